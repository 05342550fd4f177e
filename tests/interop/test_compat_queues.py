"""Issue 14's queue-ordering items, hutch against the run's RabbitMQ (differential.py's rule):
priority queues (x-max-priority), the order unacknowledged messages come back in (requeue),
single active consumer (x-single-active-consumer) and consumer priorities (x-priority).

Each scenario returns what its client saw, in order: bodies with their redelivered flags,
reply codes and texts. The clients vary by item: pika for requeue order and consumer
priorities, py-amqp for priority queues, aio-pika for single active consumer.
"""

import pytest
from conftest import pika_connection, pump_until
from differential import MARKS, fresh, same_on_both

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
    ],
    ids=[
        "reject-one-by-one",
        "nack-multiple",
        "redelivered-then-close",
        "channel-close",
        "connection-close",
        "recover",
    ],
)
def test_requeued_messages_return_to_their_original_places(scenario, broker, rabbitmq):
    same_on_both(scenario, broker, rabbitmq)
