"""Runs of publishes into ordinary queues taken in one go (amqp091/batch.py PublishRun, core/runs.py,
c_accel/runs.c: routed once, enqueued together, their deliveries made in one C call) against the
one-by-one path (each publish through the channel, Broker.publish, the queue and
output.deliver).

Differential: two brokers on their own data folders read the same bytes in the same chunks
with the C frame scanner, one with the run path and one without: a publisher, and consumers
(no-ack, or acking with a prefetch; on their own connections or sharing one; with a small
frame_max, so that large bodies are cut into frames) of plain queues, a fanout to two of them,
a priority queue, queues with a TTL or a length limit and a durable one (persistent
messages, its window in memory small or not). After every chunk every connection must have
been sent the same bytes, and at the end the brokers must count the same, hold the same
budget, keep the same messages in the same order and have written the same journal, whatever the
publishes (alike or not, properties that differ per message or that the broker checks, bodies
empty or large) and however the reads cut them. CPython only.
"""

import os
import shutil
import struct
import tempfile

from broker_state import broker_state, written_files
from c_path import WALL, journaled_broker
from hypothesis import given, settings
from hypothesis import strategies as st
from raw_amqp import login, method

from hutch.amqp091.connection import Connection
from hutch.codec import spec
from hutch.codec.wire import encode_properties, frame
from hutch.core.limits import Limits

QUEUES = [
    (b"q", {}),
    (b"q2", {}),
    (b"pq", {"x-max-priority": 5}),
    (b"ttl", {"x-message-ttl": 60000}),
    (b"lim", {"x-max-length": 30}),
]


def declare(name, arguments, durable=False):
    return method(1, spec.QUEUE_DECLARE, "hsbbbbbt", [0, name, False, durable, False, False, False, arguments])


def publisher_setup(confirms):
    return (
        login(131072)
        + (method(1, spec.CONFIRM_SELECT, "b", [False]) if confirms else b"")
        + b"".join(declare(name, arguments) for name, arguments in QUEUES)
        + declare(b"d", {}, durable=True)
        + declare(b"d2", {}, durable=True)
        + method(1, spec.EXCHANGE_DECLARE, "hssbbbbbt", [0, b"both", b"fanout", False, False, False, False, False, {}])
        + method(1, spec.QUEUE_BIND, "hsssbt", [0, b"q", b"both", b"", False, {}])
        + method(1, spec.QUEUE_BIND, "hsssbt", [0, b"q2", b"both", b"", False, {}])
    )


def consume(channel, queue, tag, no_ack, prefetch, global_prefetch=False):
    return (
        method(channel, spec.CHANNEL_OPEN, "s", [b""]) * (channel != 1)
        + method(channel, spec.BASIC_QOS, "lhb", [0, prefetch, global_prefetch])
        + method(channel, spec.BASIC_CONSUME, "hssbbbbt", [0, queue, tag, False, no_ack, False, False, {}])
    )


def publish(body, key=b"q", exchange=b"", properties=None, bits=0, channel=1):
    props = encode_properties(properties or {})
    return (
        frame(
            1,
            channel,
            struct.pack(">IH", spec.BASIC_PUBLISH, 0)
            + bytes((len(exchange),))
            + exchange
            + bytes((len(key),))
            + key
            + bytes((bits,)),
        )
        + frame(2, channel, struct.pack(">HHQ", 60, 0, len(body)) + props)
        + (frame(3, channel, body) if body else b"")
    )


def publish_raw(body, flags, properties, key=b"q"):
    """A publish whose content header has these property flags and property octets as given, even
    cut short (what no client library sends)."""
    return (
        frame(1, 1, struct.pack(">IH", spec.BASIC_PUBLISH, 0) + bytes((0, len(key))) + key + b"\x00")
        + frame(2, 1, struct.pack(">HHQH", 60, 0, len(body), flags) + properties)
        + (frame(3, 1, body) if body else b"")
    )


PROPERTIES = st.sampled_from(
    [
        None,
        {"delivery-mode": 2},  # persistent: into the journal for the durable queue
        {"content-type": b"application/json", "headers": {"sensor": b"t1"}},
        {"priority": 3},
        {"expiration": b"60000"},  # a TTL: one by one
        {"user-id": b"guest"},
        {"user-id": b"mallory"},  # refused: 406 closes the channel
        {"headers": {"CC": [b"q2"]}},  # sender-selected: routed by that key too
        {"reply-to": b"amq.rabbitmq.reply-to"},  # no reply consumer here: 406
        {"headers": {"x-sensor-id": b"t1", "x-sensor-seq": 7}},  # one reading sent again and again: taken once
    ]
)
PER_MESSAGE = st.sampled_from(
    [
        lambda i: {"message-id": b"m%d" % i},  # after the headers table: each publish's own
        lambda i: {"timestamp": 1700000000 + i, "message-id": b"reading-%d" % (i * 7)},
        lambda i: {"headers": {"n": i}},  # inside the headers table: not alike
        lambda i: {"content-type": b"text/plain", "correlation-id": b"c" * (i % 5)},
        lambda i: {"headers": {"x-sensor-id": b"t2", "x-sensor-seq": i // 2}},  # each reading twice
    ]
)
BODIES = st.one_of(st.binary(max_size=40), st.builds(lambda n: b"y" * n, st.sampled_from([0, 3000, 70000])))
KEYS = st.sampled_from([b"q", b"q", b"q2", b"pq", b"ttl", b"lim", b"d", b"nowhere"])

alike_run = st.builds(
    lambda key, props, bodies: b"".join(publish(b, key=key, properties=props) for b in bodies),
    KEYS,
    PROPERTIES,
    st.lists(BODIES, min_size=1, max_size=60),
)
varying_run = st.builds(
    lambda key, props, bodies: b"".join(publish(b, key=key, properties=props(i)) for i, b in enumerate(bodies)),
    KEYS,
    PER_MESSAGE,
    st.lists(BODIES, min_size=1, max_size=40),
)
# Property lists cut short or overlong (a frame error: codec/wire.py check_property_list), one by one
# as in a run, into a plain queue or the durable one (delivery-mode read in place)
broken_run = st.builds(
    lambda flags, properties, key, bodies: b"".join(publish_raw(b, flags, properties, key) for b in bodies),
    st.sampled_from([0x2000, 0x8000, 0xA000, 0x0800, 0x9000, 0x1080]),
    st.sampled_from([b"", b"\x00\x00", b"\x05ab", b"\x00\x00\x00\x09xy", b"\xc8ab", b"\x02\x02m1"]),
    st.sampled_from([b"q", b"d"]),
    st.lists(BODIES, min_size=1, max_size=20),
)
# persistent into the durable queue: each into the journal, its backlog on disk once it pages
persistent_run = st.builds(
    lambda bodies, props: b"".join(
        publish(b, key=b"d", properties=dict(props, **{"delivery-mode": 2})) for b in bodies
    ),
    st.lists(BODIES, min_size=1, max_size=60),
    st.sampled_from([{}, {"content-type": b"application/json"}, {"expiration": b"60000"}]),
)
fanout_run = st.builds(
    lambda bodies: b"".join(publish(b, exchange=b"both") for b in bodies), st.lists(BODIES, max_size=40)
)
pieces = st.one_of(
    alike_run,
    alike_run,
    varying_run,
    persistent_run,
    broken_run,
    fanout_run,
    st.builds(lambda b: publish(b, key=b"nowhere", bits=1), BODIES),  # mandatory, unroutable: returned
    st.builds(lambda b: publish(b, exchange=b"none"), BODIES),  # no such exchange: 404 closes the channel
    st.just(method(1, spec.TX_SELECT, "", [])),  # a transaction (on a confirm channel: 406)
    st.just(method(1, spec.TX_COMMIT, "", [])),
    st.just(method(1, spec.CHANNEL_OPEN, "s", [b""])),  # reopens after a 406 or 404 (else 504)
)
# What the consumers send between reads: settle everything delivered so far, in one of the ways.
SETTLES = st.sampled_from(
    [
        b"",
        method(2, spec.BASIC_ACK, "Lb", [0, True]),
        method(2, spec.BASIC_NACK, "Lbb", [0, True, True]),  # requeued: redelivered, the run's Messages again
        method(2, spec.BASIC_NACK, "Lbb", [0, True, False]),
    ]
)
LAYOUTS = st.sampled_from(["apart", "together", "publisher"])


class Side:
    """A broker on its own data folder with a publisher and consumers, reading with the C
    scanner, with or without the run path."""

    def __init__(self, folder, runs, limits, layout, prefetch, frame_max, confirms, segment_bytes=1 << 20):
        self.folder = folder
        self.broker, self.writer = journaled_broker(folder, limits, runs, segment_bytes)
        publisher = Connection(self.broker, {"address": "127.0.0.1", "port": 1})
        self.conns = [publisher]
        self.feed(publisher, publisher_setup(confirms))
        # the no-ack consumer of q on channel 1, the acking one of q2 on channel 2, with the
        # priority, TTL and durable queues' consumers beside it; on one or two connections
        first = Connection(self.broker, {"address": "127.0.0.1", "port": 2}) if layout != "publisher" else publisher
        if layout != "publisher":
            self.conns.append(first)
            self.feed(first, login(frame_max) + consume(1, b"q", b"a", True, 0))
        else:  # the publisher consumes too, on channel 3
            self.feed(first, consume(3, b"q", b"a", True, 0))
        second = first
        if layout == "apart":
            second = Connection(self.broker, {"address": "127.0.0.1", "port": 3})
            self.conns.append(second)
            self.feed(second, login(frame_max) + method(1, spec.BASIC_QOS, "lhb", [0, 0, False]))
        self.settler = second
        self.feed(
            second,
            consume(2, b"q2", b"b", False, prefetch[0], prefetch[1])
            + method(2, spec.BASIC_CONSUME, "hssbbbbt", [0, b"pq", b"c", False, False, False, False, {}])
            + method(2, spec.BASIC_CONSUME, "hssbbbbt", [0, b"ttl", b"e", False, True, False, False, {}])
            + method(2, spec.BASIC_CONSUME, "hssbbbbt", [0, b"d", b"f", False, False, False, False, {}]),
        )

    def feed(self, conn, data):
        conn.feed(data)
        self.writer.commit()  # a group commit: the confirms it holds are sent

    def step(self, data, settle, seconds):
        self.broker.tick(seconds * 1000, WALL + seconds)
        self.feed(self.conns[0], data)
        outputs = [conn.take_output() for conn in self.conns]
        if settle:
            self.feed(self.settler, settle)
            outputs += [conn.take_output() for conn in self.conns]
        return outputs, [(conn.state, conn.closed, conn.paused) for conn in self.conns]

    def state(self):
        return broker_state(self.broker)

    def close(self):
        self.writer.commit()
        self.writer.files.close()


@settings(max_examples=150)
@given(
    st.lists(pieces, min_size=1, max_size=12),
    st.lists(SETTLES, min_size=1, max_size=12),
    LAYOUTS,
    st.sampled_from([(0, False), (1, False), (7, False), (100, False), (10, True)]),
    st.sampled_from([4096, 131072]),
    st.booleans(),
    st.sampled_from([1, 50, 700, 5000, 1 << 20]),
    st.sampled_from(
        [
            Limits(),
            Limits(output_high_water=3000),
            Limits(total_max_messages=80),
            Limits(queue_window_messages=20),  # the durable queue pages: its backlog on disk
        ]
    ),
)
def test_runs_into_queues_send_and_keep_what_the_one_by_one_path_does(
    pieces_, settles, layout, prefetch, frame_max, confirms, chunk, limits
):
    compare(pieces_, settles, layout, prefetch, frame_max, confirms, chunk, limits)


@settings(max_examples=40)
@given(
    st.lists(persistent_run, min_size=1, max_size=8),
    st.lists(SETTLES, min_size=1, max_size=12),
    st.sampled_from([(1, False), (7, False)]),
    st.booleans(),
    st.sampled_from([50, 700, 5000, 1 << 20]),
)
def test_persistent_runs_into_a_queue_that_pages_write_what_one_by_one_writes(
    pieces_, settles, prefetch, confirms, chunk
):
    """The durable queue's consumer lags (a prefetch of 1 or 7), and its window in memory holds
    20 messages: a run's messages go to its backlog on disk part way, and come back as acks
    make room."""
    compare(pieces_, settles, "apart", prefetch, 131072, confirms, chunk, Limits(queue_window_messages=20))


@settings(max_examples=40)
@given(
    st.lists(
        st.builds(
            lambda key, bodies: b"".join(publish(b, key=key, properties={"delivery-mode": 2}) for b in bodies),
            st.sampled_from([b"d", b"d2"]),
            st.lists(st.builds(lambda n: b"z" * n, st.integers(0, 3000)), min_size=1, max_size=30),
        ),
        min_size=2,
        max_size=10,
    ),
    st.sampled_from([50, 700, 5000, 1 << 20]),
)
def test_persistent_runs_across_segments_and_two_durable_queues_write_what_one_by_one_writes(pieces_, chunk):
    """Segments of 8 KiB roll over inside runs, and runs into two durable queues take turns (a
    queue's ids in a segment then skip, and its members become a bitmap): the journal's files
    are those the one-by-one path writes."""
    compare(pieces_, [b""], "apart", (7, False), 131072, True, chunk, Limits(), segment_bytes=8192)


@settings(max_examples=40)
@given(
    st.lists(st.tuples(BODIES, st.sampled_from([1, 2, 2, 130])), min_size=2, max_size=40),
    st.sampled_from([{}, {"content-type": b"application/json"}, {"message-id": b"m"}]),
    st.booleans(),
    st.sampled_from([50, 700, 5000, 1 << 20]),
)
def test_publishes_whose_delivery_mode_changes_are_journalled_each_as_one_by_one(publishes, props, confirms, chunk):
    """Persistent and transient publishes, alike but for their delivery-mode (2, 1, or one no
    client sends: 130, not persistent), into a durable queue: each is journalled or not by its
    own delivery-mode. A run took its first's for all of them (a fuzzed session's 130 among 2s
    was written to the journal; a transient first would have left persistent ones off it)."""
    data = b"".join(
        publish(body, key=b"d", properties=dict(props, **{"delivery-mode": mode})) for body, mode in publishes
    )
    compare([data], [b""], "apart", (7, False), 131072, confirms, chunk, Limits())


def compare(pieces_, settles, layout, prefetch, frame_max, confirms, chunk, limits, segment_bytes=1 << 20):
    """The same reads into a broker with the run path and one without (Side): the same bytes to
    every connection after each, and at the end the same state and the same journal."""
    top = tempfile.mkdtemp(prefix="hutch-runs-")
    try:
        sides = [
            Side(os.path.join(top, name), runs, limits, layout, prefetch, frame_max, confirms, segment_bytes)
            for name, runs in (("one", False), ("runs", True))
        ]
        data = b"".join(pieces_)
        chunk = max(chunk, len(data) // 100)
        reads = [data[i : i + chunk] for i in range(0, len(data), chunk)]
        for n, read in enumerate(reads):
            settle = settles[n % len(settles)]
            one, runs = (side.step(read, settle, n) for side in sides)
            assert runs == one
        assert sides[1].state() == sides[0].state()
        for side in sides:
            side.close()
        assert journal_files(sides[1].folder) == journal_files(sides[0].folder)
    finally:
        shutil.rmtree(top)


def journal_files(folder):
    """{name: content} of the journal's files (not the recovery's report, which says how long it
    took): a run's records are those of its publishes."""
    return written_files(folder, lambda name: name != "recovery.txt")


def test_a_run_into_a_queue_is_taken_in_one_call():
    """The run path is taken: 30 alike publishes in one read reach the no-ack consumer as one
    buffer of frames (one part of its output), where one by one each delivery adds its own."""
    top = tempfile.mkdtemp(prefix="hutch-runs-")
    try:
        parts = []
        for name, runs in (("one", False), ("runs", True)):
            side = Side(os.path.join(top, name), runs, Limits(), "apart", (100, False), 131072, False)
            side.conns[1].take_output()  # (the handshake's)
            side.conns[0].feed(b"".join(publish(b"%d" % i) for i in range(30)))
            parts.append(len(side.conns[1].out))
            assert side.conns[1].out_bytes == sum(len(b"%d" % i) + 64 for i in range(30))
            side.close()
        assert parts == [30 * 8, 1]
    finally:
        shutil.rmtree(top)


def test_a_sensor_s_reading_sent_again_in_the_same_read_is_taken_once():
    """A sensor's readings (x-sensor-id, x-sensor-seq), each sent twice in one read: the copies
    alike enough to make a run still pass the sensor dedup (core/dedup.py) one by one."""
    top = tempfile.mkdtemp(prefix="hutch-runs-")
    try:
        taken = []
        for name, runs in (("one", False), ("runs", True)):
            side = Side(os.path.join(top, name), runs, Limits(), "apart", (100, False), 131072, False)
            reading = [{"headers": {"x-sensor-id": b"s1", "x-sensor-seq": seq}} for seq in (1, 1, 2, 2, 3, 3)]
            side.conns[0].feed(b"".join(publish(b"x", properties=p) for p in reading))
            taken.append(side.broker.queues[b"q"].published)
            side.close()
        assert taken == [3, 3]
    finally:
        shutil.rmtree(top)


def test_a_run_stops_where_the_connection_has_no_more_room():
    """The consumer's connection takes deliveries while what it holds counts below its high-water
    mark (body size + 64 each): exactly 10 of 16-byte bodies at 800 bytes, the rest queued, in
    the run as one by one."""
    top = tempfile.mkdtemp(prefix="hutch-runs-")
    try:
        sides = []
        for name, runs in (("one", False), ("runs", True)):
            side = Side(
                os.path.join(top, name), runs, Limits(output_high_water=800), "apart", (0, False), 131072, False
            )
            for conn in side.conns:
                conn.take_output()
            sides.append(side)
        seen = []
        for side in sides:
            side.conns[0].feed(b"".join(publish(b"x" * 16) for _ in range(12)))
            seen.append((side.broker.queues[b"q"].delivered, side.conns[1].out_bytes))
            seen.append([conn.take_output() for conn in side.conns])  # (the last two go out now)
        assert seen[0] == (10, 800)
        assert seen[2:] == seen[:2]
        assert sides[1].state() == sides[0].state()
        for side in sides:
            side.close()
    finally:
        shutil.rmtree(top)


# A content header's properties cut short or overlong, in a run of alike publishes: its first
# (delivery-mode after a content-type longer than the frame: what read the properties in place
# raised IndexError, an internal error), or a later one (its own message-id longer than the
# frame), or one with octets after its last property. Each is a frame error on every path.
GOOD = (0x1080, b"\x02\x02m1")  # delivery-mode 2, message-id "m1"
CUT_SHORT_PUBLISHES = [
    [(0x9000, b"\xc8ab")] * 4,
    [GOOD, GOOD, GOOD, (0x1080, b"\x02\x09m1"), GOOD],
    [GOOD, GOOD, (0x1000, b"\x02xyz"), GOOD],
]


def test_properties_cut_short_or_overlong_are_a_frame_error_on_every_path():
    """The pure-Python frame reader, the C scanner one by one and its runs answer alike:
    connection.close 501 FRAME_ERROR naming what is wrong, what came before it taken, nothing
    after it, and no internal error."""
    from hutch.core.broker import Broker
    from hutch.ports.recovery import recover

    top = tempfile.mkdtemp(prefix="hutch-runs-")
    try:
        for n, publishes in enumerate(CUT_SHORT_PUBLISHES):
            seen = []
            for name in ("python", "one", "runs"):
                folder = os.path.join(top, "%s-%d" % (name, n))
                if name == "python":  # (no frame reader installed: amqp091/framing.py's)
                    broker = Broker(Limits(), log=lambda level, message, exc=None: None)
                    writer = recover(folder, broker, 1 << 20, 1 << 30, broker.log)
                else:
                    broker, writer = journaled_broker(folder, Limits(), name == "runs")
                conn = Connection(broker, {"address": "127.0.0.1", "port": 1})
                conn.feed(publisher_setup(True))
                writer.commit()
                conn.take_output()
                conn.feed(b"".join(publish_raw(b"reading", flags, props, key=b"d") for flags, props in publishes))
                writer.commit()
                out = conn.take_output()
                seen.append((broker.queues[b"d"].published, conn.state, out[out.find(b"\x00\x0a\x00\x32") :]))
                writer.files.close()
            taken = [i for i, p in enumerate(publishes) if p != GOOD][0]  # those before the bad one
            assert seen[0][0] == taken, seen
            assert seen[0][2].startswith(b"\x00\x0a\x00\x32\x01\xf5") and b"FRAME_ERROR - " in seen[0][2], seen
            assert b"INTERNAL_ERROR" not in seen[0][2]
            assert seen[1] == seen[0] and seen[2] == seen[0], (n, seen)
    finally:
        shutil.rmtree(top)
