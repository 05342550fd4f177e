"""Direct reply-to (amqp091/replyto.py): the pseudo-queue amq.rabbitmq.reply-to, with RabbitMQ's
rules and words."""

from harness import closed_with, names, opened

from hutch.amqp091.connection import serving_of
from hutch.amqp091.handshake import CAPABILITIES
from hutch.codec import spec

PSEUDO = b"amq.rabbitmq.reply-to"


def _requester():
    """A client whose channel 1 has a reply consumer, and a server queue for its requests."""
    client = opened()
    assert client.consume(1, PSEUDO, tag=b"replies", no_ack=True)[0].args == [b"replies"]
    client.queue(1, b"requests")
    return client


def _reply_name(client):
    """Publish a request with reply_to = the pseudo-queue; return the name the broker gave it."""
    client.publish(1, b"", b"requests", b"ping", {"reply-to": PSEUDO, "correlation-id": b"c1"})
    request = client.get(1, b"requests", no_ack=True)[0]
    assert request.properties["correlation-id"] == b"c1"
    return request.properties["reply-to"]


def test_reply_goes_straight_to_the_requester():
    requester = _requester()
    name = _reply_name(requester)
    assert name.startswith(PSEUDO + b".") and len(name) > len(PSEUDO) + 1
    server = opened(requester.broker)
    assert server.publish(1, b"", name, b"pong", {"correlation-id": b"c1"}) == []
    replies = requester.read()
    assert [(e.channel, e.name) for e in replies] == [(1, "basic.deliver")]
    tag, delivery_tag, redelivered, exchange, routing_key = replies[0].args
    assert (tag, redelivered, exchange, routing_key) == (b"replies", False, b"", name)
    assert replies[0].body == b"pong" and replies[0].properties["correlation-id"] == b"c1"
    # RabbitMQ 3.10 hands a reply the channel's next delivery tag without taking it (the get
    # above took 1): the next delivery of any kind has the same tag
    assert delivery_tag == 2
    server.publish(1, b"", name, b"again")
    assert requester.read()[0].args[1] == 2
    assert b"amq.rabbitmq.reply-to" not in requester.broker.queues  # nothing was queued


def test_mandatory_reply_comes_back_as_in_rabbitmq_3_10():
    """A reply is routed to no queue: mandatory returns it (312) though it was delivered."""
    requester = _requester()
    name = _reply_name(requester)
    server = opened(requester.broker)
    events = server.publish(1, b"", name, b"pong", mandatory=True)
    assert names(events) == ["basic.return"] and events[0].args[:2] == [spec.NO_ROUTE, b"NO_ROUTE"]
    assert names(requester.read()) == ["basic.deliver"]


def test_reply_to_a_gone_requester_is_dropped():
    requester = _requester()
    name = _reply_name(requester)
    assert names(requester.call(1, spec.CHANNEL_CLOSE, (200, b"", 0, 0))) == ["channel.close-ok"]
    server = opened(requester.broker)
    assert names(server.publish(1, b"", name, b"late", mandatory=True)) == ["basic.return"]
    assert requester.read() == []
    assert not serving_of(requester.broker).reply_channels


def test_cancel_ends_the_reply_consumer():
    requester = _requester()
    assert requester.call(1, spec.BASIC_CANCEL, (b"replies", False))[0].args == [b"replies"]
    events = requester.publish(1, b"", b"requests", b"ping", {"reply-to": PSEUDO})
    text = closed_with(events, spec.PRECONDITION_FAILED)
    assert text == b"PRECONDITION_FAILED - fast reply consumer does not exist"


def test_misuse_gets_rabbitmq_errors():
    client = opened()
    text = closed_with(client.consume(1, PSEUDO, no_ack=False), spec.PRECONDITION_FAILED)
    assert text == b"PRECONDITION_FAILED - reply consumer cannot acknowledge"
    client.channel(2)
    client.consume(2, PSEUDO, no_ack=True)
    text = closed_with(client.consume(2, PSEUDO, no_ack=True), spec.PRECONDITION_FAILED)
    assert text == b"PRECONDITION_FAILED - reply consumer already set"
    client.channel(3)
    client.queue(3, b"q")
    events = client.publish(3, b"", b"q", b"x", {"reply-to": PSEUDO})  # no reply consumer on channel 3
    assert closed_with(events, spec.PRECONDITION_FAILED) == b"PRECONDITION_FAILED - fast reply consumer does not exist"
    client.channel(4)
    client.consume(4, b"q", tag=b"t", no_ack=True)
    text = closed_with(client.consume(4, PSEUDO, tag=b"t", no_ack=True), spec.NOT_ALLOWED, "connection.close")
    assert text == b"NOT_ALLOWED - attempt to reuse consumer tag 't'"


def test_declaring_the_pseudo_queue_and_reply_names():
    requester = _requester()
    name = _reply_name(requester)
    other = opened(requester.broker)
    for queue, passive in ((PSEUDO, True), (PSEUDO, False), (name, True), (name, False)):
        events = other.declare_queue(1, queue, passive=passive)
        assert names(events) == ["queue.declare-ok"] and events[0].args == [queue, 0, 1], events
    for queue in (PSEUDO + b".unknown", PSEUDO + b"x"):
        text = closed_with(other.declare_queue(1, queue), spec.NOT_FOUND)
        assert text == b"NOT_FOUND - no queue '%s' in vhost '/'" % queue
        other.reopen(1)
    text = closed_with(other.get(1, PSEUDO), spec.NOT_FOUND)  # no queue behind the name
    assert text == b"NOT_FOUND - no queue 'amq.rabbitmq.reply-to' in vhost '/'"


def test_request_under_a_transaction_is_rewritten_at_publish():
    requester = _requester()
    requester.call(1, spec.TX_SELECT)
    requester.publish(1, b"", b"requests", b"ping", {"reply-to": PSEUDO})
    assert names(requester.call(1, spec.TX_COMMIT)) == ["tx.commit-ok"]
    request = requester.get(1, b"requests", no_ack=True)[0]
    assert request.properties["reply-to"].startswith(PSEUDO + b".")


def test_advertised():
    assert CAPABILITIES["direct_reply_to"] is True
