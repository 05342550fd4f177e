"""Entries added to a message's headers table where the message is kept encoded: the content
header frame tail (core/message.py header_tail: payload size, class, weight, body size,
property flags, properties, frame-end), every other property byte for byte.

A stream adds x-stream-offset to each record (core/streams/streamlog.py); a bridge adds its hop,
origin and sequence headers to what it forwards (server/bridges/driver.py); dead-lettering
(core/deadletter.py) sets x-death and its companions and drops the expiration property. A
published message's CC and BCC headers are read here too (sender_selected), and BCC taken out.
Sans-IO and MicroPython-clean.
"""

import struct

from ..codec.wire import decode_value

FLAG_HEADERS = 0x2000
FLAG_DELIVERY_MODE = 0x1000
FLAG_EXPIRATION = 0x0100


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


def with_entries(header_tail, entries, keys, persistent=False, drop_expiration=False):
    """header_tail with the encoded field-table entries `entries` last in its headers table,
    any entry named in keys taken out first; persistent: delivery-mode 2 as well;
    drop_expiration: without the expiration property (a dead letter's)."""
    flags, before, table, after = split(header_tail)
    for key in keys:
        if key in table:
            table = without(table, key)
    if drop_expiration and flags & FLAG_EXPIRATION:
        after = _without_expiration(flags, after)
        flags &= ~FLAG_EXPIRATION
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
        stop = decode_value(table, value_at, end, False)[1]
        if table[pos + 1 : value_at] != key:
            kept.append(table[pos:stop])
        pos = stop
    return b"".join(kept)


def _without_expiration(flags, after):
    """The properties after the headers table (delivery-mode, priority, correlation-id,
    reply-to, expiration, ...) but expiration."""
    pos = 0
    if flags & FLAG_DELIVERY_MODE:
        pos += 1
    if flags & 0x0800:  # priority
        pos += 1
    if flags & 0x0400:  # correlation-id
        pos += 1 + after[pos]
    if flags & 0x0200:  # reply-to
        pos += 1 + after[pos]
    return after[:pos] + after[pos + 1 + after[pos] :]


def routes(header_tail, key):
    """(type tag, keys) of a CC or BCC header (key: b"CC" or b"BCC") of an encoded message: the
    long strings of its array, as RabbitMQ takes them (other items are ignored); the tag is
    None when there is no such header, and the keys empty when it is not an array."""
    _flags, _before, table, _after = split(header_tail)
    pos = 0
    end = len(table)
    while pos < end:
        value_at = pos + 1 + table[pos]
        stop = decode_value(table, value_at, end, False)[1]
        if table[pos + 1 : value_at] == key:
            tag = table[value_at]
            keys = []
            if tag == 0x41:  # 'A'
                item = value_at + 5
                while item < stop:
                    after = decode_value(table, item, stop, False)[1]
                    if table[item] == 0x53:  # 'S'
                        keys.append(bytes(table[item + 5 : after]))
                    item = after
            return tag, keys
        pos = stop
    return None, []


# RabbitMQ's names of the field types, as its refusal of a CC or BCC header that is no array says
TYPE_NAMES = {
    0x53: "longstr",
    0x49: "signedint",
    0x44: "decimal",
    0x54: "timestamp",
    0x46: "table",
    0x62: "byte",
    0x42: "unsignedbyte",
    0x73: "short",
    0x75: "unsignedshort",
    0x69: "unsignedint",
    0x6C: "long",
    0x64: "double",
    0x66: "float",
    0x78: "binary",
    0x56: "void",
    0x74: "bool",
}


def sender_selected(message):
    """Sender-selected distribution (RabbitMQ's): a published message's CC and BCC headers, arrays
    of routing keys, route it by each of their keys too (message.cc), and BCC leaves the
    message. A CC or BCC that is not an array is refused as RabbitMQ refuses it (406)."""
    keys = []
    bcc = False
    for name in (b"CC", b"BCC"):
        tag, found = routes(message.header_tail, name)
        if tag is None:
            continue
        if tag != 0x41:
            from ..codec.errors import PRECONDITION_FAILED, Refused
            from ..codec.spec import BASIC_PUBLISH

            raise Refused(
                PRECONDITION_FAILED,
                'invalid message: {unacceptable_type_in_header,"%s",%s}'
                % (name.decode(), TYPE_NAMES.get(tag, "unknown")),
                BASIC_PUBLISH,
            )
        keys += found
        bcc = bcc or name == b"BCC"
    if bcc:
        old = message.header_tail
        message.header_tail = with_entries(old, b"", (b"BCC",))
        message.cost += len(message.header_tail) - len(old)
        message._properties = None
    message.cc = keys
