"""The serial link layer (codec/link.py), fed bytes directly: two Links wired together.

Plain functions and asserts, no pytest: run_micropython.py runs them under
MicroPython too. Impairments come from a seeded generator written here, so
both interpreters see the same line.
"""

from hutch.codec.link import ACK, DATA, HELLO, Link, cobs_decode, cobs_encode


class Rng:
    """xorshift32: the same numbers on CPython and MicroPython."""

    def __init__(self, seed):
        self.state = (seed * 2654435761 + 1) & 0xFFFFFFFF or 1

    def next(self):
        x = self.state
        x ^= (x << 13) & 0xFFFFFFFF
        x ^= x >> 17
        x ^= (x << 5) & 0xFFFFFFFF
        self.state = x
        return x

    def below(self, n):
        return self.next() % n

    def chance(self, per_million):
        return self.below(1000000) < per_million

    def data(self, n):
        return bytes(self.below(256) for _ in range(n))


class Line:
    """One direction of a noisy wire: per byte, chances (per million) of damage."""

    def __init__(self, rng, corrupt=0, drop=0, garbage=0, duplicate=0):
        self.rng = rng
        self.corrupt = corrupt
        self.drop = drop
        self.garbage = garbage
        self.duplicate = duplicate
        self.recent = b""

    def carry(self, data):
        if not (self.corrupt or self.drop or self.garbage or self.duplicate) or not data:
            return data
        rng = self.rng
        out = bytearray()
        for b in data:
            if rng.chance(self.garbage):
                out += rng.data(1 + rng.below(12))
            if rng.chance(self.drop):
                continue
            if rng.chance(self.corrupt):
                b ^= 1 + rng.below(255)
            out.append(b)
        if self.recent and rng.chance(self.duplicate * len(data)):
            out += self.recent  # a stretch of the line played again
        self.recent = bytes(data[-300:])
        return bytes(out)


class Pair:
    """Links a and b wired through two Lines, driven in steps of `step` ms."""

    def __init__(self, a=None, b=None, ab=None, ba=None, step=10, **kw):
        self.now = 1000
        self.a = a or Link(self.now, b"AAAA", **kw)
        self.b = b or Link(self.now, b"BBBB", **kw)
        self.ab = ab or Line(None)
        self.ba = ba or Line(None)
        self.step = step
        self.got_a = bytearray()  # what a received
        self.got_b = bytearray()
        self.take = True

    def run(self, ms, until=None):
        end = self.now + ms
        while self.now < end:
            self.now += self.step
            for link in (self.a, self.b):
                link.tick(self.now)
            self.b.receive(self.ab.carry(self.a.take_output()))
            self.a.receive(self.ba.carry(self.b.take_output()))
            if self.take:
                self.got_a += self.a.take_data()
                self.got_b += self.b.take_data()
            if until is not None and until():
                return True
        return until is None


class Feeder:
    """Pushes a byte string through link.send as backpressure allows."""

    def __init__(self, link, data):
        self.link = link
        self.data = data
        self.pos = 0

    def push(self):
        if self.pos < len(self.data):
            self.pos += self.link.send(self.data[self.pos : self.pos + 4096])
        return self.pos == len(self.data)


def transfer(pair, to_b, to_a, ms=600000):
    fb = Feeder(pair.a, to_b)
    fa = Feeder(pair.b, to_a)

    def done():
        fb.push()
        fa.push()
        assert bytes(pair.got_b) == to_b[: len(pair.got_b)], "b received bytes a never sent"
        assert bytes(pair.got_a) == to_a[: len(pair.got_a)], "a received bytes b never sent"
        return len(pair.got_b) == len(to_b) and len(pair.got_a) == len(to_a)

    return pair.run(ms, done)


def test_cobs_round_trip():
    rng = Rng(1)
    cases = [
        b"",
        b"\x00",
        b"\x00\x00",
        b"a",
        b"a\x00",
        b"\x00a",
        b"\x01" * 253,
        b"\x01" * 254,
        b"\x01" * 255,
        b"\x01" * 254 + b"\x00",
        b"\x01" * 508,
        b"\x00" * 300,
    ]
    for _ in range(200):
        cases.append(bytes(rng.below(3) and rng.below(256) for _ in range(rng.below(700))))
    for data in cases:
        encoded = cobs_encode(data)
        assert b"\x00" not in encoded
        assert bytes(cobs_decode(encoded)) == data, data
    assert cobs_decode(b"\x05ab") is None  # says 4 bytes follow, only 2 do


def test_handshake_and_clean_round_trip():
    pair = Pair()
    assert not pair.a.connected
    assert pair.run(200, lambda: pair.a.connected and pair.b.connected)
    assert pair.a.peer_session == b"BBBB" and pair.b.peer_session == b"AAAA"
    assert not pair.a.peer_restarted and not pair.b.peer_restarted
    rng = Rng(2)
    to_b = rng.data(40000)
    to_a = rng.data(15000) + b"\x00" * 3000
    assert transfer(pair, to_b, to_a)
    for link in (pair.a, pair.b):
        assert link.stats["crc_errors"] == 0 and link.stats["retransmits"] == 0
        assert link.pending() == 0 or pair.run(100, lambda link=link: link.pending() == 0)
    assert pair.a.stats["bytes_out"] > 40000 and pair.b.stats["bytes_in"] == pair.a.stats["bytes_out"]


def test_data_sent_before_the_handshake_waits_for_it():
    pair = Pair()
    assert pair.a.send(b"early") == 5
    assert pair.run(200, lambda: bytes(pair.got_b) == b"early")


def test_frames_on_the_wire_are_delimited_and_checked():
    a = Link(0, b"AAAA")
    first = a.take_output()
    assert first[0] == 0 and first[-1] == 0 and first.count(b"\x00") == 2
    frame = bytes(cobs_decode(first[1:-1]))
    assert frame[0] == HELLO and frame[3:7] == b"AAAA" and len(frame) == 11
    b = Link(0, b"BBBB")
    damaged = bytearray(first)
    damaged[5] ^= 0x40
    b.receive(bytes(damaged))
    assert b.peer_session is None and b.stats["crc_errors"] == 1
    b.receive(first)
    assert b.peer_session == b"AAAA" and b.stats["frames_received"] == 1


def test_a_corrupted_data_frame_is_never_delivered():
    pair = Pair()
    assert pair.run(200, lambda: pair.a.connected and pair.b.connected)
    pair.a.send(b"hello, sensor")
    pair.a.tick(pair.now)
    wire = bytearray(pair.a.take_output())
    for i in range(1, len(wire) - 1):  # every single-byte corruption inside the frame
        damaged = bytearray(wire)
        damaged[i] ^= 0x5A
        pair.b.receive(bytes(damaged))
        assert pair.b.take_data() == b""
    assert pair.b.stats["crc_errors"] + pair.b.stats["resyncs"] >= len(wire) - 2
    pair.b.receive(bytes(wire))
    assert pair.b.take_data() == b"hello, sensor"
    pair.b.receive(bytes(wire))  # the same frame again: not delivered twice
    assert pair.b.take_data() == b"" and pair.b.stats["duplicates"] == 1


def test_garbage_resynchronises_at_the_next_delimiter():
    pair = Pair()
    assert pair.run(200, lambda: pair.a.connected and pair.b.connected)
    rng = Rng(3)
    pair.b.receive(rng.data(5000).replace(b"\x00", b"\x01"))  # one overlong run
    pair.b.receive(rng.data(3000))  # random frames
    pair.b.receive(b"\x00\x00\x00\x03\x00")  # empty and too-short frames
    assert pair.b.stats["resyncs"] >= 2
    pair.a.send(b"still here")
    assert pair.run(300, lambda: bytes(pair.got_b) == b"still here")


def test_noisy_line_delivers_the_exact_stream_or_nothing():
    for seed in range(6):
        rng = Rng(100 + seed)
        ab = Line(rng, corrupt=1500, drop=1000, garbage=500, duplicate=30)
        ba = Line(rng, corrupt=1500, drop=1000, garbage=500, duplicate=30)
        pair = Pair(ab=ab, ba=ba)
        to_b = rng.data(12000)
        to_a = rng.data(4000)
        assert transfer(pair, to_b, to_a), "seed %d: %d/%d and %d/%d bytes after 10 minutes" % (
            seed,
            len(pair.got_b),
            len(to_b),
            len(pair.got_a),
            len(to_a),
        )
        stats = pair.a.stats
        damage = pair.b.stats["crc_errors"] + pair.b.stats["resyncs"] + stats["crc_errors"] + stats["resyncs"]
        assert damage > 0 and stats["retransmits"] > 0, (pair.a.stats, pair.b.stats)


def test_a_very_bad_line_never_corrupts():
    # Half the frames are damaged: slow, but every byte that arrives is right.
    rng = Rng(7)
    pair = Pair(
        ab=Line(rng, corrupt=3000, drop=2000, garbage=2000), ba=Line(rng, corrupt=3000, drop=2000, garbage=2000)
    )
    to_b = rng.data(3000)
    to_a = rng.data(3000)
    assert transfer(pair, to_b, to_a)


def test_peer_restart_is_detected_and_starts_clean():
    pair = Pair()
    assert pair.run(200, lambda: pair.a.connected and pair.b.connected)
    pair.a.send(b"x" * 5000)  # in flight when b reboots
    pair.b.send(b"y" * 100)
    pair.run(30)
    assert 0 < len(pair.got_b) < 5000
    pair.b = Link(pair.now, b"CCCC")  # b reboots: new session, knows nothing
    pair.got_b = bytearray()
    assert pair.run(500, lambda: pair.a.peer_restarted)
    a = pair.a
    assert a.stats["restarts"] == 1 and a.peer_session == b"CCCC"
    assert a.pending() == 0 and a.take_data() == b""  # the old life's data is gone
    a.clear_restart()
    assert not a.peer_restarted
    pair.got_a = bytearray()
    assert pair.run(500, lambda: a.connected and pair.b.connected)
    assert not pair.b.peer_restarted  # a fresh boot has no previous peer to lose
    assert transfer(pair, b"after restart" * 100, b"new life" * 50)
    assert bytes(pair.got_b) == b"after restart" * 100  # nothing of the old x's


def test_restart_of_the_other_side_is_seen_by_hello_ack():
    pair = Pair()
    assert pair.run(200, lambda: pair.a.connected and pair.b.connected)
    pair.a = Link(pair.now, b"DDDD")  # a reboots
    assert pair.run(500, lambda: pair.b.peer_restarted and pair.a.connected and pair.b.connected)
    assert pair.b.peer_session == b"DDDD" and not pair.a.peer_restarted
    pair.b.clear_restart()
    assert transfer(pair, b"1" * 1000, b"2" * 1000)


def test_hello_is_retried_until_the_peer_is_there():
    now = 0
    a = Link(now, b"AAAA", retransmit_ms=200)
    hellos = 0
    while now < 3000:  # nobody listening for 3 s
        now += 10
        a.tick(now)
        if a.take_output():
            hellos += 1
    assert hellos == 4, hellos  # at 0.01, 0.21, 0.61 and 1.41 s: backing off to every 2 s
    b = Link(now, b"BBBB")
    for _ in range(300):
        now += 10
        a.tick(now)
        b.tick(now)
        b.receive(a.take_output())
        a.receive(b.take_output())
        if a.connected and b.connected:
            break
    assert a.connected and b.connected


def test_stale_hello_ack_is_ignored():
    a = Link(0, b"AAAA")
    a.take_output()
    b = Link(0, b"BBBB")
    b.receive(Link(0, b"OLD!").take_output())  # b answers the HELLO of a's previous boot
    a.receive(b.take_output())  # HELLO from b and HELLO_ACK for OLD!
    assert a.peer_session == b"BBBB" and not a.connected


def test_window_limits_frames_in_flight():
    a = Link(0, b"AAAA", window=3, mtu=100)
    b = Link(0, b"BBBB", window=3, mtu=100)
    b.receive(a.take_output())
    a.receive(b.take_output())
    b.receive(a.take_output())
    assert a.connected and b.connected
    a.send(b"z" * 1000)
    out = a.take_output()
    frames = [cobs_decode(f) for f in out.split(b"\x00") if f]
    assert [f[0] for f in frames] == [DATA] * 3 and [f[1] for f in frames] == [0, 1, 2]
    assert a.take_output() == b""  # the window is full until acks come
    b.receive(out)
    assert b.take_data() == b"z" * 300
    ack = b.take_output()
    assert [cobs_decode(f)[0] for f in ack.split(b"\x00") if f] == [ACK]
    a.receive(ack)
    assert len([f for f in a.take_output().split(b"\x00") if f]) == 3


def test_send_buffer_backpressure():
    a = Link(0, b"AAAA", buffer=2000)
    assert a.send(b"q" * 1500) == 1500
    assert a.send(b"q" * 1500) == 500
    assert a.send(b"q") == 0
    assert a.pending() == 2000


def test_a_receiver_that_does_not_take_data_stalls_the_sender():
    pair = Pair(buffer=1500)
    assert pair.run(200, lambda: pair.a.connected and pair.b.connected)
    pair.take = False
    feeder = Feeder(pair.a, bytes(range(256)) * 40)
    pair.run(3000, lambda: feeder.push() and False)
    assert len(pair.b._data) <= 1500 and pair.b.stats["rx_full"] > 0
    assert feeder.pos < 4000 and pair.a.pending() + len(pair.b._data) == feeder.pos  # held back, none lost
    pair.take = True
    assert pair.run(20000, lambda: feeder.push() and len(pair.got_b) == len(feeder.data) and pair.a.pending() == 0)
    assert bytes(pair.got_b) == feeder.data


def test_sequence_numbers_wrap():
    pair = Pair(mtu=16)
    to_b = Rng(9).data(16 * 700)  # 700 frames: wraps 0..255 twice
    assert transfer(pair, to_b, b"")
    assert pair.a._next == 700 % 256


def test_default_session_is_random_enough():
    assert Link(0).session != Link(0).session


def test_a_clock_that_wraps_does_not_stop_the_timers():
    pair = Pair()
    assert pair.run(200, lambda: pair.a.connected and pair.b.connected)
    pair.a.send(b"before the wrap")
    pair.a.tick(pair.now)
    pair.a.take_output()  # this frame is lost
    pair.now = 5  # MicroPython's ticks_ms() wrapped around
    assert pair.run(1000, lambda: bytes(pair.got_b) == b"before the wrap")
    assert pair.a.stats["retransmits"] == 1


def test_a_starved_receiver_asks_for_the_rest_as_soon_as_it_reads():
    pair = Pair(b=Link(1000, b"BBBB", buffer=500))
    assert pair.run(200, lambda: pair.a.connected and pair.b.connected)
    pair.take = False
    assert pair.a.send(b"s" * 1900) == 1900
    pair.run(100)
    assert pair.b.stats["rx_full"] > 0
    pair.run(5000)  # the sender backs off to a retry every 2 s
    pair.take = True
    # the receiver's read sends a NAK: the rest follows at once, not at the next retry
    assert pair.run(100, lambda: len(pair.got_b) == 1900)
