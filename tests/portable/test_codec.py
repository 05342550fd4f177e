"""Field tables, method arguments and content properties (the wire codec)."""

import struct

from hutch.codec import spec, wire
from hutch.codec.errors import DecodeError
from hutch.codec.wire import (
    Decimal,
    Timestamp,
    decode_args,
    decode_properties,
    decode_table,
    encode_args,
    encode_properties,
    encode_table,
    signature,
)


def _raises(fn, code=None):
    try:
        fn()
    except DecodeError as e:
        assert code is None or e.code == code, e.code
        return
    raise AssertionError("no DecodeError")


def test_table_round_trip():
    table = {
        "bool": True,
        "int": -5,
        "big": 2**40,
        "float": 1.5,
        "text": b"utf8 \xc3\xa9",
        "bytes": bytearray(b"\x00\x01"),
        "nested": {"a": [1, b"two", None]},
        "void": None,
        "when": Timestamp(1700000000),
        "money": Decimal(2, 12345),
    }
    raw = encode_table(table)
    assert decode_table(raw, 0, len(raw)) == (table, len(raw))


def test_str_values_encode_as_long_strings():
    raw = encode_table({"k": "v"})
    assert raw == b"\x00\x00\x00\x08\x01kS\x00\x00\x00\x01v"


def test_every_rabbitmq_tag_decodes():
    entries = [
        (b"t", b"\x01", True),
        (b"b", b"\xff", -1),
        (b"B", b"\xff", 255),
        (b"s", b"\xff\xfe", -2),
        (b"u", b"\xff\xfe", 65534),
        (b"U", b"\x00\x07", 7),
        (b"I", b"\xff\xff\xff\xff", -1),
        (b"i", b"\xff\xff\xff\xff", 4294967295),
        (b"l", struct.pack(">q", -3), -3),
        (b"L", struct.pack(">q", 9), 9),
        (b"f", struct.pack(">f", 0.5), 0.5),
        (b"d", struct.pack(">d", 0.25), 0.25),
        (b"D", b"\x02\x00\x00\x00\x07", Decimal(2, 7)),
        (b"S", b"\x00\x00\x00\x02hi", b"hi"),
        (b"A", b"\x00\x00\x00\x02b\x05", [5]),
        (b"T", struct.pack(">Q", 10), Timestamp(10)),
        (b"F", b"\x00\x00\x00\x00", {}),
        (b"V", b"", None),
        (b"x", b"\x00\x00\x00\x01z", bytearray(b"z")),
    ]
    for tag, raw, value in entries:
        body = b"\x01k" + tag + raw
        table = struct.pack(">I", len(body)) + body
        assert decode_table(table, 0, len(table))[0] == {"k": value}, tag


def test_duplicate_keys_keep_the_first():
    body = b"\x01kI\x00\x00\x00\x01\x01kI\x00\x00\x00\x02"
    table = struct.pack(">I", len(body)) + body
    assert decode_table(table, 0, len(table))[0] == {"k": 1}


def test_keys_like_x_match_are_fine():
    raw = encode_table({"x-match": "all", "connection.blocked": True, "": 1})
    assert set(decode_table(raw, 0, len(raw))[0]) == {"x-match", "connection.blocked", ""}


def test_truncated_and_lying_tables():
    raw = encode_table({"key": b"value"})
    for cut in range(1, len(raw)):
        _raises(lambda cut=cut: decode_table(raw[:cut], 0, cut))
    _raises(lambda: decode_table(b"\x00\x00\x00\x03\x01kZ", 0, 7), 502)  # unknown tag
    _raises(lambda: decode_table(b"\x00\x00\x00\x06\x01kS\xff\xff", 0, 10))  # string runs past


def test_args_with_packed_bits():
    sig = signature(spec.QUEUE_DECLARE)
    args = [0, b"q", True, False, True, False, True, {"x": 1}]
    raw = encode_args(sig, args)
    assert raw[2 + 2] == 0b10101  # five bits in one octet, low bit first
    assert decode_args(sig, raw, 0, len(raw)) == args


def test_nine_bits_take_two_octets():
    raw = encode_args("bbbbbbbbb", [True] * 9)
    assert raw == b"\xff\x01"
    assert decode_args("bbbbbbbbb", raw, 0, 2) == [True] * 9


def test_args_reject_short_and_long_payloads():
    sig = signature(spec.BASIC_QOS)
    raw = encode_args(sig, [0, 5, False])
    _raises(lambda: decode_args(sig, raw[:-1], 0, len(raw) - 1))
    _raises(lambda: decode_args(sig, raw + b"\x00", 0, len(raw) + 1))


def test_properties_round_trip():
    props = {
        "content-type": b"text/plain",
        "headers": {"a": 1},
        "delivery-mode": 2,
        "priority": 9,
        "correlation-id": b"c",
        "reply-to": b"r",
        "expiration": b"60000",
        "message-id": b"m",
        "timestamp": 1700000000,
        "type": b"t",
        "user-id": b"u",
        "app-id": b"a",
        "cluster-id": b"",
    }
    header = struct.pack(">HHQ", 60, 0, 0) + encode_properties(props)
    assert decode_properties(header) == props


def test_property_flags_continuation_word_is_skipped():
    header = struct.pack(">HHQ", 60, 0, 0) + struct.pack(">HH", 0x8001, 0) + b"\x01a"
    assert decode_properties(header) == {"content-type": b"a"}


def test_bad_properties():
    _raises(lambda: decode_properties(struct.pack(">HHQ", 60, 0, 0) + b"\x80\x00\x05ab"))
    _raises(lambda: decode_properties(struct.pack(">HHQ", 60, 0, 0) + b"\x00\x00junk"))


# ---------------------------------------------------------------- reading in place (wire.py's client section)


def test_get_short_long_longlong_read_big_endian():
    raw = bytes(range(1, 9))
    assert wire.get_short(raw, 0) == 0x0102
    assert wire.get_long(raw, 1) == 0x02030405
    assert wire.get_longlong(memoryview(raw), 0) == 0x0102030405060708


def test_frame_end_finds_whole_frames_only():
    raw = wire.method_frame(1, spec.BASIC_ACK, (7, False)) + wire.HEARTBEAT_FRAME
    stop = wire.frame_end(raw, 0, len(raw))
    assert raw[stop] == 0xCE and stop == len(raw) - 9
    assert wire.frame_end(raw, stop + 1, len(raw)) == len(raw) - 1
    for cut in range(stop + 1):  # the first frame, cut anywhere
        assert wire.frame_end(raw, 0, cut) == -1
    bad = bytearray(raw)
    bad[stop] = 0
    _raises(lambda: wire.frame_end(bad, 0, len(bad)))


def test_read_args_matches_decode_args_in_a_reused_list():
    out = [None] * 5
    for method_id, args in (
        (spec.BASIC_DELIVER, ["ctag", 2**40, True, "", "r\u00e9"]),
        (spec.BASIC_GET_OK, [3, False, "x", "k", 9]),
        (spec.QUEUE_DECLARE, [0, "q", True, False, True, False, True, {"x": b"\x01"}]),
        (spec.CONNECTION_START_OK, [{"a": 1}, "PLAIN", b"\x00u\x00p", "en_US"]),
        (spec.BASIC_QOS, [0, 5, False]),
    ):
        sig = signature(method_id)
        raw = encode_args(sig, args, binary=True)
        out = out + [None] * (len(sig) - len(out))
        view = memoryview(raw)
        assert wire.read_args(sig, view, 0, len(raw), out, True) == len(raw)
        assert out[: len(sig)] == decode_args(sig, raw, 0, len(raw), True), method_id
    raw = encode_args("s", [b"\xff"])  # not UTF-8: the bytes themselves
    wire.read_args("s", raw, 0, len(raw), out)
    assert out[0] == b"\xff"
    _raises(lambda: wire.read_args("sl", raw, 0, len(raw), out))
    _raises(lambda: wire.read_args("", raw, 0, len(raw), out))
