"""queue.declare/bind/purge/delete, exclusivity, auto-delete and the queue arguments."""

from harness import Client, closed_with, names, opened

from hutch.codec import spec


def _count(client, ch, queue):
    return client.declare_queue(ch, queue, passive=True)[0].args[1]


def test_declare_ok_counts():
    client = opened()
    assert client.declare_queue(1, b"q")[0].args == [b"q", 0, 0]
    client.publish(1, b"", b"q", b"one")
    client.publish(1, b"", b"q", b"two")
    client.consume(1, b"q", tag=b"c")  # both messages go to the consumer (no prefetch limit)
    assert client.declare_queue(1, b"q")[0].args[1:] == [0, 1]


def test_server_named_queues_are_unique():
    client = opened()
    first = client.queue(1)
    second = client.queue(1)
    assert first.startswith(b"amq.gen-") and second.startswith(b"amq.gen-") and first != second


def test_passive_declare():
    client = opened()
    client.queue(1, b"q")
    assert names(client.declare_queue(1, b"q", passive=True)) == ["queue.declare-ok"]
    text = closed_with(client.declare_queue(1, b"nope", passive=True), spec.NOT_FOUND)
    assert text == b"NOT_FOUND - no queue 'nope' in vhost '/'"


def test_reserved_prefix():
    client = opened()
    closed_with(client.declare_queue(1, b"amq.mine"), spec.ACCESS_REFUSED)


def test_redeclare_inequivalent():
    for change in ({"durable": True}, {"auto_delete": True}, {"arguments": {"x-message-ttl": 5}}):
        client = opened()
        client.queue(1, b"q")
        text = closed_with(client.declare_queue(1, b"q", **change), spec.PRECONDITION_FAILED)
        assert b"inequivalent arg" in text


def test_durable_flag_is_kept():
    client = opened()
    client.queue(1, b"d", durable=True)
    assert client.broker.queues[b"d"].durable
    assert names(client.declare_queue(1, b"d", durable=True)) == ["queue.declare-ok"]


def test_unknown_arguments_are_kept_not_compared():
    client = opened()
    client.queue(1, b"q", arguments={"x-custom": 1})
    assert names(client.declare_queue(1, b"q", arguments={"x-custom": 2})) == ["queue.declare-ok"]


def test_unsupported_and_invalid_arguments():
    client = opened()
    text = closed_with(client.declare_queue(1, b"q", arguments={"x-delivery-limit": 10}), spec.PRECONDITION_FAILED)
    assert b"not supported" in text
    client.channel(2)
    closed_with(client.declare_queue(2, b"q", arguments={"x-message-ttl": -1}), spec.PRECONDITION_FAILED)
    client.channel(3)
    closed_with(client.declare_queue(3, b"q", arguments={"x-overflow": "explode"}), spec.PRECONDITION_FAILED)
    client.channel(4)
    closed_with(client.declare_queue(4, b"q", arguments={"x-queue-type": "quorum"}), spec.PRECONDITION_FAILED)


def test_exclusive_queue_is_locked_to_its_connection():
    owner = opened()
    owner.queue(1, b"mine", exclusive=True)
    other = opened(owner.broker)
    for action in (
        lambda: other.declare_queue(1, b"mine", exclusive=True),
        lambda: other.declare_queue(1, b"mine", passive=True),
        lambda: other.consume(1, b"mine"),
        lambda: other.get(1, b"mine"),
        lambda: other.bind(1, b"mine", b"amq.fanout"),
        lambda: other.call(1, spec.QUEUE_PURGE, (0, b"mine", False)),
        lambda: other.call(1, spec.QUEUE_DELETE, (0, b"mine", False, False, False)),
    ):
        closed_with(action(), spec.RESOURCE_LOCKED)
        other.reopen(1)


def test_exclusive_queue_goes_with_its_connection():
    owner = opened()
    owner.queue(1, b"mine", exclusive=True)
    owner.call(0, spec.CONNECTION_CLOSE, (200, b"", 0, 0))
    assert b"mine" not in owner.broker.queues


def test_exclusive_queue_goes_when_connection_is_lost():
    owner = opened()
    owner.queue(1, b"mine", exclusive=True)
    owner.conn.lost()
    assert b"mine" not in owner.broker.queues


def test_auto_delete_after_last_consumer():
    client = opened()
    client.queue(1, b"temp", auto_delete=True)
    client.consume(1, b"temp", tag=b"a")
    client.consume(1, b"temp", tag=b"b")
    client.call(1, spec.BASIC_CANCEL, (b"a", False))
    assert b"temp" in client.broker.queues
    client.call(1, spec.BASIC_CANCEL, (b"b", False))
    assert b"temp" not in client.broker.queues


def test_auto_delete_without_consumers_stays():
    client = opened()
    client.queue(1, b"temp", auto_delete=True)
    client.call(1, spec.CHANNEL_CLOSE, (200, b"", 0, 0))
    assert b"temp" in client.broker.queues


def test_purge():
    client = opened()
    client.queue(1, b"q")
    for _i in range(3):
        client.publish(1, b"", b"q", b"m")
    unacked = client.get(1, b"q")[0]
    assert client.expect(1, spec.QUEUE_PURGE, (0, b"q", False)).args == [2]
    # purge leaves delivered-but-unacknowledged messages alone
    client.call(1, spec.BASIC_REJECT, (unacked.args[0], True))
    assert _count(client, 1, b"q") == 1


def test_purge_missing_queue():
    client = opened()
    closed_with(client.call(1, spec.QUEUE_PURGE, (0, b"nope", False)), spec.NOT_FOUND)


def test_delete_if_unused_and_if_empty():
    client = opened()
    client.queue(1, b"q")
    client.consume(1, b"q", tag=b"c")
    closed_with(client.call(1, spec.QUEUE_DELETE, (0, b"q", True, False, False)), spec.PRECONDITION_FAILED)
    client.channel(2)
    client.queue(2, b"full")
    client.publish(2, b"", b"full", b"m")
    closed_with(client.call(2, spec.QUEUE_DELETE, (0, b"full", False, True, False)), spec.PRECONDITION_FAILED)
    client.channel(3)
    assert client.expect(3, spec.QUEUE_DELETE, (0, b"full", False, False, False)).args == [1]
    # deleting a queue that is not there succeeds with a count of 0, as in RabbitMQ
    assert client.expect(3, spec.QUEUE_DELETE, (0, b"full", False, False, False)).args == [0]


def test_delete_removes_bindings():
    client = opened()
    client.queue(1, b"q")
    client.bind(1, b"q", b"amq.fanout")
    client.call(1, spec.QUEUE_DELETE, (0, b"q", False, False, False))
    assert client.broker.exchange(b"amq.fanout").bindings == {}


def test_empty_name_means_last_declared_queue():
    client = opened()
    name = client.queue(1)
    client.bind(1, b"", b"amq.fanout")  # binds the server-named queue
    client.publish(1, b"amq.fanout", b"", b"m")
    assert client.get(1, b"", no_ack=True)[0].body == b"m"
    assert client.broker.queues[name].inbound


def test_empty_name_without_a_declared_queue():
    client = opened()
    closed_with(client.get(1, b""), spec.NOT_FOUND)


def test_queue_limit():
    from hutch.core.limits import Limits

    client = opened(limits=Limits(max_queues=2))
    client.queue(1, b"a")
    client.queue(1, b"b")
    text = closed_with(client.declare_queue(1, b"c"), spec.PRECONDITION_FAILED)
    assert b"queue limit" in text


def test_message_ttl():
    client = opened()
    client.queue(1, b"q", arguments={"x-message-ttl": 1000})
    client.tick(0)
    client.publish(1, b"", b"q", b"old")
    client.tick(600)
    client.publish(1, b"", b"q", b"new")
    client.tick(1100)
    assert _count(client, 1, b"q") == 1
    assert client.get(1, b"q", no_ack=True)[0].body == b"new"


def test_per_message_expiration():
    client = opened()
    client.queue(1, b"q")
    client.publish(1, b"", b"q", b"short", {"expiration": b"100"})
    client.publish(1, b"", b"q", b"long", {"expiration": b"100000"})
    client.tick(200)
    assert client.get(1, b"q", no_ack=True)[0].body == b"long"


def test_invalid_expiration():
    client = opened()
    client.queue(1, b"q")
    closed_with(client.publish(1, b"", b"q", b"x", {"expiration": b"soon"}), spec.PRECONDITION_FAILED)


def test_ttl_zero_delivers_only_to_a_waiting_consumer():
    client = opened()
    client.queue(1, b"q", arguments={"x-message-ttl": 0})
    client.publish(1, b"", b"q", b"nobody")
    client.tick(1)
    assert client.get(1, b"q")[0].name == "basic.get-empty"
    client.consume(1, b"q", tag=b"c", no_ack=True)
    events = client.publish(1, b"", b"q", b"someone")
    assert names(events) == ["basic.deliver"] and events[0].body == b"someone"


def test_queue_expires_when_unused():
    client = opened()
    client.queue(1, b"q", arguments={"x-expires": 1000})
    client.tick(900)
    client.declare_queue(1, b"q", arguments={"x-expires": 1000})  # a redeclare counts as use
    client.tick(1800)
    assert b"q" in client.broker.queues
    client.tick(2000)
    assert b"q" not in client.broker.queues


def test_max_length_drops_the_oldest():
    client = opened()
    client.queue(1, b"q", arguments={"x-max-length": 2})
    for body in (b"1", b"2", b"3"):
        client.publish(1, b"", b"q", body)
    assert [client.get(1, b"q", no_ack=True)[0].body for _ in range(2)] == [b"2", b"3"]


def test_max_length_bytes():
    client = opened()
    client.queue(1, b"q", arguments={"x-max-length-bytes": 10})
    for body in (b"aaaa", b"bbbb", b"cccc"):
        client.publish(1, b"", b"q", body)
    assert [client.get(1, b"q", no_ack=True)[0].body for _ in range(2)] == [b"bbbb", b"cccc"]


def test_reject_publish_overflow_nacks():
    client = opened()
    client.queue(1, b"q", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    client.expect(1, spec.CONFIRM_SELECT, (False,))
    assert names(client.publish(1, b"", b"q", b"1")) == ["basic.ack"]
    events = client.publish(1, b"", b"q", b"2")
    assert names(events) == ["basic.nack"] and events[0].args[0] == 2
    assert _count(client, 1, b"q") == 1


def test_dead_letter_on_reject_and_expiry():
    client = opened()
    client.declare_exchange(1, b"dlx", b"fanout")
    client.queue(1, b"dead")
    client.bind(1, b"dead", b"dlx")
    client.queue(1, b"work", arguments={"x-dead-letter-exchange": "dlx", "x-message-ttl": 500})
    client.publish(1, b"", b"work", b"rejected-one", {"headers": {"id": 1}})
    got = client.get(1, b"work")[0]
    client.call(1, spec.BASIC_REJECT, (got.args[0], False))
    client.tick(0)
    client.publish(1, b"", b"work", b"expired-one")
    client.tick(600)
    first = client.get(1, b"dead", no_ack=True)[0]
    second = client.get(1, b"dead", no_ack=True)[0]
    assert first.body == b"rejected-one" and second.body == b"expired-one"
    death = first.properties["headers"]["x-death"][0]
    assert death["reason"] == b"rejected" and death["queue"] == b"work" and death["count"] == 1
    assert first.properties["headers"]["id"] == 1
    assert first.properties["headers"]["x-first-death-reason"] == b"rejected"
    assert second.properties["headers"]["x-death"][0]["reason"] == b"expired"


def test_dead_letter_routing_key():
    client = opened()
    client.queue(1, b"parking")
    client.queue(1, b"work", arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "parking"})
    client.publish(1, b"", b"work", b"m")
    got = client.get(1, b"work")[0]
    client.call(1, spec.BASIC_NACK, (got.args[0], False, False))
    event = client.get(1, b"parking", no_ack=True)[0]
    assert event.body == b"m" and event.args[3] == b"parking"


def test_dead_letter_cycle_is_dropped():
    client = opened()
    client.queue(1, b"loop", arguments={"x-dead-letter-exchange": "", "x-message-ttl": 10})
    client.tick(0)
    client.publish(1, b"", b"loop", b"m")
    client.tick(100)
    client.tick(200)
    assert _count(client, 1, b"loop") == 0


def test_queue_state_survives_other_connection_closing():
    first = opened()
    first.queue(1, b"shared")
    second = opened(first.broker)
    second.publish(1, b"", b"shared", b"kept")
    second.call(0, spec.CONNECTION_CLOSE, (200, b"", 0, 0))
    assert first.get(1, b"shared", no_ack=True)[0].body == b"kept"


def test_visibility_across_connections():
    # requirements R151: a queue one client declared is visible to another at once
    a = opened()
    a.queue(1, b"seen")
    b = Client(a.broker)
    b.open()
    b.channel(1)
    assert names(b.declare_queue(1, b"seen", passive=True)) == ["queue.declare-ok"]


def test_delete_ok_comes_before_the_consumers_cancel():
    """RabbitMQ answers queue.delete first and then cancels the queue's consumers (py-amqp and
    kombu fail on a basic.cancel that comes while they wait for delete-ok), on the deleting
    channel and on the others."""
    for exclusive, auto_delete in ((False, False), (True, False), (False, True)):
        client = opened()
        client.channel(2)
        client.queue(1, b"q", exclusive=exclusive, auto_delete=auto_delete)
        client.consume(1, b"q", tag=b"here")
        client.consume(2, b"q", tag=b"there")
        events = client.call(1, spec.QUEUE_DELETE, (0, b"q", False, False, False))
        assert [(e.channel, e.name) for e in events] == [
            (1, "queue.delete-ok"),
            (1, "basic.cancel"),
            (2, "basic.cancel"),
        ], events
        assert names(client.declare_queue(1, b"q", passive=True)) == ["channel.close"]
