"""AMQP 0-9-1 value codec: method arguments, field tables, basic properties.

Every read checks its length against the end of the buffer first, so a
truncated or lying length raises DecodeError instead of reading past the data.

Representation, chosen so that names route without re-encoding:
- shortstr arguments (queue, exchange, routing key, consumer tag) stay bytes;
- field-table keys are str; 'S' long strings are bytes; 'x' byte arrays are
  bytearray, so they encode back as 'x';
- 'T' timestamps and 'D' decimals decode to the small classes below so that
  they encode back with the same tag.

Field-table tags follow RabbitMQ (requirements.md §2.4 and §4 row 7): decode
t b B s u U I i l L f d D S A T F V x; encode only t I l d D S A T F V x.
"""

import struct

from .errors import DecodeError
from .spec import BASIC_PROPERTIES, NAMES, SIGNATURES


class Timestamp:
    """A field-table or property timestamp: seconds since the epoch."""

    def __init__(self, seconds):
        self.seconds = seconds

    def __eq__(self, other):
        return isinstance(other, Timestamp) and other.seconds == self.seconds

    def __hash__(self):
        return hash(self.seconds)

    def __repr__(self):
        return "Timestamp(%d)" % self.seconds


class Decimal:
    """An AMQP decimal kept as its raw scale and 32-bit value (requirements §4 row 11)."""

    def __init__(self, scale, value):
        self.scale = scale
        self.value = value

    def __eq__(self, other):
        return isinstance(other, Decimal) and (other.scale, other.value) == (self.scale, self.value)

    def __hash__(self):
        return hash((self.scale, self.value))

    def __repr__(self):
        return "Decimal(%d, %d)" % (self.scale, self.value)


def _need(end, pos, n):
    if pos + n > end:
        raise DecodeError("truncated: need %d bytes at offset %d" % (n, pos))


def text(raw):
    """Readable text for logs and reply texts, whatever bytes a client sent."""
    try:
        return raw.decode()
    except (UnicodeError, AttributeError):
        return repr(raw)


# ---------------------------------------------------------------- field tables


def decode_table(buf, pos, end):
    """Decode a field table at pos; returns (dict, position after it)."""
    _need(end, pos, 4)
    size = (buf[pos] << 24) | (buf[pos + 1] << 16) | (buf[pos + 2] << 8) | buf[pos + 3]
    pos += 4
    stop = pos + size
    if stop > end:
        raise DecodeError("field table length %d runs past the frame" % size)
    table = {}
    while pos < stop:
        n = buf[pos]
        pos += 1
        _need(stop, pos, n)
        try:
            key = bytes(buf[pos : pos + n]).decode()
        except UnicodeError:
            raise DecodeError("field table key is not UTF-8", 502)
        pos += n
        value, pos = _decode_value(buf, pos, stop)
        if key not in table:  # duplicate keys: the first one wins (requirements §4 row 9)
            table[key] = value
    return table, stop


def _decode_value(buf, pos, end):
    _need(end, pos, 1)
    tag = buf[pos]
    pos += 1
    if tag == 0x53:  # 'S' long string
        _need(end, pos, 4)
        n = struct.unpack_from(">I", buf, pos)[0]
        pos += 4
        _need(end, pos, n)
        return bytes(buf[pos : pos + n]), pos + n
    if tag == 0x49:  # 'I'
        _need(end, pos, 4)
        return struct.unpack_from(">i", buf, pos)[0], pos + 4
    if tag == 0x74:  # 't'
        _need(end, pos, 1)
        return buf[pos] != 0, pos + 1
    if tag == 0x46:  # 'F'
        return decode_table(buf, pos, end)
    if tag == 0x6C or tag == 0x4C:  # 'l', 'L': both signed 64 as in RabbitMQ
        _need(end, pos, 8)
        return struct.unpack_from(">q", buf, pos)[0], pos + 8
    if tag == 0x62:  # 'b'
        _need(end, pos, 1)
        return struct.unpack_from(">b", buf, pos)[0], pos + 1
    if tag == 0x42:  # 'B'
        _need(end, pos, 1)
        return buf[pos], pos + 1
    if tag == 0x73 or tag == 0x55:  # 's' (RabbitMQ: int16), 'U' (spec: int16)
        _need(end, pos, 2)
        return struct.unpack_from(">h", buf, pos)[0], pos + 2
    if tag == 0x75:  # 'u'
        _need(end, pos, 2)
        return struct.unpack_from(">H", buf, pos)[0], pos + 2
    if tag == 0x69:  # 'i'
        _need(end, pos, 4)
        return struct.unpack_from(">I", buf, pos)[0], pos + 4
    if tag == 0x66:  # 'f'
        _need(end, pos, 4)
        return struct.unpack_from(">f", buf, pos)[0], pos + 4
    if tag == 0x64:  # 'd'
        _need(end, pos, 8)
        return struct.unpack_from(">d", buf, pos)[0], pos + 8
    if tag == 0x44:  # 'D'
        _need(end, pos, 5)
        return Decimal(buf[pos], struct.unpack_from(">i", buf, pos + 1)[0]), pos + 5
    if tag == 0x54:  # 'T'
        _need(end, pos, 8)
        return Timestamp(struct.unpack_from(">Q", buf, pos)[0]), pos + 8
    if tag == 0x41:  # 'A'
        _need(end, pos, 4)
        n = struct.unpack_from(">I", buf, pos)[0]
        pos += 4
        stop = pos + n
        if stop > end:
            raise DecodeError("field array length %d runs past the frame" % n)
        items = []
        while pos < stop:
            value, pos = _decode_value(buf, pos, stop)
            items.append(value)
        return items, stop
    if tag == 0x56:  # 'V'
        return None, pos
    if tag == 0x78:  # 'x' byte array
        _need(end, pos, 4)
        n = struct.unpack_from(">I", buf, pos)[0]
        pos += 4
        _need(end, pos, n)
        return bytearray(buf[pos : pos + n]), pos + n
    raise DecodeError("unknown field table type %r" % chr(tag), 502)


def encode_table(table):
    out = bytearray(4)
    for key in table:
        raw = key.encode() if isinstance(key, str) else bytes(key)
        if len(raw) > 255:
            raise ValueError("field table key longer than 255 bytes")
        out.append(len(raw))
        out += raw
        _encode_value(out, table[key])
    struct.pack_into(">I", out, 0, len(out) - 4)
    return bytes(out)


def _encode_value(out, value):
    if value is True or value is False:
        out += b"t\x01" if value else b"t\x00"
    elif isinstance(value, int):
        if -0x80000000 <= value <= 0x7FFFFFFF:
            out += b"I" + struct.pack(">i", value)
        else:
            out += b"l" + struct.pack(">q", value)
    elif isinstance(value, str):
        raw = value.encode()
        out += b"S" + struct.pack(">I", len(raw)) + raw
    elif isinstance(value, bytearray):
        out += b"x" + struct.pack(">I", len(value)) + value
    elif isinstance(value, bytes):
        out += b"S" + struct.pack(">I", len(value)) + value
    elif isinstance(value, dict):
        out += b"F" + encode_table(value)
    elif isinstance(value, (list, tuple)):
        items = bytearray()
        for item in value:
            _encode_value(items, item)
        out += b"A" + struct.pack(">I", len(items)) + items
    elif isinstance(value, float):
        out += b"d" + struct.pack(">d", value)
    elif value is None:
        out += b"V"
    elif isinstance(value, Timestamp):
        out += b"T" + struct.pack(">Q", value.seconds)
    elif isinstance(value, Decimal):
        out += b"D" + struct.pack(">Bi", value.scale, value.value)
    else:
        raise ValueError("cannot encode %r in a field table" % (value,))


# ---------------------------------------------------------------- method arguments


def decode_args(sig, buf, pos, end):
    """Decode method arguments by signature (see spec.py); returns a list."""
    out = []
    bit = 0
    bits = 0
    for code in sig:
        if code == "b":
            if bit == 0:
                _need(end, pos, 1)
                bits = buf[pos]
                pos += 1
            out.append((bits >> bit) & 1 == 1)
            bit = (bit + 1) & 7
            continue
        bit = 0
        if code == "s":
            _need(end, pos, 1)
            n = buf[pos]
            pos += 1
            _need(end, pos, n)
            out.append(bytes(buf[pos : pos + n]))
            pos += n
        elif code == "h":
            _need(end, pos, 2)
            out.append((buf[pos] << 8) | buf[pos + 1])
            pos += 2
        elif code == "l":
            _need(end, pos, 4)
            out.append(struct.unpack_from(">I", buf, pos)[0])
            pos += 4
        elif code == "q" or code == "T":
            _need(end, pos, 8)
            out.append(struct.unpack_from(">Q", buf, pos)[0])
            pos += 8
        elif code == "t":
            table, pos = decode_table(buf, pos, end)
            out.append(table)
        elif code == "S":
            _need(end, pos, 4)
            n = struct.unpack_from(">I", buf, pos)[0]
            pos += 4
            _need(end, pos, n)
            out.append(bytes(buf[pos : pos + n]))
            pos += n
        elif code == "o":
            _need(end, pos, 1)
            out.append(buf[pos])
            pos += 1
    if pos != end:
        raise DecodeError("%d unexpected bytes after the method arguments" % (end - pos))
    return out


def shortstr(value):
    raw = value.encode() if isinstance(value, str) else bytes(value)
    if len(raw) > 255:
        raw = raw[:255]  # only reply texts can get this long; truncation beats failing a close
    return bytes((len(raw),)) + raw


def encode_args(sig, args):
    out = bytearray()
    bit = 0
    for code, value in zip(sig, args):
        if code == "b":
            if bit == 0:
                out.append(0)
            if value:
                out[-1] |= 1 << bit
            bit = (bit + 1) & 7
            continue
        bit = 0
        if code == "s":
            out += shortstr(value)
        elif code == "h":
            out += struct.pack(">H", value)
        elif code == "l":
            out += struct.pack(">I", value)
        elif code == "q" or code == "T":
            out += struct.pack(">Q", value)
        elif code == "t":
            out += encode_table(value or {})
        elif code == "S":
            raw = value.encode() if isinstance(value, str) else value
            out += struct.pack(">I", len(raw)) + raw
        elif code == "o":
            out.append(value)
    return bytes(out)


def method_payload(method_id, args=()):
    return struct.pack(">I", method_id) + encode_args(SIGNATURES[method_id], args)


def method_name(method_id):
    """ "basic.publish" for 0x003C0028: for error texts and logs, never on a hot path."""
    at = NAMES.find("%08X " % method_id)
    if at < 0:
        return "unknown method %d.%d" % (method_id >> 16, method_id & 0xFFFF)
    return NAMES[at + 9 : NAMES.find("\n", at)]


# ---------------------------------------------------------------- basic properties


def property_flags(header):
    """The first property-flags word of a content header payload."""
    return (header[12] << 8) | header[13]


def decode_properties(header):
    """Decode a content header payload's properties into a dict keyed by name."""
    end = len(header)
    _need(end, 0, 14)
    flag_words = []
    pos = 12
    while True:
        _need(end, pos, 2)
        word = (header[pos] << 8) | header[pos + 1]
        pos += 2
        flag_words.append(word)
        if not word & 1:
            break
    flags = flag_words[0]
    props = {}
    for i in range(len(BASIC_PROPERTIES)):
        if not flags & (0x8000 >> i):
            continue
        name, code = BASIC_PROPERTIES[i]
        stop = _value_end(code, header, pos, end)
        props[name] = decode_args(code, header, pos, stop)[0]
        pos = stop
    if pos != end:
        raise DecodeError("%d unexpected bytes after the content properties" % (end - pos))
    return props


def _value_end(code, buf, pos, end):
    if code == "s":
        _need(end, pos, 1)
        stop = pos + 1 + buf[pos]
    elif code == "t":
        _need(end, pos, 4)
        stop = pos + 4 + struct.unpack_from(">I", buf, pos)[0]
    elif code == "o":
        stop = pos + 1
    else:  # 'T'
        stop = pos + 8
    if stop > end:
        raise DecodeError("content property runs past the header frame")
    return stop


def encode_properties(props):
    """Encode a properties dict (as decode_properties returns) into flags + list."""
    flags = 0
    body = bytearray()
    for i in range(len(BASIC_PROPERTIES)):
        name, code = BASIC_PROPERTIES[i]
        if name in props and props[name] is not None:
            flags |= 0x8000 >> i
            body += encode_args(code, (props[name],))
    return struct.pack(">H", flags) + body
