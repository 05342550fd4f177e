"""aio-pika (over aiormq) against the real `hutch serve`.

aio-pika's default channel uses publisher confirms, so every `publish` here
waits for the broker's basic.ack. Covers: connect and connect_robust; exchange
and queue declare and bind; publishing N messages and awaiting their
confirms; consuming with the async queue iterator and acking through
`message.process()`; basic.get; reject/nack with requeue; prefetch; a mandatory
publish that is returned (callback and PublishError); channel errors mapped to
aiormq's exceptions (404 publish to a missing exchange, 404 passive declare,
405 exclusive queue, 406 redeclare); connect_robust reconnecting after the
broker restarts (the broker's 320 CONNECTION_FORCED on SIGTERM).

Each test is a plain function running asyncio.run with an overall timeout, so
no pytest plugin is needed and nothing can hang.
"""

import asyncio

import aio_pika
import aiormq
import pytest
from aio_pika import DeliveryMode, ExchangeType, Message
from pamqp.commands import Basic

# A blocking client waits for ever for a reply that never comes: fail the test instead.
pytestmark = pytest.mark.timeout(60)


def run(coro, timeout=20):
    async def bounded():
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


async def until(predicate, what, timeout=5):
    """Let the event loop run until predicate() holds; fail after timeout seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "not within %ds: %s" % (timeout, what)
        await asyncio.sleep(0.02)  # the polling interval


async def collect(queue, count, timeout=5, ack=True):
    """Take `count` messages from queue with the async iterator, acking each; [(body, message)]."""
    got = []
    async with queue.iterator(timeout=timeout) as messages:
        async for message in messages:
            if ack:
                async with message.process():
                    got.append((message.body, message))
            else:
                got.append((message.body, message))
            if len(got) == count:
                break
    return got


def test_publish_with_confirms_then_consume_with_iterator(broker):
    async def main():
        async with await aio_pika.connect_robust(broker.url) as conn:
            ch = await conn.channel()  # publisher confirms on by default
            assert ch.publisher_confirms
            ex = await ch.declare_exchange("aio.topic", ExchangeType.TOPIC, durable=True)
            queue = await ch.declare_queue("aio.readings", durable=True)
            await queue.bind(ex, routing_key="sensor.*.temp")
            confirms = []
            for i in range(200):
                confirms.append(
                    await ex.publish(
                        Message(
                            b"reading-%d" % i,
                            headers={"seq": i},
                            content_type="text/plain",
                            delivery_mode=DeliveryMode.PERSISTENT,
                            correlation_id=str(i),
                        ),
                        routing_key="sensor.%d.temp" % (i % 4),
                    )
                )
            # the broker acked every publish (no return, no nack)
            assert all(isinstance(c, Basic.Ack) for c in confirms)
            # and a key that does not match the binding goes nowhere
            await ex.publish(Message(b"stray"), routing_key="sensor.1.humidity")
            declared = await ch.declare_queue("aio.readings", durable=True)
            assert declared.declaration_result.message_count == 200
            got = await collect(queue, 200)
            assert [b for b, _ in got] == [b"reading-%d" % i for i in range(200)]
            first = got[0][1]
            assert first.headers == {"seq": 0} and first.content_type == "text/plain"
            assert first.delivery_mode == DeliveryMode.PERSISTENT and first.correlation_id == "0"
            assert first.routing_key == "sensor.0.temp" and first.exchange == "aio.topic"
            assert not any(m.redelivered for _, m in got)
            # everything was acked: the queue is empty
            assert await queue.get(fail=False) is None

    run(main())


def test_publish_concurrently_and_gather_confirms(broker):
    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            ch = await conn.channel()
            queue = await ch.declare_queue("", exclusive=True)
            results = await asyncio.gather(
                *(ch.default_exchange.publish(Message(b"%d" % i), routing_key=queue.name) for i in range(500))
            )
            assert len(results) == 500 and all(isinstance(r, Basic.Ack) for r in results)
            got = await collect(queue, 500)
            assert sorted(int(b) for b, _ in got) == list(range(500))

    run(main())


def test_get_reject_and_nack_with_requeue(broker):
    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            ch = await conn.channel()
            queue = await ch.declare_queue("aio.get")
            for body in (b"a", b"b", b"c"):
                await ch.default_exchange.publish(Message(body), routing_key="aio.get")
            first = await queue.get(timeout=5)
            assert first.body == b"a" and not first.redelivered
            await first.reject(requeue=True)
            again = await queue.get(timeout=5)
            assert again.body == b"a" and again.redelivered
            await again.nack(requeue=False)  # dropped
            b = await queue.get(timeout=5)
            await b.nack(requeue=True)
            b2 = await queue.get(timeout=5)
            assert b2.body == b"b" and b2.redelivered
            await b2.ack()
            c = await queue.get(timeout=5, no_ack=True)
            assert c.body == b"c"
            assert await queue.get(fail=False) is None
            with pytest.raises(aio_pika.exceptions.QueueEmpty):
                await queue.get(timeout=5)

    run(main())


def test_prefetch_bounds_unacked_deliveries(broker):
    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            ch = await conn.channel()
            await ch.set_qos(prefetch_count=5)
            queue = await ch.declare_queue("aio.qos")
            for i in range(30):
                await ch.default_exchange.publish(Message(b"%d" % i), routing_key="aio.qos")
            held = []
            arrived = asyncio.Event()

            async def on_message(message):
                held.append(message)
                if len(held) == 5:
                    arrived.set()

            tag = await queue.consume(on_message)
            await asyncio.wait_for(arrived.wait(), 5)
            await asyncio.sleep(0.3)  # room for the broker to overshoot, if it would: this wait is the check
            assert len(held) == 5
            await queue.cancel(tag)  # first, so the acks below open no new slots
            for message in held:
                await message.ack()
            # 5 delivered and acked; 25 still queued
            declared = await ch.declare_queue("aio.qos", passive=True)
            assert declared.declaration_result.message_count == 25

    run(main())


def test_mandatory_publish_is_returned(broker):
    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            ch = await conn.channel()  # on_return_raises=False: the return goes to callbacks
            returned = []
            ch.return_callbacks.add(lambda channel, message: returned.append(message))
            ex = await ch.declare_exchange("aio.unbound", ExchangeType.DIRECT)
            await ex.publish(Message(b"to-nobody", message_id="r-1"), routing_key="nobody", mandatory=True)
            await until(lambda: returned, "the return")
            assert [m.body for m in returned] == [b"to-nobody"]
            assert returned[0].message_id == "r-1"
            assert returned[0].routing_key == "nobody" and returned[0].exchange == "aio.unbound"

            strict = await conn.channel(on_return_raises=True)
            ex2 = await strict.get_exchange("aio.unbound")
            with pytest.raises(aiormq.exceptions.PublishError) as e:
                await ex2.publish(Message(b"bounce"), routing_key="nobody", mandatory=True)
            assert e.value.frame.reply_code == 312 and e.value.frame.reply_text == "NO_ROUTE"
            assert e.value.message.body == b"bounce"
            # the channel goes on working after a return
            queue = await strict.declare_queue("", exclusive=True)
            await strict.default_exchange.publish(Message(b"fine"), routing_key=queue.name, mandatory=True)
            assert (await queue.get(timeout=5)).body == b"fine"

    run(main())


def test_publish_to_missing_exchange_closes_channel_with_404(broker):
    async def main():
        async with await aio_pika.connect(broker.url) as conn:
            ch = await conn.channel()
            missing = await ch.get_exchange("aio.no-such-exchange", ensure=False)
            with pytest.raises(aiormq.exceptions.ChannelNotFoundEntity) as e:
                await missing.publish(Message(b"x"), routing_key="k")
            assert "NOT_FOUND - no exchange 'aio.no-such-exchange' in vhost '/'" in str(e.value)
            assert ch.is_closed
            # the connection is untouched: another channel works
            other = await conn.channel()
            queue = await other.declare_queue("", exclusive=True)
            assert queue.name.startswith("amq.gen-")

    run(main())


def test_channel_errors_map_to_reply_codes(broker):
    async def main():
        async with await aio_pika.connect(broker.url) as conn, await aio_pika.connect(broker.url) as other:
            ch = await conn.channel()
            with pytest.raises(aiormq.exceptions.ChannelNotFoundEntity):  # 404
                await ch.declare_queue("aio.absent", passive=True)
            ch = await conn.channel()
            await ch.declare_queue("aio.durable", durable=True)
            with pytest.raises(aiormq.exceptions.ChannelPreconditionFailed):  # 406
                await ch.declare_queue("aio.durable", durable=False)
            ch = await conn.channel()
            await ch.declare_queue("aio.exclusive", exclusive=True)
            och = await other.channel()
            with pytest.raises(aiormq.exceptions.ChannelLockedResource):  # 405
                await och.declare_queue("aio.exclusive", exclusive=True)
            ch = await conn.channel()
            with pytest.raises(aiormq.exceptions.ChannelAccessRefused):  # 403
                await ch.declare_exchange("amq.reserved", ExchangeType.FANOUT)

    run(main())


def test_robust_connection_recovers_after_broker_restart(broker):
    async def main():
        conn = await aio_pika.connect_robust(broker.url, reconnect_interval=0.2)
        reconnected = asyncio.Event()
        conn.reconnect_callbacks.add(lambda *args: reconnected.set())
        closes = []
        conn.close_callbacks.add(lambda connection, exc: closes.append(exc))
        ch = await conn.channel()
        queue = await ch.declare_queue("aio.robust", auto_delete=True)
        got = []
        received = asyncio.Event()

        async def on_message(message):
            async with message.process():
                got.append(message.body)
                received.set()

        await queue.consume(on_message)
        await ch.default_exchange.publish(Message(b"before"), routing_key="aio.robust")
        await asyncio.wait_for(received.wait(), 5)
        # stop the broker as a service manager would; the client gets 320 and reconnects
        await asyncio.get_running_loop().run_in_executor(None, broker.stop)
        await until(lambda: closes, "the connection's close")
        # the broker said goodbye in protocol terms before hanging up
        assert [(type(e), e.args) for e in closes[:1]] == [
            (aiormq.exceptions.ConnectionClosed, (320, "CONNECTION_FORCED - broker shutdown"))
        ]
        await asyncio.get_running_loop().run_in_executor(None, broker.start)
        await asyncio.wait_for(reconnected.wait(), 10)
        received.clear()
        # the robust channel re-declared the queue and its consumer on the new broker
        await ch.default_exchange.publish(Message(b"after"), routing_key="aio.robust")
        await asyncio.wait_for(received.wait(), 5)
        assert got == [b"before", b"after"]
        await conn.close()

    run(main(), timeout=40)
