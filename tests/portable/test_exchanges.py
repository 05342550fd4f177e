"""exchange.declare/delete/bind/unbind and routing by every exchange type."""

from harness import closed_with, method, names, opened

from hutch.codec import spec
from hutch.codec.wire import method_name


def _routes(client, exchange, key, queues, headers=None):
    """Publish one message; return the queues (of `queues`) it reached."""
    client.publish(1, exchange, key, b"probe", {"headers": headers} if headers else None)
    reached = []
    for queue in queues:
        event = client.get(1, queue, no_ack=True)[0]
        if event.name == "basic.get-ok":
            reached.append(queue)
    return reached


def test_predeclared_exchanges():
    client = opened()
    for name, kind in (
        (b"amq.direct", b"direct"),
        (b"amq.fanout", b"fanout"),
        (b"amq.topic", b"topic"),
        (b"amq.match", b"headers"),
        (b"amq.headers", b"headers"),
    ):
        events = client.declare_exchange(1, name, kind, passive=True)
        assert names(events) == ["exchange.declare-ok"], (name, events)
        # an active declare of a system exchange is a redeclare: fine when equivalent (RabbitMQ)
        events = client.declare_exchange(1, name, kind, durable=True)
        assert names(events) == ["exchange.declare-ok"], (name, events)


def test_system_exchange_redeclared_otherwise():
    client = opened()
    text = closed_with(client.declare_exchange(1, b"amq.direct", b"direct"), spec.PRECONDITION_FAILED)
    assert text == (
        b"PRECONDITION_FAILED - inequivalent arg 'durable' for exchange 'amq.direct' in vhost '/': "
        b"received 'false' but current is 'true'"
    )
    client.channel(2)
    text = closed_with(client.declare_exchange(2, b"amq.direct", b"fanout", durable=True), spec.PRECONDITION_FAILED)
    assert b"inequivalent arg 'type'" in text


DEFAULT_REFUSED = b"ACCESS_REFUSED - operation not permitted on the default exchange"


def test_default_exchange_refuses_every_operation():
    """RabbitMQ answers 403 to anything but publishing on "": passive or active declare, delete,
    binding to or from it, and before it looks for the other end (a missing queue or exchange)."""
    client = opened()
    client.queue(1, b"q")
    client.declare_exchange(1, b"x", b"fanout")
    attempts = (
        lambda ch: client.declare_exchange(ch, b"", passive=True),
        lambda ch: client.declare_exchange(ch, b"", b"direct", durable=True),
        lambda ch: client.call(ch, spec.EXCHANGE_DELETE, (0, b"", False, False)),
        lambda ch: client.bind(ch, b"q", b""),
        lambda ch: client.bind(ch, b"missing", b""),
        lambda ch: client.call(ch, spec.QUEUE_UNBIND, (0, b"missing", b"", b"k", {})),
        lambda ch: client.call(ch, spec.EXCHANGE_BIND, (0, b"", b"x", b"k", False, {})),
        lambda ch: client.call(ch, spec.EXCHANGE_BIND, (0, b"missing", b"", b"k", False, {})),
        lambda ch: client.call(ch, spec.EXCHANGE_UNBIND, (0, b"x", b"", b"k", False, {})),
    )
    for number, attempt in enumerate(attempts, 2):
        client.channel(number)
        assert closed_with(attempt(number), spec.ACCESS_REFUSED) == DEFAULT_REFUSED, number


def test_binding_refusals_in_rabbitmq_order():
    """A missing exchange is reported before a missing queue, a missing source exchange before a
    missing destination."""
    client = opened()
    text = closed_with(client.bind(1, b"no-queue", b"no-exchange"), spec.NOT_FOUND)
    assert text == b"NOT_FOUND - no exchange 'no-exchange' in vhost '/'"
    client.channel(2)
    text = closed_with(client.call(2, spec.EXCHANGE_BIND, (0, b"no-dest", b"no-src", b"", False, {})), spec.NOT_FOUND)
    assert text == b"NOT_FOUND - no exchange 'no-src' in vhost '/'"


def test_declare_each_type_and_redeclare():
    client = opened()
    for kind in (b"direct", b"fanout", b"topic", b"headers"):
        name = b"ex-" + kind
        assert names(client.declare_exchange(1, name, kind)) == ["exchange.declare-ok"]
        assert names(client.declare_exchange(1, name, kind)) == ["exchange.declare-ok"]
        assert names(client.declare_exchange(1, name, b"ignored", passive=True)) == ["exchange.declare-ok"]


def test_passive_declare_of_missing_exchange():
    client = opened()
    text = closed_with(client.declare_exchange(1, b"nope", passive=True), spec.NOT_FOUND)
    assert text == b"NOT_FOUND - no exchange 'nope' in vhost '/'"


def test_redeclare_with_other_properties():
    for change in (
        {"kind": b"fanout"},
        {"durable": True},
        {"auto_delete": True},
        {"internal": True},
        {"arguments": {"alternate-exchange": "ae"}},
    ):
        client = opened()
        client.declare_exchange(1, b"x", b"direct")
        text = closed_with(
            client.declare_exchange(1, b"x", **dict({"kind": b"direct"}, **change)), spec.PRECONDITION_FAILED
        )
        assert b"inequivalent arg" in text, text


def test_reserved_names():
    client = opened()
    closed_with(client.declare_exchange(1, b"amq.mine", b"direct"), spec.ACCESS_REFUSED)
    client.channel(2)
    closed_with(client.declare_exchange(2, b"", b"direct"), spec.ACCESS_REFUSED)
    client.channel(3)
    text = closed_with(client.call(3, spec.EXCHANGE_DELETE, (0, b"amq.direct", False, False)), spec.ACCESS_REFUSED)
    assert text == b"ACCESS_REFUSED - deletion of system exchange 'amq.direct' in vhost '/' not allowed"
    client.channel(4)
    closed_with(client.call(4, spec.EXCHANGE_DELETE, (0, b"", False, False)), spec.ACCESS_REFUSED)


def test_unknown_exchange_type():
    client = opened()
    text = closed_with(client.declare_exchange(1, b"x", b"system"), spec.PRECONDITION_FAILED)
    assert b"invalid exchange type 'system'" in text


def test_delete_if_unused_and_missing():
    client = opened()
    client.declare_exchange(1, b"x", b"fanout")
    queue = client.queue(1, b"q")
    client.bind(1, queue, b"x")
    closed_with(client.call(1, spec.EXCHANGE_DELETE, (0, b"x", True, False)), spec.PRECONDITION_FAILED)
    client.channel(2)
    assert names(client.call(2, spec.EXCHANGE_DELETE, (0, b"x", False, False))) == ["exchange.delete-ok"]
    assert names(client.call(2, spec.EXCHANGE_DELETE, (0, b"x", False, False))) == ["exchange.delete-ok"]
    closed_with(client.declare_exchange(2, b"x", passive=True), spec.NOT_FOUND)


def test_bind_errors():
    client = opened()
    client.queue(1, b"q")
    closed_with(client.bind(1, b"q", b"missing"), spec.NOT_FOUND)
    client.channel(2)
    closed_with(client.bind(2, b"missing", b"amq.direct"), spec.NOT_FOUND)
    client.channel(3)
    closed_with(client.bind(3, b"q", b""), spec.ACCESS_REFUSED)  # the default exchange takes no bindings


def test_direct_routing_and_unbind():
    client = opened()
    client.declare_exchange(1, b"d", b"direct")
    for queue, key in ((b"a", b"red"), (b"b", b"red"), (b"c", b"blue")):
        client.queue(1, queue)
        client.bind(1, queue, b"d", key)
    assert _routes(client, b"d", b"red", [b"a", b"b", b"c"]) == [b"a", b"b"]
    assert _routes(client, b"d", b"blue", [b"a", b"b", b"c"]) == [b"c"]
    assert _routes(client, b"d", b"green", [b"a", b"b", b"c"]) == []
    events = client.call(1, spec.QUEUE_UNBIND, (0, b"a", b"d", b"red", {}))
    assert names(events) == ["queue.unbind-ok"]
    assert _routes(client, b"d", b"red", [b"a", b"b", b"c"]) == [b"b"]
    # unbinding what is not bound is fine, as in RabbitMQ
    assert names(client.call(1, spec.QUEUE_UNBIND, (0, b"a", b"d", b"red", {}))) == ["queue.unbind-ok"]


def test_unbinding_from_what_is_gone_is_ok_as_in_rabbitmq():
    """An auto-delete exchange goes with its last binding; clients unbind from it at teardown."""
    client = opened()
    client.declare_exchange(1, b"src", b"fanout", auto_delete=True)
    client.declare_exchange(1, b"dst", b"fanout")
    assert names(client.call(1, spec.EXCHANGE_BIND, (0, b"dst", b"src", b"", False, {}))) == ["exchange.bind-ok"]
    for _ in range(2):  # the first unbind removes src (its last binding), the second finds it gone
        assert names(client.call(1, spec.EXCHANGE_UNBIND, (0, b"dst", b"src", b"", False, {}))) == [
            "exchange.unbind-ok"
        ]
    closed_with(client.declare_exchange(1, b"src", b"fanout", passive=True), spec.NOT_FOUND)
    client.channel(2)
    client.queue(2, b"q")
    for unbind in (
        (spec.QUEUE_UNBIND, (0, b"q", b"no.such.x", b"k", {})),
        (spec.QUEUE_UNBIND, (0, b"no.such.q", b"dst", b"k", {})),
        (spec.EXCHANGE_UNBIND, (0, b"no.such.dst", b"dst", b"", False, {})),
    ):
        assert names(client.call(2, *unbind)) == [method_name(unbind[0]) + "-ok"]
    closed_with(client.call(2, spec.QUEUE_UNBIND, (0, b"q", b"", b"q", {})), spec.ACCESS_REFUSED)


def test_same_queue_bound_twice_gets_one_copy():
    client = opened()
    client.declare_exchange(1, b"d", b"direct")
    client.queue(1, b"q")
    client.bind(1, b"q", b"d", b"k")
    client.bind(1, b"q", b"d", b"k", {"x-extra": 1})  # a second binding with other arguments
    client.bind(1, b"q", b"d", b"k")  # a duplicate: a no-op
    client.publish(1, b"d", b"k", b"once")
    assert client.get(1, b"q", no_ack=True)[0].name == "basic.get-ok"
    assert client.get(1, b"q", no_ack=True)[0].name == "basic.get-empty"


def test_default_exchange_routes_by_queue_name():
    client = opened()
    client.queue(1, b"orders")
    assert _routes(client, b"", b"orders", [b"orders"]) == [b"orders"]
    assert _routes(client, b"amq.direct", b"orders", [b"orders"]) == []


def test_fanout_routing():
    client = opened()
    for queue in (b"a", b"b", b"c"):
        client.queue(1, queue)
        client.bind(1, queue, b"amq.fanout", queue)
    assert _routes(client, b"amq.fanout", b"anything", [b"a", b"b", b"c"]) == [b"a", b"b", b"c"]


def test_topic_routing():
    client = opened()
    patterns = {
        b"q1": b"*.stock.#",
        b"q2": b"usd.#",
        b"q3": b"#",
        b"q4": b"*",
        b"q5": b"a.*.c",
        b"q6": b"a.#.c",
        b"q7": b"",
    }
    for queue, pattern in patterns.items():
        client.queue(1, queue)
        client.bind(1, queue, b"amq.topic", pattern)
    every = sorted(patterns)
    cases = {
        b"usd.stock": [b"q1", b"q2", b"q3"],
        b"eur.stock.db": [b"q1", b"q3"],
        b"stock.nasdaq": [b"q3"],
        b"usd": [b"q2", b"q3", b"q4"],
        b"a.b.c": [b"q3", b"q5", b"q6"],
        b"a.c": [b"q3", b"q6"],
        b"a.x.y.c": [b"q3", b"q6"],
        b"": [b"q3", b"q7"],
    }
    for key, expected in cases.items():
        assert _routes(client, b"amq.topic", key, every) == expected, key


def test_a_topic_exchange_s_routes_follow_its_bindings_as_they_change():
    """With the trie's walk, and with core/route_cache.py's router that remembers each routing
    key's queues (a broker on CPython): a binding made or removed, or a queue deleted, is seen
    by the next publish."""
    from hutch.core import route_cache

    _routes_follow_bindings()
    remembering = _routes_follow_bindings(route_cache.routers())
    assert isinstance(remembering.exchange(b"amq.topic").router, route_cache.RememberingTopicRouter)


def _routes_follow_bindings(routers=None):
    client = opened()
    if routers is not None:
        client.broker.routers = routers
    client.queue(1, b"a")
    client.bind(1, b"a", b"amq.topic", b"sensors.#")
    assert _routes(client, b"amq.topic", b"sensors.1.temp", [b"a"]) == [b"a"]
    client.queue(1, b"b")
    client.bind(1, b"b", b"amq.topic", b"sensors.*.temp")
    assert _routes(client, b"amq.topic", b"sensors.1.temp", [b"a", b"b"]) == [b"a", b"b"]
    client.call(1, spec.QUEUE_UNBIND, (0, b"a", b"amq.topic", b"sensors.#", {}))
    assert _routes(client, b"amq.topic", b"sensors.1.temp", [b"a", b"b"]) == [b"b"]
    client.call(1, spec.QUEUE_DELETE, (0, b"b", False, False, False))
    assert _routes(client, b"amq.topic", b"sensors.1.temp", [b"a"]) == []
    return client.broker


def test_topic_unbind_prunes():
    client = opened()
    client.queue(1, b"q")
    client.bind(1, b"q", b"amq.topic", b"a.b.c")
    client.bind(1, b"q", b"amq.topic", b"a.*")
    client.call(1, spec.QUEUE_UNBIND, (0, b"q", b"amq.topic", b"a.b.c", {}))
    assert _routes(client, b"amq.topic", b"a.b.c", [b"q"]) == []
    assert _routes(client, b"amq.topic", b"a.b", [b"q"]) == [b"q"]
    router = client.broker.exchange(b"amq.topic").router
    assert list(router.root.children[b"a"].children) == [b"*"]


def test_headers_routing():
    client = opened()
    bindings = {
        b"all": {"x-match": "all", "format": "pdf", "type": "report"},
        b"any": {"x-match": "any", "format": "pdf", "type": "log"},
        b"default": {"format": "zip"},  # no x-match means all
        b"present": {"x-match": "all", "urgent": None},  # a void value matches on presence
        b"with-x": {"x-match": "any-with-x", "x-tag": 7},
    }
    for queue, args in bindings.items():
        client.queue(1, queue)
        client.bind(1, queue, b"amq.headers", b"", args)
    every = sorted(bindings)
    assert _routes(client, b"amq.headers", b"", every, {"format": "pdf", "type": "report"}) == [b"all", b"any"]
    assert _routes(client, b"amq.headers", b"", every, {"type": "log"}) == [b"any"]
    assert _routes(client, b"amq.headers", b"", every, {"format": "zip"}) == [b"default"]
    assert _routes(client, b"amq.headers", b"", every, {"urgent": False}) == [b"present"]
    assert _routes(client, b"amq.headers", b"", every, {"x-tag": 7}) == [b"with-x"]
    assert _routes(client, b"amq.headers", b"", every, {}) == []


def test_headers_bad_x_match():
    client = opened()
    client.queue(1, b"q")
    closed_with(client.bind(1, b"q", b"amq.headers", b"", {"x-match": "some"}), spec.PRECONDITION_FAILED)


def test_exchange_to_exchange():
    client = opened()
    client.declare_exchange(1, b"upstream", b"topic")
    client.declare_exchange(1, b"downstream", b"fanout")
    client.queue(1, b"q")
    client.bind(1, b"q", b"downstream")
    events = client.call(1, spec.EXCHANGE_BIND, (0, b"downstream", b"upstream", b"sensor.#", False, {}))
    assert names(events) == ["exchange.bind-ok"]
    assert _routes(client, b"upstream", b"sensor.temp", [b"q"]) == [b"q"]
    assert _routes(client, b"upstream", b"actuator.valve", [b"q"]) == []
    events = client.call(1, spec.EXCHANGE_UNBIND, (0, b"downstream", b"upstream", b"sensor.#", False, {}))
    assert names(events) == ["exchange.unbind-ok"]
    assert _routes(client, b"upstream", b"sensor.temp", [b"q"]) == []


def test_exchange_binding_cycle_delivers_once():
    client = opened()
    client.declare_exchange(1, b"a", b"fanout")
    client.declare_exchange(1, b"b", b"fanout")
    client.call(1, spec.EXCHANGE_BIND, (0, b"b", b"a", b"", False, {}))
    client.call(1, spec.EXCHANGE_BIND, (0, b"a", b"b", b"", False, {}))
    client.queue(1, b"q")
    client.bind(1, b"q", b"b")
    client.publish(1, b"a", b"", b"once")
    assert client.get(1, b"q", no_ack=True)[0].name == "basic.get-ok"
    assert client.get(1, b"q", no_ack=True)[0].name == "basic.get-empty"


def test_exchange_bind_errors():
    client = opened()
    closed_with(client.call(1, spec.EXCHANGE_BIND, (0, b"missing", b"amq.direct", b"", False, {})), spec.NOT_FOUND)
    client.channel(2)
    closed_with(client.call(2, spec.EXCHANGE_BIND, (0, b"", b"amq.direct", b"", False, {})), spec.ACCESS_REFUSED)


def test_auto_delete_exchange_goes_with_its_last_binding():
    client = opened()
    client.declare_exchange(1, b"temp", b"direct", auto_delete=True)
    client.queue(1, b"q")
    client.bind(1, b"q", b"temp", b"k")
    client.call(1, spec.QUEUE_UNBIND, (0, b"q", b"temp", b"k", {}))
    closed_with(client.declare_exchange(1, b"temp", passive=True), spec.NOT_FOUND)


def test_deleting_an_exchange_removes_its_bindings():
    client = opened()
    client.declare_exchange(1, b"x", b"fanout")
    client.queue(1, b"q")
    client.bind(1, b"q", b"x")
    client.call(1, spec.EXCHANGE_DELETE, (0, b"x", False, False))
    assert client.broker.queues[b"q"].inbound == []
    assert client.broker.binding_count == 0


def test_internal_exchange_refuses_publish():
    client = opened()
    client.declare_exchange(1, b"inner", b"fanout", internal=True)
    text = closed_with(client.publish(1, b"inner", b"", b"x"), spec.ACCESS_REFUSED)
    assert b"internal exchange" in text


def test_publish_to_missing_exchange():
    client = opened()
    text = closed_with(client.publish(1, b"ghost", b"", b"x"), spec.NOT_FOUND)
    assert text == b"NOT_FOUND - no exchange 'ghost' in vhost '/'"


def test_alternate_exchange_takes_unroutable():
    client = opened()
    client.declare_exchange(1, b"ae", b"fanout")
    client.queue(1, b"leftovers")
    client.bind(1, b"leftovers", b"ae")
    client.declare_exchange(1, b"main", b"direct", arguments={"alternate-exchange": "ae"})
    client.queue(1, b"routed")
    client.bind(1, b"routed", b"main", b"good")
    assert _routes(client, b"main", b"good", [b"routed", b"leftovers"]) == [b"routed"]
    assert _routes(client, b"main", b"bad", [b"routed", b"leftovers"]) == [b"leftovers"]
    # a message that reached the alternate exchange is not "unroutable": no return
    events = client.publish(1, b"main", b"bad", b"x", mandatory=True)
    assert events == []


def test_nowait_declare_sends_nothing():
    client = opened()
    client.send(method(1, spec.EXCHANGE_DECLARE, (0, b"quiet", b"fanout", False, False, False, False, True, {})))
    assert client.read() == []
    assert names(client.declare_exchange(1, b"quiet", b"fanout", passive=True)) == ["exchange.declare-ok"]
