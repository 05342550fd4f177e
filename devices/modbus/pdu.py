"""Modbus's protocol data units: the function code and its data, whatever carries them (RTU adds a
unit id and a CRC: rtu.py; TCP a header, which pymodbus writes on CPython).

    request = read_request("holding", 0, 4)     # 4 holding registers from 0
    answer_size(request)                        # 10 octets for a normal answer
    words = answer(request, got, "a read ...")  # [w0, w1, w2, w3], or Failed

An answer with the function code's top bit set is a Modbus exception (2 octets: the function,
the code); one that does not fit the request (another function's, another length) is no answer.
"""

import struct

from ..line import Failed, garbled
from .registers import FUNCTIONS

EXCEPTION = 0x80  # the function code's top bit, in an exception answer
EXCEPTION_SIZE = 2  # function | 0x80, code
WRITE_COIL, WRITE_REGISTER, WRITE_REGISTERS = 5, 6, 16


def read_request(kind, start, count):
    """The PDU that reads count registers (or bits) of a kind from start."""
    return struct.pack(">BHH", FUNCTIONS[kind], start, count)


def write_request(kind, address, value):
    """The PDU that writes registers.py encode()'s value: a coil's bool, or the words of a holding
    register (one word: function 6; more: 16)."""
    if kind == "coil":
        return struct.pack(">BHH", WRITE_COIL, address, 0xFF00 if value else 0)
    if len(value) == 1:
        return struct.pack(">BHH", WRITE_REGISTER, address, value[0])
    words = struct.pack(">%dH" % len(value), *value)
    return struct.pack(">BHHB", WRITE_REGISTERS, address, len(value), len(words)) + words


def answer_size(request):
    """The octets of a normal answer's PDU to the request's."""
    function = request[0]
    if function in (1, 2):  # a count of bits, packed 8 to an octet
        return 2 + (struct.unpack(">H", request[3:5])[0] + 7) // 8
    if function in (3, 4):
        return 2 + 2 * struct.unpack(">H", request[3:5])[0]
    return 5  # a write's echo: function, address, value or count


def is_exception(request, got):
    """Whether got (an answer's PDU so far) begins an exception answer to the request."""
    return len(got) >= 1 and got[0] == request[0] | EXCEPTION


def answer(request, got, what):
    """What an answer's PDU says: a read's words (a list of ints) or bits (bools, as many as
    asked), a write's None; else Failed("exception" or "error", why). what names the request
    in the reason ("a read of 2 holding at 0")."""
    function = request[0]
    if len(got) == EXCEPTION_SIZE and is_exception(request, got):
        raise Failed("exception", "exception code %d to %s" % (got[1], what))
    size = answer_size(request)
    if len(got) != size or got[0] != function:
        raise garbled(len(got), what)
    if function in (1, 2):
        count = struct.unpack(">H", request[3:5])[0]
        return [bool(got[2 + i // 8] >> (i % 8) & 1) for i in range(count)]
    if function in (3, 4):
        if got[1] != size - 2:
            raise Failed("error", "an answer to %s that counts %d octets, not %d" % (what, got[1], size - 2))
        return list(struct.unpack(">%dH" % ((size - 2) // 2), got[2:]))
    if got[1:5] != request[1:5]:  # a write's answer echoes the address and the value or count
        raise Failed("error", "an answer to %s that echoes another write" % what)
    return None
