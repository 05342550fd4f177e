"""Property tests (hypothesis) of the codec and of the connection's frame reader.

CPython only (hypothesis does not run on MicroPython); the plain codec tests in
tests/portable run on both.
"""

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from hutch.amqp091.connection import Connection
from hutch.codec import spec
from hutch.codec.errors import DecodeError
from hutch.codec.spec import CONTENT, METHODS
from hutch.codec.wire import (
    PROTOCOL_HEADER,
    content_frames,
    decode_args,
    decode_table,
    encode_args,
    encode_table,
    frame,
    method_frame,
    signature,
)
from hutch.core.broker import Broker

# HUTCH_FUZZ_EXAMPLES=5000 for a longer hunt than CI's
FUZZ_EXAMPLES = int(os.environ.get("HUTCH_FUZZ_EXAMPLES", "300"))

keys = st.text(max_size=20).filter(lambda k: len(k.encode()) <= 255)
scalars = (
    st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False)
    | st.binary(max_size=50)
    | st.none()
    | st.binary(max_size=20).map(bytearray)
)
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4), max_leaves=20
)
tables = st.dictionaries(keys, values, max_size=8)

METHOD_IDS = sorted(int(line[:8], 16) for line in METHODS.splitlines())


@given(tables)
def test_tables_round_trip(table):
    raw = encode_table(table)
    assert decode_table(raw, 0, len(raw)) == (table, len(raw))


@given(st.binary(max_size=200))
def test_random_bytes_never_crash_the_table_decoder(raw):
    try:
        decode_table(raw, 0, len(raw))
    except DecodeError:
        pass


def _value(code):
    return {
        "o": st.integers(0, 255),
        "h": st.integers(0, 65535),
        "l": st.integers(0, 2**32 - 1),
        "q": st.integers(0, 2**64 - 1),
        "T": st.integers(0, 2**64 - 1),
        "b": st.booleans(),
        "s": st.binary(max_size=255),
        "S": st.binary(max_size=300),
        "t": tables,
    }[code]


@st.composite
def method_args(draw):
    method_id = draw(st.sampled_from(METHOD_IDS))
    sig = signature(method_id)
    return sig, [draw(_value(code)) for code in sig]


@given(method_args())
def test_method_args_round_trip(case):
    sig, args = case
    raw = encode_args(sig, args)
    assert decode_args(sig, raw, 0, len(raw)) == args


@settings(max_examples=300)
@given(
    st.lists(st.tuples(st.integers(0, 9), st.integers(0, 3), st.binary(max_size=40)), max_size=10), st.integers(1, 64)
)
def test_random_frames_never_crash_the_broker(frames, chunk):
    """Whatever arrives, the broker answers in protocol terms (or waits), never with an exception."""
    broker = Broker()
    logged = []
    broker.log = lambda level, message, exc=None: logged.append((level, message))
    conn = Connection(broker, {"address": "127.0.0.1", "port": 1})
    data = PROTOCOL_HEADER + b"".join(frame(t, ch, p) for t, ch, p in frames)
    for i in range(0, len(data), chunk):
        conn.feed(data[i : i + chunk])
        conn.take_output()
    assert not [m for level, m in logged if level == "error"], logged


def _open_connection(broker):
    conn = Connection(broker, {"address": "127.0.0.1", "port": 1})
    conn.feed(PROTOCOL_HEADER)
    conn.feed(method_frame(0, spec.CONNECTION_START_OK, ({}, b"PLAIN", b"\x00guest\x00guest", b"en_US")))
    conn.feed(method_frame(0, spec.CONNECTION_TUNE_OK, (100, 131072, 0)))
    conn.feed(method_frame(0, spec.CONNECTION_OPEN, (b"/", b"", False)))
    conn.feed(method_frame(1, spec.CHANNEL_OPEN, (b"",)))
    conn.take_output()
    return conn


names = st.sampled_from([b"", b"q", b"amq.direct", b"amq.topic", b"x", b"amq.gen-1"])


@st.composite
def valid_methods(draw):
    """Well-formed method frames with arbitrary (often nonsensical) arguments, on channels 1-2."""
    method_id = draw(st.sampled_from([m for m in METHOD_IDS if m >> 16 != 10]))
    sig = signature(method_id)
    args = []
    for code in sig:
        if code == "s":
            args.append(draw(names))
        elif code == "t":
            args.append(
                draw(
                    st.sampled_from(
                        [
                            {},
                            {"x-match": "any", "a": 1},
                            {"x-message-ttl": 5},
                            {"x-max-length": 1},
                            {"alternate-exchange": "x"},
                        ]
                    )
                )
            )
        else:
            args.append(draw(_value(code)))
    channel = draw(st.sampled_from([1, 1, 1, 2]))
    frames = method_frame(channel, method_id, args)
    if method_id in CONTENT:  # a content method: add a header and a body
        frames += content_frames(channel, draw(st.binary(max_size=30)))
    return frames


@settings(max_examples=FUZZ_EXAMPLES)
@given(st.lists(valid_methods(), max_size=25))
def test_random_methods_on_open_channels_never_crash(frames):
    broker = Broker()
    logged = []
    broker.log = lambda level, message, exc=None: logged.append((level, message))
    conns = [_open_connection(broker), _open_connection(broker)]
    for i, method in enumerate(frames):
        conns[i % 2].feed(method)
        for conn in conns:
            conn.take_output()
        broker.tick(i * 100)
    for conn in conns:
        conn.lost()
    assert not [m for level, m in logged if level == "error"], logged
    # with every connection gone, each held message sits in a queue: the budget leaks nothing
    assert broker.flow.held_messages == sum(q.message_count() for q in broker.queues.values())
    assert broker.consumer_count == 0 and broker.open_connections == 0
