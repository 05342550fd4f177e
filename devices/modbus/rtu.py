"""Modbus RTU frames: a PDU (pdu.py) with the unit id before it and a CRC after, as pymodbus's
RTU framer adds them; a request's octets, and what the octets that came back say.

A frame on an RS-485 line is the unit id, the function code, its data and a CRC-16 (low octet
first). A master sends one request and reads the answer, whose length the request fixes:

    request = read_request(1, "holding", 0, 4)    # unit 1, 4 holding registers from 0
    size = answer_size(request)                    # 13 octets for a normal answer
    ... write request, read octets until complete(request, got) ...
    words = answer(request, got)                   # [w0, w1, w2, w3], or Failed

An answer with the function code's top bit set is a Modbus exception (5 octets); anything else
that does not fit (a bad CRC, another unit's or function's answer, too few octets) is "error":
noise on the line, not an answer.

Sans-IO and MicroPython-clean: a board's RTU master (server/devices/rtu_master.py) sends and reads the
octets; on CPython pymodbus frames its own.
"""

import struct

from ..line import garbled
from . import pdu

FRAMING = 3  # octets RTU adds to a PDU: the unit id before, the CRC-16 after


def crc16(data):
    """Modbus's CRC-16 (polynomial 0xA001 reflected, from 0xFFFF) of the octets."""
    crc = 0xFFFF
    for octet in data:
        crc ^= octet
        for _ in range(8):
            crc = (crc >> 1) ^ 0xA001 if crc & 1 else crc >> 1
    return crc


def framed(unit, data):
    """A PDU framed for the unit: its id, the PDU, the CRC (low octet first)."""
    frame = bytes([unit]) + data
    return frame + struct.pack("<H", crc16(frame))


def read_request(unit, kind, start, count):
    """The frame that reads count registers (or bits) of a kind from start."""
    return framed(unit, pdu.read_request(kind, start, count))


def write_request(unit, kind, address, value):
    """The frame that writes registers.py encode()'s value to the register at address."""
    return framed(unit, pdu.write_request(kind, address, value))


def answer_size(request):
    """The octets of a normal answer to the request (a frame)."""
    return FRAMING + pdu.answer_size(request[1:-2])


def complete(request, got):
    """Whether got holds a whole answer: a normal one, or an exception's 5 octets."""
    if pdu.is_exception(request[1:-2], got[1:2]):
        return len(got) >= FRAMING + pdu.EXCEPTION_SIZE
    return len(got) >= answer_size(request)


def answer(request, got, what):
    """What a complete answer says (pdu.answer's: words, bits or a write's None), once its unit
    and CRC are the request's and sound; else Failed (an exception, or "error": no answer)."""
    data = request[1:-2]
    if pdu.is_exception(data, got[1:2]):
        got = got[: FRAMING + pdu.EXCEPTION_SIZE]
    if len(got) < FRAMING or got[0] != request[0] or not _sound(got):
        raise garbled(len(got), what)
    return pdu.answer(data, got[1:-2], what)


def _sound(frame):
    """Whether a frame's CRC is right."""
    return struct.unpack("<H", frame[-2:])[0] == crc16(frame[:-2])


def silence(baudrate):
    """Seconds of quiet a line needs between two frames: 3.5 characters of 11 bits, and at
    least 1.75 ms (the spec's fixed value above 19,200 baud)."""
    return max(38.5 / baudrate, 0.00175)


def line_limit(baudrate, reads):
    """Polls a second the line itself allows for reads [(kind, count)]: each request and answer
    at 11 bits a character, a silence after each frame."""
    seconds = 0.0
    for kind, count in reads:
        request = read_request(1, kind, 0, count)
        for size in (len(request), answer_size(request)):
            seconds += size * 11.0 / baudrate + silence(baudrate)
    return 1.0 / seconds
