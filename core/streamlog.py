"""A stream's records: what one message in a stream's log holds, reading records back from a
segment's bytes, and the message a consumer is given for one.

A stream (core/stream.py) appends one record per message to its segment files, in the
journal's record envelope (core/records.py: magic, kind, length, check, payload, crc32).
The payload of a MESSAGE record:

    offset(8)  timestamp(8, ms)  exchange shortstr  routing-key shortstr
    header size(4)  content header frame tail  body frame tail (absent for an empty body)

The frame tails are the publisher's bytes (core/message.py: size, payload, frame-end), as
the journal's MESSAGE record keeps them, with one change made once, when the record is
made: the header `x-stream-offset` (the record's offset, a signed 64-bit 'l', as RabbitMQ
sends it) added last to the headers table, every other property byte for byte as
published. So the record holds what every consumer is given, and reading one builds no
header: a stream is read many times more than it is written.

Sans-IO and MicroPython-clean: bytes in, records and messages out.
"""

import struct
from binascii import crc32

from .message import Message
from .records import CLEAN, CORRUPT, HEADER_SIZE, MAGIC, TORN, TRAILER_SIZE
from .wire import _decode_value, shortstr

MESSAGE = 32  # the record kind (apart from the journal's, so a journal tool never mistakes one)
PREFIX = 16  # offset and timestamp: what reading past a record needs of its payload
OFFSET_KEY = b"x-stream-offset"
_OFFSET_ENTRY = shortstr(OFFSET_KEY) + b"l"  # the header's key and type tag; the value follows
FLAG_HEADERS = 0x2000

# What parse() says of the bytes at a position besides a record's end.
INCOMPLETE = -1  # they end inside the record (or its header)
DAMAGED = -2  # its header or its checksum does not check out


def message_record(offset, timestamp_ms, message):
    """(parts, bytes): the record of message at offset, as core/records.py record_parts would
    make it (written out here: a stream's publish path), the body not copied."""
    header = with_offset(message.header_tail, offset)
    head = struct.pack(">QQ", offset, timestamp_ms) + message.route + struct.pack(">I", len(header))
    body = message.body_tail
    length = len(head) + len(header) + (len(body) if body is not None else 0)
    crc = crc32(struct.pack(">BI", MESSAGE, length))
    parts = [struct.pack(">BBIH", MAGIC, MESSAGE, length, crc & 0xFFFF), head, header]
    crc = crc32(header, crc32(head, crc))
    if body is not None:
        parts.append(body)
        crc = crc32(body, crc)
    parts.append(struct.pack(">I", crc & 0xFFFFFFFF))
    return parts, HEADER_SIZE + length + TRAILER_SIZE


def parse(buf, pos, end, verify=True):
    """The record at buf[pos:end]: where it ends (its payload is buf[pos + HEADER_SIZE : stop -
    TRAILER_SIZE]), or INCOMPLETE, or DAMAGED. verify=False skips the payload's checksum (a
    record read past, not delivered: its header is still checked)."""
    if end - pos < HEADER_SIZE:
        return INCOMPLETE
    fields = bytes(buf[pos + 1 : pos + 6])
    if buf[pos] != MAGIC or crc32(fields) & 0xFFFF != (buf[pos + 6] << 8) | buf[pos + 7]:
        return DAMAGED
    length = (fields[1] << 24) | (fields[2] << 16) | (fields[3] << 8) | fields[4]
    stop = pos + HEADER_SIZE + length + TRAILER_SIZE
    if stop > end:
        return INCOMPLETE
    if fields[0] != MESSAGE or length < PREFIX:
        return DAMAGED
    if verify:
        stored = (buf[stop - 4] << 24) | (buf[stop - 3] << 16) | (buf[stop - 2] << 8) | buf[stop - 1]
        if crc32(buf[pos + HEADER_SIZE : stop - TRAILER_SIZE], crc32(fields)) & 0xFFFFFFFF != stored:
            return DAMAGED
    return stop


def needed(buf, pos, end):
    """How many bytes the record at pos takes (header and trailer included), read from its
    header; HEADER_SIZE while not even that is there."""
    if end - pos < HEADER_SIZE:
        return HEADER_SIZE
    return (
        HEADER_SIZE + ((buf[pos + 2] << 24) | (buf[pos + 3] << 16) | (buf[pos + 4] << 8) | buf[pos + 5]) + TRAILER_SIZE
    )


def offset_and_time(buf, pos):
    """(offset, timestamp in ms) of the record at pos (parse() said it is whole)."""
    return struct.unpack_from(">QQ", buf, pos + HEADER_SIZE)


def scan(data):
    """A segment's bytes read back at start: (records, last offset, last timestamp, good_end,
    ending), by the journal's rules for how data ends (core/records.py: CLEAN; TORN, a write
    cut short: cut it; CORRUPT, damage with data after it). last offset is -1 with no record."""
    pos = 0
    end = len(data)
    count = 0
    last = (-1, 0)
    while pos < end:
        stop = parse(data, pos, end)
        if stop < 0:
            return count, last[0], last[1], pos, _ending(data, pos, stop)
        last = offset_and_time(data, pos)
        count += 1
        pos = stop
    return count, last[0], last[1], pos, CLEAN


def _ending(data, pos, why):
    end = len(data)
    if end - pos < HEADER_SIZE:
        return TORN if data[pos] in (MAGIC, 0) else CORRUPT
    if data[pos] != MAGIC or crc32(bytes(data[pos + 1 : pos + 6])) & 0xFFFF != (data[pos + 6] << 8) | data[pos + 7]:
        return TORN if _zeros(data, pos) else CORRUPT
    if why == INCOMPLETE:
        return TORN  # a sound header: its record was being written
    stop = pos + needed(data, pos, end)
    return TORN if stop >= end or _zeros(data, stop) else CORRUPT  # a bad last record: a torn write


def _zeros(data, start):
    for i in range(start, len(data)):
        if data[i]:
            return False
    return True


def delivery(buf, start, stop):
    """The message a consumer is given for the record whose payload is buf[start:stop] (the
    bytearray read into: the message gets copies of its parts, bytearrays, which the frames
    that carry them take as they take bytes)."""
    route_at = start + PREFIX
    n = buf[route_at]
    key_at = route_at + 1 + n
    route_end = key_at + 1 + buf[key_at]
    route = buf[route_at:route_end]
    header_end = route_end + 4 + struct.unpack_from(">I", buf, route_end)[0]
    header = buf[route_end + 4 : header_end]
    if header_end < stop:
        return Message(route[1 : 1 + n], route[2 + n :], route, header, buf[header_end:stop], stop - header_end - 5)
    return Message(route[1 : 1 + n], route[2 + n :], route, header, None, 0)


def with_offset(header_tail, offset):
    """A content header frame tail (size, class, weight, body size, flags, properties, frame-end)
    with x-stream-offset = offset last in its headers table (replacing one the publisher set),
    the other properties byte for byte."""
    flags = (header_tail[16] << 8) | header_tail[17]
    if not flags & 0xE000:  # no content-type, content-encoding, headers (the usual): a table first
        return b"".join(
            (
                struct.pack(">I", len(header_tail) + 24),  # + table size (4) + the entry (25)
                header_tail[4:16],
                struct.pack(">HI", flags | FLAG_HEADERS, len(_OFFSET_ENTRY) + 8),
                _OFFSET_ENTRY,
                struct.pack(">q", offset),
                header_tail[18:],
            )
        )
    pos = 18
    if flags & 0x8000:  # content-type, content-encoding: the two shortstrs before headers
        pos += 1 + header_tail[pos]
    if flags & 0x4000:
        pos += 1 + header_tail[pos]
    entry = _OFFSET_ENTRY + struct.pack(">q", offset)
    if flags & FLAG_HEADERS:
        size = struct.unpack_from(">I", header_tail, pos)[0]
        table = header_tail[pos + 4 : pos + 4 + size]
        if OFFSET_KEY in table:
            table = _without(table, OFFSET_KEY)
        headers = struct.pack(">I", len(table) + len(entry)) + table + entry
        rest = header_tail[pos + 4 + size : -1]
    else:
        headers = struct.pack(">I", len(entry)) + entry
        rest = header_tail[pos:-1]
    payload = b"".join((header_tail[4:16], struct.pack(">H", flags | FLAG_HEADERS), header_tail[18:pos], headers, rest))
    return struct.pack(">I", len(payload)) + payload + b"\xce"


def _without(table, key):
    """The entries of a field table's content (no length prefix) but those named key (wire's
    reader finds where each value ends)."""
    kept = []
    pos = 0
    end = len(table)
    while pos < end:
        value_at = pos + 1 + table[pos]
        stop = _decode_value(table, value_at, end, False)[1]
        if table[pos + 1 : value_at] != key:
            kept.append(table[pos:stop])
        pos = stop
    return b"".join(kept)
