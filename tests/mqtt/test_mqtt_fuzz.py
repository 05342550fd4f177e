"""Bad input costs one connection and nothing else: hypothesis feeds the MQTT front end sessions
of well-formed packets with octets flipped, cut or inserted, and random octets, in random
pieces; whatever it makes of them, no exception leaves the connection, the broker logs no
internal error, and a good client on the same broker is served after each."""

from harness_mqtt import Client, published
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hutch.core.broker import Broker
from hutch.core.limits import Limits
from hutch.mqtt import packets
from hutch.mqtt.packets import V5, V311


def session(level):
    """A well-formed session's packets, in order."""
    props = {packets.USER_PROPERTY: [(b"k", b"v")], packets.TOPIC_ALIAS: 1} if level == V5 else None
    return [
        packets.connect(b"fuzz", clean=False, keep_alive=30, user=b"guest", password=b"guest", level=level,
                        will=(b"status/fuzz", b"gone", 1, False)),
        packets.subscribe(1, [(b"fuzz/#", 1), (b"other/+/x", 0)], level),
        packets.publish(b"fuzz/a", b"payload", 1, packet_id=2, props=props, level=level),
        packets.publish(b"fuzz/b", b"x" * 300, 2, packet_id=3, level=level),
        packets.ack(packets.PUBREL, 3, level=level),
        packets.ack(packets.PUBACK, 1, level=level),
        packets.unsubscribe(4, [b"other/+/x"], level),
        bytes((0xC0, 0)),
        bytes((0xE0, 0)),
    ]  # fmt: skip


def mutated(data, edits):
    data = bytearray(data)
    for kind, where, octet in edits:
        if not data:
            break
        i = where % len(data)
        if kind == 0:
            data[i] ^= octet or 1
        elif kind == 1:
            del data[i]
        else:
            data.insert(i, octet)
    return bytes(data)


EDITS = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 1 << 16), st.integers(0, 255)), max_size=6)


def errors_of(broker):
    said = []
    broker.log = lambda level, line, exc=None: said.append((level, line)) if level == "error" else None
    return said


def still_serves(broker):
    good = Client(broker)
    assert [p.name for p in good.connect(b"good")] == ["CONNACK"]
    good.subscribe(1, b"check", qos=0)
    out = good.publish(b"check", b"ok")
    assert [published(p)[:2] for p in out] == [(b"check", b"ok")]
    good.conn.lost()


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    level=st.sampled_from([V311, V5]),
    edits=EDITS,
    which=st.integers(0, 8),
    cuts=st.lists(st.integers(1, 64), max_size=8),
)
def test_mutated_sessions_cost_one_connection(level, edits, which, cuts):
    broker = Broker(Limits())
    said = errors_of(broker)
    packets_ = session(level)
    packets_[which] = mutated(packets_[which], edits)
    data = b"".join(packets_)
    bad = Client(broker, level=level)
    pos = 0
    for cut in cuts + [len(data)]:  # in pieces, as a network delivers them
        bad.conn.feed(data[pos : pos + cut])
        bad.read()
        pos += cut
        if pos >= len(data):
            break
    bad.conn.eof()
    broker.tick(broker.now + 120_000)
    assert said == []
    still_serves(broker)


@settings(max_examples=200)
@given(st.binary(max_size=400))
def test_random_octets_after_connect(noise):
    broker = Broker(Limits())
    said = errors_of(broker)
    c = Client(broker, level=V5)
    c.connect(b"noise")
    c.conn.feed(noise)
    c.read()
    c.conn.eof()
    assert said == []
    still_serves(broker)


@settings(max_examples=200)
@given(st.binary(max_size=64))
def test_the_packet_readers_raise_only_malformed(body):
    for level in (V311, V5):
        for read in (
            lambda: packets.Connect(body, 0, len(body)),
            lambda level=level: packets.read_publish(0x32, body, 0, len(body), level),
            lambda level=level: packets.read_subscribe(body, 0, len(body), level),
            lambda level=level: packets.read_unsubscribe(body, 0, len(body), level),
            lambda: packets.read_properties(body, 0, len(body)),
            lambda: packets.split(body, 0, 1 << 20),
        ):
            try:
                read()
            except packets.Malformed:
                pass
