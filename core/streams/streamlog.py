"""A stream's records: what one message in a stream's log holds, and reading records back from a
segment's bytes. (The frames a 0-9-1 consumer is given for them are amqp091/output.py's.)

A stream (core/streams/stream.py) appends one record per message to its segment files, in the
journal's record envelope (core/store/records.py: magic, kind, length, check, payload, crc32).
The payload of a MESSAGE record:

    offset(8)  timestamp(8, ms)  exchange shortstr  routing-key shortstr
    header size(4)  content header frame tail  body frame tail (absent for an empty body)

The frame tails are the publisher's bytes (core/message.py: size, payload, frame-end), as
the journal's MESSAGE record keeps them, with one change made once, when the record is
made: the header `x-stream-offset` (the record's offset, a signed 64-bit 'l', as RabbitMQ
sends it) added last to the headers table, every other property byte for byte as
published. So the record holds what every consumer is given, and reading one builds no
header: a stream is read many times more than it is written.

Sans-IO and MicroPython-clean: bytes in, records and frames out.
"""

import struct
from binascii import crc32

from ...codec.wire import shortstr
from .. import headers
from ..message import Message
from ..store.records import CLEAN, CORRUPT, HEADER_SIZE, MAGIC, TORN, TRAILER_SIZE, envelope, next_record, sound_payload
from ..store.records import INCOMPLETE as CUT_SHORT  # (the envelope's: the data ends inside it)

MESSAGE = 32  # the record kind (apart from the journal's, so a journal tool never mistakes one)
PREFIX = 16  # offset and timestamp: what reading past a record needs of its payload
OFFSET_KEY = b"x-stream-offset"
_OFFSET_ENTRY = shortstr(OFFSET_KEY) + b"l"  # the header's key and type tag; the value follows

# Why a maker of deliveries stopped (amqp091/output.py stream_records; c_accel/streams.h has the
# same values).
WANT = 0
DONE = 1
BAD_RECORD = 2

# What parse() says of the bytes at a position besides a record's end.
INCOMPLETE = -1  # they end inside the record (or its header)
DAMAGED = -2  # its header or its checksum does not check out


def message_record(offset, timestamp_ms, message, cache):
    """(parts, bytes): the record of message at offset, as core/store/records.py record_parts would
    make it (written out here: a stream's publish path). cache: a list the stream keeps for
    this (empty at first): what the record of the previous message had that this one can
    reuse. Publishers send run after run of messages with the same route, properties and
    body size, so the envelope, the header with its x-stream-offset slot and their checksum
    seed are made once per run, not once per message."""
    body = message.body_tail
    body_size = len(body) if body is not None else 0
    header_tail = message.header_tail
    route = message.route
    if not cache or cache[0] != body_size or cache[1] != header_tail or cache[2] != route:
        prefix, _, after = record_template(route, header_tail)
        length = PREFIX + len(prefix) + 8 + len(after) + body_size
        fields = struct.pack(">BI", MESSAGE, length)
        seed = crc32(fields)
        head = struct.pack(">B", MAGIC) + fields + struct.pack(">H", seed & 0xFFFF)
        cache[:] = [body_size, header_tail, route, prefix, after, head, seed]
    if body is None:
        body = b""
    payload = b"".join((struct.pack(">QQ", offset, timestamp_ms), cache[3], struct.pack(">q", offset), cache[4], body))
    return (
        [cache[5], payload, struct.pack(">I", crc32(payload, cache[6]) & 0xFFFFFFFF)],
        HEADER_SIZE + len(payload) + TRAILER_SIZE,
    )


def record_template(route, header_tail):
    """(prefix, body_size_at, after): a record's payload for a message with this route and
    content header tail is offset(8) timestamp(8) prefix offset(8) after body-tail, the body
    size (8 bytes) being prefix[body_size_at:] (c_accel/appends.c writes each message's there)."""
    before, after = around_offset(header_tail)
    prefix = route + struct.pack(">I", len(before) + 8 + len(after)) + before
    return prefix, len(route) + 4 + 8, after


def parse(buf, pos, end, verify=True):
    """The record at buf[pos:end]: where it ends (its payload is buf[pos + HEADER_SIZE : stop -
    TRAILER_SIZE]), or INCOMPLETE, or DAMAGED (its envelope does not check out, or it is not a
    stream's record). verify=False skips the payload's checksum (a record read past, not
    delivered: its header is still checked)."""
    kind, stop = envelope(buf, pos, end)
    if kind == -CUT_SHORT:
        return INCOMPLETE
    if kind != MESSAGE:
        return DAMAGED
    if stop + TRAILER_SIZE > end:
        return INCOMPLETE
    if stop - pos - HEADER_SIZE < PREFIX or (verify and not sound_payload(buf, pos, stop)):
        return DAMAGED
    return stop + TRAILER_SIZE


def read_messages(cursor, visible, room):
    """Up to room messages (core/message.py) of the records a consumer's cursor has read ahead,
    each checked (parse) and below visible, skipping those before the cursor's offset or
    stamped before its after_ms: ([(offset, message)], why it stopped: WANT, read on; DONE,
    room given or the next record not durable yet; BAD_RECORD, the record at the cursor does
    not check out). The cursor moves past what was taken. For the sessions that deliver a
    stream's records as messages (an up bridge's, an AMQP 1.0 link's)."""
    buf = memoryview(cursor.buf)
    pos = cursor.pos
    end = cursor.end
    offset = cursor.offset
    found = []
    status = DONE
    while len(found) < room:
        stop = parse(buf, pos, end)
        if stop < 0:
            status = WANT if stop == INCOMPLETE else BAD_RECORD
            break
        record, stamp = offset_and_time(buf, pos)
        if record < offset:
            pos = stop  # before where this consumer reads from
            continue
        if record >= visible:
            offset = record  # not durable yet
            break
        message = record_message(buf, pos + HEADER_SIZE, stop - TRAILER_SIZE)
        if message is None:
            status = BAD_RECORD
            break
        pos = stop
        offset = record + 1
        if cursor.after_ms:
            if stamp < cursor.after_ms:
                continue
            cursor.after_ms = 0
        found.append((record, message))
    cursor.pos = pos
    cursor.offset = offset
    return found, status


def record_message(buf, start, end):
    """The message of the record payload buf[start:end] (its exchange and routing key, the
    content header's size and frame tail, the body's frame tail if any, past the offset and
    timestamp), or None if its parts do not fit in it."""
    at = start + PREFIX
    key_at = at + 1 + buf[at]
    if key_at >= end:
        return None
    route_end = key_at + 1 + buf[key_at]
    if route_end + 4 > end:
        return None
    header_at = route_end + 4
    header_end = header_at + struct.unpack_from(">I", buf, route_end)[0]
    if header_end - header_at < 19 or header_end > end or 0 < end - header_end < 5:
        return None  # (a header frame's tail: size, class, weight, body size, flags, frame-end)
    body_size = end - header_end - 5 if end > header_end else 0
    return Message(
        bytes(buf[at + 1 : key_at]),
        bytes(buf[key_at + 1 : route_end]),
        bytes(buf[at:route_end]),
        bytes(buf[header_at:header_end]),
        bytes(buf[header_end:end]) if body_size > 0 else None,
        body_size,
    )


def messages_in(data):
    """The messages of a segment's records, in order (data: whole records, as scan() found
    them; the payloads' checksums not checked again)."""
    pos = 0
    end = len(data)
    while pos < end:
        stop = parse(data, pos, end, False)
        if stop < 0:
            return
        message = record_message(data, pos + HEADER_SIZE, stop - TRAILER_SIZE)
        if message is not None:
            yield message
        pos = stop


def needed(buf, pos, end):
    """How many bytes the record at pos takes (header and trailer included), read from its
    header; HEADER_SIZE while not even that is there (or while it does not check out)."""
    kind, stop = envelope(buf, pos, end)
    return HEADER_SIZE if kind < 0 else stop + TRAILER_SIZE - pos


def offset_and_time(buf, pos):
    """(offset, timestamp in ms) of the record at pos (parse() said it is whole)."""
    return struct.unpack_from(">QQ", buf, pos + HEADER_SIZE)


def scan(data):
    """A segment's bytes read back at start: (records, last offset, last timestamp, good_end,
    ending), by the journal's rules for how data ends (core/store/records.py: CLEAN; TORN, a write
    cut short: cut it; CORRUPT, damage with data after it). last offset is -1 with no record."""
    pos = 0
    end = len(data)
    count = 0
    last = (-1, 0)
    while pos < end:
        stop = parse(data, pos, end)
        if stop < 0:
            return count, last[0], last[1], pos, _ending(data, pos)
        last = offset_and_time(data, pos)
        count += 1
        pos = stop
    return count, last[0], last[1], pos, CLEAN


def _ending(data, pos):
    """How a segment whose record at pos is not a sound stream record ends, by the journal's
    rules (core/store/records.py next_record): a sound envelope that is not a stream's record
    is damage too, unless nothing but zeros comes after it."""
    kind, _start, stop = next_record(data, pos)
    if kind == -CUT_SHORT:
        return TORN
    if kind < 0:
        return -kind
    stop += TRAILER_SIZE
    return TORN if stop >= len(data) or not any(memoryview(data)[stop:]) else CORRUPT


def around_offset(header_tail):
    """(before, after): the content header frame tail (size, class, weight, body size, flags,
    properties, frame-end) with x-stream-offset last in its headers table (replacing one the
    publisher set), the other properties byte for byte, is before + the offset (8 bytes,
    signed big-endian) + after, whatever the offset (the frame's size counts those 8 bytes)."""
    flags, before, table, after = headers.split(header_tail)
    if OFFSET_KEY in table:
        table = headers.without(table, OFFSET_KEY)
    head = b"".join(
        (
            header_tail[4:16],
            struct.pack(">H", flags | headers.FLAG_HEADERS),
            before,
            struct.pack(">I", len(table) + len(_OFFSET_ENTRY) + 8),
            table,
            _OFFSET_ENTRY,
        )
    )
    return struct.pack(">I", len(head) + 8 + len(after)) + head, after + b"\xce"
