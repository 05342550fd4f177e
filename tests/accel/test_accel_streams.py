"""The C maker of stream deliveries (c_accel/streams.c) against its pure-Python reference
(amqp091/output.py stream_records).

Differential tests: on the same buffer of records and the same arguments, both give the
same deliveries, positions, offsets and statuses, call after call, and the same frame
bytes, whatever the records (any properties, empty and large bodies, before the
consumer's offset or time, not yet visible) and whatever was done to them (cut short,
bytes flipped, random). CPython only; `make setup` builds the extension, so an import
failure here is a failed build.
"""

import struct
from binascii import crc32

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from paths import PORTABLE_TESTS

from hutch.amqp091 import output
from hutch.amqp091.batch import install
from hutch.c_accel import _accel, streams
from hutch.codec.wire import decode_properties, encode_properties, frame_at
from hutch.core.message import Message
from hutch.core.streams import streamlog
from hutch.core.streams.streamlog import BAD_RECORD, DONE, WANT, message_record

EXAMPLES = 150  # (the suite runs them beside the board tests, whose heap figures need CPU to spare)


def message(exchange, key, properties, body):
    header = struct.pack(">HHQ", 60, 0, len(body)) + encode_properties(properties)
    header_tail = struct.pack(">I", len(header)) + header + b"\xce"
    body_tail = struct.pack(">I", len(body)) + body + b"\xce" if body else None
    route = bytes((len(exchange),)) + exchange + bytes((len(key),)) + key
    return Message(exchange, key, route, header_tail, body_tail, len(body))


def records(specs):
    """The bytes of a segment holding a record for each (offset, stamp, message)."""
    cache = []
    out = []
    for offset, stamp, msg in specs:
        out.extend(message_record(offset, stamp, msg, cache)[0])
    return b"".join(out)


class _Reading:
    """What a maker of a stream's deliveries reads and moves: a consumer's cursor, its channel
    and connection (attributes as core/streams/stream.py, amqp091/channel.py and
    amqp091/connection.py have them)."""

    def __init__(self, **fields):
        self.__dict__.update(fields)


def positional(make):
    """make (stream_records' way: a cursor, a channel, a consumer) called with the values each
    of those holds, giving back (delivered, pos, offset, after_ms, status, made): how the tests
    below say what a call did."""

    def call(buf, pos, end, offset, after_ms, visible, count, space, number, tag_ss, tag, max_payload, out):
        cursor = _Reading(buf=buf, pos=pos, end=end, offset=offset, after_ms=after_ms)
        conn = _Reading(high_water=space, out_bytes=0, max_payload=max_payload, out=out)
        channel = _Reading(conn=conn, number=number, next_tag=tag)
        given, status, made = make(cursor, visible, count, channel, _Reading(tag_shortstr=tag_ss))
        return given, cursor.pos, cursor.offset, cursor.after_ms, status, made

    return call


PYTHON = positional(output.stream_records)
C = positional(streams.deliveries)


def run(make, buf, pos, offset, after_ms, visible, count, space, number, tag_ss, tag, max_payload, calls=6):
    """What a consumer's reads would see: calls one after the other, each from where the last
    stopped, until one gives nothing; [(result, frames)]."""
    seen = []
    for _ in range(calls):
        out = []
        result = make(
            buf, pos, len(buf), offset, after_ms, visible, count, space, number, tag_ss, tag, max_payload, out
        )
        seen.append((result, b"".join(out)))
        given, pos, offset, after_ms, status, made = result
        assert made == len(seen[-1][1])
        assert status in (WANT, DONE, BAD_RECORD)
        if not given:
            break
        tag += given
    return seen


def both(*args, **kw):
    python = run(PYTHON, *args, **kw)
    c = run(C, *args, **kw)
    assert c == python
    return python


names = st.binary(max_size=12)
properties = st.fixed_dictionaries(
    {},
    optional={
        "content-type": st.sampled_from([b"text/plain", b"application/json"]),
        "content-encoding": st.just(b"gzip"),
        "headers": st.dictionaries(
            st.sampled_from(["a", "b", "x-stream-offset"]), st.integers(-(2**31), 2**31 - 1), max_size=3
        ),
        "delivery-mode": st.sampled_from([1, 2]),
        "priority": st.integers(0, 9),
        "correlation-id": st.just(b"c1"),
        "message-id": st.just(b"m1"),
    },
)
bodies = st.one_of(st.binary(max_size=40), st.binary(min_size=100, max_size=1500))
messages = st.builds(message, names, names, properties, bodies)
record_lists = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2**41), messages), min_size=1, max_size=8).map(
    lambda items: _numbered(items)
)
max_payloads = st.sampled_from([1, 7, 100, 4088, 131064]) | st.integers(1, 300)
tags = st.binary(max_size=40).map(lambda t: bytes((len(t),)) + t)


def _numbered(items):
    """Offsets that only grow (a step of 0 to 3: gaps as after a crash)."""
    offset = 0
    out = []
    for step, stamp, msg in items:
        offset += step
        out.append((offset, stamp, msg))
        offset += 1
    return out


arguments = st.tuples(
    st.integers(0, 30),  # offset
    st.sampled_from([0, 0, 1, 2**40]),  # after_ms
    st.integers(0, 40),  # visible
    st.integers(1, 5),  # count
    st.sampled_from([1, 200, 1 << 30]),  # space
    st.integers(0, 65535),  # channel
    tags,
    st.integers(1, 2**63),  # first delivery tag
    max_payloads,
)


@settings(max_examples=EXAMPLES)
@given(record_lists, arguments)
def test_sound_records(specs, args):
    data = records(specs)
    calls = both(bytearray(data), 0, *args)
    offset, after_ms, visible, count, space, number, tag_ss, tag, max_payload = args
    # and the frames are the deliveries of the first records that qualify, in order: at or past
    # offset, below visible, none before the first stamped at or after after_ms
    wanted = [s for s in specs if offset <= s[0] < visible]
    while after_ms and wanted and wanted[0][1] < after_ms:
        wanted.pop(0)
    delivered = _deliveries(b"".join(c[1] for c in calls), number, max_payload)
    assert len(delivered) == sum(c[0][0] for c in calls) <= len(wanted)
    for i, (method, header, body) in enumerate(delivered):
        consumer, delivery_tag, redelivered = struct.unpack_from(">%dsQB" % len(tag_ss), method, 4)
        assert consumer == tag_ss and delivery_tag == tag + i and not redelivered
        record_offset, _stamp, msg = wanted[i]
        assert decode_properties(header)["headers"]["x-stream-offset"] == record_offset
        assert method[4 + len(tag_ss) + 9 :] == msg.route and body == bytes(msg.body())


def _deliveries(frames, number, max_payload):
    """[(method payload, header payload, body)] of a run of deliveries' frames."""
    out = []
    pos = 0
    while pos < len(frames):
        ftype, channel, start, end = frame_at(frames, pos, len(frames))
        assert channel == number
        if ftype == 1:
            out.append([frames[start:end], None, b""])
        elif ftype == 2:
            out[-1][1] = frames[start:end]
        else:
            assert ftype == 3 and end - start <= max_payload
            out[-1][2] += frames[start:end]
        pos = end + 1
    return [tuple(d) for d in out]


@settings(max_examples=EXAMPLES)
@given(record_lists, arguments, st.data())
def test_records_cut_short(specs, args, data):
    raw = records(specs)
    cut = data.draw(st.integers(0, len(raw)))
    calls = both(bytearray(raw[:cut]), 0, *args)
    assert calls[-1][0][4] in (WANT, DONE)


@settings(max_examples=EXAMPLES)
@given(record_lists, arguments, st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4))
def test_flipped_bytes(specs, args, flips):
    raw = bytearray(records(specs))
    for where, octet in flips:
        raw[where % len(raw)] = octet
    both(raw, 0, *args)


@settings(max_examples=EXAMPLES)
@given(st.lists(st.tuples(st.integers(0, 12), st.binary(max_size=60)), max_size=6), arguments)
def test_records_that_check_out_but_do_not_hold_together(pieces, args):
    """A sound envelope and CRC around a payload that is not a stream's (lengths pointing out
    of it): BAD_RECORD, never a read past the record."""
    raw = b""
    for offset, junk in pieces:
        payload = struct.pack(">QQ", offset, 0) + junk
        fields = struct.pack(">BI", streamlog.MESSAGE, len(payload))
        seed = crc32(fields)
        raw += b"\xa5" + fields + struct.pack(">H", seed & 0xFFFF) + payload
        raw += struct.pack(">I", crc32(payload, seed) & 0xFFFFFFFF)
    both(bytearray(raw), 0, *args)


@settings(max_examples=EXAMPLES)
@given(st.binary(max_size=600), st.integers(0, 600), arguments)
def test_random_bytes(raw, pos, args):
    both(bytearray(raw), min(pos, len(raw)), *args)


def test_a_delivery_larger_than_the_output_buffer_grows_it():
    """The C side writes into one buffer: a run that does not fit in it is given in several
    calls (fewer deliveries each, as count would), and a delivery larger than the buffer gets
    a larger one. The frames, and where the reading ends, are the same."""
    specs = _numbered([(0, 5, message(b"", b"q", {}, bytes(range(256)) * 40)) for _ in range(5)])
    data = bytearray(records(specs))
    args = (data, 0, 0, 0, 100, 10, 1 << 30, 1, b"\x01t", 1, 4088)
    python = run(PYTHON, *args)
    saved = streams._out[0]
    try:
        streams._out[0] = _accel.ffi.new("uint8_t[]", 3000)
        c = run(C, *args, calls=20)
        assert len(streams._out[0]) > 10000
    finally:
        streams._out[0] = saved
    assert len(python) == 2 and len(c) > 2
    assert b"".join(call[1] for call in c) == b"".join(call[1] for call in python)
    assert c[-1][0] == python[-1][0] == (0, len(data), 5, 0, WANT, 0)


def test_statuses():
    specs = _numbered([(0, 1000 * i, message(b"ex", b"key", {"priority": 1}, b"body%d" % i)) for i in range(4)])
    data = bytearray(records(specs))
    for make in (PYTHON, C):
        # all four, then the end of the buffer
        assert make(data, 0, len(data), 0, 0, 10, 10, 1 << 20, 1, b"\x00", 1, 4088, [])[4] == WANT
        # the third is not visible yet: the consumer waits at its offset
        given, pos, offset, after_ms, status, made = make(
            data, 0, len(data), 0, 0, 2, 10, 1 << 20, 1, b"\x00", 1, 4088, []
        )
        assert (given, offset, status) == (2, 2, DONE)
        # a consumer at a moment: the records before it are read past
        given, pos, offset, after_ms, status, made = make(
            data, 0, len(data), 0, 2000, 10, 10, 1 << 20, 1, b"\x00", 1, 4088, []
        )
        assert (given, offset, after_ms, status) == (2, 4, 0, WANT)
        # a flipped byte in the second record's body
        bad = bytearray(data)
        bad[len(records(specs[:2])) - 6] ^= 1
        given, pos, offset, after_ms, status, made = make(
            bad, 0, len(bad), 0, 0, 10, 10, 1 << 20, 1, b"\x00", 1, 4088, []
        )
        assert (given, pos, offset, status) == (1, len(records(specs[:1])), 1, BAD_RECORD)


# ---------------------------------------------------------------- the core's stream tests, on C


def _core_stream_tests():
    import sys

    core = PORTABLE_TESTS
    if core not in sys.path:
        sys.path.insert(0, core)  # (where they and their harness are imported from)
    import test_streams

    return test_streams, [name for name in sorted(dir(test_streams)) if name.startswith("test_")]


@pytest.mark.parametrize("name", _core_stream_tests()[1])
def test_the_cores_stream_tests_pass_with_the_c_maker(name, monkeypatch):
    """tests/portable/test_streams.py again, each of its brokers making deliveries as `hutch serve`
    has it make them on CPython (amqp091/batch.py install: the C twin): damage, gaps,
    prefetch, budgets and every offset form through the C code."""
    module, _ = _core_stream_tests()

    class NodeMakingDeliveriesInC(module.Node):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            install(self.broker, stream_deliveries=streams.deliveries)  # (as server/startup.py does)

    monkeypatch.setattr(module, "Node", NodeMakingDeliveriesInC)  # (the test module's, undone after)
    getattr(module, name)()
