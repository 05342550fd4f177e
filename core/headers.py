"""Entries added to a message's headers table where the message is kept encoded: the content
header frame tail (core/message.py header_tail: payload size, class, weight, body size,
property flags, properties, frame-end), every other property byte for byte.

A stream adds x-stream-offset to each record (core/streamlog.py); a bridge adds its hop,
origin and sequence headers to what it forwards (server/bridge.py). Sans-IO and
MicroPython-clean.
"""

import struct

from .wire import _decode_value

FLAG_HEADERS = 0x2000
FLAG_DELIVERY_MODE = 0x1000


def split(header_tail):
    """(flags, properties before the headers table, the table's entries (no length prefix),
    the properties after it (no frame-end)): the tail's pieces around its headers table, an
    empty one if it has none."""
    flags = (header_tail[16] << 8) | header_tail[17]
    pos = 18
    if flags & 0x8000:  # content-type, content-encoding: the two shortstrs before headers
        pos += 1 + header_tail[pos]
    if flags & 0x4000:
        pos += 1 + header_tail[pos]
    if flags & FLAG_HEADERS:
        size = struct.unpack_from(">I", header_tail, pos)[0]
        return flags, header_tail[18:pos], header_tail[pos + 4 : pos + 4 + size], header_tail[pos + 4 + size : -1]
    return flags, header_tail[18:pos], b"", header_tail[pos:-1]


def _framed(payload):
    return struct.pack(">I", len(payload)) + payload + b"\xce"


def with_entries(header_tail, entries, keys, persistent=False):
    """header_tail with the encoded field-table entries `entries` last in its headers table,
    any entry named in keys taken out first; persistent: delivery-mode 2 as well."""
    flags, before, table, after = split(header_tail)
    for key in keys:
        if key in table:
            table = without(table, key)
    if persistent:
        if flags & FLAG_DELIVERY_MODE:  # the first property after the headers table
            after = b"\x02" + after[1:]
        else:
            flags |= FLAG_DELIVERY_MODE
            after = b"\x02" + after
    table += entries
    payload = b"".join(
        (
            header_tail[4:16],
            struct.pack(">H", flags | FLAG_HEADERS),
            before,
            struct.pack(">I", len(table)),
            table,
            after,
        )
    )
    return _framed(payload)


def without(table, key):
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
