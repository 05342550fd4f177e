"""Stream queues with aio-pika against `hutch serve`, and the same client code against the run's
RabbitMQ (conftest.py's rabbitmq fixture): the x-stream-offset forms, several consumers at
their own offsets, and the refusals as aiormq raises them (class and reply text).

Each test is a plain function running asyncio.run with a timeout, as tests/interop/clients/test_aio_pika.py does.
"""

import asyncio
import datetime
import time
import uuid

import aio_pika
import aiormq
import pytest
from aio_pika import Message

pytestmark = pytest.mark.timeout(120)

STREAM = {"x-queue-type": "stream"}


def run(coro, timeout=60):
    async def bounded():
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


def url(target):
    return "amqp://guest:guest@%s:%d/" % (target.host, target.port)


async def until(predicate, what, timeout=15):
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "not within %ds: %s" % (timeout, what)
        await asyncio.sleep(0.02)  # the polling interval


async def publish(connection, name, bodies):
    channel = await connection.channel()  # aio-pika's channels confirm every publish
    for body in bodies:
        await channel.default_exchange.publish(Message(body), routing_key=name)
    await channel.close()


class Reader:
    """A consumer of a stream on a channel of its own: what it got, as (offset, body)."""

    def __init__(self):
        self.got = []

    async def start(self, connection, name, offset=None, prefetch=100):
        self.channel = await connection.channel()
        await self.channel.set_qos(prefetch_count=prefetch)
        queue = await self.channel.get_queue(name, ensure=False)
        arguments = {} if offset is None else {"x-stream-offset": offset}
        await queue.consume(self._on, arguments=arguments)
        return self

    async def _on(self, message):
        self.got.append((message.headers["x-stream-offset"], message.body))
        await message.ack()

    async def until(self, body):
        await until(lambda: any(b == body for _, b in self.got), "%r delivered" % body)
        return list(self.got)


def numbered(start, stop):
    return [(i, b"m%d" % i) for i in range(start, stop)]


def forms(target):
    async def main():
        name = "aio-%s" % uuid.uuid4().hex[:10]
        connection = await aio_pika.connect(url(target))
        channel = await connection.channel()
        await channel.declare_queue(name, durable=True, arguments=STREAM)
        await publish(connection, name, [b"m%d" % i for i in range(10)])
        seen = {}
        for label, offset in (
            ("first", "first"),
            ("last", "last"),
            ("4", 4),
            ("timestamp an hour ago", datetime.datetime.fromtimestamp(time.time() - 3600, datetime.timezone.utc)),
            ("interval 1h", "1h"),
        ):
            reader = await Reader().start(connection, name, offset)
            seen[label] = await reader.until(b"m9")
            await reader.channel.close()
        # several consumers, each at its own offset, two of them waiting for what is to come
        readers = {
            "first": await Reader().start(connection, name, "first", prefetch=2),
            "7": await Reader().start(connection, name, 7, prefetch=1),
            "next": await Reader().start(connection, name, "next"),
            "11": await Reader().start(connection, name, 11),
        }
        await publish(connection, name, [b"m10", b"m11", b"m12"])
        for label, reader in readers.items():
            seen["together: " + label] = await reader.until(b"m12")
        await connection.close()
        return seen

    return run(main())


def test_x_stream_offset_forms_and_several_consumers_with_aio_pika(broker, rabbitmq):
    hutch = forms(broker)
    assert hutch == {
        "first": numbered(0, 10),
        "last": numbered(9, 10),
        "4": numbered(4, 10),
        "timestamp an hour ago": numbered(0, 10),
        "interval 1h": numbered(0, 10),
        "together: first": numbered(0, 13),
        "together: 7": numbered(7, 13),
        "together: next": numbered(10, 13),
        "together: 11": numbered(11, 13),
    }, hutch
    assert forms(rabbitmq) == hutch


def refusals(target, name):
    async def attempt(how):
        connection = await aio_pika.connect(url(target))
        try:
            channel = await connection.channel()
            await how(channel)
            return ("ok",)
        except aiormq.exceptions.AMQPError as e:
            return (type(e).__name__, e.args[-1])
        finally:
            await connection.close()

    async def main():
        connection = await aio_pika.connect(url(target))
        channel = await connection.channel()
        await channel.declare_queue(name, durable=True, arguments=STREAM)
        await publish(connection, name, [b"a", b"b"])
        await connection.close()

        async def get(channel):
            queue = await channel.get_queue(name)
            await queue.get()

        async def purge(channel):
            await (await channel.get_queue(name)).purge()

        async def ignore(message):
            pass

        async def consume(channel, prefetch=10, no_ack=False, arguments=None):
            if prefetch:
                await channel.set_qos(prefetch_count=prefetch)
            await (await channel.get_queue(name)).consume(ignore, no_ack=no_ack, arguments=arguments)

        async def declare(channel, queue, durable=True, arguments=STREAM):
            await channel.declare_queue(queue, durable=durable, arguments=arguments)

        return {
            "basic.get": await attempt(get),
            "queue.purge": await attempt(purge),
            "consume without prefetch": await attempt(lambda channel: consume(channel, prefetch=0)),
            "consume with no-ack": await attempt(lambda channel: consume(channel, no_ack=True)),
            "consume at '5'": await attempt(lambda channel: consume(channel, arguments={"x-stream-offset": "5"})),
            "declare non-durable": await attempt(lambda channel: declare(channel, name + "-x", durable=False)),
            "declare with a TTL": await attempt(
                lambda channel: declare(channel, name + "-x", arguments=dict(STREAM, **{"x-message-ttl": 10}))
            ),
            "declare x-max-age 1w": await attempt(
                lambda channel: declare(channel, name + "-x", arguments=dict(STREAM, **{"x-max-age": "1w"}))
            ),
        }

    return run(main())


def test_refusals_as_aiormq_raises_them_are_rabbitmqs(broker, rabbitmq):
    name = "aio-%s" % uuid.uuid4().hex[:10]
    hutch = refusals(broker, name)
    assert hutch["basic.get"][0] == "ConnectionNotImplemented" and hutch["declare with a TTL"][0] == (
        "ChannelPreconditionFailed"
    ), hutch
    assert refusals(rabbitmq, name) == hutch
