"""Which consumer a queue serves: consumer priorities (x-priority) and single active consumer
(x-single-active-consumer), with RabbitMQ's refusals of bad values."""

from harness import closed_with, names, opened

from hutch.codec import spec


def _deliveries(events):
    """(consumer tag, body) of each basic.deliver, in order."""
    return [(e.args[0], e.body) for e in events if e.name == "basic.deliver"]


def _publish(client, queue, count, first=0, ch=1):
    out = []
    for i in range(first, first + count):
        out += client.publish(ch, b"", queue, b"m%d" % i)
    return out


def test_higher_priority_consumers_are_served_first_and_equals_in_turn():
    client = opened()
    client.queue(1, b"q")
    client.call(1, spec.BASIC_QOS, (0, 2, False))
    for tag, priority in ((b"low", -1), (b"a5", 5), (b"zero", 0), (b"b5", 5)):
        client.consume(1, b"q", tag=tag, arguments={"x-priority": priority})
    events = _publish(client, b"q", 10)
    assert _deliveries(events) == [
        (b"a5", b"m0"),
        (b"b5", b"m1"),
        (b"a5", b"m2"),
        (b"b5", b"m3"),
        (b"zero", b"m4"),
        (b"zero", b"m5"),
        (b"low", b"m6"),
        (b"low", b"m7"),
    ]
    events = client.ack(1, 1) + client.ack(1, 3)  # a5's two: it is served again first
    assert _deliveries(events) == [(b"a5", b"m8"), (b"a5", b"m9")]


def test_a_consumer_without_priority_is_priority_zero():
    client = opened()
    client.queue(1, b"q")
    client.consume(1, b"q", tag=b"plain")
    client.consume(1, b"q", tag=b"below", arguments={"x-priority": -5})
    client.consume(1, b"q", tag=b"zero", arguments={"x-priority": 0})
    # no prefetch: the first of priority 0 and its equal in turn; -5 never
    assert _deliveries(_publish(client, b"q", 3)) == [(b"plain", b"m0"), (b"zero", b"m1"), (b"plain", b"m2")]


def test_x_priority_must_be_an_integer():
    for value, kind in ((b"5", b"longstr"), (True, b"bool"), ({}, b"table")):
        client = opened()
        client.queue(1, b"q")
        text = closed_with(client.consume(1, b"q", arguments={"x-priority": value}), spec.PRECONDITION_FAILED)
        assert text == b"PRECONDITION_FAILED - invalid arg 'x-priority' for queue 'q' in vhost '/': " + (
            b'"expected integer, got %s"' % kind
        )
    client = opened()
    client.queue(1, b"q")
    assert names(client.consume(1, b"q", arguments={"x-priority": 1 << 40}))[0] == "basic.consume-ok"


SAC = {"x-single-active-consumer": True}


def test_only_the_first_consumer_of_a_single_active_consumer_queue_is_served():
    client = opened()
    client.queue(1, b"q", arguments=SAC)
    client.call(1, spec.BASIC_QOS, (0, 1, False))
    client.consume(1, b"q", tag=b"first")
    client.consume(1, b"q", tag=b"urgent", arguments={"x-priority": 10})  # no matter while first is here
    assert _deliveries(_publish(client, b"q", 3)) == [(b"first", b"m0")]
    assert client.get(1, b"q", no_ack=True)[0].body == b"m1"  # basic.get still takes from it
    events = client.ack(1, 1)
    assert _deliveries(events) == [(b"first", b"m2")]


def test_the_highest_priority_takes_over_with_the_messages_requeued_first():
    client = opened()
    client.queue(1, b"q", arguments=SAC)
    client.call(1, spec.BASIC_QOS, (0, 2, False))
    client.consume(1, b"q", tag=b"a")
    other = opened(client.broker)
    other.call(1, spec.BASIC_QOS, (0, 2, False))
    other.consume(1, b"q", tag=b"b")
    other.consume(1, b"q", tag=b"c", arguments={"x-priority": 3})
    _publish(client, b"q", 4)
    client.call(1, spec.CHANNEL_CLOSE, (200, b"", 0, 0))  # a's m0 and m1 back, c takes over
    events = other.read()
    assert [(tag, body, e.args[2]) for (tag, body), e in zip(_deliveries(events), events)] == [
        (b"c", b"m0", True),
        (b"c", b"m1", True),
    ]


def test_a_cancelled_single_active_consumer_hands_over_at_once():
    """As RabbitMQ 4 does (3.10 serves no one, and its queue process crashes at the next
    publish: tests/interop/compat/test_compat_queues.py)."""
    client = opened()
    client.queue(1, b"q", arguments=SAC)
    client.call(1, spec.BASIC_QOS, (0, 1, False))
    client.consume(1, b"q", tag=b"a")
    client.consume(1, b"q", tag=b"b")
    _publish(client, b"q", 3)
    events = client.call(1, spec.BASIC_CANCEL, (b"a", False))
    assert names(events) == ["basic.cancel-ok", "basic.deliver"]
    assert _deliveries(events) == [(b"b", b"m1")]  # a keeps m0 until it acks or its channel closes


def test_no_exclusive_consumer_on_a_single_active_consumer_queue():
    client = opened()
    client.queue(1, b"q", arguments=SAC)
    text = closed_with(client.consume(1, b"q", exclusive=True), spec.ACCESS_REFUSED)
    assert text == b"ACCESS_REFUSED - queue 'q' in vhost '/' in exclusive use"


def test_queue_arguments_of_the_ordering_items_are_checked_in_rabbitmqs_words():
    cases = (
        ({"x-max-priority": 256}, b"{max_value_exceeded,256}"),
        ({"x-max-priority": -1}, b"{value_negative,-1}"),
        ({"x-max-priority": "5"}, b'"expected integer, got longstr"'),
        ({"x-max-priority": True}, b'"expected integer, got bool"'),
        ({"x-single-active-consumer": "yes"}, b"{unacceptable_type,longstr}"),
        ({"x-single-active-consumer": 1}, b"{unacceptable_type,signedint}"),
    )
    for arguments, why in cases:
        client = opened()
        text = closed_with(client.declare_queue(1, b"q", arguments=arguments), spec.PRECONDITION_FAILED)
        key = list(arguments)[0].encode()
        assert text == b"PRECONDITION_FAILED - invalid arg '%s' for queue 'q' in vhost '/': %s" % (key, why)


def test_a_redeclare_must_repeat_them():
    cases = (
        ({"x-max-priority": 5}, {}, b"received none but current is the value '5' of type 'signedint'"),
        ({"x-max-priority": 5}, {"x-max-priority": 6}, b"received '6' but current is '5'"),
        ({}, {"x-max-priority": 5}, b"received the value '5' of type 'signedint' but current is none"),
        (SAC, {}, b"received none but current is the value 'true' of type 'bool'"),
        (SAC, {"x-single-active-consumer": False}, b"received 'false' but current is 'true'"),
        ({"x-max-priority": 5}, {"x-max-priority": "5"}, b"received '5' but current is '5'"),  # (types differ)
    )
    for first, again, words in cases:
        client = opened()
        client.queue(1, b"q", arguments=first)
        text = closed_with(client.declare_queue(1, b"q", arguments=again), spec.PRECONDITION_FAILED)
        key = list(first or again)[0].encode()
        assert text == b"PRECONDITION_FAILED - inequivalent arg '%s' for queue 'q' in vhost '/': %s" % (key, words)
