"""kombu with the py-amqp transport (`pyamqp`) against the real `hutch serve`.

Covers: Producer/Consumer round trips with kombu's serializers and
drain_events with timeouts; SimpleQueue put/get/ack and its Empty timeout;
direct, fanout, topic and headers exchanges declared through kombu's entities;
queue message TTL, per-message expiration and dead-lettering of expired and
rejected messages; x-max-length; requeue through message.requeue(); publisher
confirms (py-amqp's confirm_publish) with a broker nack; channel errors with
py-amqp's exceptions and reply codes (404, 406).
"""

import socket
import time

import amqp
import amqp.exceptions
import pytest
from brokers import wait_until
from kombu import Connection, Consumer, Exchange, Producer, Queue

# A blocking client waits for ever for a reply that never comes: fail the test instead.
pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def conn(broker):
    url = "pyamqp://guest:guest@127.0.0.1:%d//" % broker.port
    with Connection(url, connect_timeout=5, transport_options={"confirm_publish": False}) as connection:
        connection.connect()
        yield connection


def drain(connection, received, count, timeout=5):
    """drain_events until `count` messages arrived in `received`, each wait bounded."""
    deadline = time.monotonic() + timeout
    while len(received) < count:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError("got %d of %d messages within %ss" % (len(received), count, timeout))
        try:
            connection.drain_events(timeout=min(left, 0.5))
        except socket.timeout:
            pass


def get_all(connection, queue, limit=100):
    """Every message queue holds right now (basic.get, acked): [payload]."""
    bound = queue(connection.default_channel)
    out = []
    for _ in range(limit):
        message = bound.get(no_ack=True)
        if message is None:
            return out
        out.append(message.payload)
    raise AssertionError("queue still not empty after %d gets" % limit)


def test_transport_is_py_amqp(conn):
    assert type(conn.transport).__module__ == "kombu.transport.pyamqp"
    assert isinstance(conn.connection, amqp.Connection) and conn.connected
    # the broker told py-amqp what it can do
    server = conn.connection.server_properties
    assert server["product"] == "hutch"
    assert server["capabilities"]["publisher_confirms"] is True


def test_producer_consumer_round_trip(conn):
    exchange = Exchange("k.tasks", "direct", durable=True)
    queue = Queue("k.tasks.q", exchange, routing_key="job", durable=True)
    producer = Producer(conn.channel(), exchange, serializer="json")
    producer.declare()
    queue(conn.default_channel).declare()
    for i in range(20):
        producer.publish(
            {"n": i, "text": "job %d" % i, "nested": [i, {"sq": i * i}]}, routing_key="job", headers={"attempt": 1}
        )
    received = []

    def on_message(body, message):
        received.append((body, message.headers, message.content_type, message.delivery_info["redelivered"]))
        message.ack()

    with Consumer(conn.default_channel, [queue], callbacks=[on_message], prefetch_count=5):
        drain(conn, received, 20)
    assert [r[0] for r in received] == [{"n": i, "text": "job %d" % i, "nested": [i, {"sq": i * i}]} for i in range(20)]
    assert all(r[1] == {"attempt": 1} and r[2] == "application/json" and r[3] is False for r in received)
    assert get_all(conn, queue) == []


def test_drain_events_times_out_when_idle(conn):
    queue = Queue("k.idle", routing_key="k.idle")
    with Consumer(conn.default_channel, [queue], callbacks=[lambda body, m: m.ack()]):
        started = time.monotonic()
        with pytest.raises(socket.timeout):
            conn.drain_events(timeout=0.3)
        assert time.monotonic() - started < 2


def test_simple_queue(conn):
    sq = conn.SimpleQueue("k.simple")
    for i in range(5):
        sq.put({"i": i}, serializer="json")
    assert sq.qsize() == 5
    got = []
    for _ in range(5):
        message = sq.get(block=True, timeout=5)
        got.append(message.payload)
        message.ack()
    assert got == [{"i": i} for i in range(5)]
    with pytest.raises(sq.Empty):
        sq.get(block=True, timeout=0.3)
    sq.put("requeue me", serializer="json")
    message = sq.get(timeout=5)
    message.requeue()  # basic.reject with requeue
    again = sq.get(timeout=5)
    assert again.payload == "requeue me" and again.delivery_info["redelivered"] is True
    again.ack()
    assert sq.qsize() == 0
    sq.close()


def test_pickle_and_raw_bodies(conn):
    queue = Queue("k.raw", routing_key="k.raw")
    producer = Producer(conn.default_channel)
    queue(conn.default_channel).declare()
    producer.publish(
        b"\x00\xffbinary\xce", routing_key="k.raw", content_type="application/octet-stream", content_encoding="binary"
    )
    producer.publish({1, 2, 3}, routing_key="k.raw", serializer="pickle")
    received = []
    conn_consumer = Consumer(
        conn.default_channel,
        [queue],
        accept=["pickle", "application/octet-stream"],
        callbacks=[lambda body, m: (received.append(body), m.ack())],
    )
    with conn_consumer:
        drain(conn, received, 2)
    assert received == [b"\x00\xffbinary\xce", {1, 2, 3}]


def test_exchange_types(conn):
    channel = conn.default_channel
    fanout = Exchange("k.fan", "fanout")
    topic = Exchange("k.topic", "topic")
    headers = Exchange("k.headers", "headers")
    queues = {
        "fan.a": Queue("k.fan.a", fanout),
        "fan.b": Queue("k.fan.b", fanout),
        "topic": Queue("k.topic.q", topic, routing_key="eu.*.temp"),
        "headers": Queue("k.headers.q", headers, binding_arguments={"x-match": "all", "type": "alarm"}),
    }
    for q in queues.values():
        q(channel).declare()
    producer = Producer(channel, serializer="json")
    producer.publish("to all", exchange=fanout, routing_key="whatever")
    for key in ("eu.berlin.temp", "us.nyc.temp", "eu.paris.wind"):
        producer.publish(key, exchange=topic, routing_key=key)
    producer.publish("alarm", exchange=headers, headers={"type": "alarm", "zone": 3})
    producer.publish("info", exchange=headers, headers={"type": "info"})
    assert get_all(conn, queues["fan.a"]) == ["to all"]
    assert get_all(conn, queues["fan.b"]) == ["to all"]
    assert get_all(conn, queues["topic"]) == ["eu.berlin.temp"]
    assert get_all(conn, queues["headers"]) == ["alarm"]


def test_message_ttl_and_dead_lettering(conn):
    channel = conn.default_channel
    dlx = Exchange("k.dlx", "direct")
    dead = Queue("k.dead", dlx, routing_key="expired")
    dead(channel).declare()
    short = Queue(
        "k.short",
        routing_key="k.short",
        message_ttl=0.3,
        queue_arguments={"x-dead-letter-exchange": "k.dlx", "x-dead-letter-routing-key": "expired"},
    )
    short(channel).declare()
    producer = Producer(channel, serializer="json")
    producer.publish("soon gone", routing_key="k.short")
    producer.publish("gone sooner", routing_key="k.short", expiration=0.1)
    # look at the dead-letter queue only, until both are there (the broker checks TTLs a few
    # times a second): nothing touches k.short, so only the broker's own expiry (not a
    # basic.get skipping stale entries) can have moved them
    dead_bound = dead(channel)
    got = []

    def both_dead_lettered():
        message = dead_bound.get(no_ack=True)
        if message is not None:
            got.append(message)
        return len(got) == 2

    wait_until(both_dead_lettered, 5, what="both expired messages dead-lettered")
    assert len(got) == 2 and None not in got, "expired message was not dead-lettered"
    assert sorted(m.payload for m in got) == ["gone sooner", "soon gone"]
    assert get_all(conn, short) == []
    death = got[0].headers["x-death"][0]
    assert death["reason"] == "expired" and death["queue"] == "k.short" and death["count"] == 1


def test_rejected_message_is_dead_lettered(conn):
    channel = conn.default_channel
    Queue("k.rejects", routing_key="k.rejects")(channel).declare()
    work = Queue(
        "k.work",
        routing_key="k.work",
        queue_arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "k.rejects"},
    )
    work(channel).declare()
    Producer(channel, serializer="json").publish({"bad": True}, routing_key="k.work")
    message = work(channel).get()
    message.reject()  # requeue=False: dead-lettered
    dead = Queue("k.rejects")(channel).get(no_ack=True)
    assert dead is not None and dead.payload == {"bad": True}
    assert dead.headers["x-death"][0]["reason"] == "rejected"


def test_max_length_drops_oldest(conn):
    queue = Queue("k.bounded", routing_key="k.bounded", max_length=3)
    queue(conn.default_channel).declare()
    producer = Producer(conn.default_channel, serializer="json")
    for i in range(6):
        producer.publish(i, routing_key="k.bounded")
    assert get_all(conn, queue) == [3, 4, 5]


def test_confirm_publish_gets_nack_from_full_queue(broker):
    url = "pyamqp://guest:guest@127.0.0.1:%d//" % broker.port
    with Connection(url, connect_timeout=5, transport_options={"confirm_publish": True}) as connection:
        queue = Queue("k.full", routing_key="k.full", max_length=1, queue_arguments={"x-overflow": "reject-publish"})
        queue(connection.default_channel).declare()
        producer = Producer(connection.default_channel, serializer="json")
        producer.publish("fits", routing_key="k.full")  # waits for basic.ack
        with pytest.raises(amqp.exceptions.MessageNacked):
            producer.publish("does not fit", routing_key="k.full")
        assert get_all(connection, queue) == ["fits"]


def test_channel_errors_have_reply_codes(conn):
    channel = conn.channel()
    with pytest.raises(amqp.exceptions.NotFound) as e:
        channel.queue_declare("k.missing", passive=True)
    assert e.value.reply_code == 404
    channel = conn.channel()
    channel.exchange_declare("k.ex", "direct")
    with pytest.raises(amqp.exceptions.PreconditionFailed) as e:
        channel.exchange_declare("k.ex", "topic")
    assert e.value.reply_code == 406
    # the connection is still fine
    assert conn.SimpleQueue("k.after-errors").qsize() == 0
