"""The broker's protocol-neutral surface (Broker.publish, consume, delivered, settle), driven
as a front end that is not a 0-9-1 channel drives it: the bridge, an AMQP 1.0 link. Its
session and publisher here are the few methods the broker asks of one, nothing more."""

import struct

from harness import names, opened

from hutch.codec import spec
from hutch.codec.wire import encode_properties, shortstr, tail
from hutch.core.broker import ACCEPT, HELD, JOURNALLED, REFUSED, REJECT, REQUEUE, ROUTED, Broker
from hutch.core.limits import Limits
from hutch.core.message import Message
from hutch.core.queue import Consumer
from hutch.core.topology import bind, declare_exchange, declare_queue, delete_queue


def message(routing_key, body, exchange=b"", properties=None):
    header = struct.pack(">HHQ", 60, 0, len(body)) + encode_properties(properties or {})
    route = shortstr(exchange) + shortstr(routing_key)
    return Message(exchange, routing_key, route, tail(header), tail(body) if body else None, len(body))


class Session:
    """What a queue's consumer needs of whoever serves it."""

    prefetch_global = 0
    consumer_unacked = 0
    stats = None  # (its counters: the broker's own)

    def __init__(self, broker):
        self.broker = broker
        self.open = True
        self.delivered = []  # (queue, entry)
        self.cancelled = []

    def can_deliver(self):
        return self.open

    def deliver(self, consumer, queue, entry):
        self.broker.delivered(queue, entry, consumer.no_ack)
        consumer.unacked += 0 if consumer.no_ack else 1
        self.delivered.append((queue, entry))

    def server_cancel(self, consumer):
        self.cancelled.append(consumer.tag)
        self.broker.cancel(consumer)


class Publisher:
    stats = None  # (its counters: the broker's own)

    def __init__(self, confirming, keeps=True):
        self.confirming = confirming
        self.keeps = keeps  # whether it keeps a publish a full queue holds back (a transaction's commit does not)
        self.held_for = []

    def hold_for(self, queue):
        self.held_for.append(queue.name)
        return self.keeps


def bodies(session):
    return [bytes(entry[0].body()) for _, entry in session.delivered]


def consume(broker, queue, no_ack=False, prefetch=0):
    session = Session(broker)
    consumer = Consumer(session, b"c1", queue, no_ack, False, prefetch)
    broker.consume(None, queue, consumer, spec.BASIC_CONSUME)
    queue.dispatch()
    return session, consumer


def test_publish_routes_and_a_session_consumes_and_settles():
    broker = Broker(Limits())
    queue = declare_queue(broker, None, b"q")
    publisher = Publisher(confirming=True)
    for i in range(3):
        assert broker.publish(broker.default_exchange, message(b"q", b"m%d" % i), publisher) == ROUTED
    assert broker.publish(broker.default_exchange, message(b"nowhere", b"lost"), publisher) == 0
    assert broker.flow.held_messages == 3
    session, consumer = consume(broker, queue)
    assert bodies(session) == [b"m0", b"m1", b"m2"]
    broker.settle(queue, [entry for _, entry in session.delivered], ACCEPT, None)
    assert broker.flow.held_messages == 0 and queue.message_count() == 0


def test_requeue_puts_back_at_the_head_redelivered_and_reject_dead_letters():
    broker = Broker(Limits())
    dead = declare_queue(broker, None, b"dead")
    declare_exchange(broker, None, b"dlx", b"fanout")
    bind(broker, None, b"dlx", b"dead", b"", {}, spec.QUEUE_BIND, to_queue=True)
    queue = declare_queue(broker, None, b"q", arguments={"x-dead-letter-exchange": "dlx"})
    for i in range(2):
        broker.publish(broker.default_exchange, message(b"q", b"m%d" % i), Publisher(False))
    session, consumer = consume(broker, queue)
    first, second = [entry for _, entry in session.delivered]
    session.open = False  # as a link that has no credit: nothing is delivered meanwhile
    broker.settle(queue, [first, second], REQUEUE, None)
    assert queue.message_count() == 2
    session.open = True
    session.delivered = []
    queue.dispatch()
    assert bodies(session) == [b"m0", b"m1"] and [entry[1] for _, entry in session.delivered] == [True, True]
    broker.settle(queue, [session.delivered[0][1]], REJECT, None)
    assert dead.message_count() == 1
    death = dead.messages.peek()[0].properties()["headers"]["x-death"][0]
    assert death["reason"] == b"rejected" and death["queue"] == b"q"


def test_flow_control_asks_the_publisher():
    broker = Broker(Limits(queue_max_messages=1))
    queue = declare_queue(broker, None, b"q")
    declare_queue(broker, None, b"capped", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    confirming, plain = Publisher(True), Publisher(False)
    assert broker.publish(broker.default_exchange, message(b"q", b"1"), plain) == ROUTED
    assert broker.publish(broker.default_exchange, message(b"q", b"2"), plain) == HELD  # nothing of it taken
    assert plain.held_for == [b"q"] and queue.message_count() == 1
    committing = Publisher(False, keeps=False)
    assert broker.publish(broker.default_exchange, message(b"q", b"2"), committing) == ROUTED  # taken, then held back
    assert committing.held_for == [b"q"] and queue.message_count() == 2
    assert broker.publish(broker.default_exchange, message(b"q", b"3"), confirming) == ROUTED | REFUSED
    assert broker.publish(broker.default_exchange, message(b"capped", b"1"), confirming) == ROUTED
    assert broker.publish(broker.default_exchange, message(b"capped", b"2"), confirming) == ROUTED | REFUSED
    broker.flow.set_alarm("memory", "low on memory: test")
    declare_queue(broker, None, b"other")
    assert broker.publish(broker.default_exchange, message(b"other", b"x"), confirming) == ROUTED | REFUSED
    assert not broker.publish(broker.default_exchange, message(b"other", b"x"), confirming) & JOURNALLED


def test_a_message_published_by_another_front_end_reaches_a_0_9_1_consumer():
    client = opened()
    client.queue(1, b"q")
    client.consume(1, b"q", tag=b"ctag", no_ack=True)
    broker = client.broker
    result = broker.publish(
        broker.default_exchange, message(b"q", b"from the bridge", properties={"app-id": b"up"}), None
    )
    assert result == ROUTED
    events = client.read()
    assert names(events) == ["basic.deliver"] and events[0].body == b"from the bridge"
    assert events[0].properties["app-id"] == b"up"
    assert broker.flow.held_messages == 0  # delivered without an ack to wait for: gone


def test_deleting_a_queue_cancels_its_consumers_through_their_session():
    broker = Broker(Limits())
    queue = declare_queue(broker, None, b"q")
    consume(broker, queue)
    session = queue.consumers[0].session
    delete_queue(broker, queue)
    assert session.cancelled == [b"c1"] and broker.consumer_count == 0


def test_persistent_is_read_past_the_properties_before_delivery_mode():
    """Message.persistent() steps over content type, encoding and a headers table by their
    lengths; it says what the decoded properties say, whatever is set."""
    cases = [
        {},
        {"delivery-mode": 2},
        {"delivery-mode": 1},
        {"content-type": b"application/json", "delivery-mode": 2},
        {"content-encoding": b"gzip", "delivery-mode": 1},
        {"headers": {"x-mqtt-publish-qos": 1, "x-mqtt-dup": False, "unit": b"C" * 300}, "delivery-mode": 2},
        {"content-type": b"t", "content-encoding": b"e", "headers": {"k": 2}, "delivery-mode": 2, "priority": 2},
        {"content-type": b"t", "headers": {"k": 1}, "delivery-mode": 1, "expiration": b"2"},
        {"headers": {}, "priority": 2},
    ]
    for properties in cases:
        m = message(b"k", b"body", properties=properties)
        assert m.persistent() == (m.properties().get("delivery-mode") == 2), properties
