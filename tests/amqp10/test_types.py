"""amqp10/types.py, the AMQP 1.0 type system: every type round-trips in its shortest form, the
spec's own examples encode as the spec writes them, and octets that are not a value are a
DecodeError naming what is wrong (never an IndexError or a wrong value)."""

import pytest

from hutch.amqp10 import spec
from hutch.amqp10.types import (
    Array,
    Byte,
    Char,
    DecodeError,
    Described,
    Float,
    Int,
    Short,
    Symbol,
    Timestamp,
    Ubyte,
    Uint,
    Ulong,
    Ushort,
    Uuid,
    decode,
    encode,
)
from hutch.tools import gen_spec10

VALUES = [
    None, True, False, 0, 5, -3, 1000, 2**40, -(2**63), 1.5, "", "héllo", "x" * 300, b"", b"\x00\x01", b"y" * 70000,
    [], [1, "a", [None]], {}, {Symbol("k"): Uint(7), "s": [1, 2]}, Ubyte(3), Ushort(500), Uint(0), Uint(9),
    Uint(70000), Ulong(0), Ulong(200), Ulong(2**40), Byte(-2), Short(-300), Int(5), Int(-70000), Float(0.5),
    Char("é"), Timestamp(1700000000000), Uuid(bytes(range(16))), Symbol("amqp:accepted:list"),
    Array(0xA3, [Symbol("a"), Symbol("bb")]), Array(0x70, [Uint(1), Uint(70000)]), list(range(300)),
    Described(Ulong(spec.OPEN), ["container", None, Uint(131072)]), Described(Symbol("x:y"), {}),
]  # fmt: skip


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_every_type_round_trips(value):
    data = encode(value)
    assert decode(data) == (value, len(data))
    assert decode(b"\x40" + data, 1) == (value, len(data) + 1)  # from a position within a frame


@pytest.mark.parametrize(
    "value, octets",
    [
        (Uint(0), b"\x43"),  # uint0
        (Uint(7), b"\x52\x07"),  # smalluint
        (Ulong(0x10), b"\x53\x10"),  # smallulong: how descriptors are written
        (True, b"\x41"),
        ([], b"\x45"),  # list0
        ("ab", b"\xa1\x02ab"),  # str8-utf8
        (Symbol("PLAIN"), b"\xa3\x05PLAIN"),
        (Described(Ulong(spec.ACCEPTED), []), b"\x00\x53\x24\x45"),  # accepted, as every client sends it
    ],
)
def test_the_shortest_form(value, octets):
    assert encode(value) == octets


@pytest.mark.parametrize(
    "octets, said",
    [
        (b"", "the data ends"),
        (b"\x70\x00\x00", "needs 4 octets"),
        (b"\xa1\x05ab", "5 octets announced"),
        (b"\xa1\x02\xff\xfe", "not UTF-8"),
        (b"\xc1\x02\x01\x41", "pairs"),
        (b"\xc0\x04\x02\x41\x41\x41", "its size says"),
        (b"\x13", "not an AMQP 1.0 constructor"),
        (b"\x00\x53", "needs 1 octets, 0 left"),
        (b"\x00\x53\x10", "the data ends"),  # a descriptor without its value
        (b"\xe0\x01\x00", "element constructor"),
    ],
)
def test_what_is_not_a_value_is_said(octets, said):
    with pytest.raises(DecodeError, match=said):
        decode(octets)


def test_the_generated_spec_is_the_xml_s():
    assert gen_spec10.main(["--check"]) == 0
    assert spec.OPEN == 0x10 and spec.SASL_OUTCOME == 0x44 and spec.AMQP_VALUE == 0x77
    name, fields = spec.TYPES[spec.OPEN]
    assert name == "open" and fields[:3] == ("container-id", "hostname", "max-frame-size")


# ---------------------------------------------------------------- what a peer may send


@pytest.mark.parametrize(
    "octets, value",
    [
        (b"\x74\x22\x30\x00\x01", "Decimal32"),
        (b"\x84" + bytes(8), "Decimal64"),
        (b"\x94" + bytes(16), "Decimal128"),
        (b"\xe0\x06\x02\xc0\x01\x00\x01\x00", "Array"),  # an array of lists
        (b"\xe0\x08\x02\x00\xa3\x01x\x56\x01\x00", "Array"),  # described booleans
    ],
)
def test_decimals_and_arrays_of_compound_or_described_elements_decode(octets, value):
    found, end = decode(octets)
    assert type(found).__name__ == value and end == len(octets)
    if value.startswith("Decimal"):
        assert encode(found) == octets


@pytest.mark.parametrize(
    "octets, said",
    [
        (b"\xa3\x01\xff", "not ASCII"),
        (b"\x73\x00\x11\x00\x00", "not a Unicode code point"),
        (b"\xc0\x00", "0 octets"),
        (b"\xd0\x00\x00\x00\x04\xff\xff\xff\xff", "elements in"),
        (b"\xf0\x00\x00\x00\x05\xff\xff\xff\xff\x70", "elements in"),
        (b"\xc0\x03\x01" * 40 + b"\x40", "nested more than 32"),
    ],
)
def test_what_a_peer_may_send_wrongly_is_a_decode_error(octets, said):
    with pytest.raises(DecodeError, match=said):
        decode(octets)
