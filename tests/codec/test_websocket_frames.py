"""codec/websocket.py: a client's frames (masked) read back whatever octets bring them, the
frames the protocol does not allow refused with the close code that says why."""

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hutch.codec import websocket as ws

MASK = b"\x37\xfa\x21\x3d"


def fragments(opcode, payload, sizes, mask=MASK):
    """payload as a message of several frames: the first of opcode, then continuations."""
    out, at = [], 0
    for i, size in enumerate(sizes):
        piece = payload[at : at + size]
        at += size
        first = (opcode if i == 0 else ws.CONTINUATION) | (0x80 if i == len(sizes) - 1 else 0)
        out.append(bytes((first,)) + ws.frame(0, piece, mask)[1:])
    return b"".join(out)


def read_all(reader, octets, chunks):
    """Everything the reader says of octets fed in the given chunk sizes (then the rest)."""
    found, at = [], 0
    for size in chunks:
        found += reader.feed(octets[at : at + size])
        at += size
    found += reader.feed(octets[at:])
    return found


def binary(found):
    return b"".join(payload for opcode, payload in found if opcode == ws.BINARY)


@pytest.mark.parametrize("size", [0, 1, 125, 126, 65535, 65536, 70001])
def test_a_frame_of_each_length_form_reads_back_whole_and_split(size):
    payload = os.urandom(size)
    octets = ws.frame(ws.BINARY, payload, MASK)
    assert octets[0] == 0x82 and octets[1] & 0x80
    assert binary(ws.FrameReader().feed(octets)) == payload
    for cut in sorted({1, 2, 3, 5, 9, 13, len(octets) // 2, len(octets) - 1}):
        assert binary(read_all(ws.FrameReader(), octets, [cut])) == payload, cut
    # a server's frames are not masked, and a client reads them so
    assert binary(ws.FrameReader(masked=False).feed(ws.frame(ws.BINARY, payload))) == payload


@given(
    st.lists(st.binary(max_size=300), min_size=1, max_size=6),
    st.lists(st.integers(min_value=0, max_value=40), max_size=30),
    st.data(),
)
def test_messages_fragments_and_pings_between_read_back_in_order(messages, chunks, data):
    octets, pings = b"", []
    for i, message in enumerate(messages):
        cuts = sorted(data.draw(st.lists(st.integers(min_value=0, max_value=len(message)), max_size=3)))
        sizes = [b - a for a, b in zip([0] + cuts, cuts + [len(message)])]  # the message's frames
        whole = fragments(ws.BINARY, message, sizes)
        if len(sizes) > 1:  # a ping between two frames of a message (RFC 6455 5.4)
            first_frame_end = len(fragments(ws.BINARY, message[: sizes[0]], [sizes[0]]))
            whole = whole[:first_frame_end] + ws.frame(ws.PING, b"p%d" % i, MASK) + whole[first_frame_end:]
            pings.append(b"p%d" % i)
        octets += whole
    found = read_all(ws.FrameReader(), octets, chunks)
    assert binary(found) == b"".join(messages)
    assert [payload for opcode, payload in found if opcode == ws.PING] == pings


def test_control_frames_come_whole_and_a_close_says_its_code():
    reader = ws.FrameReader()
    octets = ws.frame(ws.CLOSE, ws.close_payload(1001, "going away"), MASK)
    found = read_all(reader, octets, [1, 1, 1, 1, 1, 1])
    assert found == [(ws.CLOSE, ws.close_payload(1001, "going away"))]
    assert ws.close_code(found[0][1]) == (1001, "going away") and ws.close_code(b"") == (1005, "")
    assert ws.FrameReader().feed(ws.frame(ws.TEXT, b"hi", MASK)) == [(ws.TEXT, b"")]


@pytest.mark.parametrize(
    "octets, why",
    [
        (bytes((0x82, 4)) + b"\x10\x02\x00\x00", "not masked"),
        (bytes((0x83, 0x80)) + MASK, "opcode 3 is reserved"),
        (bytes((0xC2, 0x80)) + MASK, "reserved bits"),
        (bytes((0x80, 0x80)) + MASK, "no message to continue"),
        (bytes((0x02, 0x81)) + MASK + b"x" + bytes((0x82, 0x80)) + MASK, "before the last one's final frame"),
        (bytes((0x89, 0xFE, 0, 126)) + MASK + b"x" * 126, "control frame"),
        (bytes((0x09, 0x80)) + MASK, "control frame"),
        (bytes((0x82, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 0)) + MASK, "most significant bit"),
    ],
)
def test_a_frame_the_protocol_does_not_allow_is_a_protocol_error(octets, why):
    with pytest.raises(ws.FrameError) as raised:
        ws.FrameReader().feed(octets)
    assert raised.value.code == ws.PROTOCOL_ERROR and why in raised.value.reason
