"""The AMQP 1.0 type system (part 1 of the specification, `types.xml`): values to octets and back.

    encode(value) -> bytes
    decode(data, pos=0) -> (value, position after it)

Python values map to AMQP types as a client library maps them: None is null, bool boolean,
int long, float double, str string, bytes binary, list list, dict map. The types Python has no
word for are small classes here: Ubyte, Ushort, Uint, Ulong, Byte, Short, Int (integers of a
width), Timestamp (milliseconds since the epoch), Symbol, Uuid (16 octets), Char, Float (a
32-bit float), Array (one element type for all), and Described (a descriptor and a value: how
every performative and message section is written). Decoding gives the same classes back, so a
value decodes to what encoded it; each class compares equal to one of the same class and value.

Each value is written in its shortest form (uint0, smalluint, str8, list0, ...), as the
specification recommends and the clients here do. Pure Python with struct: it runs on
MicroPython too.
"""

import struct


class DecodeError(ValueError):
    """Octets that are not an AMQP 1.0 value (a client's mistake): amqp:decode-error."""


class _Scalar:
    """A value of one AMQP type that Python has no type for: compares by class and value."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        return type(other) is type(self) and other.value == self.value

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        return hash((type(self).__name__, self.value))

    def __repr__(self):
        return "%s(%r)" % (type(self).__name__, self.value)


class Ubyte(_Scalar):
    pass


class Ushort(_Scalar):
    pass


class Uint(_Scalar):
    pass


class Ulong(_Scalar):
    pass


class Byte(_Scalar):
    pass


class Short(_Scalar):
    pass


class Int(_Scalar):
    pass


class Float(_Scalar):
    pass


class Char(_Scalar):
    pass


class Timestamp(_Scalar):
    pass


class Uuid(_Scalar):
    pass


class Symbol(_Scalar):
    pass


class Decimal32(_Scalar):
    """An IEEE 754 decimal, kept as its octets (4, 8 or 16): passed on, never computed with."""


class Decimal64(_Scalar):
    pass


class Decimal128(_Scalar):
    pass


class Array(_Scalar):
    """Elements of one type: `code` is its constructor (0xa3 for symbols, 0x70 for uints ...)."""

    __slots__ = ("code",)

    def __init__(self, code, value):
        self.code = code
        self.value = list(value)

    def __eq__(self, other):
        return type(other) is Array and other.code == self.code and other.value == self.value

    def __hash__(self):
        return hash((self.code, len(self.value)))

    def __repr__(self):
        return "Array(0x%02x, %r)" % (self.code, self.value)


class Described:
    """A described value: every performative, outcome and message section (descriptor: a Ulong
    code or a Symbol name)."""

    __slots__ = ("descriptor", "value")

    def __init__(self, descriptor, value):
        self.descriptor = descriptor
        self.value = value

    def __eq__(self, other):
        return type(other) is Described and other.descriptor == self.descriptor and other.value == self.value

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        return hash(self.descriptor)

    def __repr__(self):
        return "Described(%r, %r)" % (self.descriptor, self.value)


# ------------------------------------------------------------------ encoding


def encode(value):
    out = []
    _encode(value, out)
    return b"".join(out)


def _encode(value, out):
    kind = type(value)
    if value is None:
        out.append(b"\x40")
    elif kind is bool:
        out.append(b"\x41" if value else b"\x42")
    elif kind is int:
        _long(value, out)
    elif kind is float:
        out.append(b"\x82" + struct.pack(">d", value))
    elif kind is str:
        _variable(value.encode(), 0xA1, 0xB1, out)
    elif kind is bytes or kind is bytearray or kind is memoryview:
        _variable(bytes(value), 0xA0, 0xB0, out)
    elif kind is list or kind is tuple:
        _list(value, out)
    elif kind is dict:
        _map(value, out)
    elif kind is Described:
        out.append(b"\x00")
        _encode(value.descriptor, out)
        _encode(value.value, out)
    elif kind in ENCODERS:
        ENCODERS[kind](value.value, out)
    elif kind is Array:
        _array(value, out)
    else:
        raise TypeError("no AMQP 1.0 type for %r" % (value,))


def _long(v, out):
    if -128 <= v <= 127:
        out.append(b"\x55" + struct.pack(">b", v))
    else:
        out.append(b"\x81" + struct.pack(">q", v))


def _uint(v, out):
    if v == 0:
        out.append(b"\x43")
    elif v < 256:
        out.append(bytes((0x52, v)))
    else:
        out.append(b"\x70" + struct.pack(">I", v))


def _ulong(v, out):
    if v == 0:
        out.append(b"\x44")
    elif v < 256:
        out.append(bytes((0x53, v)))
    else:
        out.append(b"\x80" + struct.pack(">Q", v))


def _int(v, out):
    if -128 <= v <= 127:
        out.append(b"\x54" + struct.pack(">b", v))
    else:
        out.append(b"\x71" + struct.pack(">i", v))


def _variable(data, short, long, out):
    n = len(data)
    out.append(bytes((short, n)) if n < 256 else bytes((long,)) + struct.pack(">I", n))
    out.append(data)


def _list(items, out):
    if not items:
        out.append(b"\x45")
        return
    body = []
    for item in items:
        _encode(item, body)
    data = b"".join(body)
    if len(data) + 1 < 256 and len(items) < 256:
        out.append(bytes((0xC0, len(data) + 1, len(items))))
    else:
        out.append(b"\xd0" + struct.pack(">II", len(data) + 4, len(items)))
    out.append(data)


def _map(pairs, out):
    body = []
    for key, item in pairs.items():
        _encode(key, body)
        _encode(item, body)
    data = b"".join(body)
    count = 2 * len(pairs)
    if len(data) + 1 < 256 and count < 256:
        out.append(bytes((0xC1, len(data) + 1, count)))
    else:
        out.append(b"\xd1" + struct.pack(">II", len(data) + 4, count))
    out.append(data)


# An array's elements are written without their constructor (the array's, written once):
# constructor -> writer of one element
ELEMENTS = {
    0xA3: lambda v: bytes((len(v.encode()),)) + v.encode(),  # sym8
    0xB3: lambda v: struct.pack(">I", len(v.encode())) + v.encode(),  # sym32
    0xA1: lambda v: bytes((len(v.encode()),)) + v.encode(),  # str8
    0xB1: lambda v: struct.pack(">I", len(v.encode())) + v.encode(),  # str32
    0x70: lambda v: struct.pack(">I", v),  # uint
    0x80: lambda v: struct.pack(">Q", v),  # ulong
    0x71: lambda v: struct.pack(">i", v),  # int
    0x81: lambda v: struct.pack(">q", v),  # long
}


def _array(array, out):
    write = ELEMENTS.get(array.code)
    if write is None:
        raise TypeError("arrays of constructor 0x%02x are not written here" % array.code)
    values = [item.value if isinstance(item, _Scalar) else item for item in array.value]
    data = bytes((array.code,)) + b"".join(write(v) for v in values)
    if len(data) + 1 < 256 and len(values) < 256:
        out.append(bytes((0xE0, len(data) + 1, len(values))))
    else:
        out.append(b"\xf0" + struct.pack(">II", len(data) + 4, len(values)))
    out.append(data)


ENCODERS = {
    Ubyte: lambda v, out: out.append(bytes((0x50, v))),
    Ushort: lambda v, out: out.append(b"\x60" + struct.pack(">H", v)),
    Uint: _uint,
    Ulong: _ulong,
    Byte: lambda v, out: out.append(b"\x51" + struct.pack(">b", v)),
    Short: lambda v, out: out.append(b"\x61" + struct.pack(">h", v)),
    Int: _int,
    Float: lambda v, out: out.append(b"\x72" + struct.pack(">f", v)),
    Char: lambda v, out: out.append(b"\x73" + struct.pack(">I", ord(v))),
    Timestamp: lambda v, out: out.append(b"\x83" + struct.pack(">q", v)),
    Uuid: lambda v, out: out.append(b"\x98" + bytes(v)),
    Symbol: lambda v, out: _variable(v.encode(), 0xA3, 0xB3, out),
    Decimal32: lambda v, out: out.append(b"\x74" + bytes(v)),
    Decimal64: lambda v, out: out.append(b"\x84" + bytes(v)),
    Decimal128: lambda v, out: out.append(b"\x94" + bytes(v)),
}


# ------------------------------------------------------------------ decoding


MAX_DEPTH = 32  # lists, maps, arrays and described values within each other: deeper is refused


def decode(data, pos=0, depth=0):
    """(value, the position after it) of the value at pos; DecodeError for what is not one."""
    try:
        code = data[pos]
    except IndexError:
        raise DecodeError("a value was expected at octet %d, the data ends" % pos)
    pos += 1
    if code == 0x00:  # a described value
        if depth >= MAX_DEPTH:
            raise DecodeError("values nested more than %d deep" % MAX_DEPTH)
        descriptor, pos = decode(data, pos, depth + 1)
        value, pos = decode(data, pos, depth + 1)
        return Described(descriptor, value), pos
    fixed = FIXED.get(code)
    if fixed is not None:
        size, make = fixed
        end = pos + size
        if end > len(data):
            raise DecodeError("constructor 0x%02x needs %d octets, %d left" % (code, size, len(data) - pos))
        return make(data[pos:end]), end
    if code in VARIABLE:
        width, make = VARIABLE[code]
        size, pos = _size(data, pos, width)
        end = pos + size
        if end > len(data):
            raise DecodeError("constructor 0x%02x: %d octets announced, %d left" % (code, size, len(data) - pos))
        return make(bytes(data[pos:end])), end
    if code in (0xC0, 0xD0, 0xC1, 0xD1, 0xE0, 0xF0):
        if depth >= MAX_DEPTH:
            raise DecodeError("values nested more than %d deep" % MAX_DEPTH)
        if code >= 0xE0:
            return _decode_array(data, pos, code, depth + 1)
        return _compound(data, pos, code, depth + 1)
    raise DecodeError("0x%02x is not an AMQP 1.0 constructor" % code)


def _size(data, pos, width):
    if pos + width > len(data):
        raise DecodeError("a size was expected at octet %d, the data ends" % pos)
    if width == 1:
        return data[pos], pos + 1
    return struct.unpack_from(">I", data, pos)[0], pos + 4


def _compound(data, pos, code, depth):
    width = 1 if code in (0xC0, 0xC1) else 4
    size, pos = _size(data, pos, width)
    end = pos + size
    if end > len(data) or size < width:
        raise DecodeError("a list or map of %d octets, %d left" % (size, len(data) - pos))
    count, pos = _size(data, pos, width)
    if count > end - pos:  # (each element takes an octet at least)
        raise DecodeError("a list or map of %d elements in %d octets" % (count, end - pos))
    items = []
    for _ in range(count):
        item, pos = decode(data, pos, depth)
        items.append(item)
    if pos != end:
        raise DecodeError("a list or map's elements end at octet %d, its size says %d" % (pos, end))
    if code in (0xC0, 0xD0):
        return items, end
    if count % 2:
        raise DecodeError("a map of %d elements: keys and values come in pairs" % count)
    out = {}
    for i in range(0, count, 2):
        key = items[i]
        if isinstance(key, (list, dict)):
            raise DecodeError("a map key must not be a list or map")
        out[key] = items[i + 1]
    return out, end


def _decode_array(data, pos, code, depth):
    width = 1 if code == 0xE0 else 4
    size, pos = _size(data, pos, width)
    end = pos + size
    if end > len(data) or size < width:
        raise DecodeError("an array of %d octets, %d left" % (size, len(data) - pos))
    count, pos = _size(data, pos, width)
    if pos >= end:
        raise DecodeError("an array without its element constructor")
    element = data[pos]
    pos += 1
    descriptor = None
    if element == 0x00:  # described elements: the descriptor once, then the elements' constructor
        descriptor, pos = decode(data, pos, depth)
        if pos >= end:
            raise DecodeError("a described array without its element constructor")
        element = data[pos]
        pos += 1
    if count > end - pos and (element not in ZERO_WIDTH or count > 0xFFFF):
        raise DecodeError("an array of %d elements in %d octets" % (count, end - pos))
    items = []
    for _ in range(count):
        item, pos = _element(data, pos, element, depth)
        items.append(Described(descriptor, item) if descriptor is not None else item)
    if pos != end:
        raise DecodeError("an array's elements end at octet %d, its size says %d" % (pos, end))
    return Array(element, items), end


def _element(data, pos, element, depth):
    """One element of an array: its octets without a constructor (the array's, once)."""
    if element in (0xC0, 0xD0, 0xC1, 0xD1, 0xE0, 0xF0):
        if depth >= MAX_DEPTH:
            raise DecodeError("values nested more than %d deep" % MAX_DEPTH)
        if element >= 0xE0:
            return _decode_array(data, pos, element, depth + 1)
        return _compound(data, pos, element, depth + 1)
    fixed = FIXED.get(element)
    if fixed is not None:
        size, make = fixed
        if pos + size > len(data):
            raise DecodeError("an array element past the data's end")
        return make(data[pos : pos + size]), pos + size
    variable = VARIABLE.get(element)
    if variable is None:
        raise DecodeError("arrays of constructor 0x%02x are not read here" % element)
    width, make = variable
    size, pos = _size(data, pos, width)
    if pos + size > len(data):
        raise DecodeError("an array element past the data's end")
    return make(bytes(data[pos : pos + size])), pos + size


def _utf8(raw):
    try:
        return raw.decode()
    except UnicodeError:
        raise DecodeError("a string that is not UTF-8")


def _symbol(raw):
    try:
        return Symbol(raw.decode("ascii"))
    except UnicodeError:
        raise DecodeError("a symbol that is not ASCII")


def _char(raw):
    point = struct.unpack(">I", raw)[0]
    if point > 0x10FFFF or 0xD800 <= point <= 0xDFFF:
        raise DecodeError("char 0x%x is not a Unicode code point" % point)
    return Char(chr(point))


FIXED = {
    0x40: (0, lambda b: None),
    0x41: (0, lambda b: True),
    0x42: (0, lambda b: False),
    0x56: (1, lambda b: b[0] == 1),
    0x43: (0, lambda b: Uint(0)),
    0x44: (0, lambda b: Ulong(0)),
    0x45: (0, lambda b: []),
    0x50: (1, lambda b: Ubyte(b[0])),
    0x51: (1, lambda b: Byte(struct.unpack(">b", b)[0])),
    0x52: (1, lambda b: Uint(b[0])),
    0x53: (1, lambda b: Ulong(b[0])),
    0x54: (1, lambda b: Int(struct.unpack(">b", b)[0])),
    0x55: (1, lambda b: struct.unpack(">b", b)[0]),
    0x60: (2, lambda b: Ushort(struct.unpack(">H", b)[0])),
    0x61: (2, lambda b: Short(struct.unpack(">h", b)[0])),
    0x70: (4, lambda b: Uint(struct.unpack(">I", b)[0])),
    0x71: (4, lambda b: Int(struct.unpack(">i", b)[0])),
    0x72: (4, lambda b: Float(struct.unpack(">f", b)[0])),
    0x73: (4, _char),
    0x74: (4, lambda b: Decimal32(bytes(b))),
    0x84: (8, lambda b: Decimal64(bytes(b))),
    0x94: (16, lambda b: Decimal128(bytes(b))),
    0x80: (8, lambda b: Ulong(struct.unpack(">Q", b)[0])),
    0x81: (8, lambda b: struct.unpack(">q", b)[0]),
    0x82: (8, lambda b: struct.unpack(">d", b)[0]),
    0x83: (8, lambda b: Timestamp(struct.unpack(">q", b)[0])),
    0x98: (16, lambda b: Uuid(bytes(b))),
}

VARIABLE = {
    0xA0: (1, lambda b: b),
    0xB0: (4, lambda b: b),
    0xA1: (1, _utf8),
    0xB1: (4, _utf8),
    0xA3: (1, _symbol),
    0xB3: (4, _symbol),
}
ZERO_WIDTH = (0x40, 0x41, 0x42, 0x43, 0x44, 0x45)  # constructors with no octets of their own
