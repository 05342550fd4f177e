"""The C frame scanner (c_accel/) against its pure-Python reference (amqp091/framing.py).

Differential tests: on the same buffer, start, max_payload and batch size, both
give the same frames, stop, status and detail, call after call, whatever the bytes
(valid streams, truncated, oversize, bad frame-ends, random). CPython only;
`make setup` builds the extension, so an import failure here is a failed build.
"""

import struct

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hutch.amqp091 import framing
from hutch.amqp091.framing import BAD_FRAME_END, FULL, NEED_MORE, OVERSIZE, PUBLISH, RECORD_SLOTS, SETTLE
from hutch.c_accel import scanner as c_scanner
from hutch.codec.wire import frame

EXAMPLES = 500


def scan_to_the_end(scan, make_records, buf, pos, max_payload, capacity):
    """Every call a connection would make on buf: [(count, stop, status, detail, records)]."""
    records = make_records(capacity)
    calls = []
    while True:
        count, stop, status, detail = scan(buf, pos, max_payload, records)
        found = tuple(tuple(records[RECORD_SLOTS * i + k] for k in range(RECORD_SLOTS)) for i in range(count))
        calls.append((count, stop, status, detail, found))
        if status != FULL:
            return calls
        assert count == capacity and stop > pos
        pos = stop


def both(buf, pos, max_payload, capacity):
    """The C and Python transcripts of buf, after checking they are the same."""
    python = scan_to_the_end(framing.scan_frames, framing.new_records, buf, pos, max_payload, capacity)
    c = scan_to_the_end(c_scanner.scan_frames, c_scanner.new_records, buf, pos, max_payload, capacity)
    assert c == python
    return python


def frames_of(calls):
    return [record for call in calls for record in call[4]]


def frames_in(data, calls):
    """(type, channel, payload) of every frame the records cover, a whole publish as its frames."""
    found = []
    for ftype, channel, start, end, header_end, body_end in frames_of(calls):
        if ftype == SETTLE:
            assert (header_end, body_end) == struct.unpack_from(">IQ", data, start)
            found.append((1, channel, data[start:end]))
            continue
        if ftype != PUBLISH:
            found.append((ftype, channel, data[start:end]))
            continue
        found.append((1, channel, data[start:end]))
        found.append((2, channel, data[end + 8 : header_end]))
        if body_end != header_end:
            found.append((3, channel, data[header_end + 8 : body_end]))
    return found


def as_buffer(data, kind):
    """data as each kind of buffer a port hands the connection."""
    if kind == "bytes":
        return data
    if kind == "bytearray":
        return bytearray(data)
    if kind == "memoryview":
        return memoryview(data)
    # a view into the middle of a larger (port's read) buffer
    return memoryview(bytearray(b"\xce" * 3 + data + b"\x01" * 5))[3 : 3 + len(data)]


PUBLISH_ID = b"\x00\x3c\x00\x28"


@st.composite
def publishes(draw):
    """A basic.publish and its content frames, now and then a little wrong: another channel,
    a body size that does not match, the body split in two, a short header."""
    channel = draw(st.integers(0, 3))
    body = draw(st.binary(max_size=120))
    declared = len(body) if draw(st.booleans()) else draw(st.integers(0, 2**64 - 1))
    method = PUBLISH_ID + draw(st.sampled_from([b"\x00\x00\x00\x01q\x00", b"", b"\x00\x00\x01x\x00\x00"]))
    header = (
        b"\x00\x3c\x00\x00" + struct.pack(">Q", declared) + draw(st.sampled_from([b"\x00\x00", b"", b"\x10\x00\x02"]))
    )
    if draw(st.integers(0, 5)) == 0:
        header = header[: draw(st.integers(0, len(header)))]
    frames = [(1, channel, method), (2, channel if draw(st.integers(0, 5)) else channel + 1, header)]
    if body and draw(st.integers(0, 4)) == 0:
        frames += [(3, channel, body[: len(body) // 2]), (3, channel, body[len(body) // 2 :])]
    elif body or draw(st.booleans()):
        frames.append((3, channel if draw(st.integers(0, 5)) else channel + 1, body))
    return frames


settlements = st.tuples(
    st.sampled_from([1, 1, 1, 2]),
    st.integers(0, 3),
    st.builds(
        lambda mid, tag, bits, cut: (struct.pack(">IQ", mid, tag) + bytes((bits,)) + b"+")[:cut],
        st.sampled_from([0x003C0050, 0x003C0078, 0x003C005A, 0x003C0028, 0x003C0051]),
        st.integers(0, 2**64 - 1),
        st.integers(0, 255),
        st.sampled_from([12, 13, 13, 13, 14]),
    ),
)

any_frames = st.tuples(st.integers(0, 255), st.integers(0, 65535), st.binary(max_size=300))
frame_lists = st.lists(
    st.one_of(any_frames.map(lambda f: [f]), settlements.map(lambda f: [f]), publishes()), max_size=20
).map(lambda groups: [f for group in groups for f in group])
capacities = st.integers(1, 40)
buffer_kinds = st.sampled_from(["bytes", "bytearray", "memoryview", "slice"])
max_payloads = st.sampled_from([0, 1, 7, 100, 299, 300, 4088, 131064, 2**32 - 9, 2**32 - 1]) | st.integers(0, 400)


@settings(max_examples=EXAMPLES)
@given(frame_lists, st.binary(max_size=20), capacities, buffer_kinds)
def test_valid_streams(frames, prefix, capacity, kind):
    data = prefix + b"".join(frame(*f) for f in frames)
    calls = both(as_buffer(data, kind), len(prefix), 300, capacity)
    assert calls[-1][1:4] == (len(data), NEED_MORE, 0)
    # and the records say where each frame's payload is
    assert frames_in(data, calls) == frames


@settings(max_examples=EXAMPLES)
@given(frame_lists, capacities, st.data())
def test_truncated_streams(frames, capacity, data):
    stream = b"".join(frame(*f) for f in frames)
    cut = data.draw(st.integers(0, len(stream)))
    calls = both(stream[:cut], 0, 300, capacity)
    assert calls[-1][2] == NEED_MORE
    # whole frames before the cut are all found; the stop is the start of the cut one
    whole, end = 0, 0
    for f in frames:
        if end + len(f[2]) + 8 > cut:
            break
        whole, end = whole + 1, end + len(f[2]) + 8
    assert len(frames_in(stream, calls)) == whole and calls[-1][1] == end


@settings(max_examples=EXAMPLES)
@given(frame_lists.filter(bool), capacities, max_payloads, st.data())
def test_oversize_frame(frames, capacity, max_payload, data):
    """A size above max_payload stops the scan at that frame, payload arrived or not."""
    stream = bytearray(b"".join(frame(*f) for f in frames))
    bad = data.draw(st.integers(0, len(frames) - 1))
    at = sum(len(f[2]) + 8 for f in frames[:bad])
    assume(all(len(f[2]) <= max_payload for f in frames[:bad]))
    size = data.draw(st.integers(max_payload + 1, 2**32 - 1)) if max_payload < 2**32 - 1 else 2**32 - 1
    stream[at + 3 : at + 7] = struct.pack(">I", size)
    calls = both(bytes(stream), 0, max_payload, capacity)
    if size > max_payload:
        assert calls[-1][1:4] == (at, OVERSIZE, size)
        assert len(frames_in(bytes(stream), calls)) == bad


@settings(max_examples=EXAMPLES)
@given(frame_lists.filter(bool), capacities, st.integers(0, 255).filter(lambda b: b != 0xCE), st.data())
def test_bad_frame_end(frames, capacity, octet, data):
    stream = bytearray(b"".join(frame(*f) for f in frames))
    bad = data.draw(st.integers(0, len(frames) - 1))
    at = sum(len(f[2]) + 8 for f in frames[:bad])
    stream[at + 7 + len(frames[bad][2])] = octet
    calls = both(bytes(stream), 0, 300, capacity)
    assert calls[-1][1:4] == (at, BAD_FRAME_END, octet)
    assert len(frames_in(bytes(stream), calls)) == bad


@settings(max_examples=EXAMPLES)
@given(frame_lists, capacities, st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=5))
def test_corrupted_streams(frames, capacity, flips):
    stream = bytearray(b"".join(frame(*f) for f in frames))
    for where, octet in flips:
        if stream:
            stream[where % len(stream)] = octet
    both(bytes(stream), 0, 300, capacity)


@settings(max_examples=EXAMPLES * 2)
@given(st.binary(max_size=3000), st.integers(0, 3005), max_payloads, capacities, buffer_kinds)
def test_random_bytes(raw, pos, max_payload, capacity, kind):
    both(as_buffer(raw, kind), pos, max_payload, capacity)


@settings(max_examples=EXAMPLES)
@given(
    st.lists(st.sampled_from([b"\x01\x00\x01", b"\x03\x00\x01", b"\x08\x00\x00"]), max_size=50),
    st.lists(st.integers(0, 8), max_size=50),
    st.integers(0, 8),
    capacities,
)
def test_many_small_frames_near_the_limit(heads, sizes, max_payload, capacity):
    """Sizes around max_payload: equal passes, one more is oversize."""
    stream = b"".join(head + struct.pack(">I", size) + b"\x00" * size + b"\xce" for head, size in zip(heads, sizes))
    both(stream, 0, max_payload, capacity)


def test_edges():
    big = struct.pack(">BHI", 3, 1, 0xFFFFFFFF)
    cases = [
        (b"", 0, 100),
        (b"\x01\x00", 0, 100),
        (frame(1, 0, b"abc"), 50, 100),  # pos past the end
        (frame(1, 0, b"abc"), 11, 100),  # pos at the end
        (frame(1, 0, b"abc")[:-1], 0, 100),  # all but the frame-end octet
        (frame(1, 0, b"abc")[:7], 0, 100),  # the header alone
        (frame(1, 0, b"abc"), 0, 3),  # size == max_payload
        (frame(1, 0, b"abc"), 0, 2),  # size == max_payload + 1
        (frame(1, 0, b"abc"), 0, -1),  # a nonsensical max_payload is still compared, not trusted
        (big, 0, 2**32 - 1),  # the largest size: incomplete, no overflow
        (big + b"\x00" * 100, 0, 2**32 - 9),
        (frame(8, 0, b"") * 100, 0, 0),
    ]
    for buf, pos, max_payload in cases:
        for capacity in (1, 2, 32):
            both(buf, pos, max_payload, capacity)
    assert both(frame(1, 0, b"abc"), 0, 2, 32)[-1][1:] == (0, OVERSIZE, 3, ())
    assert both(big, 0, 2**32 - 1, 32)[-1][1:] == (0, NEED_MORE, 0, ())


def test_records_beyond_count_are_left_alone():
    """A scan writes count records and nothing past them (the connection reads only those)."""
    records = c_scanner.new_records(4)
    for i in range(24):
        records[i] = 7
    count, stop, status, _ = c_scanner.scan_frames(frame(1, 2, b"xy"), 0, 100, records)
    assert (count, stop, status) == (1, 10, NEED_MORE)
    assert list(records[0:6]) == [1, 2, 7, 9, 0, 0] and list(records[6:24]) == [7] * 18


def test_a_whole_publish_is_one_record():
    method = frame(1, 5, PUBLISH_ID + b"\x00\x00\x00\x01q\x00")
    header = frame(2, 5, b"\x00\x3c\x00\x00" + struct.pack(">Q", 3) + b"\x00\x00")
    body = frame(3, 5, b"abc")
    data = method + header + body + frame(8, 0, b"")
    calls = both(data, 0, 100, 32)
    m, h = len(method), len(method) + len(header)
    assert frames_of(calls) == [
        (PUBLISH, 5, 7, m - 1, h - 1, len(data) - 9),
        (8, 0, len(data) - 1, len(data) - 1, 0, 0),
    ]
    # an empty body has no body frame; a body frame that has not arrived yet: frame by frame
    empty = frame(2, 5, b"\x00\x3c\x00\x00" + struct.pack(">Q", 0) + b"\x00\x00")
    assert frames_of(both(method + empty, 0, 100, 32))[0][0] == PUBLISH
    assert [r[0] for r in frames_of(both(method + header + body[:-1], 0, 100, 32))] == [1, 2]


def test_an_ack_nack_or_reject_is_decoded():
    ack = frame(1, 2, struct.pack(">IQB", 0x003C0050, 2**64 - 1, 1))
    nack = frame(1, 2, struct.pack(">IQB", 0x003C0078, 7, 3))
    reject = frame(1, 2, struct.pack(">IQB", 0x003C005A, 8, 0))
    recover = frame(1, 2, struct.pack(">IB", 0x003C006E, 1))
    found = frames_of(both(ack + nack + reject + recover, 0, 100, 32))
    assert [r[0] for r in found] == [SETTLE, SETTLE, SETTLE, 1]
    assert [r[4:] for r in found[:3]] == [(0x003C0050, 2**64 - 1), (0x003C0078, 7), (0x003C005A, 8)]
