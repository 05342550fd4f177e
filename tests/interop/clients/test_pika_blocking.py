"""pika's BlockingConnection against the real `hutch serve`.

Covers: queue/exchange declare and bind for the direct, fanout, topic and
headers exchange types; publish, consume, basic.get; ack, nack and reject
(with and without requeue, and the redelivered flag); publisher confirms with
mandatory returns (UnroutableError) and broker nacks (NackError); transactions;
exchange-to-exchange bindings; channel errors with RabbitMQ's reply codes (404,
406, 405); per-consumer prefetch; unacked messages requeued in order when a
channel closes; the server-sent consumer cancel when a queue is deleted; bodies
larger than frame_max; heartbeat negotiation and monitoring.

Every wait is bounded: pika's process_data_events(time_limit=...) and the
`wait_until` helper below stop after a few seconds at most.
"""

import datetime
import decimal
import time

import brokers
import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, NackError, StreamLostError, UnroutableError

# A blocking client waits for ever for a reply that never comes: fail the test instead.
pytestmark = pytest.mark.timeout(30)


def connect(broker, **params):
    params.setdefault("blocked_connection_timeout", 10)
    params.setdefault("socket_timeout", 5)
    return pika.BlockingConnection(
        pika.ConnectionParameters(
            host=broker.host, port=broker.port, credentials=pika.PlainCredentials("guest", "guest"), **params
        )
    )


@pytest.fixture
def conn(broker):
    connection = connect(broker)
    yield connection
    if connection.is_open:
        connection.close()


def wait_until(connection, predicate, timeout=5.0):
    """Pump pika's I/O until predicate() holds; fail after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached within %.1fs" % timeout)
        connection.process_data_events(time_limit=0.05)


def drain(channel, queue, limit=1000):
    """Every message basic.get can take from queue right now (auto-ack): [(method, props, body)]."""
    out = []
    for _ in range(limit):
        method, props, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            return out
        out.append((method, props, body))
    raise AssertionError("queue %s still not empty after %d gets" % (queue, limit))


def bodies(messages):
    return [m[2] for m in messages]


def ready_count(channel, queue):
    return channel.queue_declare(queue, passive=True).method.message_count


# ---------------------------------------------------------------- declare, bind, route


def test_server_named_queue_and_default_exchange(conn):
    ch = conn.channel()
    declared = ch.queue_declare("", exclusive=True)
    name = declared.method.queue
    assert name.startswith("amq.gen-")
    assert declared.method.message_count == 0 and declared.method.consumer_count == 0
    ch.basic_publish("", name, b"hello", pika.BasicProperties(content_type="text/plain", headers={"n": 1}))
    method, props, body = ch.basic_get(name, auto_ack=True)
    assert body == b"hello"
    assert method.routing_key == name and method.exchange == "" and not method.redelivered
    assert props.content_type == "text/plain" and props.headers == {"n": 1}
    assert ch.basic_get(name) == (None, None, None)


def test_direct_exchange_routes_by_key(conn):
    ch = conn.channel()
    ch.exchange_declare("logs.direct", "direct")
    for q in ("d.info", "d.error"):
        ch.queue_declare(q)
    ch.queue_bind("d.info", "logs.direct", "info")
    ch.queue_bind("d.error", "logs.direct", "error")
    ch.queue_bind("d.error", "logs.direct", "critical")
    for key in ("info", "error", "critical", "debug"):
        ch.basic_publish("logs.direct", key, key.encode())
    assert bodies(drain(ch, "d.info")) == [b"info"]
    assert bodies(drain(ch, "d.error")) == [b"error", b"critical"]


def test_fanout_exchange_copies_to_every_queue(conn):
    ch = conn.channel()
    ch.exchange_declare("news", "fanout")
    for q in ("f1", "f2", "f3"):
        ch.queue_declare(q)
        ch.queue_bind(q, "news", "ignored-key")
    for i in range(5):
        ch.basic_publish("news", "any", b"n%d" % i)
    for q in ("f1", "f2", "f3"):
        assert bodies(drain(ch, q)) == [b"n%d" % i for i in range(5)]


def test_topic_exchange_wildcards(conn):
    ch = conn.channel()
    ch.exchange_declare("sensors", "topic")
    bindings = {"t.star": "house.*.temp", "t.hash": "house.#", "t.exact": "house.kitchen.temp", "t.tail": "#.humidity"}
    for q, pattern in bindings.items():
        ch.queue_declare(q)
        ch.queue_bind(q, "sensors", pattern)
    for key in (
        "house.kitchen.temp",
        "house.attic.temp",
        "house.kitchen.fridge.temp",
        "house",
        "garden.humidity",
        "house.cellar.humidity",
    ):
        ch.basic_publish("sensors", key, key.encode())
    assert bodies(drain(ch, "t.star")) == [b"house.kitchen.temp", b"house.attic.temp"]
    assert bodies(drain(ch, "t.hash")) == [
        b"house.kitchen.temp",
        b"house.attic.temp",
        b"house.kitchen.fridge.temp",
        b"house",
        b"house.cellar.humidity",
    ]
    assert bodies(drain(ch, "t.exact")) == [b"house.kitchen.temp"]
    assert bodies(drain(ch, "t.tail")) == [b"garden.humidity", b"house.cellar.humidity"]


def test_headers_exchange_all_and_any(conn):
    ch = conn.channel()
    ch.exchange_declare("hx", "headers")
    ch.queue_declare("h.all")
    ch.queue_declare("h.any")
    ch.queue_bind("h.all", "hx", "", arguments={"x-match": "all", "kind": "temp", "room": "kitchen"})
    ch.queue_bind("h.any", "hx", "", arguments={"x-match": "any", "kind": "temp", "room": "kitchen"})
    cases = [
        ({"kind": "temp", "room": "kitchen", "extra": 1}, b"both"),
        ({"kind": "temp", "room": "attic"}, b"kind-only"),
        ({"room": "kitchen"}, b"room-only"),
        ({"kind": "humidity"}, b"neither"),
        (None, b"no-headers"),
    ]
    for headers, body in cases:
        ch.basic_publish("hx", "", body, pika.BasicProperties(headers=headers))
    assert bodies(drain(ch, "h.all")) == [b"both"]
    assert bodies(drain(ch, "h.any")) == [b"both", b"kind-only", b"room-only"]


def test_unbind_stops_routing(conn):
    ch = conn.channel()
    ch.exchange_declare("ub", "direct")
    ch.queue_declare("ub.q")
    ch.queue_bind("ub.q", "ub", "k")
    ch.basic_publish("ub", "k", b"before")
    ch.queue_unbind("ub.q", "ub", "k")
    ch.basic_publish("ub", "k", b"after")
    assert bodies(drain(ch, "ub.q")) == [b"before"]


def test_exchange_to_exchange_binding(conn):
    ch = conn.channel()
    ch.exchange_declare("e2e.src", "topic")
    ch.exchange_declare("e2e.mid", "fanout")
    ch.exchange_declare("e2e.dst", "direct")
    ch.exchange_bind(destination="e2e.mid", source="e2e.src", routing_key="a.#")
    ch.exchange_bind(destination="e2e.dst", source="e2e.mid")
    ch.queue_declare("e2e.q")
    ch.queue_bind("e2e.q", "e2e.dst", "a.b")
    ch.queue_declare("e2e.direct")
    ch.queue_bind("e2e.direct", "e2e.src", "a.b")  # also bound straight to the source
    ch.basic_publish("e2e.src", "a.b", b"routed")  # src -> mid (a.#) -> dst (a.b) -> e2e.q
    ch.basic_publish("e2e.src", "a.c", b"wrong-key")  # reaches dst, but dst has no a.c binding
    ch.basic_publish("e2e.src", "b.b", b"no-match")  # stops at src
    assert bodies(drain(ch, "e2e.q")) == [b"routed"]
    # a queue reachable along two paths still gets one copy
    assert bodies(drain(ch, "e2e.direct")) == [b"routed"]
    ch.exchange_unbind(destination="e2e.mid", source="e2e.src", routing_key="a.#")
    ch.basic_publish("e2e.src", "a.b", b"after-unbind")
    assert drain(ch, "e2e.q") == []


def test_topic_edge_cases(conn):
    # RabbitMQ's semantics: "#" matches zero or more words, "*" exactly one (possibly empty) word
    ch = conn.channel()
    ch.exchange_declare("tedge", "topic")
    patterns = ["#", "*", "a.#.b", "a.*.b", "#.b", "*.*", ""]
    for i, pattern in enumerate(patterns):
        ch.queue_declare("tedge%d" % i)
        ch.queue_bind("tedge%d" % i, "tedge", pattern)
    for key in ("", "a", "a.b", "a.x.b", "a.x.y.b", "b", "a..b"):
        ch.basic_publish("tedge", key, key.encode())
    got = {pattern: [b.decode() for b in bodies(drain(ch, "tedge%d" % i))] for i, pattern in enumerate(patterns)}
    assert got == {
        "#": ["", "a", "a.b", "a.x.b", "a.x.y.b", "b", "a..b"],
        "*": ["a", "b"],
        "a.#.b": ["a.b", "a.x.b", "a.x.y.b", "a..b"],
        "a.*.b": ["a.x.b", "a..b"],
        "#.b": ["a.b", "a.x.b", "a.x.y.b", "b", "a..b"],
        "*.*": ["a.b"],
        "": [""],
    }


def test_alternate_exchange_takes_unroutable(conn):
    ch = conn.channel()
    ch.exchange_declare("ae.catch", "fanout")
    ch.queue_declare("ae.caught")
    ch.queue_bind("ae.caught", "ae.catch")
    ch.exchange_declare("ae.main", "direct", arguments={"alternate-exchange": "ae.catch"})
    ch.queue_declare("ae.routed")
    ch.queue_bind("ae.routed", "ae.main", "known")
    ch.confirm_delivery()
    ch.basic_publish("ae.main", "known", b"routed", mandatory=True)
    ch.basic_publish("ae.main", "unknown", b"to-alternate", mandatory=True)  # not returned: the AE took it
    assert bodies(drain(ch, "ae.routed")) == [b"routed"]
    assert bodies(drain(ch, "ae.caught")) == [b"to-alternate"]


def test_internal_exchange_refuses_publish_403(conn):
    ch = conn.channel()
    ch.exchange_declare("inner", "fanout", internal=True)
    ch.exchange_declare("outer", "fanout")
    ch.exchange_bind(destination="inner", source="outer")
    ch.queue_declare("inner.q")
    ch.queue_bind("inner.q", "inner")
    ch.basic_publish("outer", "", b"via-binding")  # reaching it through a binding is fine
    assert bodies(drain(ch, "inner.q")) == [b"via-binding"]
    ch.basic_publish("inner", "", b"direct")
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.queue_declare("inner.q", passive=True)
    assert e.value.reply_code == 403


def test_competing_consumers_on_two_connections_round_robin(broker, conn):
    other = connect(broker)
    try:
        ch_a = conn.channel()
        ch_b = other.channel()
        ch_a.queue_declare("rr")
        got_a, got_b = [], []
        ch_a.basic_consume("rr", lambda c, m, p, b: (got_a.append(int(b)), c.basic_ack(m.delivery_tag)))
        ch_b.basic_consume("rr", lambda c, m, p, b: (got_b.append(int(b)), c.basic_ack(m.delivery_tag)))
        for i in range(20):
            ch_a.basic_publish("", "rr", b"%d" % i)
        deadline = time.monotonic() + 5
        while len(got_a) + len(got_b) < 20 and time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.02)
            other.process_data_events(time_limit=0.02)
        assert sorted(got_a + got_b) == list(range(20))
        # each consumer gets every other message, in order
        assert {tuple(got_a), tuple(got_b)} == {tuple(range(0, 20, 2)), tuple(range(1, 20, 2))}
    finally:
        other.close()


def test_purge_and_delete_report_counts(conn):
    ch = conn.channel()
    ch.queue_declare("pd")
    for _i in range(7):
        ch.basic_publish("", "pd", b"x")
    assert ch.queue_purge("pd").method.message_count == 7
    for _i in range(3):
        ch.basic_publish("", "pd", b"y")
    assert ch.queue_delete("pd").method.message_count == 3
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.queue_declare("pd", passive=True)
    assert e.value.reply_code == 404


def test_properties_and_headers_round_trip(conn):
    ch = conn.channel()
    ch.queue_declare("props")
    ch.queue_declare("props.dead")
    ch.queue_declare("props.src", arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "props.dead"})
    headers = {
        "str": "text \u00fc",
        "int": 42,
        "neg": -7,
        "big": 2**40,
        "yes": True,
        "no": False,
        "none": None,
        "bytes": b"\x00\x01",
        "dec": decimal.Decimal("3.14"),
        "ts": datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc),
        "list": [1, "two", [3], {"four": 4}],
        "table": {"nested": {"deep": [True, None]}},
    }
    props = pika.BasicProperties(
        content_type="application/x",
        content_encoding="gzip",
        headers=headers,
        delivery_mode=2,
        priority=3,
        correlation_id="cid",
        reply_to="rt",
        expiration="60000",
        message_id="mid",
        timestamp=1700000000,
        type="t",
        user_id="guest",
        app_id="app",
        cluster_id="cl",
    )
    ch.basic_publish("", "props", b"body", props)
    _, got, _ = ch.basic_get("props", auto_ack=True)
    assert got.__dict__ == props.__dict__
    # dead-lettering rewrites the header (adds x-death): every other field must survive
    ch.basic_publish("", "props.src", b"body", props)
    method, _, _ = ch.basic_get("props.src")
    ch.basic_reject(method.delivery_tag, requeue=False)
    method, dead, body = ch.basic_get("props.dead", auto_ack=True)
    assert body == b"body" and method.routing_key == "props.dead"
    dead_headers = dict(dead.headers)
    [death] = dead_headers.pop("x-death")
    assert {k: death[k] for k in ("count", "reason", "queue", "exchange", "routing-keys", "original-expiration")} == {
        "count": 1,
        "reason": "rejected",
        "queue": "props.src",
        "exchange": "",
        "routing-keys": ["props.src"],
        "original-expiration": "60000",
    }
    for which in ("first", "last"):  # x-last-death-*: RabbitMQ 3.13+
        assert dead_headers.pop("x-%s-death-reason" % which) == "rejected"
        assert dead_headers.pop("x-%s-death-queue" % which) == "props.src"
        assert dead_headers.pop("x-%s-death-exchange" % which) == ""
    assert dead_headers == headers
    # the expiration property goes (x-death keeps it as original-expiration), as in RabbitMQ
    assert dead.expiration is None
    assert {k: v for k, v in dead.__dict__.items() if k not in ("headers", "expiration")} == {
        k: v for k, v in props.__dict__.items() if k not in ("headers", "expiration")
    }


def test_invalid_properties_are_406(conn):
    ch = conn.channel()
    ch.queue_declare("badprops")
    ch.basic_publish("", "badprops", b"x", pika.BasicProperties(expiration="soon"))
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.queue_declare("badprops", passive=True)
    assert e.value.reply_code == 406 and "invalid expiration" in e.value.reply_text
    ch = conn.channel()
    ch.basic_publish("", "badprops", b"x", pika.BasicProperties(user_id="not-guest"))
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.queue_declare("badprops", passive=True)
    assert e.value.reply_code == 406 and "user_id" in e.value.reply_text
    assert ready_count(conn.channel(), "badprops") == 0


# ---------------------------------------------------------------- consume, get, settle


def test_consume_and_ack_in_order(conn):
    ch = conn.channel()
    ch.queue_declare("work")
    for i in range(50):
        ch.basic_publish("", "work", b"m%d" % i, pika.BasicProperties(message_id=str(i)))
    got = []

    def on_message(channel, method, props, body):
        got.append((body, props.message_id, method.delivery_tag))
        channel.basic_ack(method.delivery_tag)

    tag = ch.basic_consume("work", on_message)
    wait_until(conn, lambda: len(got) == 50)
    assert [g[0] for g in got] == [b"m%d" % i for i in range(50)]
    assert [g[1] for g in got] == [str(i) for i in range(50)]
    assert [g[2] for g in got] == list(range(1, 51))  # delivery tags count up from 1 per channel
    ch.basic_cancel(tag)
    assert ready_count(ch, "work") == 0


def test_consume_generator_no_ack(conn):
    ch = conn.channel()
    ch.queue_declare("gen")
    for i in range(10):
        ch.basic_publish("", "gen", b"%d" % i)
    got = []
    for method, _props, body in ch.consume("gen", auto_ack=True, inactivity_timeout=2):
        if method is None:
            break
        got.append(body)
        if len(got) == 10:
            break
    ch.cancel()
    assert got == [b"%d" % i for i in range(10)]
    assert ready_count(ch, "gen") == 0


def test_basic_get_reports_remaining_and_empty(conn):
    ch = conn.channel()
    ch.queue_declare("getq")
    for i in range(3):
        ch.basic_publish("", "getq", b"g%d" % i)
    method, _, body = ch.basic_get("getq")
    assert body == b"g0" and method.message_count == 2 and not method.redelivered
    ch.basic_ack(method.delivery_tag)
    method, _, body = ch.basic_get("getq", auto_ack=True)
    assert body == b"g1" and method.message_count == 1
    method, _, body = ch.basic_get("getq", auto_ack=True)
    assert body == b"g2" and method.message_count == 0
    assert ch.basic_get("getq") == (None, None, None)


def test_reject_with_requeue_sets_redelivered(conn):
    ch = conn.channel()
    ch.queue_declare("rej")
    ch.basic_publish("", "rej", b"first")
    ch.basic_publish("", "rej", b"second")
    method, _, body = ch.basic_get("rej")
    assert body == b"first" and not method.redelivered
    ch.basic_reject(method.delivery_tag, requeue=True)
    # a requeued message goes back to the head of the queue
    method, _, body = ch.basic_get("rej")
    assert body == b"first" and method.redelivered
    ch.basic_reject(method.delivery_tag, requeue=False)  # dropped for good
    method, _, body = ch.basic_get("rej", auto_ack=True)
    assert body == b"second" and not method.redelivered
    assert ch.basic_get("rej") == (None, None, None)


def test_nack_multiple_with_and_without_requeue(conn):
    ch = conn.channel()
    ch.queue_declare("nk")
    for i in range(6):
        ch.basic_publish("", "nk", b"%d" % i)
    tags = [ch.basic_get("nk")[0].delivery_tag for _ in range(6)]
    ch.basic_nack(tags[2], multiple=True, requeue=False)  # 0, 1, 2 dropped
    ch.basic_nack(tags[4], multiple=True, requeue=True)  # 3, 4 back to the queue
    ch.basic_ack(tags[5])
    back = drain(ch, "nk")
    assert bodies(back) == [b"3", b"4"]
    assert all(m[0].redelivered for m in back)


def test_ack_multiple_leaves_later_ones_unacked(conn, broker):
    ch = conn.channel()
    ch.queue_declare("am")
    for i in range(5):
        ch.basic_publish("", "am", b"%d" % i)
    tags = [ch.basic_get("am")[0].delivery_tag for _ in range(5)]
    ch.basic_ack(tags[2], multiple=True)
    ch.close()  # 3 and 4 were never acked: they come back
    ch = conn.channel()
    back = drain(ch, "am")
    assert bodies(back) == [b"3", b"4"]
    assert all(m[0].redelivered for m in back)


def test_unknown_delivery_tag_is_406(conn):
    ch = conn.channel()
    ch.queue_declare("unk")
    ch.basic_publish("", "unk", b"x")
    method, _, _ = ch.basic_get("unk")
    ch.basic_ack(method.delivery_tag)
    ch.basic_ack(method.delivery_tag)  # twice: the broker closes the channel
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.queue_declare("unk", passive=True)
    assert e.value.reply_code == 406
    assert "unknown delivery tag" in e.value.reply_text


def test_unacked_requeued_in_order_when_channel_closes(conn):
    ch = conn.channel()
    ch.queue_declare("inorder")
    for i in range(10):
        ch.basic_publish("", "inorder", b"%d" % i)
    ch.basic_qos(prefetch_count=6)
    got = []
    tag = ch.basic_consume("inorder", lambda c, m, p, b: got.append((m.delivery_tag, b)))
    wait_until(conn, lambda: len(got) == 6)
    ch.basic_cancel(tag)  # no more deliveries (cancel leaves the unacked ones unacked)
    ch.basic_ack(got[1][0])  # ack "1"; 0, 2, 3, 4, 5 stay unacked
    ch.close()
    ch2 = conn.channel()
    back = drain(ch2, "inorder")
    # the unacked ones, in their original order, ahead of the never-delivered 6..9
    assert bodies(back) == [b"0", b"2", b"3", b"4", b"5", b"6", b"7", b"8", b"9"]
    assert [m[0].redelivered for m in back] == [True] * 5 + [False] * 4


def test_unacked_requeued_when_connection_closes(broker):
    first = connect(broker)
    ch = first.channel()
    ch.queue_declare("conn-close")
    for i in range(4):
        ch.basic_publish("", "conn-close", b"%d" % i)
    got = []
    ch.basic_consume("conn-close", lambda c, m, p, b: got.append(b))
    wait_until(first, lambda: len(got) == 4)
    first.close()
    second = connect(broker)
    back = drain(second.channel(), "conn-close")
    second.close()
    assert bodies(back) == [b"0", b"1", b"2", b"3"]
    assert all(m[0].redelivered for m in back)


def test_basic_recover_redelivers_unacked(conn):
    ch = conn.channel()
    ch.queue_declare("recover")
    ch.basic_publish("", "recover", b"r")
    got = []
    ch.basic_consume("recover", lambda c, m, p, b: got.append((m.redelivered, b, m.delivery_tag)))
    wait_until(conn, lambda: len(got) == 1)
    ch.basic_recover(requeue=True)
    wait_until(conn, lambda: len(got) == 2)
    assert got[0][:2] == (False, b"r") and got[1][:2] == (True, b"r")
    ch.basic_ack(got[1][2])
    assert ready_count(ch, "recover") == 0


def test_unacked_handed_to_other_consumer_when_channel_closes(conn):
    feeder = conn.channel()
    feeder.queue_declare("handover")
    first = conn.channel()
    got_first = []
    first.basic_consume("handover", lambda c, m, p, b: got_first.append(b))
    for i in range(10):
        feeder.basic_publish("", "handover", b"%d" % i)
    wait_until(conn, lambda: len(got_first) == 10)
    second = conn.channel()
    got_second = []
    second.basic_consume(
        "handover", lambda c, m, p, b: (got_second.append((m.redelivered, b)), c.basic_ack(m.delivery_tag))
    )
    first.close()  # never acked: all ten go to the remaining consumer, in order, redelivered
    wait_until(conn, lambda: len(got_second) == 10)
    assert got_second == [(True, b"%d" % i) for i in range(10)]


def test_exclusive_consumer_refuses_others_403(conn):
    ch = conn.channel()
    ch.queue_declare("solo")
    ch.basic_consume("solo", lambda *a: None, exclusive=True)
    other = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as e:
        other.basic_consume("solo", lambda *a: None)
    assert e.value.reply_code == 403 and "exclusive use" in e.value.reply_text


def test_delete_if_unused_and_if_empty_are_406(conn):
    ch = conn.channel()
    ch.queue_declare("keep")
    ch.basic_publish("", "keep", b"x")
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.queue_delete("keep", if_empty=True)
    assert e.value.reply_code == 406
    ch = conn.channel()
    ch.basic_consume("keep", lambda *a: None)
    other = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as e:
        other.queue_delete("keep", if_unused=True)
    assert e.value.reply_code == 406
    other = conn.channel()
    other.exchange_declare("keep.ex", "direct")
    other.queue_bind("keep", "keep.ex", "k")
    with pytest.raises(ChannelClosedByBroker) as e:
        other.exchange_delete("keep.ex", if_unused=True)
    assert e.value.reply_code == 406
    assert ready_count(conn.channel(), "keep") == 0  # the one message went to the consumer


def test_auto_delete_queue_goes_with_its_last_consumer(conn):
    ch = conn.channel()
    ch.queue_declare("ephemeral", auto_delete=True)
    first = ch.basic_consume("ephemeral", lambda *a: None)
    second = ch.basic_consume("ephemeral", lambda *a: None)
    ch.basic_cancel(first)
    assert ready_count(ch, "ephemeral") == 0  # still there: one consumer left
    ch.basic_cancel(second)
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.queue_declare("ephemeral", passive=True)
    assert e.value.reply_code == 404


def test_queue_expires_when_unused(conn, broker):
    ch = conn.channel()
    ch.queue_declare("x-expires-kept", arguments={"x-expires": 300})
    ch.basic_consume("x-expires-kept", lambda *a: None)  # in use: does not expire
    ch.queue_declare("x-expires", arguments={"x-expires": 300})
    # Wait out the 300 ms without touching the queues (a declare would use them): until the
    # broker logs the unused one's expiry. The kept one, declared first, was due by then too.
    expired = "queue 'x-expires' expired after 300 ms unused"
    brokers.wait_until(lambda: expired in broker.log(), what="the queue's expiry in the broker's log")
    assert "queue 'x-expires-kept' expired" not in broker.log()
    assert ready_count(ch, "x-expires-kept") == 0
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.queue_declare("x-expires", passive=True)
    assert e.value.reply_code == 404


def test_prefetch_limits_unacked_per_consumer(conn):
    ch = conn.channel()
    ch.queue_declare("qos")
    for i in range(20):
        ch.basic_publish("", "qos", b"%d" % i)
    ch.basic_qos(prefetch_count=3)
    unacked = []
    most = [0]

    def on_message(channel, method, props, body):
        unacked.append(method.delivery_tag)
        most[0] = max(most[0], len(unacked))

    ch.basic_consume("qos", on_message)
    wait_until(conn, lambda: len(unacked) == 3)
    conn.process_data_events(time_limit=0.3)  # give the broker the chance to overshoot
    assert len(unacked) == 3
    assert ready_count(ch, "qos") == 17
    for _ in range(17):  # messages 4..20
        # ack one at a time: each ack opens exactly one slot, which the next message fills
        ch.basic_ack(unacked.pop(0))
        wait_until(conn, lambda: len(unacked) == 3)
    while unacked:
        ch.basic_ack(unacked.pop(0))
    assert most[0] == 3
    assert ready_count(ch, "qos") == 0


def test_prefetch_shared_by_channel_with_global(conn):
    ch = conn.channel()
    for q in ("g1", "g2"):
        ch.queue_declare(q)
        for i in range(5):
            ch.basic_publish("", q, b"%d" % i)
    ch.basic_qos(prefetch_count=4, global_qos=True)
    got = []
    for q in ("g1", "g2"):
        ch.basic_consume(q, lambda c, m, p, b: got.append(m.delivery_tag))
    wait_until(conn, lambda: len(got) == 4)
    conn.process_data_events(time_limit=0.3)
    assert len(got) == 4  # both consumers share one window of 4
    ch.basic_ack(0, multiple=True)
    wait_until(conn, lambda: len(got) == 8)


# ---------------------------------------------------------------- confirms


def test_confirms_ack_routable_publishes(conn):
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("conf")
    for i in range(100):
        ch.basic_publish("", "conf", b"%d" % i, mandatory=True)  # raises on nack or return
    assert ready_count(ch, "conf") == 100


def test_confirms_mandatory_unroutable_is_returned(conn):
    ch = conn.channel()
    ch.confirm_delivery()
    ch.exchange_declare("nowhere", "direct")
    with pytest.raises(UnroutableError) as e:
        ch.basic_publish("nowhere", "no-such-key", b"lost", pika.BasicProperties(message_id="u1"), mandatory=True)
    [returned] = e.value.messages
    assert returned.method.reply_code == 312 and returned.method.reply_text == "NO_ROUTE"
    assert returned.method.exchange == "nowhere" and returned.method.routing_key == "no-such-key"
    assert returned.body == b"lost" and returned.properties.message_id == "u1"
    # without mandatory an unroutable message is simply dropped and acked
    ch.basic_publish("nowhere", "no-such-key", b"dropped")
    # the channel is still usable
    ch.queue_declare("after-return")
    ch.basic_publish("", "after-return", b"ok", mandatory=True)
    assert bodies(drain(ch, "after-return")) == [b"ok"]


def test_confirms_nack_when_queue_rejects(conn):
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("bounded", arguments={"x-max-length": 2, "x-overflow": "reject-publish"})
    ch.basic_publish("", "bounded", b"1")
    ch.basic_publish("", "bounded", b"2")
    with pytest.raises(NackError):  # the queue is full and says so: nack, not a silent drop
        ch.basic_publish("", "bounded", b"3")
    assert bodies(drain(ch, "bounded")) == [b"1", b"2"]
    ch.basic_publish("", "bounded", b"4")  # room again: acked
    assert bodies(drain(ch, "bounded")) == [b"4"]


def test_return_without_confirms_reaches_callback(conn):
    ch = conn.channel()
    returned = []
    ch.add_on_return_callback(lambda c, method, props, body: returned.append((method.reply_code, body)))
    ch.basic_publish("amq.direct", "nobody-bound", b"bounce", mandatory=True)
    wait_until(conn, lambda: returned)
    assert returned == [(312, b"bounce")]


# ---------------------------------------------------------------- transactions


def test_tx_commit_and_rollback(conn):
    ch = conn.channel()
    ch.queue_declare("txq")
    ch.tx_select()
    ch.basic_publish("", "txq", b"rolled-back")
    assert ready_count(ch, "txq") == 0  # nothing is routed before the commit
    ch.tx_rollback()
    ch.basic_publish("", "txq", b"committed-1")
    ch.basic_publish("", "txq", b"committed-2")
    ch.tx_commit()
    assert ready_count(ch, "txq") == 2
    other = conn.channel()
    assert bodies(drain(other, "txq")) == [b"committed-1", b"committed-2"]


def test_tx_acks_take_effect_on_commit_only(conn):
    ch = conn.channel()
    ch.queue_declare("txack")
    for i in range(2):
        ch.basic_publish("", "txack", b"%d" % i)
    ch.tx_select()
    first = ch.basic_get("txack")[0]
    second = ch.basic_get("txack")[0]
    ch.basic_ack(first.delivery_tag)
    ch.tx_commit()
    ch.basic_ack(second.delivery_tag)
    ch.tx_rollback()  # the ack of "1" is forgotten; "1" stays unacked
    ch.close()  # ...and comes back when the channel closes
    back = drain(conn.channel(), "txack")
    assert bodies(back) == [b"1"] and back[0][0].redelivered


def test_tx_and_confirm_modes_exclude_each_other_406(conn):
    ch = conn.channel()
    ch.tx_select()
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.confirm_delivery()
    assert e.value.reply_code == 406
    ch = conn.channel()
    ch.confirm_delivery()
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.tx_select()
    assert e.value.reply_code == 406


def test_tx_commit_without_select_is_406(conn):
    ch = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.tx_commit()
    assert e.value.reply_code == 406


# ---------------------------------------------------------------- errors


def test_passive_declare_of_missing_queue_is_404(conn):
    ch = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.queue_declare("does-not-exist", passive=True)
    assert e.value.reply_code == 404
    assert e.value.reply_text == "NOT_FOUND - no queue 'does-not-exist' in vhost '/'"
    assert conn.is_open  # a channel error leaves the connection alone
    assert conn.channel().queue_declare("", exclusive=True).method.queue


def test_passive_declare_of_missing_exchange_is_404(conn):
    ch = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.exchange_declare("no-such-exchange", passive=True)
    assert e.value.reply_code == 404


def test_publish_to_missing_exchange_closes_channel_404(conn):
    ch = conn.channel()
    ch.basic_publish("missing-exchange", "k", b"x")
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.queue_declare("", exclusive=True)
    assert e.value.reply_code == 404
    assert "missing-exchange" in e.value.reply_text


def test_redeclare_queue_with_other_properties_is_406(conn):
    ch = conn.channel()
    ch.queue_declare("strict", durable=True)
    ch.queue_declare("strict", durable=True)  # the same again is fine
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.queue_declare("strict", durable=False)
    assert e.value.reply_code == 406
    assert "inequivalent arg 'durable'" in e.value.reply_text
    ch = conn.channel()
    ch.queue_declare("ttl", arguments={"x-message-ttl": 1000})
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.queue_declare("ttl", arguments={"x-message-ttl": 2000})
    assert e.value.reply_code == 406


def test_redeclare_exchange_with_other_type_is_406(conn):
    ch = conn.channel()
    ch.exchange_declare("ex.kind", "direct")
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.exchange_declare("ex.kind", "fanout")
    assert e.value.reply_code == 406
    assert "inequivalent arg 'type'" in e.value.reply_text


def test_reserved_amq_prefix_is_403(conn):
    ch = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as e:
        ch.exchange_declare("amq.mine", "direct")
    assert e.value.reply_code == 403


def test_bind_and_delete_errors(conn):
    cases = [
        (lambda ch: ch.queue_bind("amq.gen-none", "amq.direct", "k"), 404),  # no such queue
        (lambda ch: ch.queue_bind("bind.q", "no-such-exchange", "k"), 404),
        (lambda ch: ch.queue_bind("bind.q", "", "k"), 403),  # the default exchange binds itself
        (lambda ch: ch.exchange_bind("no-such-exchange", "amq.fanout"), 404),
        (lambda ch: ch.exchange_delete("amq.direct"), 403),  # predeclared exchanges stay
    ]
    conn.channel().queue_declare("bind.q")
    for attempt, code in cases:
        ch = conn.channel()
        with pytest.raises(ChannelClosedByBroker) as e:
            attempt(ch)
        assert e.value.reply_code == code, e.value.reply_text
    # removing what is not there succeeds, as in RabbitMQ
    ch = conn.channel()
    ch.queue_unbind("bind.q", "amq.direct", "never-bound")
    assert ch.queue_delete("never-declared").method.message_count == 0
    ch.exchange_delete("never-declared")


def test_exclusive_queue_from_second_connection_is_405(broker, conn):
    ch = conn.channel()
    ch.queue_declare("mine-only", exclusive=True)
    other = connect(broker)
    try:
        for attempt in (
            lambda c: c.queue_declare("mine-only", exclusive=True),
            lambda c: c.queue_declare("mine-only", passive=True),
            lambda c: c.basic_consume("mine-only", lambda *a: None),
        ):
            oc = other.channel()
            with pytest.raises(ChannelClosedByBroker) as e:
                attempt(oc)
            assert e.value.reply_code == 405
            assert "RESOURCE_LOCKED" in e.value.reply_text
        # publishing to it is not locked (RabbitMQ): only declare, consume and get are
        oc = other.channel()
        oc.confirm_delivery()
        oc.basic_publish("", "mine-only", b"from-other", mandatory=True)
    finally:
        other.close()
    assert ch.basic_get("mine-only", auto_ack=True)[2] == b"from-other"
    # the owner still uses it; once the owner is gone, the queue is gone too
    ch.basic_publish("", "mine-only", b"x")
    assert ready_count(ch, "mine-only") == 1
    conn.close()
    third = connect(broker)
    with pytest.raises(ChannelClosedByBroker) as e:
        third.channel().queue_declare("mine-only", passive=True)
    assert e.value.reply_code == 404
    third.close()


def test_consumer_cancel_notification_when_queue_deleted(conn):
    ch = conn.channel()
    ch.queue_declare("doomed")
    cancelled = []
    ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
    tag = ch.basic_consume("doomed", lambda *a: None)
    other = conn.channel()
    other.queue_delete("doomed")
    wait_until(conn, lambda: cancelled)
    assert cancelled == [tag]
    assert tag not in ch.consumer_tags
    # the channel survives the cancel
    ch.queue_declare("survivor")
    assert ready_count(ch, "survivor") == 0


# ---------------------------------------------------------------- big bodies, heartbeats


def test_large_bodies_cross_frame_boundaries(conn):
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("big")
    frame_max = conn._impl.params.frame_max  # negotiated; a 1 MiB body needs several body frames
    assert frame_max <= 131072
    sizes = [1024 * 1024, frame_max - 8, frame_max - 7, frame_max, 3 * frame_max + 1, 0]
    sent = [bytes((i * 7 + n) % 251 for i in range(size)) for n, size in enumerate(sizes)]
    for body in sent:
        ch.basic_publish("", "big", body)
    got = []
    ch.basic_consume("big", lambda c, m, p, b: (got.append(b), c.basic_ack(m.delivery_tag)))
    wait_until(conn, lambda: len(got) == len(sent), timeout=10)
    assert [len(b) for b in got] == sizes
    assert got == sent


def test_small_negotiated_frame_max_is_respected(broker):
    # the client asks for the 4096 minimum: the broker must split deliveries, returns
    # and get-oks at that size (pika rejects larger frames)
    conn = connect(broker, frame_max=4096)
    try:
        assert conn._impl.params.frame_max == 4096
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("small-frames")
        body = bytes(range(256)) * 400
        ch.basic_publish("", "small-frames", body, pika.BasicProperties(headers={"pad": "v" * 3000}))
        method, props, got = ch.basic_get("small-frames", auto_ack=True)
        assert got == body and props.headers == {"pad": "v" * 3000}
        with pytest.raises(UnroutableError) as e:
            ch.basic_publish("", "no-such-queue", body, mandatory=True)
        assert e.value.messages[0].body == body
    finally:
        conn.close()


def test_prefetch_size_is_not_implemented_540(conn):
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as e:
        ch.basic_qos(prefetch_size=1024)
    assert e.value.reply_code == 540  # a connection error, as in RabbitMQ


def test_heartbeat_negotiated_and_connection_kept_alive(broker):
    offered = []

    def choose(connection, server_value):
        offered.append(server_value)
        return 2

    conn = connect(broker, heartbeat=choose)
    assert offered == [60]  # hutch's default, from its limits
    assert conn._impl.params.heartbeat == 2
    ch = conn.channel()
    ch.queue_declare("alive")
    checker = conn._impl._heartbeat_checker
    deadline = time.monotonic() + 5.5  # well past the 4 s a silent peer would be allowed
    while time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.5)
    assert conn.is_open
    assert checker._heartbeat_frames_received >= 2  # the broker sends one every heartbeat/2
    ch.basic_publish("", "alive", b"still here")
    assert bodies(drain(ch, "alive")) == [b"still here"]
    conn.close()
    assert "missed heartbeats" not in broker.log()


def test_broker_drops_a_client_that_stops_heartbeating(broker):
    conn = connect(broker, heartbeat=1)
    ch = conn.channel()
    time.sleep(3.5)  # no I/O at all: more than two heartbeat periods of silence
    with pytest.raises((StreamLostError, pika.exceptions.ConnectionClosed)):
        ch.queue_declare("", exclusive=True)
        conn.process_data_events(time_limit=1)
    assert "missed heartbeats" in broker.log()
