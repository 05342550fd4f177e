"""Property tests (hypothesis) of the serial link layer (codec/link.py).

CPython only; tests/portable/test_link.py has the plain tests that also run on
MicroPython. Whatever the line does to the bytes (drop, damage, garbage,
replays, any chunking), the receiving side sees a prefix of what was sent —
never a byte that was not — and once the line is clean again, all of it.
"""

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from hutch.codec.link import Link, cobs_decode, cobs_encode

EXAMPLES = int(os.environ.get("HUTCH_FUZZ_EXAMPLES", "150"))

# What the line does to one chunk of output (one take_output() call's bytes).
damage = st.one_of(
    st.just(("pass",)),
    st.just(("drop",)),
    st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(1, 255)),
    st.tuples(st.just("cut"), st.integers(0, 10**6)),
    st.tuples(st.just("garbage"), st.integers(0, 10**6), st.binary(min_size=1, max_size=40)),
    st.tuples(
        st.just("replay"),
    ),
    st.tuples(st.just("split"), st.integers(0, 10**6)),
)


class Wire:
    def __init__(self, plan):
        self.plan = list(plan)
        self.last = b""

    def carry(self, chunk):
        """The chunk after the next damage of the plan, as a list of pieces to deliver."""
        if not chunk:
            return []
        if not self.plan:
            return [chunk]
        action = self.plan.pop(0)
        kind = action[0]
        previous, self.last = self.last, chunk
        if kind == "drop":
            return []
        if kind == "flip":
            i = action[1] % len(chunk)
            return [chunk[:i] + bytes((chunk[i] ^ action[2],)) + chunk[i + 1 :]]
        if kind == "cut":
            i = action[1] % len(chunk)
            return [chunk[:i]]
        if kind == "garbage":
            i = action[1] % (len(chunk) + 1)
            return [chunk[:i] + action[2] + chunk[i:]]
        if kind == "replay":
            return [previous, chunk]
        if kind == "split":
            i = action[1] % len(chunk)
            return [chunk[:i], chunk[i:]]
        return [chunk]


def step(a, b, wire_ab, wire_ba, now):
    """One 10 ms slice of time: both links tick, and what each sends crosses its wire."""
    a.tick(now)
    b.tick(now)
    for piece in wire_ab.carry(a.take_output()):
        b.receive(piece)
    for piece in wire_ba.carry(b.take_output()):
        a.receive(piece)


def run(a, b, wire_ab, wire_ba, to_b, to_a, ms):
    now = a.now
    got_a = bytearray()
    got_b = bytearray()
    pos_b = pos_a = 0
    end = now + ms
    while now < end:
        now += 10
        pos_b += a.send(to_b[pos_b : pos_b + 1000])
        pos_a += b.send(to_a[pos_a : pos_a + 1000])
        step(a, b, wire_ab, wire_ba, now)
        got_b += b.take_data()
        got_a += a.take_data()
        assert bytes(got_b) == to_b[: len(got_b)]
        assert bytes(got_a) == to_a[: len(got_a)]
        if len(got_b) == len(to_b) and len(got_a) == len(to_a):
            return True
    return False


@given(st.binary(max_size=2000))
def test_cobs_round_trip(data):
    encoded = cobs_encode(data)
    assert b"\x00" not in encoded
    assert bytes(cobs_decode(encoded)) == data


@given(st.binary(max_size=600))
def test_cobs_decode_never_crashes(data):
    decoded = cobs_decode(data.replace(b"\x00", b""))
    assert decoded is None or isinstance(decoded, bytearray)


@settings(max_examples=EXAMPLES)
@given(
    plan_ab=st.lists(damage, max_size=60),
    plan_ba=st.lists(damage, max_size=60),
    to_b=st.binary(min_size=1, max_size=3000),
    to_a=st.binary(max_size=1500),
    window=st.integers(1, 8),
    mtu=st.integers(8, 300),
)
def test_damaged_line_delivers_exact_stream(plan_ab, plan_ba, to_b, to_a, window, mtu):
    a = Link(0, b"AAAA", mtu=mtu, window=window)
    b = Link(0, b"BBBB", mtu=mtu, window=window)
    # the damage plans run out after a while: then the line is clean and all must arrive
    assert run(a, b, Wire(plan_ab), Wire(plan_ba), to_b, to_a, 120000)


@settings(max_examples=EXAMPLES)
@given(st.lists(st.binary(max_size=300), max_size=30))
def test_random_bytes_are_never_delivered(chunks):
    a = Link(0, b"AAAA")
    b = Link(0, b"BBBB")
    b.receive(a.take_output())
    a.receive(b.take_output())
    b.receive(a.take_output())
    assert a.connected and b.connected
    for chunk in chunks:
        b.receive(chunk)
    assert b.take_data() == b""
    assert not b.peer_restarted


@settings(max_examples=EXAMPLES)
@given(st.binary(min_size=1, max_size=2000), st.lists(st.integers(1, 50), min_size=1, max_size=20))
def test_any_chunking_of_the_stream_is_the_same(data, sizes):
    a = Link(0, b"AAAA")
    b = Link(0, b"BBBB")
    b.receive(a.take_output())
    a.receive(b.take_output())
    b.receive(a.take_output())
    a.send(data)
    got = bytearray()
    now = 0
    while len(got) < len(data) and now < 60000:
        now += 10
        a.tick(now)
        b.tick(now)
        wire = a.take_output()
        i = 0
        k = 0
        while i < len(wire):
            n = sizes[k % len(sizes)]
            b.receive(wire[i : i + n])
            i += n
            k += 1
        a.receive(b.take_output())
        got += b.take_data()
    assert bytes(got) == data
    assert a.stats["retransmits"] == 0


@settings(max_examples=EXAMPLES)
@given(
    restart_at=st.integers(0, 60),
    plan=st.lists(damage, max_size=30),
    old=st.binary(min_size=1, max_size=2000),
    new=st.binary(min_size=1, max_size=2000),
)
def test_after_a_peer_restart_only_the_new_life_is_delivered(restart_at, plan, old, new):
    """b reboots mid-transfer (a new Link, a new session); a must notice, drop the old life's
    bytes both ways, and carry the new life's bytes exactly, whatever the line did."""
    a = Link(0, b"AAAA")
    b = Link(0, b"BBBB")
    b.receive(a.take_output())
    a.receive(b.take_output())
    b.receive(a.take_output())
    assert a.connected and b.connected  # a knows b's first life
    wire_ab, wire_ba = Wire(plan), Wire(plan)
    now = 0
    a.send(old)
    b.send(old)
    got_b = bytearray()
    for _ in range(restart_at):
        now += 10
        step(a, b, wire_ab, wire_ba, now)
        got_b += b.take_data()
        a.take_data()
    assert bytes(got_b) == old[: len(got_b)]
    b = Link(now, b"CCCC")  # reboot
    got_a = bytearray()
    got_b = bytearray()
    new_life = False
    pos = 0
    for _ in range(12000):
        now += 10
        step(a, b, wire_ab, wire_ba, now)
        if a.peer_restarted:
            a.clear_restart()
            assert not new_life
            new_life = True
        data = a.take_data()
        if new_life:
            got_a += data
            pos += a.send(new[pos:])
        got_b += b.take_data()
        assert bytes(got_a) == new[: len(got_a)]  # nothing of b's old life after the restart
        assert bytes(got_b) == new[: len(got_b)]  # nothing of a's old data reaches the new b
        if new_life and len(got_b) == len(new) and (not b.pending() or len(got_a) == 0):
            break
    assert new_life and a.peer_session == b"CCCC"
    assert bytes(got_b) == new
