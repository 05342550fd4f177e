"""The connection behaves the same whichever frame scanner it uses.

Three connections are fed the same bytes in the same chunks: one with the C
scanner, one with the pure-Python one, and one with the frame loop the
connection had before the batch scanner (kept below as the behaviour to keep).
After every chunk their output, state, closed flag and unread bytes must match:
so errors are reported with the same reply text at the same frame, and pausing
or closing mid-buffer stops at the same frame.
"""
import struct
import types

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hutch.core import framing, spec
from hutch.core.broker import Broker
from hutch.core.codec import encode_args
from hutch.core.connection import CLOSING, ConnectionException
from hutch.core.limits import Limits

try:
    from hutch.c_accel import scanner as c_scanner
except ImportError as e:  # pragma: no cover - depends on the install
    pytest.skip("C accelerator not built: %s" % e, allow_module_level=True)


def legacy_read_frames(self, data, pos):
    """Connection._read_frames as it was before the batch scanner (commit 3bcd288)."""
    n = len(data)
    while n - pos >= 7:
        if self.paused or self.closed:
            break
        size = (data[pos + 3] << 24) | (data[pos + 4] << 16) | (data[pos + 5] << 8) | data[pos + 6]
        if size > self.max_payload:
            self._frame_error("FRAME_ERROR - frame size %d exceeds frame_max %d" % (size + 8, self.frame_max))
            return n
        end = pos + 7 + size
        if end >= n:
            break
        if data[end] != 0xCE:
            self._frame_error("FRAME_ERROR - invalid frame end marker 0x%02x" % data[end])
            return n
        ftype = data[pos]
        number = (data[pos + 1] << 8) | data[pos + 2]
        if self.state == CLOSING:
            self._closing_frame(ftype, number, data, pos, end)
        elif ftype == 1:
            self._method_frame(number, data, pos + 7, end)
        elif ftype == 2 or ftype == 3:
            self._content_frame(ftype, number, data, pos, end)
        elif ftype == 8:
            if number != 0:
                raise ConnectionException(spec.UNEXPECTED_FRAME, "UNEXPECTED_FRAME - heartbeat frame on channel %d" % number)
        else:
            self._frame_error("FRAME_ERROR - unknown frame type %d" % ftype)
            return n
        pos = end + 1
    return pos


class Side:
    """One broker and one connection, reading frames one way."""

    def __init__(self, how, limits):
        self.log = []
        self.broker = Broker(limits, log=lambda level, message, exc=None: self.log.append((level, message)))
        self.conn = self.broker.connect({"address": "127.0.0.1", "port": 1})
        if how == "legacy":
            self.conn._read_frames = types.MethodType(legacy_read_frames, self.conn)
        elif how == "c":
            self.conn._scan, self.conn._records = c_scanner.scan_frames, c_scanner.new_records()
        else:
            self.conn._scan, self.conn._records = framing.scan_frames, framing.new_records()

    def feed(self, chunk):
        self.conn.feed(chunk)
        conn = self.conn
        return conn.take_output(), conn.state, conn.closed, conn.paused, conn._pending, self.log[:]


def frame(ftype, channel, payload):
    return struct.pack(">BHI", ftype, channel, len(payload)) + payload + b"\xce"


def method(channel, method_id, sig, args):
    return frame(1, channel, struct.pack(">I", method_id) + encode_args(sig, args))


def handshake(frame_max):
    return (b"AMQP\x00\x00\x09\x01"
            + method(0, spec.CONNECTION_START_OK, "tsSs", [{}, b"PLAIN", b"\x00guest\x00guest", b"en_US"])
            + method(0, spec.CONNECTION_TUNE_OK, "hlh", [100, frame_max, 0])
            + method(0, spec.CONNECTION_OPEN, "ssb", [b"/", b"", False])
            + method(1, spec.CHANNEL_OPEN, "s", [b""]))


def publish(body, queue=b"q"):
    return (method(1, spec.BASIC_PUBLISH, "hssbb", [0, b"", queue, False, False])
            + frame(2, 1, struct.pack(">HHQH", 60, 0, len(body), 0)) + (frame(3, 1, body) if body else b""))


DECLARE = method(1, spec.QUEUE_DECLARE, "hsbbbbbt", [0, b"q", False, False, False, False, False, {}])

pieces = st.one_of(
    st.builds(publish, st.binary(max_size=50)),
    st.just(DECLARE),
    st.just(frame(8, 0, b"")),
    st.just(frame(8, 1, b"")),                                      # heartbeat on a channel: 505
    st.just(method(0, spec.CONNECTION_CLOSE, "hshh", [200, b"bye", 0, 0])),
    st.just(method(0, spec.CONNECTION_CLOSE_OK, "", [])),
    st.builds(lambda t, ch, p: frame(t, ch, p), st.integers(0, 9), st.integers(0, 3), st.binary(max_size=20)),
    st.builds(lambda n: struct.pack(">BHI", 3, 1, n), st.sampled_from([4089, 4090, 5000, 131065, 2 ** 32 - 1])),
    st.builds(lambda n: frame(3, 1, b"\x00" * n), st.sampled_from([4087, 4088, 4089, 131064])),
    st.builds(lambda b: frame(1, 1, b"\x00\x3c\x00\x28")[:-1] + bytes([b]), st.integers(0, 255)),  # bad frame end
    st.binary(min_size=1, max_size=12),
)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([4096, 131072]), st.lists(pieces, max_size=25), st.integers(1, 400),
       st.sampled_from([1, 2, 1000]), st.booleans())
def test_same_behaviour_whatever_the_scanner(frame_max, body, chunk, queue_max, handshake_in_same_read):
    """Random frames after a handshake (its tune-ok may lower frame_max in the middle of a read);
    a queue that holds 1 or 2 messages pauses the publisher mid-buffer."""
    limits = Limits()
    limits.queue_max_messages = queue_max
    sides = [Side(how, limits) for how in ("legacy", "python", "c")]
    stream = b"".join(body)
    if handshake_in_same_read:
        reads = [handshake(frame_max) + DECLARE + stream]
    else:
        reads = [handshake(frame_max), DECLARE]
        reads += [stream[i:i + chunk] for i in range(0, len(stream), chunk)]
    for data in reads:
        results = [side.feed(data) for side in sides]
        assert results[1] == results[0], "python scanner differs from the old loop"
        assert results[2] == results[0], "C scanner differs from the old loop"


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=600), st.integers(1, 64))
def test_same_behaviour_on_random_bytes(raw, chunk):
    sides = [Side(how, Limits()) for how in ("legacy", "python", "c")]
    data = b"AMQP\x00\x00\x09\x01" + raw
    for i in range(0, len(data), chunk):
        results = [side.feed(memoryview(data)[i:i + chunk]) for side in sides]
        assert results[1] == results[0] and results[2] == results[0]


def test_tune_ok_lowers_frame_max_for_the_frames_after_it_in_the_same_read():
    """A 5000-octet frame is fine under the offered 131072 but not after tune-ok's 4096."""
    data = handshake(4096) + frame(3, 1, b"\x00" * 5000)
    for how in ("legacy", "python", "c"):
        side = Side(how, Limits())
        out, state, closed, paused, pending, log = side.feed(data)
        assert closed and b"frame size 5008 exceeds frame_max 4096" in out, how


def test_paused_publisher_keeps_the_rest_unread():
    limits = Limits()
    limits.queue_max_messages = 1
    data = handshake(131072) + DECLARE + publish(b"a") + publish(b"b") + publish(b"c")
    results = [Side(how, limits).feed(data) for how in ("legacy", "python", "c")]
    assert results[0][3] and results[0][4]  # paused, with bytes kept for later
    assert results[1] == results[0] and results[2] == results[0]


def test_paused_publisher_leaves_a_bad_frame_after_it_for_later():
    """Paused before a broken frame: the error waits until the connection reads again."""
    limits = Limits()
    limits.queue_max_messages = 1
    for broken in (struct.pack(">BHI", 3, 1, 10 ** 6), frame(1, 1, b"abcd")[:-1] + b"\x00"):
        data = handshake(131072) + DECLARE + publish(b"a") + publish(b"b") + broken
        results = [Side(how, limits).feed(data) for how in ("legacy", "python", "c")]
        out, state, closed, paused, pending, log = results[0]
        assert paused and not closed and pending.endswith(broken)
        assert results[1] == results[0] and results[2] == results[0]
