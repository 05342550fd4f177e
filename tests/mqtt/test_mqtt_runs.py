"""Runs of alike QoS 0 and QoS 1 PUBLISHes taken in one go (mqtt/runs.py through the broker's run path,
core/runs.py) against the one-by-one path (each PUBLISH through Publishing.publish,
Broker.publish, its queues and Session.deliver).

Differential: two brokers on their own data folders read the same bytes in the same chunks from
one publisher, one broker with the run path and one without. Their subscribers are of every
kind a run meets: QoS 0 and QoS 1 subscriptions of 3.1.1, 3.1 and version 5 clients, a session
that outlives its connection (a durable queue), a filter holding a dot, one that takes `$`
topics, a shared subscription, and the publisher subscribed too. The PUBLISHes are runs to one
topic and to others, at QoS 0 and at QoS 1 (packet ids that wrap through 0), with a dot,
unrouted, JSON readings that say who sent them, retained ones between them, payloads from empty
to larger than the broker takes. After every read every connection must have been sent the same
octets (the publisher its PUBACKs; a QoS 1 delivery is acknowledged at once, alike on both), and
at the end both brokers count the same, hold the same budget and keep the same messages in the
same order. CPython only.
"""

import os
import shutil
import tempfile

from broker_state import broker_state
from hypothesis import given, settings
from hypothesis import strategies as st

from hutch.core.broker import Broker
from hutch.core.limits import Limits
from hutch.mqtt import packets
from hutch.mqtt.connection import Connection, serving_of
from hutch.mqtt.runs import parse, pubacks
from hutch.ports.recovery import recover

WALL = 1700000000  # the wall clock's seconds at the start
# (client id, version, clean, [(filter, QoS)])
SUBSCRIBERS = [
    (b"plain", packets.V311, True, [(b"s/#", 0)]),
    (b"kept", packets.V311, False, [(b"s/a", 0)]),  # a durable queue
    (b"acking", packets.V311, True, [(b"s/a", 1), (b"s/b", 0)]),
    (b"old", packets.V31, True, [(b"s/+", 0)]),
    (b"five", packets.V5, True, [(b"s/#", 0)]),
    (b"dotted", packets.V311, True, [(b"s/x.y", 0), (b"s/a", 0)]),
    (b"dollar", packets.V311, True, [(b"$d/#", 0)]),
    (b"shared-1", packets.V311, True, [(b"$share/g/s/a", 0)]),
    (b"shared-2", packets.V311, True, [(b"$share/g/s/a", 0)]),
]


def publish(topic, payload, first=0x30, packet_id=0, level=packets.V311, props=b""):
    """A PUBLISH as a client of this level sends it; first: its first octet (QoS, DUP, RETAIN);
    props: a version 5 client's properties, encoded."""
    head = packets.binary(topic) + (bytes((packet_id >> 8, packet_id & 0xFF)) if first & 6 else b"")
    if level == packets.V5:
        head += packets.remaining_length(len(props)) + props
    return bytes((first,)) + packets.remaining_length(len(head) + len(payload)) + head + payload


TOPIC_NAMES = [b"s/a", b"s/b", b"s/x.y", b"s/x/y", b"$d/x", b"nowhere/n"]
TOPICS = st.sampled_from(TOPIC_NAMES)
PAYLOADS = st.one_of(
    st.binary(max_size=40),
    st.sampled_from(
        [b"", b'{"x-sensor-id": "t1", "x-sensor-seq": 7, "v": 1}', b"z" * 3000, b"w" * 9000, b"q" * 80000]
    ),  # (80,000: a packet larger than a broker of max_message_bytes 5,000 reads: malformed)
)
# Each piece is what the publisher sends, as a function of its protocol level.
alike_run = st.builds(
    lambda topic, payloads: lambda level: b"".join(publish(topic, p, level=level) for p in payloads),
    TOPICS,
    st.lists(PAYLOADS, min_size=2, max_size=80),
)
# QoS 1: each with its packet id, from 1, 100 or 65,530 on (wrapping through 0: a version 5
# client's 0 is malformed, a 3.1.1 client's is taken and logged, each one by one)
qos1_run = st.builds(
    lambda topic, payloads, first_id: (
        lambda level: b"".join(publish(topic, p, 0x32, (first_id + i) % 65536, level) for i, p in enumerate(payloads))
    ),
    TOPICS,
    st.lists(PAYLOADS, min_size=2, max_size=40),
    st.sampled_from([1, 100, 65530]),
)
# QoS 1 to s/a, more than the QoS 1 subscriber's prefetch (20): it acknowledges each window of
# deliveries in one read, a run of PUBACKs
window_run = st.builds(
    lambda payloads: lambda level: b"".join(publish(b"s/a", p, 0x32, 1 + i, level) for i, p in enumerate(payloads)),
    st.lists(st.binary(max_size=20), min_size=21, max_size=60),
)
CONTENT_TYPE = b"\x03\x00\x04text"  # (a version 5 property: not alike, one by one)
pieces = st.one_of(
    alike_run,
    alike_run,
    alike_run,
    qos1_run,
    qos1_run,
    window_run,
    st.builds(lambda t, p: lambda level: publish(t, p, level=level, props=CONTENT_TYPE), TOPICS, PAYLOADS),
    st.builds(lambda t, p: lambda level: publish(t, p, 0x31, level=level), TOPICS, PAYLOADS),  # retained
    st.builds(lambda t, p, i: lambda level: publish(t, p, 0x32, i, level), TOPICS, PAYLOADS, st.integers(1, 9)),
    st.builds(lambda t, p: lambda level: publish(t, p, 0x38, level=level), TOPICS, PAYLOADS),  # DUP at QoS 0
    st.just(lambda level: b"\xc0\x00"),  # PINGREQ
    st.sampled_from([b"\x30\x00", b"\x30\x01\x00", b"\x30\x03\x00\x05s"]).map(lambda cut: lambda level: cut),
)  # (the last: PUBLISHes cut short, malformed)
LIMITS = st.sampled_from(
    [
        Limits(),
        Limits(output_high_water=600),
        Limits(total_max_messages=80),
        Limits(max_message_bytes=5000),
        Limits(queue_window_messages=20, output_high_water=600),  # (a durable queue that pages)
    ]
)


class Side:
    """A broker on its own data folder with the publisher and the subscribers, with or without
    the run path."""

    def __init__(self, folder, runs, limits, publisher_subscribes, publisher_level=packets.V311):
        self.said = []  # the broker's log lines
        self.broker = Broker(limits, log=lambda level, message, exc=None: self.said.append((level, message)))
        self.writer = recover(folder, self.broker, 1 << 20, 1 << 30, self.broker.log)
        self.broker.tick(0, WALL)
        if runs:
            serving_of(self.broker).parse = parse
        self.conns = []
        self.publisher = self.client(b"pub", publisher_level, True)
        if publisher_subscribes:
            self.feed(self.publisher, packets.subscribe(1, [(b"s/b", 0)], publisher_level))
        for client_id, level, clean, filters in SUBSCRIBERS:
            conn = self.client(client_id, level, clean)
            self.feed(conn, packets.subscribe(1, filters, level))
        # a topic's first PUBLISH goes one by one (it is checked then): each is known before the runs
        self.feed(self.publisher, b"".join(publish(topic, b"", level=publisher_level) for topic in TOPIC_NAMES))
        for conn in self.conns:
            conn.take_output()
        del self.said[:]  # (what the start said names the side's own folder)

    def client(self, client_id, level, clean):
        conn = Connection(self.broker, {"address": "127.0.0.1", "port": 40000 + len(self.conns), "transport": "tcp"})
        self.conns.append(conn)
        self.feed(conn, packets.connect(client_id, level=level, clean=clean, user=b"guest", password=b"guest"))
        return conn

    def feed(self, conn, data):
        if not conn.closed:
            conn.feed(data)
        self.writer.commit()  # a group commit: the acknowledgements it holds are sent

    def step(self, data, seconds):
        self.broker.tick(seconds * 1000, WALL + seconds)
        self.feed(self.publisher, data)
        # (before the subscribers take their output: what the queues hold, in memory and on disk)
        outputs = [[(name, q.messages.length, q.paged) for name, q in self.broker.queues.items()]]
        for conn in self.conns:
            out = conn.take_output()
            outputs.append(out)
            acks = b"".join(packets.ack(packets.PUBACK, pid) for pid in qos1_ids(out, conn.level))
            if acks:
                self.feed(conn, acks)
        outputs += [conn.take_output() for conn in self.conns]
        return outputs, [(conn.closed, conn.paused) for conn in self.conns]

    def state(self):
        return broker_state(self.broker), list(serving_of(self.broker).stats or ()), self.said

    def close(self):
        self.writer.commit()
        self.writer.files.close()


def qos1_ids(out, level):
    """The packet ids of the QoS 1 PUBLISHes in a client's output."""
    ids = []
    pos = 0
    while True:
        found = packets.split(out, pos, 1 << 30)
        if found is None:
            return ids
        first, start, end = found
        if first >> 4 == packets.PUBLISH and (first >> 1) & 3 == 1:
            ids.append(packets.read_publish(first, out, start, end, level)[1])
        pos = end


def sides(top, limits, publisher_subscribes, publisher_level=packets.V311):
    return [
        Side(os.path.join(top, name), runs, limits, publisher_subscribes, publisher_level)
        for name, runs in (("one", False), ("runs", True))
    ]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(pieces, min_size=1, max_size=12),
    st.sampled_from([1, 50, 700, 5000, 1 << 20, 1 << 20]),  # (the reads: a run is what one read holds)
    LIMITS,
    st.booleans(),
    st.sampled_from([packets.V311, packets.V5]),
)
def test_runs_send_and_keep_what_the_one_by_one_path_does(pieces_, chunk, limits, publisher_subscribes, level):
    top = tempfile.mkdtemp(prefix="hutch-mqtt-runs-")
    try:
        both = sides(top, limits, publisher_subscribes, level)
        data = b"".join(piece(level) for piece in pieces_)
        chunk = max(chunk, len(data) // 100)
        for n, i in enumerate(range(0, len(data), chunk)):
            one, runs = (side.step(data[i : i + chunk], n) for side in both)
            assert runs == one
        assert both[1].state() == both[0].state()
        for side in both:
            side.close()
    finally:
        shutil.rmtree(top)


def counted(broker):
    """A list that grows by one at each call of broker.publish (the one-by-one way in)."""
    calls = []
    publish_one = broker.publish

    def publish(*args, **kwargs):
        calls.append(1)
        return publish_one(*args, **kwargs)

    broker.publish = publish
    return calls


def settled(broker):
    """A list that grows by how many entries each call of broker.settle settles."""
    sizes = []
    settle = broker.settle

    def counting(queue, entries, *rest):
        sizes.append(len(entries))
        return settle(queue, entries, *rest)

    broker.settle = counting
    return sizes


def test_a_run_reaches_a_subscriber_as_the_publishes_came():
    """The run path is taken: 30 alike PUBLISHes in one read go through the broker as one run
    (Broker.publish, the one-by-one way in, is not called for them) and reach the subscriber as
    the same octets."""
    top = tempfile.mkdtemp(prefix="hutch-mqtt-runs-")
    try:
        data = b"".join(publish(b"s/b", b"%d" % i) for i in range(30))
        outputs = []
        for side in sides(top, Limits(), False):
            broker = side.broker
            one_by_one = counted(broker)
            published = broker.published
            side.feed(side.publisher, data)
            outputs.append((broker.published - published, len(one_by_one), side.conns[1].take_output()))
            side.close()
        assert outputs == [(30, 30, data), (30, 0, data)]
    finally:
        shutil.rmtree(top)


def test_a_qos_1_run_goes_as_one_and_its_pubacks_come_in_order_once_on_disk():
    """30 alike QoS 1 PUBLISHes in one read go through the broker as one run (Broker.publish is
    not called for them); the durable queue of the session that outlives its connection takes
    them, through the journal, so their 30 PUBACKs, in the order of the PUBLISHes, come with the
    journal's sync, as one by one."""
    top = tempfile.mkdtemp(prefix="hutch-mqtt-runs-")
    try:
        data = b"".join(publish(b"s/a", b"%d" % i, 0x32, 1000 + i) for i in range(30))
        pubacks = b"".join(packets.ack(packets.PUBACK, 1000 + i) for i in range(30))
        seen = []
        for side in sides(top, Limits(), False):
            broker = side.broker
            one_by_one = counted(broker)
            kept = broker.queues[b"mqtt-subscription-keptqos0"]
            published = kept.published
            side.publisher.feed(data)  # (no group commit yet)
            before_sync = side.publisher.take_output()
            side.writer.commit()
            seen.append((len(one_by_one), before_sync, side.publisher.take_output(), kept.published - published))
            side.close()
        assert seen == [(30, b"", pubacks, 30), (0, b"", pubacks, 30)]
    finally:
        shutil.rmtree(top)


def test_a_read_of_pubacks_is_settled_as_one_and_brings_what_one_by_one_brings():
    """A QoS 1 subscriber holding its prefetch's 20 deliveries acknowledges them in one read:
    the 20 are settled together (one settle of its queue, where one by one settles each), and
    it is sent the next 20, the same octets as one by one sends."""
    top = tempfile.mkdtemp(prefix="hutch-mqtt-runs-")
    try:
        data = b"".join(publish(b"s/a", b"%d" % i, 0x32, 1 + i) for i in range(50))
        seen = []
        for side in sides(top, Limits(), False):
            acking = side.conns[3]
            side.feed(side.publisher, data)
            first = acking.take_output()
            settles = settled(side.broker)
            side.feed(acking, b"".join(packets.ack(packets.PUBACK, i) for i in qos1_ids(first, packets.V311)))
            seen.append((len(qos1_ids(first, packets.V311)), settles, acking.take_output()))
            side.close()
        (one, one_settles, one_next), (runs, run_settles, run_next) = seen
        assert (one, runs) == (20, 20)
        assert (one_settles, run_settles) == ([1] * 20, [20])
        assert len(qos1_ids(run_next, packets.V311)) == 20
        assert run_next == one_next
    finally:
        shutil.rmtree(top)


def test_pubacks_while_publishers_are_blocked_go_one_by_one_and_let_the_publisher_on_as_one_by_one():
    """The queued messages' budget (40) blocks the publisher part way through its 60 QoS 1
    PUBLISHes to s/a. The QoS 1 subscriber's PUBACK that takes the budget back under its low
    water unblocks the publisher there and then, before the next PUBACK: settled together, the
    publisher would find the room of all of them and be PUBACKed more, so they go one by one,
    and every client is sent what one by one sends it."""
    top = tempfile.mkdtemp(prefix="hutch-mqtt-runs-")
    try:
        data = b"".join(publish(b"s/a", b"%d" % i, 0x32, 1 + i) for i in range(60))
        both = sides(top, Limits(total_max_messages=40), False)
        one, runs = (side.step(data, 0) for side in both)
        assert runs == one
        assert [side.publisher.paused for side in both] == [True, True]  # (blocked again at the end)
        assert both[1].state() == both[0].state()
        for side in both:
            side.close()
    finally:
        shutil.rmtree(top)


def test_a_run_s_pubacks_are_the_octets_ack_makes_in_every_version():
    ids = [1, 2, 255, 256, 4660, 65535]
    for level in (packets.V31, packets.V311, packets.V5):
        assert pubacks(ids) == b"".join(packets.ack(packets.PUBACK, i, packets.SUCCESS, level) for i in ids)
    assert pubacks([]) == b""


def test_a_run_stops_where_the_subscribers_connection_has_no_more_room():
    """A subscriber's connection takes deliveries while what it holds is below its high-water
    mark: of twelve 107-octet PUBLISHes, 8 at 800 octets (the eighth passes it), the rest
    queued until it has room, in the run as one by one."""
    top = tempfile.mkdtemp(prefix="hutch-mqtt-runs-")
    try:
        seen = []
        both = sides(top, Limits(output_high_water=800), False)
        for side in both:
            plain = side.conns[1]
            queue = side.broker.queues[b"mqtt-subscription-plainqos0"]
            delivered = queue.delivered
            side.feed(side.publisher, b"".join(publish(b"s/b", b"x" * 100) for _ in range(12)))
            seen.append((queue.delivered - delivered, plain.out_bytes, queue.message_count()))
            seen.append([conn.take_output() for conn in side.conns])  # (then the other four go out)
            seen.append(side.state())
        assert seen[0] == (8, 856, 4)
        assert seen[3:] == seen[:3]
        for side in both:
            side.close()
    finally:
        shutil.rmtree(top)


def test_a_run_of_transient_messages_pages_a_durable_queue_as_one_by_one():
    """A session's durable queue keeps a window of messages in memory, the rest on disk (paged),
    transient ones too. 80 PUBLISHes of 47 octets to a subscriber whose connection takes
    about 13 of them: the other 67 pass the window of 20, and are paged in the run as one by
    one (the run path takes none of them there)."""
    top = tempfile.mkdtemp(prefix="hutch-mqtt-runs-")
    try:
        seen = []
        for side in sides(top, Limits(queue_window_messages=20, output_high_water=600), False):
            queue = side.broker.queues[b"mqtt-subscription-keptqos0"]
            side.feed(side.publisher, b"".join(publish(b"s/a", b"%40d" % i) for i in range(80)))
            seen.append((queue.messages.length, queue.paged, side.conns[2].out_bytes))
            seen.append([conn.take_output() for conn in side.conns])
            seen.append(side.state())
            side.close()
        assert seen[0] == (20, 47, 611)
        assert seen[3:] == seen[:3]
    finally:
        shutil.rmtree(top)


def test_a_publish_cut_short_or_too_large_after_a_run_ends_the_connection_as_one_by_one():
    """A run's PUBLISHes before a malformed packet go through, then the packet ends the
    connection with the reason the one-by-one path gives: a PUBLISH with no room for its
    topic's length, with one octet after it, and one larger than the broker reads."""
    for bad in (b"\x30\x00\xc0", publish(b"s/b", b"q" * 80000)):
        top = tempfile.mkdtemp(prefix="hutch-mqtt-runs-")
        try:
            seen = []
            for side in sides(top, Limits(max_message_bytes=5000), False):
                outputs = side.step(b"".join(publish(b"s/b", b"%d" % i) for i in range(5)) + bad, 1)
                seen.append((outputs, side.publisher.closed, side.state()))
                side.close()
            assert seen[0][1] and seen[0][2][2][-1][1].startswith("127.0.0.1:40000: "), seen[0][2][2]
            assert seen[1] == seen[0]
        finally:
            shutil.rmtree(top)


def test_a_version_5_publish_with_properties_goes_one_by_one_and_the_rest_as_a_run():
    """A version 5 client's PUBLISH with a property (its content type) then five without: the
    first goes its way, with its property to the version 5 subscriber; the five go as a run,
    to the 3.1.1 subscriber without the version 5 properties' length, to the version 5 one as
    they came."""
    top = tempfile.mkdtemp(prefix="hutch-mqtt-runs-")
    try:
        seen = []
        data = publish(b"s/b", b"typed", level=packets.V5, props=CONTENT_TYPE) + b"".join(
            publish(b"s/b", b"%d" % i, level=packets.V5) for i in range(5)
        )
        for side in sides(top, Limits(), False, packets.V5):
            one_by_one = counted(side.broker)
            outputs = side.step(data, 1)
            seen.append((len(one_by_one), outputs, side.state()))
            side.close()
        plain, five = (SUBSCRIBERS.index(s) + 2 for s in SUBSCRIBERS if s[0] in (b"plain", b"five"))
        assert seen[0][1][0][plain] == publish(b"s/b", b"typed") + b"".join(
            publish(b"s/b", b"%d" % i) for i in range(5)
        )
        assert seen[0][1][0][five] == data
        assert (seen[0][0], seen[1][0]) == (6, 1)
        assert seen[1][1:] == seen[0][1:]
    finally:
        shutil.rmtree(top)
