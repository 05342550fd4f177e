"""Issue 14's queue-ordering items, hutch against the run's RabbitMQ (differential.py's rule):
priority queues (x-max-priority), the order unacknowledged messages come back in (requeue),
single active consumer (x-single-active-consumer) and consumer priorities (x-priority).

Each scenario returns what its client saw, in order: bodies with their redelivered flags,
reply codes and texts. The clients vary by item: pika for requeue order and consumer
priorities, py-amqp for priority queues, aio-pika for single active consumer.
"""

import pika
import pytest
from brokers import connect_retrying, hutch_serve, pika_connection, pump_until, sigkill
from differential import MARKS, closed_by, fresh, same_on_both
from pika.exceptions import ChannelClosedByBroker

pytestmark = MARKS


def publish(channel, queue, count, first=0):
    for i in range(first, first + count):
        channel.basic_publish("", queue, b"m%d" % i)


def get_all(channel, queue, limit=100):
    """basic.get (no-ack) until the queue is empty: (body, redelivered) each, in order."""
    seen = []
    for _ in range(limit):
        method, _properties, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            break
        seen.append((body.decode(), method.redelivered))
    return seen


def gets(channel, queue, count):
    """basic.get count messages, unacknowledged: their delivery tags by body."""
    tags = {}
    for _ in range(count):
        method, _properties, body = channel.basic_get(queue, auto_ack=False)
        tags[body.decode()] = method.delivery_tag
    return tags


def with_queue(target, arguments=None):
    """(connection, channel, queue name) with a fresh queue declared."""
    connection = pika_connection(target)
    channel = connection.channel()
    queue = fresh("order")
    channel.queue_declare(queue, arguments=arguments)
    return connection, channel, queue


# ---------------------------------------------------------------- priority queues (py-amqp)

# (body, priority property or None) published to a queue of x-max-priority 3
PRIORITIES = [("0", None), ("1", 1), ("2", 5), ("3", 3), ("4", 2), ("5", 0), ("6", 3), ("7", None), ("8", 255)]


def amqp_channel(target):
    import amqp

    connection = amqp.Connection("%s:%d" % (target.host, target.port), userid="guest", password="guest")
    connection.connect()
    return connection, connection.channel()


def amqp_publish(channel, queue, published):
    import amqp

    for body, priority in published:
        properties = {} if priority is None else {"priority": priority}
        if body == "7":  # properties before the priority too
            properties.update(content_type="text/plain", application_headers={"h": 1})
        channel.basic_publish(amqp.Message(body, **properties), exchange="", routing_key=queue)


def text_of(message):
    """A py-amqp message's body (a str when it came with a content type or encoding)."""
    body = message.body
    return body if isinstance(body, str) else body.decode()


def amqp_get_all(channel, queue):
    seen = []
    for _ in range(100):
        message = channel.basic_get(queue, no_ack=True)
        if message is None:
            return seen
        seen.append((text_of(message), message.delivery_info["redelivered"]))
    return seen


def priority_order(target):
    """Nine messages into a queue of x-max-priority 3, taken with basic.get; then four taken
    unacknowledged and rejected with requeue in another order; then a consumer."""
    connection, channel = amqp_channel(target)
    queue = fresh("prio")
    channel.queue_declare(queue, auto_delete=False, arguments={"x-max-priority": 3})
    amqp_publish(channel, queue, PRIORITIES)
    seen = [amqp_get_all(channel, queue)]
    amqp_publish(channel, queue, PRIORITIES[:5])
    tags = {}
    for _ in range(4):
        message = channel.basic_get(queue, no_ack=False)
        tags[text_of(message)] = message.delivery_tag
    seen.append(list(tags))
    for body in ("1", "3", "2", "4"):
        channel.basic_reject(tags[body], requeue=True)
    amqp_publish(channel, queue, [("9", 2)])
    deliveries = []
    channel.basic_consume(queue, callback=lambda message: deliveries.append(text_of(message)), no_ack=True)
    for _ in range(100):  # bounded
        if len(deliveries) == 6:
            break
        connection.drain_events(timeout=5)
    seen.append(deliveries)
    connection.close()
    return seen


def priority_arguments(target):
    """What each x-max-priority value gets at declare (0 is a plain queue), and a redeclare
    that does not repeat it."""
    import amqp

    seen = []
    cases = [(0, None), (255, None), (256, None), (-1, None), ("5", None), (True, None)]
    cases += [(5, {}), (5, {"x-max-priority": 6}), (None, {"x-max-priority": 5})]
    for value, again in cases:
        connection, channel = amqp_channel(target)
        queue = fresh("prio")
        try:
            channel.queue_declare(queue, auto_delete=True, arguments={} if value is None else {"x-max-priority": value})
            if again is not None:
                channel.queue_declare(queue, auto_delete=True, arguments=again)
            seen.append("ok")
        except amqp.exceptions.PreconditionFailed as error:
            seen.append((error.reply_code, error.reply_text.replace(queue, "QUEUE")))
        connection.collect()
    return seen


def test_priority_queues(broker, rabbitmq):
    by_priority, taken, consumed = same_on_both(priority_order, broker, rabbitmq)
    assert [body for body, _ in by_priority] == ["2", "3", "6", "8", "4", "1", "0", "5", "7"]
    assert taken == ["2", "3", "4", "1"] and consumed == ["2", "3", "4", "9", "1", "0"]


def test_priority_queue_arguments(broker, rabbitmq):
    seen = same_on_both(priority_arguments, broker, rabbitmq)
    assert seen[:2] == ["ok", "ok"] and all(reply[0] == 406 for reply in seen[2:])


def test_a_paged_durable_priority_queue_keeps_its_order_through_a_sigkill(tmp_path):
    """hutch only (the run's RabbitMQ is shared: not killed): a durable priority queue with a
    window of 8 messages, so nearly all of its backlog is on disk, in runs by priority; after
    a SIGKILL the journal brings it back in publish order, and the queue sorts it again."""

    running = hutch_serve(tmp_path, "[limits]\nqueue_window_messages = 8\n")
    running.start()
    published = [("m%03d" % i, (i * 7) % 12 if i % 5 else None) for i in range(150)]  # 0..11, some without
    expected = [body for body, priority in sorted(published, key=lambda pair: -min(pair[1] or 0, 9))]
    connection = connect_retrying(running)
    channel = connection.channel()
    channel.queue_declare("prio.durable", durable=True, arguments={"x-max-priority": 9})
    channel.confirm_delivery()  # each publish is on disk when it returns
    for body, priority in published[:120]:
        channel.basic_publish("", "prio.durable", body, pika.BasicProperties(delivery_mode=2, priority=priority))
    sigkill(running)
    running.start()
    connection = connect_retrying(running)
    channel = connection.channel()
    for body, priority in published[120:]:  # before the first delivery: sorted with the backlog
        channel.basic_publish("", "prio.durable", body, pika.BasicProperties(delivery_mode=2, priority=priority))
    seen = [body for body, _redelivered in get_all(channel, "prio.durable", limit=200)]
    connection.close()
    assert running.stop() == 0
    assert seen == expected
    assert not running.errors(), running.log()


# ---------------------------------------------------------------- requeue order (pika)


def rejected_one_at_a_time(target):
    """Four messages taken, rejected with requeue one at a time in a shuffled order; two
    never delivered behind them."""
    connection, channel, queue = with_queue(target)
    publish(channel, queue, 6)
    tags = gets(channel, queue, 4)
    for body in ("m2", "m0", "m3", "m1"):
        channel.basic_reject(tags[body], requeue=True)
    seen = get_all(channel, queue)
    connection.close()
    return seen


def nacked_multiple_around_acks(target):
    connection, channel, queue = with_queue(target)
    publish(channel, queue, 6)
    tags = gets(channel, queue, 5)
    channel.basic_ack(tags["m1"])
    channel.basic_ack(tags["m3"])
    channel.basic_nack(tags["m4"], multiple=True, requeue=True)
    seen = get_all(channel, queue)
    connection.close()
    return seen


def redelivered_then_channel_closed(target):
    """A rejected message taken again (so delivery order is no longer queue order), then the
    channel closes with three unacknowledged: they come back at their original places."""
    connection, channel, queue = with_queue(target)
    publish(channel, queue, 5)
    tags = gets(channel, queue, 3)
    channel.basic_reject(tags["m2"], requeue=True)
    again = gets(channel, queue, 1)  # m2, redelivered
    channel.basic_reject(tags["m0"], requeue=True)
    again.update(gets(channel, queue, 1))  # m0, redelivered
    channel.close()
    other = connection.channel()
    seen = [sorted(again)] + get_all(other, queue)
    connection.close()
    return seen


def consumed(target, close):
    """A consumer (prefetch 4) acks the second of its deliveries and gets a fifth; then its
    channel or its connection closes, or it cancels and calls basic.recover: a new reader
    sees the rest."""
    connection, channel, queue = with_queue(target)
    publish(channel, queue, 6)
    channel.basic_qos(prefetch_count=4)
    deliveries = []
    tag = channel.basic_consume(queue, lambda ch, method, props, body: deliveries.append((method, body)))
    pump_until(connection, lambda: len(deliveries) == 4)
    seen = [(body.decode(), method.redelivered) for method, body in deliveries]
    channel.basic_ack(deliveries[1][0].delivery_tag)
    pump_until(connection, lambda: len(deliveries) == 5)
    seen.append((deliveries[4][1].decode(), deliveries[4][0].redelivered))
    if close == "channel":
        channel.close()
    elif close == "connection":
        connection.close()
        connection = pika_connection(target)
    elif close == "recover":
        channel.basic_cancel(tag)
        channel.basic_recover(requeue=True)
    elif close == "recover-to-itself":  # the consumer is still there: it gets them again
        channel.basic_recover(requeue=True)
        pump_until(connection, lambda: len(deliveries) == 9)
        seen += [(body.decode(), method.redelivered) for method, body in deliveries[5:]]
        channel.basic_cancel(tag)
        channel.basic_ack(deliveries[-1][0].delivery_tag, multiple=True)
    reader = connection.channel()
    seen += get_all(reader, queue)
    connection.close()
    return seen


@pytest.mark.parametrize(
    "scenario",
    [
        rejected_one_at_a_time,
        nacked_multiple_around_acks,
        redelivered_then_channel_closed,
        lambda target: consumed(target, "channel"),
        lambda target: consumed(target, "connection"),
        lambda target: consumed(target, "recover"),
        lambda target: consumed(target, "recover-to-itself"),
    ],
    ids=[
        "reject-one-by-one",
        "nack-multiple",
        "redelivered-then-close",
        "channel-close",
        "connection-close",
        "recover",
        "recover-to-itself",
    ],
)
def test_requeued_messages_return_to_their_original_places(scenario, broker, rabbitmq):
    same_on_both(scenario, broker, rabbitmq)


# ---------------------------------------------------------------- consumer priorities (pika)


def by_consumer_priority(target):
    """Four consumers on one channel (prefetch 2 each): x-priority -1, 5, 0 and 5. Ten messages
    go to the two of priority 5 in turn, then to 0, then to -1; once one of priority 5 acks,
    it gets the rest. Then an x-priority that is not an integer. Both advertise the
    consumer_priorities capability."""
    connection, channel, queue = with_queue(target)
    advertised = connection._impl.server_capabilities.get("consumer_priorities")
    channel.basic_qos(prefetch_count=2)
    seen = []
    for name, priority in (("low", -1), ("a5", 5), ("zero", 0), ("b5", 5)):

        def on_message(ch, method, properties, body, name=name):
            seen.append((name, body.decode(), method.delivery_tag))

        channel.basic_consume(queue, on_message, arguments={"x-priority": priority})
    publisher = connection.channel()
    publish(publisher, queue, 10)
    pump_until(connection, lambda: len(seen) == 8)
    for name, _body, tag in list(seen):
        if name == "a5":
            channel.basic_ack(tag)
    pump_until(connection, lambda: len(seen) == 10)
    other = connection.channel()
    try:
        other.basic_consume(queue, lambda *args: None, arguments={"x-priority": "high"})
        refused = None
    except ChannelClosedByBroker as error:
        code, reply_text = closed_by(error)
        refused = (code, reply_text.replace(queue, "QUEUE"))  # (a fresh name each run)
    connection.close()
    return [(name, body) for name, body, _tag in seen], refused, advertised


def test_consumers_of_higher_priority_are_served_first(broker, rabbitmq):
    seen, refused, advertised = same_on_both(by_consumer_priority, broker, rabbitmq)
    assert seen[:4] == [("a5", "m0"), ("b5", "m1"), ("a5", "m2"), ("b5", "m3")]
    assert refused[0] == 406 and advertised is True


def equal_priorities_in_turn(target):
    """Three consumers of priority 1 (prefetch 1, 2 and 1, each on a channel of its own) and one
    of priority 0 that always has room; each acks in turn and two more are published: who gets
    which, as the blocked consumers of priority 1 become ready again. (What each consumer got,
    in order: the order deliveries to different channels interleave on the wire is not
    RabbitMQ's rule.)"""
    connection, channel, queue = with_queue(target)
    seen, channels, acked = [], {}, set()
    for name, priority, prefetch in (("x", 1, 1), ("y", 1, 2), ("w", 1, 1), ("z", 0, 100)):
        consumer = channels[name] = connection.channel()
        consumer.basic_qos(prefetch_count=prefetch)

        def on_message(ch, method, properties, body, name=name):
            seen.append((name, body.decode(), method.delivery_tag))

        consumer.basic_consume(queue, on_message, arguments={"x-priority": priority})
    publish(channel, queue, 6)
    pump_until(connection, lambda: len(seen) == 6)
    for who in ("y", "x", "w", "y", "x", "x", "w", "z", "y"):
        count = len(seen)
        unacked = [tag for name, _body, tag in seen if name == who and (name, tag) not in acked]
        if unacked:
            channels[who].basic_ack(unacked[-1], multiple=True)
            acked.update((who, tag) for tag in unacked)
            # a round trip on the acking channel before the publish: RabbitMQ's channels are
            # processes of their own, and a publish on another channel could reach the queue
            # before the ack (who then has no room yet: seen on a loaded machine)
            channels[who].queue_declare(queue, passive=True)
        publish(channel, queue, 2, first=100 + count)
        pump_until(connection, lambda count=count: len(seen) == count + 2)
    connection.close()
    return {name: [body for who, body, _tag in seen if who == name] for name in channels}


def test_consumers_of_equal_priority_take_turns_as_they_have_room(broker, rabbitmq):
    got = same_on_both(equal_priorities_in_turn, broker, rabbitmq)
    assert got["x"][:2] == ["m0", "m108"]


# ---------------------------------------------------------------- single active consumer (aio-pika)


def single_active_consumer(target):
    """Three consumers of a single active consumer queue, each on a channel of its own with
    prefetch 2, registered A, B, then C with x-priority 10: only A gets messages (the first to
    come is active, whatever its priority); A's channel closes, so C (the highest priority)
    takes over, A's two first; C's channel closes and B takes over the same two, then two more
    once it acks. basic.get takes what is left; an exclusive consumer is refused.

    Not here: the active consumer's basic.cancel, after which RabbitMQ 3.10.8's queue process
    crashes at the next publish (test_a_cancelled_single_active_consumer_hands_over_at_once)."""
    import asyncio

    import aio_pika
    import aiormq

    async def ignore(message):
        pass

    async def main():
        connection = await aio_pika.connect("amqp://guest:guest@%s:%d/" % (target.host, target.port))
        seen = {"A": [], "B": [], "C": []}
        channels = {}
        queue_name = fresh("sac")
        for name, arguments in (("A", None), ("B", None), ("C", {"x-priority": 10})):
            channel = channels[name] = await connection.channel()
            await channel.set_qos(prefetch_count=2)
            queue = await channel.declare_queue(queue_name, arguments={"x-single-active-consumer": True})

            async def on_message(message, name=name):
                seen[name].append((message.body.decode(), message.redelivered, message))

            await queue.consume(on_message, arguments=arguments)
        publisher = await connection.channel()

        async def publish_bodies(first, count):
            for i in range(first, first + count):
                await publisher.default_exchange.publish(aio_pika.Message(b"m%d" % i), routing_key=queue_name)

        async def until(predicate):
            for _ in range(500):  # bounded: 10 s
                if predicate():
                    return
                await asyncio.sleep(0.02)  # the polling interval
            raise AssertionError("not reached: %r" % {name: [body for body, *_ in seen[name]] for name in seen})

        await publish_bodies(0, 5)
        await until(lambda: len(seen["A"]) == 2)
        await channels["A"].close()
        await until(lambda: len(seen["C"]) == 2)
        await channels["C"].close()
        await until(lambda: len(seen["B"]) == 2)
        for _body, _redelivered, message in seen["B"]:
            await message.ack()
        await until(lambda: len(seen["B"]) == 4)
        getter = await connection.channel()
        queue = await getter.get_queue(queue_name, ensure=False)
        left = []
        while True:
            message = await queue.get(no_ack=True, fail=False)
            if message is None:
                break
            left.append(message.body.decode())
        try:
            await queue.consume(ignore, exclusive=True)
            refused = None
        except aiormq.exceptions.ChannelAccessRefused as error:
            # (ChannelAccessRefused: 403; the queue's name is a fresh one each run)
            refused = (type(error).__name__, error.args[0].replace(queue_name, "QUEUE"))
        await connection.close()
        observed = {name: [(body, redelivered) for body, redelivered, _ in seen[name]] for name in seen}
        return observed, left, refused

    return asyncio.run(asyncio.wait_for(main(), 60))


def single_active_arguments(target):
    """What each x-single-active-consumer value gets at declare, and redeclares that do not
    repeat it (or give x-max-priority another type)."""
    seen = []
    cases = [({"x-single-active-consumer": value}, None) for value in (True, False, "yes", 1)]
    cases += [
        ({"x-single-active-consumer": True}, {}),
        ({"x-single-active-consumer": True}, {"x-single-active-consumer": False}),
    ]
    cases += [({"x-max-priority": 5}, {"x-max-priority": "5"})]
    for arguments, again in cases:
        connection = pika_connection(target)
        channel = connection.channel()
        queue = fresh("sac")
        try:
            channel.queue_declare(queue, auto_delete=True, arguments=arguments)
            if again is not None:
                channel.queue_declare(queue, auto_delete=True, arguments=again)
            seen.append("ok")
        except ChannelClosedByBroker as error:
            code, reply_text = closed_by(error)
            seen.append((code, reply_text.replace(queue, "QUEUE")))
        connection.close()
    return seen


def test_single_active_consumer_arguments(broker, rabbitmq):
    seen = same_on_both(single_active_arguments, broker, rabbitmq)
    assert seen[:2] == ["ok", "ok"] and all(reply[0] == 406 for reply in seen[2:])


def test_single_active_consumer(broker, rabbitmq):
    same_on_both(single_active_consumer, broker, rabbitmq)


def test_a_cancelled_single_active_consumer_hands_over_at_once(broker):
    """hutch only. RabbitMQ 3.10.8 cannot be the oracle here: after the active consumer of a
    single active consumer queue cancels, the next is not served, and at the next publish the
    queue process crashes (badmatch in rabbit_amqqueue_process:attempt_delivery; the other
    consumer gets a server-sent basic.cancel and the queue's messages are gone). hutch does what
    RabbitMQ 4 does: the next consumer takes over at once; what the cancelled one still holds
    stays with its channel until acked or requeued, and a requeue goes back to its place."""
    connection = pika_connection(broker)
    queue = fresh("sac")
    seen, channels, tags = [], {}, {}
    for name in ("A", "B"):
        channel = channels[name] = connection.channel()
        channel.basic_qos(prefetch_count=1)
        channel.queue_declare(queue, arguments={"x-single-active-consumer": True})

        def on_message(ch, method, properties, body, name=name):
            seen.append((name, body.decode(), method.redelivered, method.delivery_tag))

        tags[name] = channel.basic_consume(queue, on_message)
    publish(connection.channel(), queue, 3)
    pump_until(connection, lambda: len(seen) == 1)
    channels["A"].basic_cancel(tags["A"])
    pump_until(connection, lambda: len(seen) == 2)  # no publish needed
    channels["A"].close()  # m0 goes back before m2
    channels["B"].basic_ack(seen[1][3])
    pump_until(connection, lambda: len(seen) == 3)
    channels["B"].basic_ack(seen[2][3])
    pump_until(connection, lambda: len(seen) == 4)
    connection.close()
    assert [(name, body, redelivered) for name, body, redelivered, _tag in seen] == [
        ("A", "m0", False),
        ("B", "m1", False),
        ("B", "m0", True),
        ("B", "m2", False),
    ]
