"""The connection behaves the same whichever frame scanner it uses.

Three connections are fed the same bytes in the same chunks: one reading frames
with the C batch scanner, one with its pure-Python reference, and one with its
own frame loop (what runs without the C scanner, and on MicroPython: the loop
as it was before the scanner). After every chunk their output, state, closed
flag, pause and unread bytes must match: so errors are reported with the same
reply text at the same frame, and pausing or closing mid-buffer stops at the
same frame.
"""

import struct

from accel_sides import SCANNERS, Side
from hypothesis import given, settings
from hypothesis import strategies as st
from raw_amqp import login, method, publish

from hutch.codec import spec
from hutch.codec.wire import frame
from hutch.core.limits import Limits


def handshake(frame_max):
    return login(frame_max)


# Publishes the channel refuses after its header arrived, each in its own way: the channel
# closes (404, 406 for a user-id that is not the login's) and ignores what follows until
# close-ok; a channel that is not open closes the connection.
CONSUME = method(1, spec.BASIC_CONSUME, "hssbbbbt", [0, b"q", b"c", False, False, False, False, {}])
settlements = st.one_of(
    st.just(CONSUME),
    st.builds(
        lambda mid, tag, bits: frame(1, 1, struct.pack(">IQB", mid, tag, bits)),
        st.sampled_from([spec.BASIC_ACK, spec.BASIC_NACK, spec.BASIC_REJECT]),
        st.integers(0, 6) | st.integers(0, 2**64 - 1),
        st.integers(0, 255),
    ),
    st.builds(
        lambda mid, tag: frame(1, 1, struct.pack(">IQ", mid, tag)),  # one octet short
        st.sampled_from([spec.BASIC_ACK, spec.BASIC_NACK, spec.BASIC_REJECT]),
        st.integers(0, 6),
    ),
    st.builds(
        lambda mid, ftype, number: frame(ftype, number, struct.pack(">IQB", mid, 1, 1)),  # elsewhere
        st.sampled_from([spec.BASIC_ACK, spec.BASIC_NACK]),
        st.integers(1, 3),
        st.sampled_from([0, 2, 3]),
    ),
    st.just(method(1, spec.TX_SELECT, "", [])),
)


refused_publishes = st.one_of(
    st.builds(lambda b: publish(b, exchange=b"nowhere"), st.binary(max_size=20)),
    st.builds(lambda b: publish(b, properties=b"\x00\x10\x07mallory"), st.binary(max_size=20)),
    st.builds(lambda b: publish(b, channel=2), st.binary(max_size=20)),
    st.just(method(1, spec.CHANNEL_CLOSE_OK, "", [])),
    st.just(method(1, spec.CHANNEL_OPEN, "s", [b""])),
)


DECLARE = method(1, spec.QUEUE_DECLARE, "hsbbbbbt", [0, b"q", False, False, False, False, False, {}])

pieces = st.one_of(
    st.builds(publish, st.binary(max_size=50)),
    st.just(DECLARE),
    st.just(frame(8, 0, b"")),
    st.just(frame(8, 1, b"")),  # heartbeat on a channel: 505
    st.just(method(0, spec.CONNECTION_CLOSE, "hshh", [200, b"bye", 0, 0])),
    st.just(method(0, spec.CONNECTION_CLOSE_OK, "", [])),
    st.builds(lambda t, ch, p: frame(t, ch, p), st.integers(0, 9), st.integers(0, 3), st.binary(max_size=20)),
    st.builds(lambda n: struct.pack(">BHI", 3, 1, n), st.sampled_from([4089, 4090, 5000, 131065, 2**32 - 1])),
    st.builds(lambda n: frame(3, 1, b"\x00" * n), st.sampled_from([4087, 4088, 4089, 131064])),
    st.builds(lambda b: frame(1, 1, b"\x00\x3c\x00\x28")[:-1] + bytes([b]), st.integers(0, 255)),  # bad frame end
    st.binary(min_size=1, max_size=12),
    refused_publishes,
    settlements,
)


@settings(max_examples=300)
@given(
    st.sampled_from([4096, 131072]),
    st.lists(pieces, max_size=25),
    st.integers(1, 400),
    st.sampled_from([1, 2, 1000]),
    st.booleans(),
    st.sampled_from([30, 2**20]),
)
def test_same_behaviour_whatever_the_scanner(frame_max, body, chunk, queue_max, handshake_in_same_read, max_message):
    """Random frames after a handshake (its tune-ok may lower frame_max in the middle of a read);
    a queue that holds 1 or 2 messages pauses the publisher mid-buffer; a message size limit
    of 30 bytes makes the channel refuse larger ones at their header."""
    limits = Limits()
    limits.queue_max_messages = queue_max
    limits.max_message_bytes = max_message
    sides = [Side(how, limits) for how in ("inline", "python", "c")]
    stream = b"".join(body)
    if handshake_in_same_read:
        reads = [handshake(frame_max) + DECLARE + stream]
    else:
        reads = [handshake(frame_max), DECLARE]
        reads += [stream[i : i + chunk] for i in range(0, len(stream), chunk)]
    for data in reads:
        results = [side.feed(data) for side in sides]
        assert results[1] == results[0], "python scanner differs from the connection's own loop"
        assert results[2] == results[0], "C scanner differs from the connection's own loop"


@settings(max_examples=200)
@given(st.binary(max_size=600), st.integers(1, 64))
def test_same_behaviour_on_random_bytes(raw, chunk):
    sides = [Side(how, Limits()) for how in ("inline", "python", "c")]
    data = b"AMQP\x00\x00\x09\x01" + raw
    for i in range(0, len(data), chunk):
        results = [side.feed(memoryview(data)[i : i + chunk]) for side in sides]
        assert results[1] == results[0] and results[2] == results[0]


def test_tune_ok_lowers_frame_max_for_the_frames_after_it_in_the_same_read():
    """A 5000-octet frame is fine under the offered 131072 but not after tune-ok's 4096."""
    data = handshake(4096) + frame(3, 1, b"\x00" * 5000)
    for how in ("inline", "python", "c"):
        side = Side(how, Limits())
        out, state, closed, paused, pending, log = side.feed(data)
        assert closed and b"frame size 5008 exceeds frame_max 4096" in out, how


def test_frames_up_to_8_octets_over_frame_max_are_taken_by_every_scanner():
    """RabbitMQ's tolerance (a payload of frame_max, 8 octets over), and not one octet more."""
    for size, closed_expected in ((4096, False), (4097, True)):
        data = handshake(4096) + frame(3, 1, b"\x00" * size)
        results = [Side(how, Limits()).feed(data) for how in ("inline", "python", "c")]
        assert results[1] == results[0] and results[2] == results[0], size
        assert (b"exceeds frame_max" in results[0][0]) == closed_expected, size


def test_paused_publisher_keeps_the_rest_unread():
    limits = Limits()
    limits.queue_max_messages = 1
    data = handshake(131072) + DECLARE + publish(b"a") + publish(b"b") + publish(b"c")
    results = [Side(how, limits).feed(data) for how in ("inline", "python", "c")]
    assert results[0][3] and results[0][4]  # paused, with bytes kept for later
    assert results[1] == results[0] and results[2] == results[0]


def test_paused_publisher_leaves_a_bad_frame_after_it_for_later():
    """Paused before a broken frame: the error waits until the connection reads again."""
    limits = Limits()
    limits.queue_max_messages = 1
    for broken in (struct.pack(">BHI", 3, 1, 10**6), frame(1, 1, b"abcd")[:-1] + b"\x00"):
        data = handshake(131072) + DECLARE + publish(b"a") + publish(b"b") + broken
        results = [Side(how, limits).feed(data) for how in ("inline", "python", "c")]
        out, state, closed, paused, pending, log = results[0]
        assert paused and not closed and pending.endswith(broken)
        assert results[1] == results[0] and results[2] == results[0]


def test_acks_nacks_and_rejects_settle_the_same_whatever_the_scanner():
    """Every combination of the bits, on real deliveries: requeued ones come back (redelivered),
    others are gone; a tag that is not outstanding closes the channel (406)."""

    def settle(method_id, tag, bits):
        return frame(1, 1, struct.pack(">IQB", method_id, tag, bits))

    steps = [handshake(131072) + DECLARE + b"".join(publish(b"m%d" % i) for i in range(8)) + CONSUME]
    for method_id, tag, bits in [
        (spec.BASIC_NACK, 1, 2),
        (spec.BASIC_NACK, 2, 0),
        (spec.BASIC_REJECT, 3, 1),
        (spec.BASIC_REJECT, 4, 0),
        (spec.BASIC_NACK, 6, 3),
        (spec.BASIC_ACK, 8, 1),
        (spec.BASIC_ACK, 0, 1),
        (spec.BASIC_NACK, 0, 1),
        (spec.BASIC_ACK, 99, 0),
    ]:
        steps.append(settle(method_id, tag, bits))
    sides = [Side(how, Limits()) for how in SCANNERS]
    outputs = []
    for data in steps:
        results = [side.feed(data) for side in sides]
        assert results[1] == results[0] and results[2] == results[0], data
        outputs.append(results[0][0])
    assert b"m0" in outputs[1] and b"m1" not in outputs[2]  # nack with requeue redelivers; without, drops
    assert any("unknown delivery tag 99" in message for _, message in sides[0].log)
