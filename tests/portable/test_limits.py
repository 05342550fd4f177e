"""The limits object: every budget, and what the broker says when one runs out."""

from harness import Client, closed_with, content, method, names, opened

from hutch.codec import spec
from hutch.core.limits import Limits


def _publish(ch, key, body):
    return method(ch, spec.BASIC_PUBLISH, (0, b"", key, False, False)) + content(ch, body)


def test_limits_reject_nonsense():
    for bad in (
        {"frame_max": 1024},
        {"channel_max": 0},
        {"heartbeat": 70000},
        {"no_such_limit": 1},
        {"max_queues": -1},
        {"max_queues": "many"},
    ):
        try:
            Limits(**bad)
        except ValueError:
            continue
        raise AssertionError("accepted %r" % bad)


def test_full_queue_pauses_a_publisher_without_confirms():
    publisher = opened(limits=Limits(queue_max_messages=2))
    publisher.queue(1, b"q")
    publisher.send(
        _publish(1, b"q", b"1") + _publish(1, b"q", b"2") + _publish(1, b"q", b"3") + _publish(1, b"q", b"4")
    )
    conn = publisher.conn
    # the third publish found the queue full: held back on its channel (nothing of it taken,
    # nothing lost) and the connection stopped reading; the fourth waits unread
    assert not conn.want_read
    assert publisher.broker.queues[b"q"].message_count() == 2
    consumer = opened(publisher.broker)
    assert consumer.get(1, b"q", no_ack=True)[0].body == b"1"
    # room for one: the third goes in, and the fourth, read again, is held back in its turn
    assert not conn.want_read and publisher.broker.queues[b"q"].message_count() == 2
    assert consumer.get(1, b"q", no_ack=True)[0].body == b"2"
    assert conn.want_read  # room again: the publisher is read again and the held frames go through
    bodies = [consumer.get(1, b"q", no_ack=True)[0].body for _ in range(2)]
    assert bodies == [b"3", b"4"]
    assert publisher.broker.queues[b"q"].message_count() == 0


def test_queue_byte_budget():
    client = opened(limits=Limits(queue_max_bytes=100))
    client.queue(1, b"q")
    client.call(1, spec.CONFIRM_SELECT, (False,))
    assert names(client.publish(1, b"", b"q", b"x" * 100)) == ["basic.ack"]
    assert names(client.publish(1, b"", b"q", b"y")) == ["basic.nack"]


def test_total_budget_blocks_and_unblocks_publishers():
    limits = Limits(total_max_messages=4, low_water_percent=50)
    publisher = opened(limits=limits)
    publisher.queue(1, b"q")
    watcher = opened(publisher.broker)  # advertises connection.blocked, publishes nothing
    publisher.send(b"".join(_publish(1, b"q", b"m%d" % i) for i in range(8)))
    assert names(publisher.read()) == ["connection.blocked"]
    assert names(watcher.read()) == ["connection.blocked"]
    assert not publisher.conn.want_read and watcher.conn.want_read
    held = publisher.broker.queues[b"q"].message_count()
    assert held == 5  # the publish that crossed the line is kept, then reading stops
    for _ in range(2):
        assert names(watcher.get(1, b"q", no_ack=True)) == ["basic.get-ok"]  # still above low water
    # under the low-water mark: unblocked; the publisher's held frames are processed at once,
    # which fills the broker past its budget again
    assert names(watcher.get(1, b"q", no_ack=True)) == ["connection.unblocked", "connection.blocked", "basic.get-ok"]
    assert names(publisher.read()) == ["connection.unblocked", "connection.blocked"]
    # nothing was lost: 3 taken, 5 still queued
    assert publisher.broker.queues[b"q"].message_count() == 5


def test_blocked_notice_only_for_clients_that_support_it():
    limits = Limits(total_max_messages=1)
    plain = opened(limits=limits, capabilities={})
    plain.queue(1, b"q")
    plain.send(_publish(1, b"q", b"1") + _publish(1, b"q", b"2"))
    assert plain.read() == [] and not plain.conn.want_read


def test_late_joiner_is_told_it_is_blocked():
    limits = Limits(total_max_messages=1)
    first = opened(limits=limits)
    first.queue(1, b"q")
    first.send(_publish(1, b"q", b"1") + _publish(1, b"q", b"2"))
    later = Client(first.broker)
    assert names(later.open()) == ["connection.open-ok", "connection.blocked"]


def test_paused_publisher_is_not_timed_out_for_heartbeats():
    client = opened(limits=Limits(total_max_messages=1), heartbeat=1)
    client.queue(1, b"q")
    client.send(_publish(1, b"q", b"1") + _publish(1, b"q", b"2"))
    assert not client.conn.want_read
    client.tick(10000)
    assert not client.conn.closed


def test_consumer_and_binding_and_exchange_limits():
    client = opened(limits=Limits(max_consumers=1, max_bindings=1, max_exchanges=1))
    client.queue(1, b"q")
    client.consume(1, b"q", tag=b"a")
    closed_with(client.consume(1, b"q", tag=b"b"), spec.PRECONDITION_FAILED)
    client.reopen(1)  # the channel close cancelled consumer a, so there is room again
    client.consume(1, b"q", tag=b"b")
    client.bind(1, b"q", b"amq.fanout")
    closed_with(client.bind(1, b"q", b"amq.topic", b"#"), spec.PRECONDITION_FAILED)
    client.reopen(1)
    client.declare_exchange(1, b"one", b"direct")
    text = closed_with(client.declare_exchange(1, b"two", b"direct"), spec.PRECONDITION_FAILED)
    assert b"exchange limit" in text


def test_budget_released_on_every_exit():
    client = opened()
    client.queue(1, b"q", arguments={"x-message-ttl": 1000})
    broker = client.broker
    for _i in range(6):
        client.publish(1, b"", b"q", b"m")
    client.get(1, b"q", no_ack=True)  # no-ack delivery
    tag = client.get(1, b"q")[0].args[0]
    client.ack(1, tag)  # ack
    tag = client.get(1, b"q")[0].args[0]
    client.call(1, spec.BASIC_REJECT, (tag, False))  # reject
    client.call(1, spec.QUEUE_PURGE, (0, b"q", False))  # purge
    assert broker.flow.held_messages == 0 and broker.flow.held_bytes == 0
    client.publish(1, b"", b"q", b"m")
    client.tick(2000)  # expiry
    assert broker.flow.held_messages == 0
    client.publish(1, b"", b"q", b"m")
    client.call(1, spec.QUEUE_DELETE, (0, b"q", False, False, False))  # delete
    assert broker.flow.held_messages == 0 and broker.flow.held_bytes == 0


def test_port_memory_alarm_blocks_and_clears():
    publisher = opened()
    publisher.queue(1, b"q")
    broker = publisher.broker
    broker.flow.set_alarm("memory", "low on memory: free heap 9 KiB")
    assert names(publisher.read()) == ["connection.blocked"]
    assert b"free heap 9 KiB" in publisher.events[-1].args[0]
    publisher.send(_publish(1, b"q", b"1") + _publish(1, b"q", b"2"))
    assert not publisher.conn.want_read  # the publish that arrived is kept; the next waits
    assert broker.queues[b"q"].message_count() == 1
    broker.flow.set_alarm("memory", None)
    assert names(publisher.read()) == ["connection.unblocked"]
    assert broker.queues[b"q"].message_count() == 2 and publisher.conn.want_read


def test_alarm_and_budget_both_must_clear():
    client = opened(limits=Limits(total_max_messages=1, low_water_percent=100))
    client.queue(1, b"q")
    client.send(_publish(1, b"q", b"1") + _publish(1, b"q", b"2"))
    assert names(client.read()) == ["connection.blocked"]
    client.broker.flow.set_alarm("memory", "low on memory: free heap low")
    drainer = opened(client.broker, capabilities={})  # no blocked notices for this one
    drainer.get(1, b"q", no_ack=True)  # the budget recovers, the alarm does not
    drainer.get(1, b"q", no_ack=True)
    assert "connection.unblocked" not in names(client.read())
    client.broker.flow.set_alarm("memory", None)
    assert "connection.unblocked" in names(client.read())


def test_refused_connections_get_530():
    broker = opened().broker
    broker.flow.refuse_connections = "hutch is low on memory"
    late = Client(broker)
    late.handshake()
    text = closed_with(late.call(0, spec.CONNECTION_OPEN, (b"/", b"", False)), spec.NOT_ALLOWED, "connection.close")
    assert b"low on memory" in text


def test_confirm_publisher_is_nacked_not_paused_when_memory_runs_out():
    """A connection that publishes with confirms and also consumes must keep being read when
    memory runs out, or its acks (which free memory) would wait behind its publishes."""
    client = opened(limits=Limits(total_max_messages=1, low_water_percent=50))
    client.queue(1, b"q")
    client.call(1, spec.CONFIRM_SELECT, (False,))
    # the second publish crosses the budget (kept: it was in hand), the third is refused
    client.send(_publish(1, b"q", b"1") + _publish(1, b"q", b"2") + _publish(1, b"q", b"3"))
    events = client.read()
    assert [(e.name, e.args[0]) for e in events if e.name.startswith("basic.")] == [("basic.ack", 2), ("basic.nack", 3)]
    assert "connection.blocked" in names(events) and client.conn.want_read
    got = client.get(1, b"q")[0]  # the same connection consumes...
    client.ack(1, got.args[0])  # ...and its ack is read and frees room
    client.get(1, b"q", no_ack=True)
    assert "connection.unblocked" in names(client.read() + client.events)
    assert names(client.publish(1, b"", b"q", b"4")) == ["basic.ack"]


def test_out_of_memory_mid_frame_is_a_506_close():
    """When the heap runs out inside the broker (simulated: the allocator fails in the
    channel's publish path), the client gets 506 RESOURCE_ERROR and the broker lives on."""
    client = opened()
    client.queue(1, b"q")

    def out_of_memory(message, mandatory):
        raise MemoryError("memory allocation failed, allocating 262 bytes")

    client.conn.channels[1].publish = out_of_memory
    text = closed_with(client.publish(1, b"", b"q", b"x"), spec.RESOURCE_ERROR, "connection.close")
    assert b"out of memory" in text
    assert opened(client.broker).get(1, b"q")[0].name == "basic.get-empty"  # others carry on
