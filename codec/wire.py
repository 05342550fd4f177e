"""The AMQP 0-9-1 wire format, for both ends: frames, field tables, method arguments, properties.

One sans-IO module that the broker, the sensor client, the load generator, the tests and
the bridge all speak through; method arguments are laid out by the signatures of the
generated spec table (spec.METHODS, see signature()), not written by hand per method.

Reading: every read checks its length against the end of the buffer first, so a truncated
or lying length raises DecodeError instead of reading past the data.

Writing: put_*(buf, pos, ...) write at pos into a bytearray and return the position after
what they wrote, growing the bytearray only when it is too short. A client that keeps one
send buffer therefore builds its frames without allocating (MicroPython's bytearray cannot
be emptied and refilled; packing into it at a position can). The broker uses the helpers
that return bytes (method_frame, encode_table ...), built the same way.

Two ways of mapping values to Python, chosen per call:
- the broker's (text=False, binary=False): names and strings stay bytes, so they route and
  are written back exactly as received; 'S' long strings decode to bytes, 'x' byte arrays
  to bytearray, and bytes encode as 'S';
- a client's (text=True on reading, binary=True on writing), as pika and kombu have it:
  shortstrs and 'S' strings decode to str (bytes if not UTF-8), 'x' byte arrays to bytes,
  and bytes or bytearray encode as 'x'.
Either way str encodes as 'S', and 'T' timestamps and 'D' decimals decode to the small
classes below so that they encode back with the same tag.

Field-table tags follow RabbitMQ (requirements.md §2.4 and §4 row 7): decode
t b B s u U I i l L f d D S A T F V x; encode only t I l d D S A T F V x.
"""

import struct

from .errors import DecodeError
from .spec import BASIC_PROPERTIES, FRAME_END, METHODS

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
# The published 0-9 spec's header; RabbitMQ serves it as 0-9-1 (requirements.md §3.2).
PROTOCOL_HEADER_0_9 = b"AMQP\x01\x01\x00\x09"
FRAME_END_BYTE = b"\xce"
HEARTBEAT_FRAME = b"\x08\x00\x00\x00\x00\x00\x00\xce"
FRAME_HEADER_SIZE = 7  # type(1) channel(2) size(4); the frame-end octet follows the payload

pack_into = struct.pack_into


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


def text(raw):
    """Readable text for logs and reply texts, whatever bytes a peer sent (a str as it is)."""
    if isinstance(raw, str):
        return raw
    try:
        return raw.decode()
    except (UnicodeError, AttributeError):
        return repr(raw)


def _method_line(method_id):
    """(start of its name, start of its signature, end of line) of a method in spec.METHODS,
    or None for an id the spec does not have."""
    at = METHODS.find("%08X " % method_id)
    if at < 0:
        return None
    colon = METHODS.find(":", at + 9)
    return at + 9, colon + 1, METHODS.find("\n", colon)


def signature(method_id):
    """A method's argument signature ("hssbb" for basic.publish), or None if the spec has no such
    method."""
    line = _method_line(method_id)
    return METHODS[line[1] : line[2]] if line is not None else None


def method_name(method_id):
    """ "basic.publish" for 0x003C0028: for error texts and logs, never on a hot path."""
    line = _method_line(method_id)
    if line is None:
        return "unknown method %d.%d" % (method_id >> 16, method_id & 0xFFFF)
    return METHODS[line[0] : line[1] - 1]


# ---------------------------------------------------------------- frames


def frame_at(buf, pos, end):
    """The frame starting at pos, if all of it is in buf[:end]: (type, channel, payload
    start, payload end = index of its frame-end octet); None while it is incomplete.
    DecodeError if the frame does not end with 0xCE. The caller judges the size."""
    stop = frame_end(buf, pos, end)
    if stop < 0:
        return None
    return buf[pos], get_short(buf, pos + 1), pos + 7, stop


def frame(frame_type, channel, payload):
    return struct.pack(">BHI", frame_type, channel, len(payload)) + payload + FRAME_END_BYTE


def tail(payload):
    """size + payload + frame-end: a frame without its type and channel."""
    return struct.pack(">I", len(payload)) + bytes(payload) + FRAME_END_BYTE


def start_frame(buf, pos, frame_type, channel):
    """Begin a frame at pos (its size is written by end_frame); returns where its payload starts."""
    _room(buf, pos, 7)
    pack_into(">BHI", buf, pos, frame_type, channel, 0)
    return pos + 7


def end_frame(buf, start, pos):
    """Finish the frame begun at start whose payload ends at pos; returns the position after it."""
    _room(buf, pos, 1)
    pack_into(">I", buf, start + 3, pos - start - 7)
    buf[pos] = FRAME_END
    return pos + 1


def put_method(buf, pos, channel, method_id, args=(), binary=False):
    """A whole method frame at pos, its arguments laid out by the spec's signature."""
    start = pos
    pos = start_frame(buf, pos, 1, channel)
    pos = put_long(buf, pos, method_id)
    pos = put_args(buf, pos, signature(method_id), args, binary)
    return end_frame(buf, start, pos)


def put_content_header(buf, pos, channel, body_size, properties=None, binary=False, names=None, class_id=60):
    """A content header frame at pos: class, weight 0, body size, property flags and list."""
    start = pos
    pos = start_frame(buf, pos, 2, channel)
    _room(buf, pos, 12)
    pack_into(">HHQ", buf, pos, class_id, 0, body_size)
    pos = put_properties(buf, pos + 12, properties, binary, names)
    return end_frame(buf, start, pos)


def method_frame(channel, method_id, args=()):
    """The bytes of one method frame (the broker's values: see the module's docstring)."""
    buf = bytearray(64)
    return bytes(buf[: put_method(buf, 0, channel, method_id, args)])


def content_frames(channel, body, properties=None, frame_max=131072, class_id=60, binary=False):
    """The content header frame and the body frames (each at most frame_max) of a message."""
    buf = bytearray(64)
    out = bytes(buf[: put_content_header(buf, 0, channel, len(body), properties, binary, None, class_id)])
    step = frame_max - 8
    for start in range(0, len(body), step):
        out += frame(3, channel, body[start : start + step])
    return out


# ---------------------------------------------------------------- writing values


def _room(buf, pos, n):
    if pos + n > len(buf):
        buf.extend(bytes(pos + n - len(buf)))


def put_octet(buf, pos, value):
    _room(buf, pos, 1)
    buf[pos] = value
    return pos + 1


def put_short(buf, pos, value):
    _room(buf, pos, 2)
    pack_into(">H", buf, pos, value)
    return pos + 2


def put_long(buf, pos, value):
    _room(buf, pos, 4)
    pack_into(">I", buf, pos, value)
    return pos + 4


def put_longlong(buf, pos, value):
    _room(buf, pos, 8)
    pack_into(">Q", buf, pos, value)
    return pos + 8


def put_bytes(buf, pos, raw):
    n = len(raw)
    _room(buf, pos, n)
    buf[pos : pos + n] = raw
    return pos + n


def put_shortstr(buf, pos, value):
    raw = value.encode() if isinstance(value, str) else value
    if len(raw) > 255:
        raw = raw[:255]  # only reply texts can get this long; truncation beats failing a close
    return put_bytes(buf, put_octet(buf, pos, len(raw)), raw)


def put_longstr(buf, pos, value):
    raw = value.encode() if isinstance(value, str) else value
    return put_bytes(buf, put_long(buf, pos, len(raw)), raw)


def put_table(buf, pos, table, binary=False):
    start = pos
    pos = put_long(buf, pos, 0)
    if table:
        for key in table:
            raw = key.encode() if isinstance(key, str) else key
            if len(raw) > 255:
                raise ValueError("field table key longer than 255 bytes")
            pos = put_value(buf, put_shortstr(buf, pos, raw), table[key], binary)
    pack_into(">I", buf, start, pos - start - 4)
    return pos


def put_value(buf, pos, value, binary=False):
    """One field-table value: its tag, then the value."""
    if value is True or value is False:
        _room(buf, pos, 2)
        buf[pos] = 0x74  # 't'
        buf[pos + 1] = 1 if value else 0
        return pos + 2
    if isinstance(value, int):
        if -0x80000000 <= value <= 0x7FFFFFFF:
            _room(buf, pos, 5)
            buf[pos] = 0x49  # 'I'
            pack_into(">i", buf, pos + 1, value)
            return pos + 5
        _room(buf, pos, 9)
        buf[pos] = 0x6C  # 'l'
        pack_into(">q", buf, pos + 1, value)
        return pos + 9
    if isinstance(value, str) or (isinstance(value, bytes) and not binary):
        return put_longstr(buf, put_octet(buf, pos, 0x53), value)  # 'S'
    if isinstance(value, (bytes, bytearray)):
        return put_longstr(buf, put_octet(buf, pos, 0x78), value)  # 'x'
    if isinstance(value, dict):
        return put_table(buf, put_octet(buf, pos, 0x46), value, binary)  # 'F'
    if isinstance(value, (list, tuple)):
        pos = put_octet(buf, pos, 0x41)  # 'A'
        start = pos
        pos = put_long(buf, pos, 0)
        for item in value:
            pos = put_value(buf, pos, item, binary)
        pack_into(">I", buf, start, pos - start - 4)
        return pos
    if isinstance(value, float):
        _room(buf, pos, 9)
        buf[pos] = 0x64  # 'd'
        pack_into(">d", buf, pos + 1, value)
        return pos + 9
    if value is None:
        return put_octet(buf, pos, 0x56)  # 'V'
    if isinstance(value, Timestamp):
        return put_longlong(buf, put_octet(buf, pos, 0x54), value.seconds)  # 'T'
    if isinstance(value, Decimal):
        _room(buf, pos, 6)
        buf[pos] = 0x44  # 'D'
        pack_into(">Bi", buf, pos + 1, value.scale, value.value)
        return pos + 6
    raise ValueError("cannot encode %r in a field table" % (value,))


def put_args(buf, pos, sig, args, binary=False):
    """Method arguments by signature (one character each, see spec.py): bits share octets."""
    bit = 0
    for i in range(len(sig)):
        code = sig[i]
        value = args[i]
        if code == "b":
            if bit == 0:
                pos = put_octet(buf, pos, 0)
            if value:
                buf[pos - 1] |= 1 << bit
            bit = (bit + 1) & 7
            continue
        bit = 0
        if code == "s":
            pos = put_shortstr(buf, pos, value)
        elif code == "h":
            pos = put_short(buf, pos, value)
        elif code == "l":
            pos = put_long(buf, pos, value)
        elif code == "q" or code == "T":
            pos = put_longlong(buf, pos, value)
        elif code == "t":
            pos = put_table(buf, pos, value, binary)
        elif code == "S":
            pos = put_longstr(buf, pos, value)
        elif code == "o":
            pos = put_octet(buf, pos, value)
    return pos


def put_properties(buf, pos, props, binary=False, names=None):
    """Property flags and list from a dict keyed by name: the spec's ("content-type"), or those
    of `names`, a tuple in the spec's order (a client's "content_type")."""
    start = pos
    pos = put_short(buf, pos, 0)
    if props:
        check_properties(props, names)
        flags = 0
        for i in range(len(BASIC_PROPERTIES)):
            value = props.get(names[i] if names is not None else BASIC_PROPERTIES[i][0])
            if value is not None:
                flags |= 0x8000 >> i
                try:
                    pos = put_args(buf, pos, BASIC_PROPERTIES[i][1], (value,), binary)
                except Exception as e:  # a value of the wrong kind: named, not in the encoder's words
                    if isinstance(value, dict) or isinstance(e, MemoryError):
                        raise  # (a table's value it cannot encode: its own error names it)
                    from .property_types import wrong_type  # (loaded only then: a board's heap)

                    raise wrong_type(names[i] if names is not None else BASIC_PROPERTIES[i][0], i, value)
        pack_into(">H", buf, start, flags)
    return pos


def check_properties(props, names=None):
    """ValueError for a property name that is not one, which would otherwise be dropped without
    a word (naming the name meant when it is only spelt the other way: "delivery-mode" for a
    client's "delivery_mode"). names: as put_properties takes them."""
    known = names if names is not None else [name for name, _ in BASIC_PROPERTIES]
    for key in props:
        if key not in known:
            respelt = str(key).replace("-", "_") if names is not None else str(key).replace("_", "-")
            hint = " (did you mean '%s'?)" % respelt if respelt in known else ""
            raise ValueError("unknown message property %r%s; the properties are %s" % (key, hint, ", ".join(known)))


def _bytes_of(put, *args):
    buf = bytearray(64)
    return bytes(buf[: put(buf, 0, *args)])


def shortstr(value):
    return _bytes_of(put_shortstr, value)


def encode_table(table, binary=False):
    return _bytes_of(put_table, table, binary)


def encode_args(sig, args, binary=False):
    return _bytes_of(put_args, sig, args, binary)


def method_payload(method_id, args=()):
    buf = bytearray(64)
    return bytes(buf[: put_args(buf, put_long(buf, 0, method_id), signature(method_id), args)])


def encode_properties(props, binary=False, names=None):
    """Property flags and list (as decode_properties returns them) as bytes."""
    return _bytes_of(put_properties, props, binary, names)


# ---------------------------------------------------------------- reading values


def _need(end, pos, n):
    if pos + n > end:
        raise DecodeError("truncated: need %d bytes at offset %d" % (n, pos))


def _string(raw, as_text):
    if as_text:
        try:
            return str(raw, "utf-8")
        except UnicodeError:
            pass  # not text: the bytes themselves
    return raw


def decode_table(buf, pos, end, text=False):
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
        value, pos = decode_value(buf, pos, stop, text)
        if key not in table:  # duplicate keys: the first one wins (requirements §4 row 9)
            table[key] = value
    return table, stop


def decode_value(buf, pos, end, as_text=False):
    """One field value (its type octet, then the value) at pos: (value, where it ends)."""
    _need(end, pos, 1)
    tag = buf[pos]
    pos += 1
    if tag == 0x53:  # 'S' long string
        _need(end, pos, 4)
        n = struct.unpack_from(">I", buf, pos)[0]
        pos += 4
        _need(end, pos, n)
        return _string(bytes(buf[pos : pos + n]), as_text), pos + n
    if tag == 0x49:  # 'I'
        _need(end, pos, 4)
        return struct.unpack_from(">i", buf, pos)[0], pos + 4
    if tag == 0x74:  # 't'
        _need(end, pos, 1)
        return buf[pos] != 0, pos + 1
    if tag == 0x46:  # 'F'
        return decode_table(buf, pos, end, as_text)
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
            value, pos = decode_value(buf, pos, stop, as_text)
            items.append(value)
        return items, stop
    if tag == 0x56:  # 'V'
        return None, pos
    if tag == 0x78:  # 'x' byte array
        _need(end, pos, 4)
        n = struct.unpack_from(">I", buf, pos)[0]
        pos += 4
        _need(end, pos, n)
        raw = buf[pos : pos + n]
        return (bytes(raw) if as_text else bytearray(raw)), pos + n
    raise DecodeError("unknown field table type %r" % chr(tag), 502)


def decode_args(sig, buf, pos, end, text=False):
    """Decode method arguments by signature (see spec.py); returns a list."""
    out = [None] * len(sig)
    read_args(sig, buf, pos, end, out, text)
    return out


def check_property_list(header, pos, end):
    """That the content header payload header[pos:end] (class, weight, body size, flags, then
    the properties) holds its properties whole and nothing after them: each is stepped over by
    its length, none decoded. A publish's header is checked as it comes in (amqp091/channel.py
    on_header; a run's first in amqp091/batch.py, the rest by c_accel/runs.c), so that what reads
    the properties in place later (core/message.py persistent(), decode_properties) finds them
    whole. DecodeError (a frame error) if not."""
    _need(end, pos, 14)
    flags = word = (header[pos + 12] << 8) | header[pos + 13]
    at = pos + 14
    while word & 1:  # continuation flag words (basic's 14 properties need none)
        _need(end, at, 2)
        word = (header[at] << 8) | header[at + 1]
        at += 2
    flags &= 0xFFFE
    for _name, code in BASIC_PROPERTIES:
        if not flags:
            break
        if flags & 0x8000:
            at = _value_end(code, header, at, end)
        flags = (flags << 1) & 0xFFFF
    if at != end:
        raise DecodeError("%d unexpected bytes after the content properties" % (end - at))


def decode_properties(header, text=False, names=None):
    """A content header payload's properties as a dict keyed by the spec's names, or by those
    of `names` (see put_properties)."""
    end = len(header)
    _need(end, 0, 14)
    flags = word = (header[12] << 8) | header[13]
    pos = 14
    while word & 1:  # continuation flag words: basic's 14 properties need none, so they are skipped
        _need(end, pos, 2)
        word = (header[pos] << 8) | header[pos + 1]
        pos += 2
    props = {}
    for i in range(len(BASIC_PROPERTIES)):
        if not flags & (0x8000 >> i):
            continue
        name, code = BASIC_PROPERTIES[i]
        stop = _value_end(code, header, pos, end)
        props[names[i] if names is not None else name] = decode_args(code, header, pos, stop, text)[0]
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


# ---------------------------------------------------------------- reading in place
# Reads that allocate nothing but the values they return, so that what a sensor node receives
# costs only what its deliveries need (client/protocol.py reuses one list for a delivery's
# arguments). buf may be a memoryview: strings are then decoded from it without a copy first.


def get_short(buf, pos):
    return (buf[pos] << 8) | buf[pos + 1]


def get_long(buf, pos):
    return (buf[pos] << 24) | (buf[pos + 1] << 16) | (buf[pos + 2] << 8) | buf[pos + 3]


def get_longlong(buf, pos):
    return (get_long(buf, pos) << 32) | get_long(buf, pos + 4)


def frame_end(buf, pos, end):
    """The index of the frame-end octet of the frame at pos, if all of that frame is in buf[:end];
    -1 while it is incomplete. DecodeError if the frame does not end with 0xCE. The caller judges
    the size; the type is buf[pos], the channel get_short(buf, pos + 1) (frame_at: all four)."""
    if end - pos < 8:
        return -1
    stop = pos + 7 + get_long(buf, pos + 3)
    if stop >= end:
        return -1
    if buf[stop] != FRAME_END:
        raise DecodeError("invalid frame end marker 0x%02x" % buf[stop])
    return stop


def _text_at(buf, pos, stop, as_text):
    """_string of buf[pos:stop], decoded from buf itself (a memoryview: no copy before the str)."""
    value = _string(buf[pos:stop], as_text)
    return value if isinstance(value, str) else bytes(value)


def read_args(sig, buf, pos, end, out, text=False):
    """Decode method arguments by signature (see spec.py) into out, a list at least len(sig)
    long that the caller may reuse (a client's read path allocates nothing more): out[i] is
    argument i. Returns the position after the arguments."""
    bit = bits = 0
    for i in range(len(sig)):
        code = sig[i]
        if code == "b":
            if bit == 0:
                _need(end, pos, 1)
                bits = buf[pos]
                pos += 1
            out[i] = (bits >> bit) & 1 == 1
            bit = (bit + 1) & 7
            continue
        bit = 0
        if code == "s" or code == "S":
            n = 1 if code == "s" else 4
            _need(end, pos, n)
            start = pos + n
            pos = start + (buf[pos] if n == 1 else get_long(buf, pos))
            _need(end, start, pos - start)
            out[i] = _text_at(buf, start, pos, text)
        elif code == "t":
            out[i], pos = decode_table(buf, pos, end, text)
        else:
            n = 1 if code == "o" else 2 if code == "h" else 4 if code == "l" else 8
            _need(end, pos, n)
            out[i] = (
                buf[pos]
                if n == 1
                else get_short(buf, pos)
                if n == 2
                else get_long(buf, pos)
                if n == 4
                else get_longlong(buf, pos)
            )
            pos += n
    if pos != end:
        raise DecodeError("%d unexpected bytes after the method arguments" % (end - pos))
    return pos
