"""basic.*: consume, deliver, get, ack/nack/reject, qos, cancel, recover, returns, flow."""

from harness import closed_with, content, method, names, opened

from hutch.codec import spec


def _fill(client, queue, count, ch=1):
    client.queue(ch, queue)
    for i in range(count):
        client.publish(ch, b"", queue, b"m%d" % i)


def _deliveries(events):
    return [e for e in events if e.name == "basic.deliver"]


def test_consume_ok_comes_before_deliveries():
    client = opened()
    _fill(client, b"q", 3)
    events = client.consume(1, b"q", tag=b"ctag")
    assert names(events) == ["basic.consume-ok", "basic.deliver", "basic.deliver", "basic.deliver"]
    assert events[0].args == [b"ctag"]
    tags = [e.args[1] for e in events[1:]]
    assert tags == [1, 2, 3]  # delivery tags start at 1 and count up per channel
    assert [e.body for e in events[1:]] == [b"m0", b"m1", b"m2"]
    deliver = events[1]
    assert deliver.args == [b"ctag", 1, False, b"", b"q"]


def test_delivery_reuses_publisher_header_bytes():
    client = opened()
    client.queue(1, b"q")
    client.consume(1, b"q", tag=b"c", no_ack=True)
    props = {
        "content-type": b"application/json",
        "headers": {"k": b"v", "n": 42},
        "delivery-mode": 2,
        "priority": 3,
        "correlation-id": b"abc",
        "reply-to": b"r",
        "message-id": b"id",
        "type": b"t",
        "app-id": b"app",
    }
    events = client.publish(1, b"", b"q", b"{}", props)
    assert events[0].properties == props
    import struct

    from hutch.codec.wire import encode_properties

    assert events[0].header == struct.pack(">HHQ", 60, 0, 2) + encode_properties(props)


def test_server_generated_consumer_tag():
    client = opened()
    client.queue(1, b"q")
    first = client.consume(1, b"q")[0].args[0]
    second = client.consume(1, b"q")[0].args[0]
    assert first.startswith(b"amq.ctag-") and first != second


def test_consumer_tag_reuse_is_a_connection_error():
    client = opened()
    client.queue(1, b"q")
    client.consume(1, b"q", tag=b"dup")
    closed_with(client.consume(1, b"q", tag=b"dup"), spec.NOT_ALLOWED, "connection.close")


def test_exclusive_consumer():
    client = opened()
    client.queue(1, b"q")
    client.consume(1, b"q", tag=b"first")
    closed_with(client.consume(1, b"q", tag=b"second", exclusive=True), spec.ACCESS_REFUSED)
    client.reopen(1)
    client.queue(1, b"q2")
    client.consume(1, b"q2", tag=b"only", exclusive=True)
    text = closed_with(client.consume(1, b"q2", tag=b"another"), spec.ACCESS_REFUSED)
    assert b"exclusive use" in text


def test_consume_missing_queue():
    client = opened()
    closed_with(client.consume(1, b"nope"), spec.NOT_FOUND)


def test_round_robin_between_consumers():
    client = opened()
    client.queue(1, b"q")
    client.consume(1, b"q", tag=b"a", no_ack=True)
    client.consume(1, b"q", tag=b"b", no_ack=True)
    got = []
    for _i in range(4):
        got += [e.args[0] for e in _deliveries(client.publish(1, b"", b"q", b"m"))]
    assert got == [b"a", b"b", b"a", b"b"]


def test_ack_single_and_multiple():
    client = opened()
    _fill(client, b"q", 5)
    client.consume(1, b"q", tag=b"c")
    assert client.ack(1, 2) == []
    assert client.ack(1, 4, multiple=True) == []
    assert sorted(client.conn.channels[1].unacked) == [5]
    assert client.ack(1, 0, multiple=True) == []  # 0 with multiple: everything outstanding
    assert client.conn.channels[1].unacked == {}
    assert client.broker.flow.held_messages == 0


def test_unknown_delivery_tag():
    client = opened()
    _fill(client, b"q", 1)
    client.consume(1, b"q", tag=b"c")
    client.ack(1, 1)
    text = closed_with(client.ack(1, 1), spec.PRECONDITION_FAILED)  # acked twice
    assert text == b"PRECONDITION_FAILED - unknown delivery tag 1"
    client.reopen(1)
    closed_with(client.ack(1, 99), spec.PRECONDITION_FAILED)
    client.reopen(1)
    closed_with(client.ack(1, 99, multiple=True), spec.PRECONDITION_FAILED)


def test_no_ack_deliveries_cannot_be_acked():
    client = opened()
    _fill(client, b"q", 1)
    client.consume(1, b"q", tag=b"c", no_ack=True)
    closed_with(client.ack(1, 1), spec.PRECONDITION_FAILED)


def test_nack_requeue_keeps_order_and_marks_redelivered():
    client = opened()
    _fill(client, b"q", 3)
    for _ in range(3):
        client.get(1, b"q")
    client.call(1, spec.BASIC_NACK, (0, True, True))
    events = [client.get(1, b"q")[0] for _ in range(3)]
    assert [e.body for e in events] == [b"m0", b"m1", b"m2"]
    assert all(e.args[1] is True for e in events)  # redelivered
    assert [e.args[0] for e in events] == [4, 5, 6]


def test_requeued_messages_go_back_to_their_original_places():
    """RabbitMQ's requeue order: whatever order they come back in (one reject at a time, a
    nack of many around acks, a redelivery then the channel closing), a message returns
    before those published after it."""
    client = opened()
    _fill(client, b"q", 6)
    tags = [client.get(1, b"q")[0].args[0] for _ in range(4)]  # m0..m3 out, m4 m5 waiting
    for i in (2, 0, 3):
        client.call(1, spec.BASIC_REJECT, (tags[i], True))
    again = client.get(1, b"q")[0]  # m0, again: now m1 (still out) was delivered after it
    assert again.body == b"m0" and again.args[1] is True
    client.call(1, spec.BASIC_NACK, (again.args[0], True, True))  # m0 and m1 back
    events = [client.get(1, b"q", no_ack=True)[0] for _ in range(6)]
    assert [(e.body, e.args[1]) for e in events] == [
        (b"m0", True),
        (b"m1", True),
        (b"m2", True),
        (b"m3", True),
        (b"m4", False),
        (b"m5", False),
    ]


def test_reject_without_requeue_drops():
    client = opened()
    _fill(client, b"q", 1)
    tag = client.get(1, b"q")[0].args[0]
    client.call(1, spec.BASIC_REJECT, (tag, False))
    assert client.get(1, b"q")[0].name == "basic.get-empty"
    assert client.broker.flow.held_messages == 0


def test_reject_requeue_goes_back_to_the_head():
    client = opened()
    _fill(client, b"q", 2)
    first = client.get(1, b"q")[0]
    client.call(1, spec.BASIC_REJECT, (first.args[0], True))
    again = client.get(1, b"q")[0]
    assert again.body == b"m0" and again.args[1] is True


def test_get_ok_and_get_empty():
    client = opened()
    _fill(client, b"q", 2)
    event = client.get(1, b"q", no_ack=True)[0]
    assert event.name == "basic.get-ok"
    assert event.args == [1, False, b"", b"q", 1]  # tag, redelivered, exchange, key, messages left
    client.get(1, b"q", no_ack=True)
    assert client.get(1, b"q")[0].name == "basic.get-empty"


def test_per_consumer_prefetch():
    client = opened()
    _fill(client, b"q", 10)
    client.call(1, spec.BASIC_QOS, (0, 3, False))
    events = client.consume(1, b"q", tag=b"c")
    assert len(_deliveries(events)) == 3
    assert len(_deliveries(client.ack(1, 1))) == 1
    assert len(_deliveries(client.ack(1, 4, multiple=True))) == 3


def test_prefetch_applies_to_consumers_started_after_qos():
    client = opened()
    _fill(client, b"q", 10)
    client.consume(1, b"q", tag=b"before")
    events = client.call(1, spec.BASIC_QOS, (0, 1, False))
    assert names(events) == ["basic.qos-ok"]
    assert len(client.conn.channels[1].unacked) == 10


def test_global_prefetch_is_shared_by_the_channel():
    client = opened()
    _fill(client, b"a", 5)
    _fill(client, b"b", 5)
    client.call(1, spec.BASIC_QOS, (0, 4, True))
    events = client.consume(1, b"a", tag=b"ca") + client.consume(1, b"b", tag=b"cb")
    assert len(_deliveries(events)) == 4
    assert len(_deliveries(client.ack(1, 2, multiple=True))) == 2


def test_per_consumer_and_global_together():
    client = opened()
    _fill(client, b"a", 5)
    _fill(client, b"b", 5)
    client.call(1, spec.BASIC_QOS, (0, 2, False))
    client.call(1, spec.BASIC_QOS, (0, 3, True))
    events = client.consume(1, b"a", tag=b"ca") + client.consume(1, b"b", tag=b"cb")
    assert [e.args[0] for e in _deliveries(events)] == [b"ca", b"ca", b"cb"]


def test_prefetch_size_is_not_implemented():
    client = opened()
    closed_with(client.call(1, spec.BASIC_QOS, (1024, 0, False)), spec.NOT_IMPLEMENTED, "connection.close")


def test_get_ignores_prefetch():
    client = opened()
    _fill(client, b"q", 3)
    client.call(1, spec.BASIC_QOS, (0, 1, True))
    assert [client.get(1, b"q")[0].name for _ in range(3)] == ["basic.get-ok"] * 3


def test_cancel():
    client = opened()
    _fill(client, b"q", 1)
    client.call(1, spec.BASIC_QOS, (0, 1, False))
    client.consume(1, b"q", tag=b"c")
    assert client.expect(1, spec.BASIC_CANCEL, (b"c", False)).args == [b"c"]
    client.publish(1, b"", b"q", b"after")
    assert client.ack(1, 1) == []  # acking after cancel is fine; nothing more is delivered
    assert client.expect(1, spec.BASIC_CANCEL, (b"unknown", False)).args == [b"unknown"]


def test_queue_deletion_cancels_consumers_that_asked():
    client = opened()
    client.queue(1, b"q")
    client.consume(1, b"q", tag=b"c")
    other = opened(client.broker)
    other.call(1, spec.QUEUE_DELETE, (0, b"q", False, False, False))
    events = client.read()
    assert names(events) == ["basic.cancel"] and events[0].args[0] == b"c"
    assert client.conn.channels[1].consumers == {}


def test_queue_deletion_without_cancel_notify_capability():
    client = opened(capabilities={})
    client.queue(1, b"q")
    client.consume(1, b"q", tag=b"c")
    client.call(1, spec.QUEUE_DELETE, (0, b"q", False, False, False))
    assert client.read() == []


def test_unacked_requeued_in_order_when_channel_closes():
    client = opened()
    _fill(client, b"q", 4)
    client.consume(1, b"q", tag=b"c")
    client.ack(1, 2)
    client.call(1, spec.CHANNEL_CLOSE, (200, b"", 0, 0))
    client.channel(2)
    events = [client.get(2, b"q", no_ack=True)[0] for _ in range(3)]
    assert [e.body for e in events] == [b"m0", b"m2", b"m3"]
    assert all(e.args[1] for e in events)


def test_unacked_requeued_when_connection_is_lost():
    client = opened()
    _fill(client, b"q", 2)
    client.consume(1, b"q", tag=b"c")
    client.conn.lost()
    other = opened(client.broker)
    events = other.consume(1, b"q", tag=b"d")
    assert [e.body for e in _deliveries(events)] == [b"m0", b"m1"]
    assert all(e.args[2] for e in _deliveries(events))


def test_unacked_requeued_when_channel_errors():
    client = opened()
    _fill(client, b"q", 1)
    client.get(1, b"q")
    closed_with(client.ack(1, 7), spec.PRECONDITION_FAILED)
    client.reopen(1)
    assert client.get(1, b"q")[0].args[1] is True


def test_requeued_message_goes_to_another_consumer():
    client = opened()
    client.queue(1, b"q")
    client.consume(1, b"q", tag=b"a")
    other = opened(client.broker)
    other.consume(1, b"q", tag=b"b")
    client.publish(1, b"", b"q", b"work")  # round robin: goes to a
    client.call(1, spec.BASIC_REJECT, (1, True))
    events = other.read()
    assert names(events) == ["basic.deliver"] and events[0].body == b"work" and events[0].args[2] is True


def test_recover_requeues_everything():
    client = opened()
    _fill(client, b"q", 2)
    client.get(1, b"q")
    client.get(1, b"q")
    assert names(client.call(1, spec.BASIC_RECOVER, (True,))) == ["basic.recover-ok"]
    assert client.get(1, b"q")[0].args[1] is True


def test_recover_without_requeue_is_not_implemented():
    client = opened()
    closed_with(client.call(1, spec.BASIC_RECOVER, (False,)), spec.NOT_IMPLEMENTED, "connection.close")


def test_mandatory_unroutable_is_returned():
    client = opened()
    events = client.publish(1, b"amq.direct", b"nowhere", b"lost?", {"message-id": b"7"}, mandatory=True)
    assert names(events) == ["basic.return"]
    assert events[0].args == [spec.NO_ROUTE, b"NO_ROUTE", b"amq.direct", b"nowhere"]
    assert events[0].body == b"lost?" and events[0].properties == {"message-id": b"7"}


def test_unroutable_without_mandatory_is_dropped():
    client = opened()
    assert client.publish(1, b"amq.direct", b"nowhere", b"x") == []
    assert client.broker.flow.held_messages == 0


def test_large_body_is_split_for_the_consumer_frame_max():
    publisher = opened()
    publisher.queue(1, b"q")
    body = bytes(range(256)) * 400  # 102,400 bytes in one frame from a 131072 frame_max publisher
    publisher.publish(1, b"", b"q", body)
    consumer = opened(publisher.broker, frame_max=4096)
    events = consumer.consume(1, b"q", tag=b"c", no_ack=True)
    assert events[1].body == body  # the harness checks no body frame exceeds 4096


def test_user_id_must_match_login():
    client = opened()
    client.queue(1, b"q")
    assert client.publish(1, b"", b"q", b"ok", {"user-id": b"guest"}) == []
    text = closed_with(client.publish(1, b"", b"q", b"spoof", {"user-id": b"admin"}), spec.PRECONDITION_FAILED)
    assert b"user_id property set to 'admin'" in text


def test_channel_flow_stops_and_resumes_delivery():
    client = opened()
    client.queue(1, b"q")
    client.consume(1, b"q", tag=b"c", no_ack=True)
    assert client.expect(1, spec.CHANNEL_FLOW, (False,)).args == [False]
    assert client.publish(1, b"", b"q", b"held") == []
    events = client.call(1, spec.CHANNEL_FLOW, (True,))
    assert names(events) == ["channel.flow-ok", "basic.deliver"]


def test_access_request_for_old_clients():
    client = opened()
    assert client.expect(1, spec.ACCESS_REQUEST, (b"/data", False, False, False, False, False)).args == [1]


def test_publish_to_queue_of_another_connection():
    a = opened()
    a.queue(1, b"inbox")
    a.consume(1, b"inbox", tag=b"c", no_ack=True)
    b = opened(a.broker)
    b.publish(1, b"", b"inbox", b"hello")
    events = a.read()
    assert names(events) == ["basic.deliver"] and events[0].body == b"hello"


def test_slow_consumer_is_not_flooded():
    from hutch.core.limits import Limits

    client = opened(limits=Limits(output_high_water=4096))
    client.queue(1, b"q")
    client.consume(1, b"q", tag=b"c", no_ack=True)
    for _i in range(20):
        client.send(method(1, spec.BASIC_PUBLISH, (0, b"", b"q", False, False)) + content(1, b"x" * 1000))
    # nothing was taken yet: deliveries stop near the high-water mark, the rest waits in the queue
    assert client.broker.queues[b"q"].message_count() > 10
    total = 0
    for _ in range(30):
        total += len(_deliveries(client.read()))
    assert total == 20


def test_recover_async_requeues_without_reply():
    client = opened()
    _fill(client, b"q", 1)
    client.get(1, b"q")
    assert client.call(1, spec.BASIC_RECOVER_ASYNC, (True,)) == []
    assert client.get(1, b"q")[0].args[1] is True
