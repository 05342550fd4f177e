"""Dead-lettering, overflow and sender-selected distribution, hutch against the run's RabbitMQ
(issue 14): the x-death table and the x-first-death-* headers of expired (per-message and queue
TTL), rejected and maxlen deaths, a message dying twice in one queue and in a cycle;
x-overflow = reject-publish-dlx; x-max-length-bytes on every kind of queue (in memory,
durable, exclusive, lazy, and a hutch whose durable queues page their backlog to disk) with
each overflow mode; the CC and BCC headers on direct, topic and the default exchange.

Each scenario is a function of one broker that returns what its client saw, as plain data
(differential.py): the queue and exchange names it made are replaced by their roles, and
x-death's time by "<time>", so the two brokers' observations can be compared as they are.
Clients vary by item: pika (dead-lettering, CC/BCC), aio-pika (reject-publish-dlx), py-amqp
(x-max-length-bytes, CC given as a string).
"""

import asyncio
import datetime

import aio_pika
import amqp
import pika
import pytest
from brokers import RunningBroker, pika_connection, wait_until
from differential import MARKS, closed_by, fresh, same_on_both
from pika.exceptions import ChannelClosedByBroker

pytestmark = MARKS


class Names:
    """The queues and exchanges a scenario makes (fresh names on the shared RabbitMQ), and the
    roles its observation calls them by."""

    def __init__(self):
        self.roles = {}

    def __call__(self, role):
        name = fresh(role)
        self.roles[name] = role
        return name

    def plain(self, value):
        """value with every name replaced by its role, and timestamps as "<time>"."""
        if isinstance(value, dict):
            return {key: self.plain(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.plain(item) for item in value]
        if isinstance(value, (bytes, bytearray)):
            value = bytes(value)
            return self.roles.get(value.decode(errors="replace"), value)
        if isinstance(value, str):
            return self.roles.get(value, value)
        if isinstance(value, datetime.datetime):
            return "<time>"
        return value


def pika_get(channel, queue, ack=True):
    """basic.get until a message comes: (method, properties, body)."""
    found = []

    def take():
        method, properties, body = channel.basic_get(queue, auto_ack=ack)
        if method is not None:
            found.append((method, properties, body))
        return found

    wait_until(take, 10, what="a message in %s" % queue)
    return found[0]


def seen(names, method, properties, body):
    """What a client sees of one message (pika), names replaced by their roles."""
    return names.plain(
        {
            "body": body,
            "exchange": method.exchange,
            "routing_key": method.routing_key,
            "headers": properties.headers,
            "expiration": properties.expiration,
            "delivery_mode": properties.delivery_mode,
        }
    )


def with_last_death(observation):
    """RabbitMQ 3.10's observation as a RabbitMQ 3.13 or 4.x would give it: each dead letter also
    carries x-last-death-reason, -queue and -exchange, the reason, queue and exchange of its
    latest death (the first entry of x-death)."""
    if isinstance(observation, list):
        return [with_last_death(item) for item in observation]
    if not isinstance(observation, dict):
        return observation
    out = {key: with_last_death(value) for key, value in observation.items()}
    headers = out.get("headers")
    if isinstance(headers, dict) and headers.get("x-death"):
        latest = headers["x-death"][0]
        headers = dict(headers)
        headers["x-last-death-reason"] = latest["reason"]
        headers["x-last-death-queue"] = latest["queue"]
        headers["x-last-death-exchange"] = latest["exchange"]
        out["headers"] = headers
    return out


def message_count(channel, queue):
    return channel.queue_declare(queue, passive=True).method.message_count


# ---------------------------------------------------------------- 1, 2: x-death (pika)


def expired_per_message(target):
    """A message with an expiration dies in its queue: the dead letter loses the property,
    and its x-death entry keeps it as original-expiration. Another keeps a binary header."""
    names = Names()
    connection = pika_connection(target)
    channel = connection.channel()
    dlx, source, dead = names("dlx"), names("source"), names("dead")
    channel.exchange_declare(dlx, "direct", auto_delete=True)
    channel.queue_declare(source, exclusive=True, arguments={"x-dead-letter-exchange": dlx})
    channel.queue_declare(dead, exclusive=True)
    channel.queue_bind(dead, dlx, routing_key=source)
    headers = {"app": "sensor-7", "raw": b"\x00\xff", "n": 7, "big": 2**40, "flag": True}
    properties = pika.BasicProperties(expiration="30", headers=headers, delivery_mode=2, message_id="m-1")
    channel.basic_publish("", source, b"reading", properties)
    observed = seen(names, *pika_get(channel, dead))
    connection.close()
    return observed


def expired_queue_ttl(target):
    """Queue TTL (x-message-ttl): no original-expiration; a message with its own longer
    expiration dies by the queue's TTL and still carries it as original-expiration."""
    names = Names()
    connection = pika_connection(target)
    channel = connection.channel()
    dlx, source, dead = names("dlx"), names("source"), names("dead")
    channel.exchange_declare(dlx, "fanout", auto_delete=True)
    channel.queue_declare(source, exclusive=True, arguments={"x-dead-letter-exchange": dlx, "x-message-ttl": 20})
    channel.queue_declare(dead, exclusive=True)
    channel.queue_bind(dead, dlx)
    channel.basic_publish("", source, b"one")
    channel.basic_publish("", source, b"two", pika.BasicProperties(expiration="60000"))
    observed = [seen(names, *pika_get(channel, dead)), seen(names, *pika_get(channel, dead))]
    connection.close()
    return observed


def rejected_and_maxlen(target):
    """basic.reject (without requeue) and x-max-length: their reasons, the dead-letter routing
    key, and original-expiration on a message that had an expiration but died otherwise."""
    names = Names()
    connection = pika_connection(target)
    channel = connection.channel()
    dlx, source, dead = names("dlx"), names("source"), names("dead")
    channel.exchange_declare(dlx, "direct", auto_delete=True)
    channel.queue_declare(
        source,
        exclusive=True,
        arguments={"x-dead-letter-exchange": dlx, "x-dead-letter-routing-key": "dead-key", "x-max-length": 1},
    )
    channel.queue_declare(dead, exclusive=True)
    channel.queue_bind(dead, dlx, routing_key="dead-key")
    channel.basic_publish("", source, b"first", pika.BasicProperties(expiration="60000"))
    channel.basic_publish("", source, b"second")  # the first is dropped: maxlen
    method, _properties, _body = pika_get(channel, source, ack=False)
    channel.basic_reject(method.delivery_tag, requeue=False)
    observed = [seen(names, *pika_get(channel, dead)), seen(names, *pika_get(channel, dead))]
    connection.close()
    return observed


def dies_twice_in_one_queue(target):
    """work dead-letters to retry (through the default exchange), retry's TTL sends it back:
    rejected in work twice, expired in retry twice. Each (queue, reason) is one x-death entry
    whose count grows, the latest first; a cycle with a client's rejection in it goes on."""
    names = Names()
    connection = pika_connection(target)
    channel = connection.channel()
    work, retry = names("work"), names("retry")
    channel.queue_declare(
        work, exclusive=True, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": retry}
    )
    channel.queue_declare(
        retry,
        exclusive=True,
        arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": work, "x-message-ttl": 20},
    )
    channel.basic_publish("", work, b"job", pika.BasicProperties(expiration="60000", headers={"try": 1}))
    seen_in_work = []
    for _ in range(3):
        method, properties, body = pika_get(channel, work, ack=False)
        seen_in_work.append(seen(names, method, properties, body))
        if len(seen_in_work) < 3:
            channel.basic_reject(method.delivery_tag, requeue=False)
        else:
            channel.basic_ack(method.delivery_tag)
    connection.close()
    return seen_in_work


def automatic_cycle(target):
    """first expires into second, second expires into a fanout back to first and to watch:
    a cycle with no rejection in it, so the message does not reach first again (RabbitMQ
    drops it there), while watch gets it."""
    names = Names()
    connection = pika_connection(target)
    channel = connection.channel()
    ring, back = names("ring"), names("back")
    first, second, watch = names("first"), names("second"), names("watch")
    channel.exchange_declare(ring, "fanout", auto_delete=True)
    channel.exchange_declare(back, "fanout", auto_delete=True)
    channel.queue_declare(first, exclusive=True, arguments={"x-dead-letter-exchange": ring, "x-message-ttl": 20})
    channel.queue_declare(second, exclusive=True, arguments={"x-dead-letter-exchange": back, "x-message-ttl": 20})
    channel.queue_declare(watch, exclusive=True)
    channel.queue_bind(second, ring)
    channel.queue_bind(first, back)
    channel.queue_bind(watch, back)
    channel.basic_publish("", first, b"loop")
    observed = seen(names, *pika_get(channel, watch))
    observed["left in first"] = message_count(channel, first)
    connection.close()
    return observed


SCENARIOS = [expired_per_message, expired_queue_ttl, rejected_and_maxlen, dies_twice_in_one_queue, automatic_cycle]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_dead_letters_match_rabbitmq_but_for_the_last_death_headers(scenario, broker, rabbitmq):
    """The dead letters' headers and properties as RabbitMQ gives them. The difference named:
    RabbitMQ 3.13 and 4.x add x-last-death-reason, -queue and -exchange (the latest death's,
    which is x-death's first entry) and hutch does as they do; the oracle here, 3.10.8, does
    not add them (with_last_death turns its observation into a 3.13's)."""
    same_on_both(scenario, broker, rabbitmq, expected_difference=with_last_death)


def test_original_expiration_and_last_death_headers_on_hutch(broker):
    """hutch alone: what the 3.13+ headers say of a message that died twice, by the values,
    not by comparison (RabbitMQ 3.10 has nothing to compare them with)."""
    observed = dies_twice_in_one_queue(broker)
    third = observed[2]["headers"]
    assert third["x-last-death-reason"] == "expired"
    assert third["x-last-death-queue"] == "retry"
    assert third["x-last-death-exchange"] == ""
    assert third["x-first-death-reason"] == "rejected"
    assert third["x-first-death-queue"] == "work"
    assert [(d["queue"], d["reason"], d["count"]) for d in third["x-death"]] == [
        ("retry", "expired", 2),
        ("work", "rejected", 2),
    ]
    assert third["x-death"][1]["original-expiration"] == "60000"
    assert "original-expiration" not in third["x-death"][0]
    assert observed[2]["expiration"] is None
    second = observed[1]["headers"]
    assert (second["x-last-death-reason"], second["x-last-death-queue"]) == ("expired", "retry")
    assert "x-death" not in observed[0]["headers"] and "x-last-death-reason" not in observed[0]["headers"]


# ---------------------------------------------------------------- 3: reject-publish-dlx (aio-pika)


def run(coro, timeout=30):
    async def bounded():
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


async def aio_get(queue, names):
    """basic.get until a message comes (aio-pika): what the client sees of it."""
    for _ in range(500):
        message = await queue.get(no_ack=True, fail=False)
        if message is not None:
            return names.plain(
                {
                    "body": message.body,
                    "routing_key": message.routing_key,
                    "exchange": message.exchange,
                    "headers": message.headers,
                }
            )
        await asyncio.sleep(0.02)  # the polling interval
    raise AssertionError("no message in %s" % queue.name)


def reject_publish_dlx(limit, bodies, confirms=True, dlx=True):
    """A reject-publish-dlx queue with the limit given (x-max-length or x-max-length-bytes):
    each publish is confirmed (ack) or refused (nack), and a refused one is dead-lettered
    with reason maxlen (when the queue has a dead-letter exchange)."""

    def scenario(target):
        async def main():
            names = Names()
            connection = await aio_pika.connect(host=target.host, port=target.port, login="guest", password="guest")
            try:
                channel = await connection.channel(publisher_confirms=confirms)
                exchange_name, source, dead = names("dlx"), names("source"), names("dead")
                exchange = await channel.declare_exchange(exchange_name, "direct", auto_delete=True)
                arguments = dict(limit, **{"x-overflow": "reject-publish-dlx"})
                if dlx:
                    arguments["x-dead-letter-exchange"] = exchange_name
                queue = await channel.declare_queue(source, exclusive=True, arguments=arguments)
                dead_queue = await channel.declare_queue(dead, exclusive=True)
                await dead_queue.bind(exchange, routing_key=source)
                outcomes = []
                for body in bodies:
                    message = aio_pika.Message(body, headers={"n": len(outcomes)})
                    try:
                        await channel.default_exchange.publish(message, routing_key=source)
                        outcomes.append("ack" if confirms else "sent")
                    except aio_pika.exceptions.DeliveryError:
                        outcomes.append("nack")
                kept = []
                while True:
                    message = await queue.get(no_ack=True, fail=False)
                    if message is None:
                        break
                    kept.append(message.body)
                dead_letters = []
                refused = outcomes.count("nack") if confirms else len(bodies) - len(kept)
                for _ in range(refused if dlx else 0):
                    dead_letters.append(await aio_get(dead_queue, names))
                return {"outcomes": outcomes, "kept": names.plain(kept), "dead": dead_letters}
            finally:
                await connection.close()

        return run(main())

    return scenario


@pytest.mark.parametrize(
    "limit, bodies",
    [
        ({"x-max-length": 2}, [b"a", b"b", b"c", b"d"]),
        ({"x-max-length-bytes": 5}, [b"abc", b"defg", b"", b"ab", b"x", b"abcdef"]),
        ({"x-max-length": 0}, [b"a"]),
    ],
    ids=["max-length", "max-length-bytes", "max-length-0"],
)
def test_reject_publish_dlx_nacks_and_dead_letters_as_rabbitmq(limit, bodies, broker, rabbitmq):
    """Refused publishes are nacked and dead-lettered with reason maxlen; the queue keeps what
    fits. The difference named: x-last-death-* (RabbitMQ 3.13+, not 3.10.8)."""
    same_on_both(reject_publish_dlx(limit, bodies), broker, rabbitmq, expected_difference=with_last_death)


def test_reject_publish_dlx_without_confirms_or_without_a_dlx(broker, rabbitmq):
    """Without confirms the refused message is still dead-lettered; without a dead-letter
    exchange it is only refused. The difference named: x-last-death-* (RabbitMQ 3.13+)."""
    bodies = [b"a", b"b", b"c"]
    same_on_both(
        reject_publish_dlx({"x-max-length": 1}, bodies, confirms=False),
        broker,
        rabbitmq,
        expected_difference=with_last_death,
    )
    same_on_both(reject_publish_dlx({"x-max-length": 1}, bodies, dlx=False), broker, rabbitmq)


# ---------------------------------------------------------------- 4: x-max-length-bytes (py-amqp)

QUEUE_KINDS = {
    "transient": {"durable": False, "exclusive": False, "persistent": False, "arguments": {}},
    "durable": {"durable": True, "exclusive": False, "persistent": True, "arguments": {}},
    "durable-transient": {"durable": True, "exclusive": False, "persistent": False, "arguments": {}},
    "exclusive": {"durable": False, "exclusive": True, "persistent": False, "arguments": {}},
    "lazy": {"durable": True, "exclusive": False, "persistent": True, "arguments": {"x-queue-mode": "lazy"}},
}
OVERFLOW_MODES = ["drop-head", "reject-publish", "reject-publish-dlx"]
BODIES = [b"aaaa", b"bb", b"cccccc", b"", b"dddddddddddd", b"e", b"ff", b"ggg"]


def amqp_connection(target, confirms=False):
    connection = amqp.Connection(
        "%s:%d" % (target.host, target.port), userid="guest", password="guest", confirm_publish=confirms
    )
    connection.connect()
    return connection


def body_of(message):
    """py-amqp's body as bytes (it gives text when it knows the content encoding)."""
    body = message.body
    return body.encode() if isinstance(body, str) else bytes(body)


def amqp_get(channel, queue, no_ack=True):
    """basic.get until a message comes (py-amqp)."""
    found = []
    wait_until(lambda: found.append(channel.basic_get(queue, no_ack=no_ack)) or found[-1], 10, what=queue)
    return found[-1]


def amqp_drain(channel, queue):
    """basic.get until the queue is empty (py-amqp): the bodies."""
    bodies = []
    for _ in range(1000):
        message = channel.basic_get(queue, no_ack=True)
        if message is None:
            return bodies
        bodies.append(body_of(message))
    raise AssertionError("more than 1000 messages in %s" % queue)


def amqp_wait_drain(channel, queue, count, names):
    """basic.get until count messages came (py-amqp): each one's body and x-death in brief."""
    found = []

    def take():
        message = channel.basic_get(queue, no_ack=True)
        if message is not None:
            deaths = message.headers.get("x-death") or []
            found.append((body_of(message), [(d["queue"], d["reason"], d["count"]) for d in deaths]))
        return len(found) >= count

    if count:
        wait_until(take, 10, what="%d dead letters" % count)
    return names.plain(found)


def max_length_bytes(kind, overflow, limit=10):
    """Publish BODIES (body sizes 4, 2, 6, 0, 12, 1, 2, 3) into a queue of this kind with
    x-max-length-bytes = limit and this overflow mode, confirms on: which publishes were
    refused, what the queue kept, and what was dead-lettered, in order."""
    shape = QUEUE_KINDS[kind]

    def scenario(target):
        names = Names()
        connection = amqp_connection(target, confirms=True)
        try:
            channel = connection.channel()
            dlx, source, dead = names("dlx"), names("source"), names("dead")
            channel.exchange_declare(dlx, "fanout", auto_delete=True)
            arguments = dict(shape["arguments"])
            arguments.update({"x-max-length-bytes": limit, "x-overflow": overflow, "x-dead-letter-exchange": dlx})
            channel.queue_declare(
                source, durable=shape["durable"], exclusive=shape["exclusive"], auto_delete=False, arguments=arguments
            )
            channel.queue_declare(dead, exclusive=True)
            channel.queue_bind(dead, dlx)
            outcomes = []
            for body in BODIES:
                message = amqp.Message(body, delivery_mode=2 if shape["persistent"] else 1)
                try:
                    channel.basic_publish(message, exchange="", routing_key=source)
                    outcomes.append("ack")
                except amqp.exceptions.MessageNacked:
                    outcomes.append("nack")
            declared = channel.queue_declare(source, passive=True)
            kept = amqp_drain(channel, source)
            dead_count = len(BODIES) - len(kept) if overflow != "reject-publish" else 0
            observed = {
                "outcomes": outcomes,
                "count": declared.message_count,
                "kept": kept,
                "dead": amqp_wait_drain(channel, dead, dead_count, names),
            }
            channel.queue_delete(source)
            return observed
        finally:
            connection.close()

    return scenario


@pytest.mark.parametrize("overflow", OVERFLOW_MODES)
@pytest.mark.parametrize("kind", sorted(QUEUE_KINDS))
def test_max_length_bytes_on_every_kind_of_queue(kind, overflow, broker, rabbitmq):
    """x-max-length-bytes counts the ready messages' body bytes, whatever the queue's kind:
    what is refused, kept and dead-lettered (reason maxlen) matches RabbitMQ."""
    same_on_both(max_length_bytes(kind, overflow), broker, rabbitmq)


@pytest.fixture
def paging_broker(tmp_path):
    """hutch whose durable queues keep 1 message in memory and the rest of their backlog in the
    journal on disk (core/store/paging.py)."""
    import os

    from brokers import BIN

    config = tmp_path / "hutch.toml"
    config.write_text("[limits]\nqueue_window_messages = 1\nqueue_window_bytes = 4096\n")
    running = RunningBroker([os.path.join(BIN, "hutch"), "serve", "--config", str(config)], tmp_path).start()
    yield running
    running.stop()
    assert not running.errors(), running.log()[-5000:]


@pytest.mark.parametrize("overflow", OVERFLOW_MODES)
@pytest.mark.parametrize("kind", ["durable", "durable-transient"])
def test_max_length_bytes_on_a_queue_paged_to_disk(kind, overflow, paging_broker, rabbitmq):
    """A durable queue whose backlog is on disk (window of 1) counts the paged messages' bytes
    too, in every overflow mode, for persistent and transient messages."""
    same_on_both(max_length_bytes(kind, overflow), paging_broker, rabbitmq)


def requeued_over_the_limit(target):
    """Delivered messages do not count; requeued (a channel closed unacked) they count again,
    and a drop-head queue then drops from its head until it fits, as on a publish."""
    names = Names()
    connection = amqp_connection(target)
    try:
        channel = connection.channel()
        dlx, source, dead = names("dlx"), names("source"), names("dead")
        channel.exchange_declare(dlx, "fanout", auto_delete=True)
        channel.queue_declare(
            source, exclusive=True, arguments={"x-max-length-bytes": 6, "x-dead-letter-exchange": dlx}
        )
        channel.queue_declare(dead, exclusive=True)
        channel.queue_bind(dead, dlx)
        taker = connection.channel()
        for body in (b"aaa", b"bbb"):
            channel.basic_publish(amqp.Message(body), exchange="", routing_key=source)
        held = [amqp_get(taker, source, no_ack=False) for _ in range(2)]
        for body in (b"ccc", b"ddd"):
            channel.basic_publish(amqp.Message(body), exchange="", routing_key=source)
        taker.close()  # aaa and bbb back at the head: 12 bytes, over the limit
        dropped = amqp_wait_drain(channel, dead, 2, names)
        return {"held": [body_of(m) for m in held], "dropped": dropped, "kept": amqp_drain(channel, source)}
    finally:
        connection.close()


def test_requeue_over_max_length_bytes_drops_from_the_head(broker, rabbitmq):
    same_on_both(requeued_over_the_limit, broker, rabbitmq)


# ---------------------------------------------------------------- 5: CC and BCC (pika, py-amqp)


def sender_selected(kind):
    """Publish with CC and BCC on an exchange of this kind ("" is the default exchange): each
    queue a key (the routing key, a CC or a BCC key) leads to gets one copy, with CC in its
    headers and BCC gone."""

    def scenario(target):
        names = Names()
        connection = pika_connection(target)
        channel = connection.channel()
        a, b, c, d, other = names("a"), names("b"), names("c"), names("d"), names("other")
        for queue in (a, b, c, d, other):
            channel.queue_declare(queue, exclusive=True)
        if kind == "":
            exchange = ""
            keys = {queue: queue for queue in (a, b, c, d, other)}
        else:
            exchange = names("exchange")
            channel.exchange_declare(exchange, kind, auto_delete=True)
            keys = {a: "key.a", b: "key.b", c: "key.c", d: "key.d", other: "key.other"}
            for queue, key in keys.items():
                channel.queue_bind(queue, exchange, routing_key=key if kind == "direct" else key.replace("key", "*"))
            channel.queue_bind(d, exchange, routing_key="#.d" if kind == "topic" else "key.a")
        headers = {"CC": [keys[b], keys[c], "nowhere", 5, keys[other].encode()], "BCC": [keys[d], keys[a]], "app": "x"}
        channel.confirm_delivery()
        channel.basic_publish(exchange, keys[a], b"hello", pika.BasicProperties(headers=headers), mandatory=True)
        only_bcc = {"BCC": [keys[c]]}
        channel.basic_publish(exchange, "nowhere", b"hidden", pika.BasicProperties(headers=only_bcc), mandatory=True)
        deliveries = {}
        for queue in (a, b, c, d):
            deliveries[names.roles[queue]] = [seen(names, *pika_get(channel, queue))]
        deliveries["c"].append(seen(names, *pika_get(channel, c)))
        deliveries["counts"] = {names.roles[q]: message_count(channel, q) for q in (a, b, c, d, other)}
        connection.close()
        return deliveries

    return scenario


@pytest.mark.parametrize("kind", ["direct", "topic", ""], ids=["direct", "topic", "default"])
def test_cc_and_bcc_route_as_rabbitmq(kind, broker, rabbitmq):
    same_on_both(sender_selected(kind), broker, rabbitmq)


def cc_not_an_array(header, value):
    """CC or BCC that is not an array (py-amqp sends a string as longstr): what the publisher's
    channel is told."""

    def scenario(target):
        names = Names()
        connection = amqp_connection(target)
        try:
            channel = connection.channel()
            queue = names("q")
            channel.queue_declare(queue, exclusive=True)
            channel.basic_publish(
                amqp.Message(b"x", application_headers={header: value}), exchange="", routing_key=queue
            )
            try:
                channel.basic_get(queue, no_ack=True)
                return "open"
            except amqp.exceptions.AMQPError as error:
                return list(closed_by(error))
        finally:
            connection.close()

    return scenario


@pytest.mark.parametrize("header, value", [("CC", "single-key"), ("BCC", "single-key"), ("CC", 7)])
def test_cc_or_bcc_that_is_not_an_array_closes_the_channel_as_rabbitmq(header, value, broker, rabbitmq):
    same_on_both(cc_not_an_array(header, value), broker, rabbitmq)


def dead_letter_of_cc(routing_key_argument):
    """A message published with CC and BCC dies: without x-dead-letter-routing-key it is
    dead-lettered with all its keys (CC and BCC too), and its x-death routing-keys name the
    routing key and CC keys; with one, CC is removed."""

    def scenario(target):
        names = Names()
        connection = pika_connection(target)
        channel = connection.channel()
        dlx, source, cc, bcc = names("dlx"), names("source"), names("cc"), names("bcc")
        channel.exchange_declare(dlx, "direct", auto_delete=True)
        arguments = {"x-dead-letter-exchange": dlx, "x-message-ttl": 20}
        if routing_key_argument:
            arguments["x-dead-letter-routing-key"] = "k.cc"
        channel.queue_declare(source, exclusive=True, arguments=arguments)
        channel.queue_declare(cc, exclusive=True, arguments={"x-message-ttl": 60000})
        channel.queue_declare(bcc, exclusive=True)
        channel.queue_bind(cc, dlx, routing_key="k.cc")
        channel.queue_bind(bcc, dlx, routing_key="k.bcc")
        headers = {"CC": ["k.cc"], "BCC": ["k.bcc"]}
        channel.basic_publish("", source, b"m", pika.BasicProperties(headers=headers))
        observed = {"cc": seen(names, *pika_get(channel, cc))}
        if not routing_key_argument:
            observed["bcc"] = seen(names, *pika_get(channel, bcc))
        observed["left in bcc"] = message_count(channel, bcc)
        connection.close()
        return observed

    return scenario


@pytest.mark.parametrize("with_key", [False, True], ids=["own-keys", "dead-letter-routing-key"])
def test_dead_letter_of_a_cc_message_as_rabbitmq(with_key, broker, rabbitmq):
    """The difference named: x-last-death-* (RabbitMQ 3.13+, not 3.10.8)."""
    same_on_both(dead_letter_of_cc(with_key), broker, rabbitmq, expected_difference=with_last_death)


def test_pika_publish_with_cc_is_refused_after_close(broker):
    """hutch alone: a channel closed by a bad CC says so to pika as well (406)."""
    connection = pika_connection(broker)
    channel = connection.channel()
    channel.queue_declare("cc-string", exclusive=True)
    channel.basic_publish("", "cc-string", b"x", pika.BasicProperties(headers={"CC": "cc-string"}))
    with pytest.raises(ChannelClosedByBroker) as caught:
        channel.basic_get("cc-string")
    assert caught.value.reply_code == 406
    connection.close()


def test_bcc_into_a_stream_on_the_c_accelerator_path(broker):
    """hutch alone: publishes into a stream, back to back, go into its log in one call when the
    C accelerator reads them (amqp091/batch.py stream_run), but not those with CC or BCC, which
    must be routed by those keys too and lose their BCC header."""
    connection = pika_connection(broker)
    channel = connection.channel()
    stream, other = fresh("stream"), fresh("other")
    channel.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    channel.queue_declare(other, exclusive=True)
    for i in range(20):
        channel.basic_publish("", stream, b"m%d" % i, pika.BasicProperties(headers={"BCC": [other]}))
    wait_until(lambda: message_count(channel, other) == 20, 10, what="20 messages in %s" % other)
    channel.basic_qos(prefetch_count=100)
    got = []
    channel.basic_consume(
        stream, lambda ch, method, properties, body: got.append(properties.headers), arguments={"x-stream-offset": 0}
    )
    wait_until(lambda: connection.process_data_events(time_limit=0.05) or len(got) >= 20, 10, what="20 records")
    assert all("BCC" not in headers for headers in got), got
    connection.close()


def dead_letter_into_a_full_reject_publish_dlx_queue(target):
    """A dead letter that a full reject-publish-dlx queue refuses is dead-lettered again, from
    that queue (maxlen), and the x-death table says both deaths."""

    async def main():
        names = Names()
        connection = await aio_pika.connect(host=target.host, port=target.port, login="guest", password="guest")
        try:
            channel = await connection.channel()
            first, full, last = names("first"), names("full"), names("last")
            await channel.declare_queue(
                first,
                exclusive=True,
                arguments={"x-message-ttl": 20, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": full},
            )
            await channel.declare_queue(
                full,
                exclusive=True,
                arguments={
                    "x-max-length": 0,
                    "x-overflow": "reject-publish-dlx",
                    "x-dead-letter-exchange": "",
                    "x-dead-letter-routing-key": last,
                },
            )
            last_queue = await channel.declare_queue(last, exclusive=True)
            await channel.default_exchange.publish(aio_pika.Message(b"m", expiration=60), routing_key=first)
            return await aio_get(last_queue, names)
        finally:
            await connection.close()

    return run(main())


def test_a_dead_letter_refused_by_reject_publish_dlx_dies_again(broker, rabbitmq):
    """The difference named: x-last-death-* (RabbitMQ 3.13+, not 3.10.8)."""
    same_on_both(
        dead_letter_into_a_full_reject_publish_dlx_queue, broker, rabbitmq, expected_difference=with_last_death
    )


def cc_with_alternate_exchange_and_returns(target):
    """CC keys count before the alternate exchange: it gets a message only when no key of it
    matched (and then by all its keys); a mandatory message no key routes comes back without
    its BCC header."""
    names = Names()
    connection = pika_connection(target)
    channel = connection.channel()
    returned = []
    channel.add_on_return_callback(lambda ch, method, properties, body: returned.append((body, properties.headers)))
    alternate, exchange, bare = names("alternate"), names("exchange"), names("bare")
    matched, caught = names("matched"), names("caught")
    channel.exchange_declare(alternate, "direct", auto_delete=True)
    channel.exchange_declare(exchange, "direct", auto_delete=True, arguments={"alternate-exchange": alternate})
    channel.exchange_declare(bare, "direct", auto_delete=True)
    channel.queue_declare(matched, exclusive=True)
    channel.queue_declare(caught, exclusive=True)
    channel.queue_bind(matched, exchange, routing_key="k.matched")
    channel.queue_bind(matched, bare, routing_key="k.matched")
    channel.queue_bind(caught, alternate, routing_key="k.cc")
    channel.basic_publish(exchange, "k.none", b"by-cc", pika.BasicProperties(headers={"CC": ["k.matched"]}))
    channel.basic_publish(exchange, "k.none", b"to-alternate", pika.BasicProperties(headers={"CC": ["k.cc"]}))
    channel.basic_publish(
        bare, "k.none", b"back", pika.BasicProperties(headers={"CC": ["x"], "BCC": ["y"]}), mandatory=True
    )
    channel.basic_publish(bare, "k.none", b"marker", mandatory=True)
    wait_until(lambda: connection.process_data_events(time_limit=0.02) or len(returned) >= 2, 10, what="returns")
    observed = {
        "matched": seen(names, *pika_get(channel, matched)),
        "caught": seen(names, *pika_get(channel, caught)),
        "returned": names.plain(returned),
        "counts": [message_count(channel, matched), message_count(channel, caught)],
    }
    connection.close()
    return observed


def test_cc_before_the_alternate_exchange_and_in_returns_as_rabbitmq(broker, rabbitmq):
    same_on_both(cc_with_alternate_exchange_and_returns, broker, rabbitmq)


ON_MICROPYTHON = {
    "dies-twice": dies_twice_in_one_queue,
    "per-message-ttl": expired_per_message,
    "cc-bcc-topic": sender_selected("topic"),
    "reject-publish-dlx": reject_publish_dlx({"x-max-length-bytes": 5}, [b"abc", b"defg", b"", b"ab", b"x"]),
    "max-length-bytes-drop-head": max_length_bytes("transient", "drop-head"),
}


@pytest.mark.parametrize("name", sorted(ON_MICROPYTHON))
def test_the_same_on_micropython(name, request, rabbitmq):
    """hutch on MicroPython's unix port (test_micropython_serve.py's fixture) against RabbitMQ. The difference named: x-last-death-* (RabbitMQ 3.13+, not
    3.10.8)."""
    board = request.getfixturevalue("mp_broker")
    same_on_both(ON_MICROPYTHON[name], board, rabbitmq, expected_difference=with_last_death)
