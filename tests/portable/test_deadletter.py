"""Dead letters (core/deadletter.py), x-overflow and x-max-length-bytes (core/queue.py), and the
CC and BCC headers (core/headers.py, Broker.route), as RabbitMQ has them: the differential
tests (tests/interop/compat/test_compat_deadletter.py) compare the same with RabbitMQ itself; these
check the core alone, under CPython and MicroPython.
"""

import struct

from harness import closed_with, frame, method, names, opened
from journal_node import PERSISTENT, Node, in_folder

from hutch.codec import spec
from hutch.core.deadletter import cycle
from hutch.core.limits import Limits


def _dead_setup(client, arguments, dead=b"dead"):
    """work dead-letters to the fanout dlx, which leads to dead."""
    client.declare_exchange(1, b"dlx", b"fanout")
    client.queue(1, dead)
    client.bind(1, dead, b"dlx")
    arguments = dict(arguments)
    arguments["x-dead-letter-exchange"] = "dlx"
    client.queue(1, b"work", arguments=arguments)


def _get(client, queue):
    events = client.get(1, queue, no_ack=True)
    assert names(events) == ["basic.get-ok"], events
    return events[0]


def _empty(client, queue):
    return names(client.get(1, queue, no_ack=True)) == ["basic.get-empty"]


# ---------------------------------------------------------------- x-death


def test_an_expired_message_loses_its_expiration_and_x_death_keeps_it():
    client = opened()
    _dead_setup(client, {})
    client.tick(0)
    client.publish(1, b"", b"work", b"m", {"expiration": b"50", "headers": {"app": b"a"}, "delivery-mode": 2})
    client.tick(100)
    event = _get(client, b"dead")
    assert "expiration" not in event.properties
    assert event.properties["delivery-mode"] == 2
    headers = event.properties["headers"]
    death = headers["x-death"][0]
    assert death["original-expiration"] == b"50"
    assert (death["reason"], death["queue"], death["exchange"], death["count"]) == (b"expired", b"work", b"", 1)
    assert death["routing-keys"] == [b"work"]
    assert headers["app"] == b"a"


def test_original_expiration_whatever_the_reason_and_never_without_an_expiration():
    client = opened()
    _dead_setup(client, {"x-max-length": 1})
    client.publish(1, b"", b"work", b"dropped", {"expiration": b"60000"})
    client.publish(1, b"", b"work", b"rejected", {"expiration": b"70000", "correlation-id": b"c", "reply-to": b"r"})
    tag = client.get(1, b"work")[0].args[0]
    client.call(1, spec.BASIC_REJECT, (tag, False))
    client.publish(1, b"", b"work", b"plain")
    tag = client.get(1, b"work")[0].args[0]
    client.call(1, spec.BASIC_REJECT, (tag, False))
    dropped, rejected, plain = _get(client, b"dead"), _get(client, b"dead"), _get(client, b"dead")
    assert dropped.properties["headers"]["x-death"][0]["original-expiration"] == b"60000"
    assert dropped.properties["headers"]["x-death"][0]["reason"] == b"maxlen"
    assert rejected.properties["headers"]["x-death"][0]["original-expiration"] == b"70000"
    # the properties around the one taken out are intact
    assert rejected.properties["correlation-id"] == b"c" and rejected.properties["reply-to"] == b"r"
    assert "expiration" not in rejected.properties
    assert "original-expiration" not in plain.properties["headers"]["x-death"][0]


def test_other_headers_stay_byte_for_byte():
    """A binary ('x') header and a 64-bit ('l') one come out with the types they went in with,
    and count is a 64-bit long, as RabbitMQ types it."""
    client = opened()
    _dead_setup(client, {"x-message-ttl": 10})
    client.tick(0)
    raw_binary = b"\x03bin" + b"x" + struct.pack(">I", 2) + b"\x00\xff"
    raw_long = b"\x04long" + b"l" + struct.pack(">q", 5)
    table = raw_binary + raw_long
    header = struct.pack(">HHQH", 60, 0, 1, 0x2000) + struct.pack(">I", len(table)) + table
    client.send(
        method(1, spec.BASIC_PUBLISH, (0, b"", b"work", False, False)) + frame(2, 1, header) + frame(3, 1, b"z")
    )
    client.read()
    client.tick(20)
    dead = client.broker.queues[b"dead"].messages.peek()[0].header_tail
    assert raw_binary in dead and raw_long in dead
    assert b"\x05countl" + struct.pack(">q", 1) in dead


def test_x_first_death_stays_and_x_last_death_follows_each_death():
    """work rejects into retry, whose TTL sends it back: each (queue, reason) one entry that
    counts, the latest first; x-first-death-* the first death's, x-last-death-* the latest's
    (RabbitMQ 3.13+)."""
    client = opened()
    client.queue(1, b"work", arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "retry"})
    client.queue(
        1,
        b"retry",
        arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "work", "x-message-ttl": 10},
    )
    client.tick(0)
    client.publish(1, b"", b"work", b"job")
    now = 0
    seen = []
    for _ in range(3):
        event = client.get(1, b"work")[0]
        seen.append(event.properties.get("headers") or {})
        client.call(1, spec.BASIC_REJECT, (event.args[0], False))
        now += 20
        client.tick(now)
    last = seen[2]
    assert [(d["queue"], d["reason"], d["count"]) for d in last["x-death"]] == [
        (b"retry", b"expired", 2),
        (b"work", b"rejected", 2),
    ]
    assert (last["x-first-death-queue"], last["x-first-death-reason"]) == (b"work", b"rejected")
    assert (last["x-last-death-queue"], last["x-last-death-reason"]) == (b"retry", b"expired")
    assert last["x-last-death-exchange"] == b""
    assert seen[1]["x-last-death-queue"] == b"retry" and "x-last-death-queue" not in seen[0]


def test_an_x_death_that_is_not_an_array_starts_again():
    client = opened()
    _dead_setup(client, {})
    client.publish(1, b"", b"work", b"m", {"headers": {"x-death": b"garbage"}})
    tag = client.get(1, b"work")[0].args[0]
    client.call(1, spec.BASIC_REJECT, (tag, False))
    headers = _get(client, b"dead").properties["headers"]
    assert [d["reason"] for d in headers["x-death"]] == [b"rejected"]
    assert "x-first-death-reason" not in headers  # RabbitMQ sets those only with a first x-death
    assert headers["x-last-death-reason"] == b"rejected"


def test_a_cycle_is_dropped_only_when_no_client_rejected_in_it():
    rejected = {"queue": b"a", "reason": b"rejected"}
    expired_b = {"queue": b"b", "reason": b"expired"}
    expired_a = {"queue": b"a", "reason": b"expired"}
    assert cycle([expired_b, rejected]) == [b"b"]  # back to a: a client rejected it there
    assert cycle([expired_b, expired_a]) == [b"b", b"a"]
    assert cycle([rejected, expired_b]) == []
    assert cycle([expired_b, b"not a table", expired_a]) == [b"b"]


def test_dead_letter_routing_key_removes_cc():
    client = opened()
    client.queue(1, b"parking")
    client.queue(1, b"other")
    client.queue(1, b"work", arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "parking"})
    client.publish(1, b"", b"work", b"m", {"headers": {"CC": [b"nowhere"], "keep": 1}})
    tag = client.get(1, b"work")[0].args[0]
    client.call(1, spec.BASIC_REJECT, (tag, False))
    headers = _get(client, b"parking").properties["headers"]
    assert "CC" not in headers and headers["keep"] == 1
    assert headers["x-death"][0]["routing-keys"] == [b"work", b"nowhere"]


def test_without_a_dead_letter_routing_key_cc_and_bcc_keys_route_the_dead_letter():
    client = opened()
    client.declare_exchange(1, b"dlx", b"direct")
    for queue in (b"cc", b"bcc"):
        client.queue(1, queue)
        client.bind(1, queue, b"dlx", b"k." + queue)
    client.queue(1, b"work", arguments={"x-dead-letter-exchange": "dlx"})
    client.publish(1, b"", b"work", b"m", {"headers": {"CC": [b"k.cc"], "BCC": [b"k.bcc"]}})
    tag = client.get(1, b"work")[0].args[0]
    client.call(1, spec.BASIC_REJECT, (tag, False))
    for queue in (b"cc", b"bcc"):
        headers = _get(client, queue).properties["headers"]
        assert headers["CC"] == [b"k.cc"] and "BCC" not in headers
        assert headers["x-death"][0]["routing-keys"] == [b"work", b"k.cc"]


# ---------------------------------------------------------------- reject-publish-dlx


def test_reject_publish_dlx_nacks_and_dead_letters_the_refused_publish():
    for limit in ({"x-max-length": 1}, {"x-max-length-bytes": 3}):
        client = opened()
        arguments = {"x-overflow": "reject-publish-dlx"}
        arguments.update(limit)
        _dead_setup(client, arguments)
        client.expect(1, spec.CONFIRM_SELECT, (False,))
        assert names(client.publish(1, b"", b"work", b"one")) == ["basic.ack"]
        assert names(client.publish(1, b"", b"work", b"two")) == ["basic.nack"]
        event = _get(client, b"dead")
        assert event.body == b"two"
        death = event.properties["headers"]["x-death"][0]
        assert (death["reason"], death["queue"]) == (b"maxlen", b"work")
        assert _get(client, b"work").body == b"one" and _empty(client, b"work")


def test_reject_publish_nacks_without_dead_lettering():
    client = opened()
    _dead_setup(client, {"x-overflow": "reject-publish", "x-max-length-bytes": 3})
    client.expect(1, spec.CONFIRM_SELECT, (False,))
    assert names(client.publish(1, b"", b"work", b"abc")) == ["basic.ack"]
    assert names(client.publish(1, b"", b"work", b"d")) == ["basic.nack"]
    assert names(client.publish(1, b"", b"work", b"")) == ["basic.ack"]  # no bytes: it fits
    assert _empty(client, b"dead")


# ---------------------------------------------------------------- x-max-length-bytes


def test_max_length_bytes_drop_head_counts_body_bytes_of_ready_messages_only():
    client = opened()
    _dead_setup(client, {"x-max-length-bytes": 6})
    for body in (b"aaa", b"bbb"):
        client.publish(1, b"", b"work", body)
    held = [client.get(1, b"work")[0].args[0] for _ in range(2)]  # delivered: they do not count
    for body in (b"ccc", b"ddd"):
        client.publish(1, b"", b"work", body)
    assert _empty(client, b"dead")
    client.call(1, spec.BASIC_NACK, (held[-1], True, True))  # requeued: 12 bytes, over
    assert [_get(client, b"dead").body for _ in range(2)] == [b"aaa", b"bbb"]
    assert [_get(client, b"work").body for _ in range(2)] == [b"ccc", b"ddd"]


def test_max_length_bytes_on_an_exclusive_queue_drops_a_message_larger_than_the_limit():
    client = opened()
    client.declare_exchange(1, b"dlx", b"fanout")
    client.queue(1, b"dead")
    client.bind(1, b"dead", b"dlx")
    client.queue(1, b"mine", exclusive=True, arguments={"x-max-length-bytes": 4, "x-dead-letter-exchange": "dlx"})
    client.publish(1, b"", b"mine", b"ab")
    client.publish(1, b"", b"mine", b"too large")
    assert [_get(client, b"dead").body for _ in range(2)] == [b"ab", b"too large"]
    assert _empty(client, b"mine")


def _paged(folder):
    return Node(folder, segment_bytes=4096, limits=Limits(queue_window_messages=1))


@in_folder
def _paged_drop_head(folder):
    node = _paged(folder)
    c = node.client()
    c.queue(1, b"dead", durable=True)
    arguments = {"x-max-length-bytes": 10, "x-dead-letter-exchange": b"", "x-dead-letter-routing-key": b"dead"}
    c.queue(1, b"q", durable=True, arguments=arguments)
    queue = node.broker.queues[b"q"]
    for i in range(6):
        c.publish(1, b"", b"q", b"m%d.." % i, PERSISTENT)  # 4 bytes each
        if i == 1:
            assert queue.paged == 1  # the window holds one: the rest is on disk
    assert queue.message_count() == 2 and queue.ready_bytes + queue.paged_bytes == 8
    assert [_get(c, b"dead").body for _ in range(4)] == [b"m0..", b"m1..", b"m2..", b"m3.."]
    assert [_get(c, b"q").body for _ in range(2)] == [b"m4..", b"m5.."]


def test_max_length_bytes_drop_head_on_a_queue_paged_to_disk():
    _paged_drop_head()


@in_folder
def _paged_reject(folder):
    node = _paged(folder)
    c = node.client()
    c.expect(1, spec.CONFIRM_SELECT, (False,))
    for overflow in (b"reject-publish", b"reject-publish-dlx"):
        name, dead = b"q-" + overflow, b"dead-" + overflow
        c.queue(1, dead, durable=True)
        arguments = {
            "x-max-length-bytes": 10,
            "x-overflow": overflow,
            "x-dead-letter-exchange": b"",
            "x-dead-letter-routing-key": dead,
        }
        c.queue(1, name, durable=True, arguments=arguments)
        outcomes = []
        for body in (b"m0..", b"m1..", b"m2..", b""):
            outcomes += names(c.publish(1, b"", name, body, PERSISTENT))  # a nack at once
            node.writer.commit()  # on disk: the ack goes out
            outcomes += names(c.read())
        assert node.broker.queues[name].paged  # the window holds one: the rest is on disk
        assert outcomes == ["basic.ack", "basic.ack", "basic.nack", "basic.ack"], outcomes
        assert [_get(c, name).body for _ in range(3)] == [b"m0..", b"m1..", b""]
        if overflow == b"reject-publish-dlx":
            assert _get(c, dead).body == b"m2.."
        assert _empty(c, dead)


def test_max_length_bytes_reject_publish_on_a_queue_paged_to_disk():
    _paged_reject()


@in_folder
def _after_restart(folder):
    for window in (1, 4):  # the backlog on disk, or all of it in memory after the replay
        name = b"q%d" % window
        node = Node(folder, segment_bytes=4096, limits=Limits(queue_window_messages=window))
        c = node.client()
        for overflow in (b"drop-head", b"reject-publish"):
            arguments = {"x-max-length-bytes": 10, "x-overflow": overflow}
            c.queue(1, name + overflow, durable=True, arguments=arguments)
            for body in (b"m0..", b"m1.."):
                c.publish(1, b"", name + overflow, body, PERSISTENT)
        node.stop()
        again = Node(folder, segment_bytes=4096, limits=Limits(queue_window_messages=window))
        d = again.client()
        for overflow in (b"drop-head", b"reject-publish"):
            queue = again.broker.queues[name + overflow]
            assert queue.ready_bytes + queue.paged_bytes == 8, (queue.ready_bytes, queue.paged_bytes)
            d.publish(1, b"", name + overflow, b"m2..", PERSISTENT)  # 12 bytes: over
        assert [_get(d, name + b"drop-head").body for _ in range(2)] == [b"m1..", b"m2.."]
        assert [_get(d, name + b"reject-publish").body for _ in range(2)] == [b"m0..", b"m1.."]
        assert _empty(d, name + b"reject-publish")
        again.stop()


def test_max_length_bytes_holds_after_a_restart():
    _after_restart()


@in_folder
def _durable_dead_letters(folder):
    node = Node(folder)
    c = node.client()
    c.queue(1, b"dead", durable=True)
    c.queue(1, b"work", durable=True, arguments={"x-dead-letter-exchange": b"", "x-dead-letter-routing-key": b"dead"})
    properties = {"delivery-mode": 2, "expiration": b"60000", "headers": {"CC": [b"dead"], "BCC": [b"work"]}}
    c.publish(1, b"", b"work", b"m", properties)  # to work, and by its CC key to dead too
    tag = c.get(1, b"work")[0].args[0]
    c.call(1, spec.BASIC_REJECT, (tag, False))
    node.crash()
    again = Node(folder)
    d = again.client()
    copy, dead = _get(d, b"dead"), _get(d, b"dead")
    assert copy.properties["headers"] == {"CC": [b"dead"]} and copy.properties["expiration"] == b"60000"
    headers = dead.properties["headers"]
    assert "expiration" not in dead.properties and dead.properties["delivery-mode"] == 2
    assert "CC" not in headers and "BCC" not in headers  # CC goes with x-dead-letter-routing-key
    assert headers["x-death"][0]["original-expiration"] == b"60000"
    assert headers["x-death"][0]["routing-keys"] == [b"work", b"dead"]
    assert headers["x-last-death-reason"] == b"rejected"
    assert _empty(d, b"dead") and _empty(d, b"work")


def test_a_persistent_dead_letter_survives_a_restart_as_it_was_made():
    _durable_dead_letters()


# ---------------------------------------------------------------- CC and BCC


def _cc_setup(client, kind):
    client.declare_exchange(1, b"x", kind)
    for queue in (b"a", b"b", b"c", b"d"):
        client.queue(1, queue)
        client.bind(1, queue, b"x", b"key." + queue if kind == b"direct" else b"*." + queue)


def test_cc_and_bcc_keys_route_on_the_same_exchange_once_per_queue():
    for kind in (b"direct", b"topic"):
        client = opened()
        _cc_setup(client, kind)
        headers = {"CC": [b"key.b", b"key.a"], "BCC": [b"key.c"], "app": 1}
        client.publish(1, b"x", b"key.a", b"m", {"headers": headers})
        for queue in (b"a", b"b", b"c"):
            event = _get(client, queue)
            assert event.args[3] == b"key.a"  # delivered with the routing key published
            assert event.properties["headers"] == {"CC": [b"key.b", b"key.a"], "app": 1}
            assert _empty(client, queue)  # once, whatever number of keys led there
        assert _empty(client, b"d")


def test_cc_on_the_default_exchange_names_queues():
    client = opened()
    for queue in (b"a", b"b"):
        client.queue(1, queue)
    client.publish(1, b"", b"a", b"m", {"headers": {"BCC": [b"b", b"missing"]}})
    assert _get(client, b"b").properties["headers"] == {}
    assert _get(client, b"a").body == b"m"


def test_cc_routes_a_mandatory_message_that_its_routing_key_would_not():
    client = opened()
    client.queue(1, b"a")
    events = client.publish(1, b"", b"nowhere", b"m", {"headers": {"CC": [b"a"]}}, mandatory=True)
    assert names(events) == []  # routed: no basic.return
    assert _get(client, b"a").body == b"m"


def test_cc_that_is_not_an_array_is_refused_as_rabbitmq_refuses_it():
    client = opened()
    client.queue(1, b"a")
    events = client.publish(1, b"", b"a", b"m", {"headers": {"CC": b"a"}})
    text = closed_with(events, spec.PRECONDITION_FAILED)
    assert text == b'PRECONDITION_FAILED - invalid message: {unacceptable_type_in_header,"CC",longstr}'
    client = opened()
    events = client.publish(1, b"", b"a", b"m", {"headers": {"BCC": 3}})
    text = closed_with(events, spec.PRECONDITION_FAILED)
    assert text == b'PRECONDITION_FAILED - invalid message: {unacceptable_type_in_header,"BCC",signedint}'


def test_array_items_that_are_not_long_strings_are_ignored():
    client = opened()
    for queue in (b"a", b"b"):
        client.queue(1, queue)
    client.publish(1, b"", b"a", b"m", {"headers": {"CC": [5, True, [b"b"]]}})
    assert _get(client, b"a").body == b"m" and _empty(client, b"b")


def test_cc_under_a_transaction_routes_at_commit():
    client = opened()
    for queue in (b"a", b"b"):
        client.queue(1, queue)
    client.call(1, spec.TX_SELECT)
    client.publish(1, b"", b"a", b"m", {"headers": {"BCC": [b"b"]}})
    assert _empty(client, b"b")
    client.call(1, spec.TX_COMMIT)
    assert _get(client, b"b").properties["headers"] == {}
