"""Modbus RTU frames: a request's octets, and what the octets that came back say.

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

from .device import Failed, garbled
from .registers import FUNCTIONS

EXCEPTION = 0x80  # the function code's top bit, in an exception answer
WRITE_COIL, WRITE_REGISTER, WRITE_REGISTERS = 5, 6, 16
EXCEPTION_SIZE = 5  # unit, function | 0x80, code, CRC


def crc16(data):
    """Modbus's CRC-16 (polynomial 0xA001 reflected, from 0xFFFF) of the octets."""
    crc = 0xFFFF
    for octet in data:
        crc ^= octet
        for _ in range(8):
            crc = (crc >> 1) ^ 0xA001 if crc & 1 else crc >> 1
    return crc


def framed(pdu):
    """unit + function + data, with its CRC appended (low octet first)."""
    return pdu + struct.pack("<H", crc16(pdu))


def read_request(unit, kind, start, count):
    """The request that reads count registers (or bits) of a kind from start."""
    return framed(struct.pack(">BBHH", unit, FUNCTIONS[kind], start, count))


def write_request(unit, kind, address, value):
    """The request that writes registers/registers.py encode()'s value: a coil's bool, or the
    words of a holding register (one word: function 6; more: 16)."""
    if kind == "coil":
        return framed(struct.pack(">BBHH", unit, WRITE_COIL, address, 0xFF00 if value else 0))
    if len(value) == 1:
        return framed(struct.pack(">BBHH", unit, WRITE_REGISTER, address, value[0]))
    words = struct.pack(">%dH" % len(value), *value)
    return framed(struct.pack(">BBHHB", unit, WRITE_REGISTERS, address, len(value), len(words)) + words)


def answer_size(request):
    """The octets of a normal answer to the request."""
    function = request[1]
    if function in (1, 2):  # a count of bits, packed 8 to an octet
        return 5 + (struct.unpack(">H", request[4:6])[0] + 7) // 8
    if function in (3, 4):
        return 5 + 2 * struct.unpack(">H", request[4:6])[0]
    return 8  # a write's echo: unit, function, address, value or count, CRC


def complete(request, got):
    """Whether got holds a whole answer: a normal one, or an exception's 5 octets."""
    if len(got) >= 2 and got[1] == request[1] | EXCEPTION:
        return len(got) >= EXCEPTION_SIZE
    return len(got) >= answer_size(request)


def answer(request, got, what):
    """What a complete answer says: a read's words (a list of ints) or bits (bools, as many as
    asked), a write's None; else Failed("exception" or "error", why). what names the request
    in the reason ("a read of 2 holding at 0")."""
    function = request[1]
    if len(got) >= EXCEPTION_SIZE and got[1] == function | EXCEPTION and _sound(got[:EXCEPTION_SIZE]):
        raise Failed("exception", "exception code %d to %s" % (got[2], what))
    size = answer_size(request)
    if len(got) != size or got[0] != request[0] or got[1] != function or not _sound(got):
        raise garbled(len(got), what)
    if function in (1, 2):
        count = struct.unpack(">H", request[4:6])[0]
        return [bool(got[3 + i // 8] >> (i % 8) & 1) for i in range(count)]
    if function in (3, 4):
        if got[2] != size - 5:
            raise Failed("error", "an answer to %s that counts %d octets, not %d" % (what, got[2], size - 5))
        return list(struct.unpack(">%dH" % ((size - 5) // 2), got[3:-2]))
    if got[2:6] != request[2:6]:  # a write's answer echoes the address and the value or count
        raise Failed("error", "an answer to %s that echoes another write" % what)
    return None


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
