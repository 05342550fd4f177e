"""Issue 14's connection and channel items, hutch against the run's RabbitMQ (3.10.8): each
scenario drives real clients (pika, aio-pika, py-amqp) against both brokers and the two
observations must be equal (differential.py). The items: connection.update-secret, direct
reply-to, channel numbers, an exclusive queue re-declared by a robust client after a cut
link, queue.delete-ok before the server's basic.cancel, and the default exchange's (and the
amq.* exchanges') refusals.
"""

import asyncio
import os
import time

import aio_pika
import amqp
import pika
import pytest
from aio_pika.patterns import RPC
from brokers import BIN, RunningBroker, pika_connection, pump_until
from differential import MARKS, attempt, fresh, same_on_both, url
from pika.exceptions import UnroutableError
from tcp_proxy import TcpProxy

pytestmark = MARKS

PSEUDO = "amq.rabbitmq.reply-to"


# ---------------------------------------------------------------- connection.update-secret


def test_update_secret_with_pika(broker, rabbitmq):
    """pika's update_secret: update-secret-ok, and the connection goes on."""

    def scenario(target):
        def refresh(connection, channel):
            connection.update_secret("guest", "token refresh")
            return channel.queue_declare("", exclusive=True).method.queue.startswith("amq.gen-")

        return attempt(target, refresh)

    assert same_on_both(scenario, broker, rabbitmq) == ("ok", True)


def test_update_secret_with_aio_pika(broker, rabbitmq):
    def scenario(target):
        async def main():
            connection = await aio_pika.connect(url(target))
            try:
                ok = await connection.update_secret("guest", reason="token refresh")
                channel = await connection.channel()
                queue = await channel.declare_queue("", exclusive=True)
                return type(ok).__name__, queue.name.startswith("amq.gen-")
            finally:
                await connection.close()

        return asyncio.run(main())

    assert same_on_both(scenario, broker, rabbitmq) == ("UpdateSecretOk", True)


def test_update_secret_refused(broker, rabbitmq):
    """A secret the login's check refuses closes the connection with RabbitMQ's 530 and words
    for a backend's refusal. A difference on purpose: RabbitMQ 3.10.8's internal backend never
    checks a new secret (its user state cannot expire: rabbit_auth_backend_internal
    state_can_expire() is false) and takes any; issue 14 asks that hutch check it with the
    login's backend, as RabbitMQ's backends whose state expires (OAuth 2) do."""

    def scenario(target):
        return attempt(target, lambda connection, channel: connection.update_secret("not the password", "refresh"))

    refused = ("connection closed", 530, "NOT_ALLOWED - New secret was refused by one of the backends")
    observed = same_on_both(scenario, broker, rabbitmq, expected_difference=lambda theirs: refused)
    assert observed == refused


# ---------------------------------------------------------------- direct reply-to


def test_direct_reply_to_round_trip_with_pika(broker, rabbitmq):
    """A requester with a no-ack consumer on the pseudo-queue publishes a request with reply_to
    amq.rabbitmq.reply-to; a server on another connection reads the generated name and replies
    to it through the default exchange, once plainly and once mandatory (it comes back: the
    reply is routed to no queue, in RabbitMQ 3.10); both come straight to the requester."""

    def scenario(target):
        requester = pika_connection(target)
        channel = requester.channel()
        replies = []

        def on_reply(_ch, method, properties, body):
            replies.append(
                (method.consumer_tag, method.delivery_tag, method.exchange, method.redelivered, body)
                + (method.routing_key == reply_name[0], properties.correlation_id)
            )

        channel.basic_consume(PSEUDO, on_reply, auto_ack=True, consumer_tag="replies")
        requests = fresh("requests")
        channel.queue_declare(requests, auto_delete=True)
        channel.basic_publish("", requests, b"ping", pika.BasicProperties(reply_to=PSEUDO, correlation_id="c1"))
        _method, request, _body = channel.basic_get(requests, auto_ack=True)
        reply_name = [request.reply_to]
        server = pika_connection(target)
        answering = server.channel()
        answering.basic_publish("", request.reply_to, b"pong", pika.BasicProperties(correlation_id="c1"))
        answering.confirm_delivery()
        try:
            answering.basic_publish("", request.reply_to, b"pong 2", pika.BasicProperties(correlation_id="c2"), True)
            returned = []
        except UnroutableError as e:
            returned = [(m.method.reply_code, m.method.reply_text, m.body) for m in e.messages]
        declared = [
            (m.queue == name, m.message_count, m.consumer_count)
            for name in (request.reply_to, PSEUDO)
            for m in (answering.queue_declare(name, passive=True).method,)
        ]
        server.close()
        pump_until(requester, lambda: len(replies) == 2, what="the two replies")
        requester.close()
        prefixed = request.reply_to.startswith(PSEUDO + ".") and len(request.reply_to) > len(PSEUDO) + 1
        return {"generated name": prefixed, "replies": replies, "returned": returned, "declared": declared}

    observed = same_on_both(scenario, broker, rabbitmq)
    assert [reply[4] for reply in observed["replies"]] == [b"pong", b"pong 2"]


def test_direct_reply_to_misuse(broker, rabbitmq):
    """RabbitMQ's refusals: a consumer that would ack, a second reply consumer, a request with
    the pseudo reply_to on a channel without one (or after it was cancelled), names behind the
    pseudo-queue that are not there, and queue operations on it."""

    def consume_twice(connection, channel):
        channel.basic_consume(PSEUDO, lambda *a: None, auto_ack=True)
        channel.basic_consume(PSEUDO, lambda *a: None, auto_ack=True)

    def request(channel):
        channel.basic_publish("", "nowhere", b"x", pika.BasicProperties(reply_to=PSEUDO))
        return channel.queue_declare("", exclusive=True).method.queue.startswith("amq.gen-")  # a round trip

    def on_other_channel(connection, channel):
        channel.basic_consume(PSEUDO, lambda *a: None, auto_ack=True)
        return request(connection.channel())

    def after_cancel(connection, channel):
        channel.basic_cancel(channel.basic_consume(PSEUDO, lambda *a: None, auto_ack=True))
        return request(channel)

    cases = {
        "consume with acks": lambda c, ch: ch.basic_consume(PSEUDO, lambda *a: None, auto_ack=False) and None,
        "consume twice": consume_twice,
        "request without a reply consumer": lambda c, ch: request(ch),
        "request on another channel": on_other_channel,
        "request after cancel": after_cancel,
        "declare an unknown reply name": lambda c, ch: ch.queue_declare(PSEUDO + ".unknown", passive=True) and None,
        "declare a look-alike": lambda c, ch: ch.queue_declare(PSEUDO + "x") and None,
        "get": lambda c, ch: ch.basic_get(PSEUDO),
        "bind": lambda c, ch: ch.queue_bind(PSEUDO, "amq.direct", "k") and None,
        "purge": lambda c, ch: ch.queue_purge(PSEUDO) and None,
        "delete": lambda c, ch: ch.queue_delete(PSEUDO).method.message_count,
    }

    def scenario(target):
        return {name: attempt(target, action) for name, action in cases.items()}

    observed = same_on_both(scenario, broker, rabbitmq)
    assert observed["consume with acks"] == (
        "channel closed",
        406,
        "PRECONDITION_FAILED - reply consumer cannot acknowledge",
    )


def test_direct_reply_to_with_aio_pika(broker, rabbitmq):
    """aio-pika as a requester on the pseudo-queue (no_ack consumer, then requests whose
    reply_to is amq.rabbitmq.reply-to) and as the server that answers to message.reply_to; a
    reply after the requester's channel is gone is dropped, not queued anywhere."""

    def scenario(target):
        async def main():
            connection = await aio_pika.connect(url(target))
            try:
                server_channel = await connection.channel()
                requests = await server_channel.declare_queue(fresh("rpc"), auto_delete=True)
                reply_names = []

                async def serve(message):
                    async with message.process():
                        reply_names.append(message.reply_to)
                        reply = aio_pika.Message(message.body * 2, correlation_id=message.correlation_id)
                        await server_channel.default_exchange.publish(reply, routing_key=message.reply_to)

                await requests.consume(serve)
                channel = await connection.channel()
                pseudo = await channel.declare_queue(PSEUDO, passive=True)
                answers = asyncio.Queue()
                await pseudo.consume(answers.put, no_ack=True)
                results = []
                for n in range(3):
                    request = aio_pika.Message(b"%d" % n, reply_to=PSEUDO, correlation_id=str(n))
                    await channel.default_exchange.publish(request, routing_key=requests.name)
                    answer = await asyncio.wait_for(answers.get(), 10)
                    results.append((answer.body, answer.correlation_id, answer.routing_key == reply_names[-1]))
                await channel.close()
                late = aio_pika.Message(b"late")
                await server_channel.default_exchange.publish(late, routing_key=reply_names[-1])
                check = await connection.channel()
                declared = await check.declare_queue(PSEUDO, passive=True)
                same_name = len(set(reply_names)) == 1 and reply_names[0].startswith(PSEUDO + ".")
                return results, same_name, (declared.declaration_result.message_count, answers.qsize())
            finally:
                await connection.close()

        return asyncio.run(main())

    observed = same_on_both(scenario, broker, rabbitmq)
    assert observed[0] == [(b"00", "0", True), (b"11", "1", True), (b"22", "2", True)]


def test_aio_pika_rpc_pattern(broker, rabbitmq):
    """aio_pika.patterns.RPC, as applications use it. (aio-pika 10's RPC has a reply queue of
    its own rather than amq.rabbitmq.reply-to: this shows the pattern works on hutch as on
    RabbitMQ, direct reply-to is shown above.)"""

    def scenario(target):
        async def main():
            connection = await aio_pika.connect(url(target))
            try:
                server = await RPC.create(await connection.channel())
                name = fresh("multiply")

                async def multiply(*, x, y):
                    return x * y

                await server.register(name, multiply, auto_delete=True)
                client = await RPC.create(await connection.channel())
                results = [await client.call(name, kwargs={"x": x, "y": 7}) for x in range(4)]
                try:
                    await client.call(name, kwargs={"x": 1})  # a missing argument: the error comes back
                    error = None
                except TypeError as e:
                    error = type(e).__name__
                return results, error
            finally:
                await connection.close()

        return asyncio.run(main())

    assert same_on_both(scenario, broker, rabbitmq) == ([0, 7, 14, 21], "TypeError")


def test_direct_reply_to_is_advertised(broker, rabbitmq):
    def scenario(target):
        connection = pika_connection(target)
        capabilities = connection._impl.server_properties["capabilities"]
        connection.close()
        return capabilities.get("direct_reply_to")

    assert same_on_both(scenario, broker, rabbitmq) is True


def test_the_whole_capabilities_table_is_rabbitmq_s(broker, rabbitmq):
    """The capabilities hutch advertises in connection.start are exactly RabbitMQ's: a client
    that turns a feature on because the broker says it has it finds it there."""

    def scenario(target):
        connection = pika_connection(target)
        capabilities = dict(connection._impl.server_properties["capabilities"])
        connection.close()
        return capabilities

    assert same_on_both(scenario, broker, rabbitmq) == {
        "publisher_confirms": True,
        "exchange_exchange_bindings": True,
        "basic.nack": True,
        "consumer_cancel_notify": True,
        "connection.blocked": True,
        "consumer_priorities": True,
        "authentication_failure_close": True,
        "per_consumer_qos": True,
        "direct_reply_to": True,
    }


# ---------------------------------------------------------------- channel numbers


def test_channel_numbers_and_their_count(broker, rabbitmq):
    """Any channel number the wire carries opens (65535 and 2048 after channel_max 2047);
    channel_max caps how many are open at once, whatever their numbers: one more closes the
    connection with 530. A closed channel frees its place."""

    def high_numbers(connection, channel):
        opened = []
        for number in (65535, 2048):
            high = connection.channel(number)
            opened.append((high.channel_number, high.queue_declare("", exclusive=True).method.queue[:8]))
        return connection._impl.params.channel_max, opened

    def count(connection, channel):
        opened = [channel.channel_number]
        for number in (500, 3000, 4):
            connection.channel(number)
            opened.append(number)
        return opened

    def freed(connection, channel):
        connection.channel(2)
        channel.close()
        connection.channel(60000)
        connection.channel(9)

    def scenario(target):
        return [
            attempt(target, high_numbers),
            attempt(target, count, channel_max=3),
            attempt(target, freed, channel_max=2),
        ]

    observed = same_on_both(scenario, broker, rabbitmq)
    assert observed[1] == (
        "connection closed",
        530,
        "NOT_ALLOWED - number of channels opened (3) has reached the negotiated channel_max (3)",
    )


# ---------------------------------------------------------------- an exclusive queue after a cut link


@pytest.mark.parametrize("fault", ["cut", "reset"])
def test_robust_client_redeclares_its_exclusive_queue_after_a_cut(broker, rabbitmq, fault):
    """aio-pika's connect_robust through a proxy that cuts the link (FIN to both ends) or resets
    it (RST): the client reconnects and re-declares its exclusive queue and consumer, which
    needs the broker to have let the old connection go (else 405 RESOURCE_LOCKED), and
    messages flow again."""

    def scenario(target):
        async def main():
            proxy = TcpProxy(target.port).start()
            connection = await aio_pika.connect_robust(
                "amqp://guest:guest@127.0.0.1:%d/" % proxy.port, reconnect_interval=0.1
            )
            try:
                reconnected = asyncio.Event()
                connection.reconnect_callbacks.add(lambda *args: reconnected.set())
                channel = await connection.channel()
                queue = await channel.declare_queue(fresh("exclusive"), exclusive=True)
                received = asyncio.Queue()
                await queue.consume(received.put, no_ack=True)
                await channel.default_exchange.publish(aio_pika.Message(b"before"), routing_key=queue.name)
                before = (await asyncio.wait_for(received.get(), 10)).body
                getattr(proxy, fault)()
                await asyncio.wait_for(reconnected.wait(), 20)
                await asyncio.wait_for(_restored(channel), 10)
                await channel.default_exchange.publish(aio_pika.Message(b"after"), routing_key=queue.name)
                after = (await asyncio.wait_for(received.get(), 10)).body
                check = await connection.channel()
                declared = await check.declare_queue(queue.name, passive=True)  # 405 if not this connection's
                return before, after, declared.declaration_result.consumer_count, proxy.accepted
            finally:
                await connection.close()
                proxy.stop()

        return asyncio.run(main())

    assert same_on_both(scenario, broker, rabbitmq) == (b"before", b"after", 1, 2)


def test_held_back_publisher_cut_then_redeclared(tmp_path, rabbitmq):
    """The case where hutch kept the old connection: a publisher held back by a full queue (a
    board's budget; here queue_max_messages = 20) is not read from, so hutch did not see its
    link cut, and without heartbeats never let it go: the robust client's re-declare of its
    exclusive queue got 405 RESOURCE_LOCKED at every reconnect. RabbitMQ has no such budget and
    reads on. Now the port watches an unread socket for the peer's hang-up (ports/epoll_sockets.py).
    Both brokers: the client (no heartbeats) reconnects once and the queue is its own again."""
    config = tmp_path / "hutch.toml"
    config.write_text("[limits]\nqueue_max_messages = 20\n")
    hutch = RunningBroker([os.path.join(BIN, "hutch"), "serve", "--config", str(config)], tmp_path).start()

    def scenario(target):
        async def main():
            proxy = TcpProxy(target.port).start()
            connection = await aio_pika.connect_robust("amqp://guest:guest@127.0.0.1:%d/?heartbeat=0" % proxy.port)
            try:
                reconnected = asyncio.Event()
                connection.reconnect_callbacks.add(lambda *args: reconnected.set())
                channel = await connection.channel(publisher_confirms=False)
                queue = await channel.declare_queue(fresh("held"), exclusive=True)
                observer = await aio_pika.connect(url(target))
                watching = await observer.channel()
                flood = await watching.declare_queue(fresh("flood"), auto_delete=False)
                for n in range(25):  # five more than hutch's budget: it stops reading this client
                    await channel.default_exchange.publish(aio_pika.Message(b"%d" % n), routing_key=flood.name)
                while await _message_count(watching, flood.name) < 20:  # (hutch takes 20, then holds back)
                    await asyncio.sleep(0.02)  # the polling interval
                proxy.cut()
                await asyncio.wait_for(reconnected.wait(), 30)
                await asyncio.wait_for(_restored(channel), 10)
                check = await connection.channel()
                declared = await check.declare_queue(queue.name, passive=True)  # 405 if not this connection's
                await flood.delete(if_unused=False, if_empty=False)
                await observer.close()
                return declared.declaration_result.message_count, proxy.accepted
            finally:
                await connection.close()
                proxy.stop()

        return asyncio.run(main())

    try:
        assert same_on_both(scenario, hutch, rabbitmq) == (0, 2)
        assert "RESOURCE_LOCKED" not in hutch.log()
    finally:
        hutch.stop()
    assert not hutch.errors(), hutch.log()[-3000:]


async def _message_count(channel, name):
    return (await channel.declare_queue(name, passive=True)).declaration_result.message_count


async def _restored(channel):
    """Wait until a robust channel is open again (its queues and consumers restored)."""
    while channel.is_closed:
        await asyncio.sleep(0.02)  # the polling interval


# ---------------------------------------------------------------- queue.delete and basic.cancel


def test_delete_ok_before_the_consumers_cancel(broker, rabbitmq):
    """py-amqp: the channel that deletes a queue gets queue.delete-ok, then the broker's
    basic.cancel for its consumers (plain, exclusive and auto-delete queues). py-amqp
    dispatches frames in the order they come, so each list is the order on the wire. A consumer
    on another channel or connection gets its cancel too, but there RabbitMQ's order is a race
    between its processes (seen either way on one connection's two channels): only that both
    come is compared. hutch sends delete-ok first everywhere (tests/portable/test_queues.py)."""

    def one(target, where, **declare):
        seen = []
        connection = amqp.Connection("127.0.0.1:%d" % target.port, userid="guest", password="guest")
        connection.connect()
        other = None
        try:
            channel = connection.channel()
            name = fresh("deleted")
            channel.queue_declare(name, **declare)
            consuming = {"same channel": channel, "other channel": connection.channel()}.get(where)
            if consuming is None:
                other = amqp.Connection("127.0.0.1:%d" % target.port, userid="guest", password="guest")
                other.connect()
                consuming = other.channel()
            consuming.basic_consume(name, callback=lambda m: None, on_cancel=lambda tag: seen.append(("cancel", tag)))
            seen.append(("delete-ok", channel.queue_delete(name)))
            waiting = other or connection
            deadline = time.monotonic() + 10
            while len(seen) < 2 and time.monotonic() < deadline:
                try:
                    waiting.drain_events(timeout=0.1)
                except TimeoutError:
                    pass
            observed = [
                (event, value if event == "delete-ok" else value.startswith("amq.ctag")) for event, value in seen
            ]
            return observed if where == "same channel" else sorted(observed)
        finally:
            connection.close()
            if other is not None:
                other.close()

    def scenario(target):
        return {
            where + " " + kind: one(target, where, **declare)
            for where in ("same channel", "other channel", "other connection")
            for kind, declare in (
                ("plain", {}),
                ("exclusive", {"exclusive": True}),
                ("auto-delete", {"auto_delete": True}),
            )
            if not (where == "other connection" and kind == "exclusive")
        }

    observed = same_on_both(scenario, broker, rabbitmq)
    assert observed["same channel plain"] == [("delete-ok", 0), ("cancel", True)]


# ---------------------------------------------------------------- the default exchange and amq.*


def test_default_and_system_exchanges(broker, rabbitmq):
    """Every operation on "" and on amq.* names: RabbitMQ refuses most on "" with 403 (before it
    looks at the other end), takes an equivalent redeclare of a system exchange, refuses a new
    amq.* name and any deletion of one; publishing to "" with a missing queue is dropped, or
    returned when mandatory."""

    def cases(queue, exchange):
        def mandatory(connection, channel):
            channel.confirm_delivery()
            try:
                channel.basic_publish("", fresh("missing"), b"x", mandatory=True)
                return "delivered"
            except UnroutableError as e:
                return [(m.method.reply_code, m.method.reply_text) for m in e.messages]

        def dropped(connection, channel):
            channel.basic_publish("", fresh("missing"), b"x")
            return channel.queue_declare(queue, passive=True).method.message_count

        missing = "compat-never-declared"
        return {
            "passive declare ''": lambda c, ch: ch.exchange_declare("", passive=True) and None,
            "declare ''": lambda c, ch: ch.exchange_declare("", "direct", durable=True) and None,
            "delete ''": lambda c, ch: ch.exchange_delete("") and None,
            "bind queue to ''": lambda c, ch: ch.queue_bind(queue, "", "k") and None,
            "bind missing queue to ''": lambda c, ch: ch.queue_bind(missing, "", "k") and None,
            "unbind queue from ''": lambda c, ch: ch.queue_unbind(queue, "", "k") and None,
            "bind exchange to ''": lambda c, ch: ch.exchange_bind("", exchange, "k") and None,
            "bind exchange from ''": lambda c, ch: ch.exchange_bind(exchange, "", "k") and None,
            "bind missing exchange from ''": lambda c, ch: ch.exchange_bind(missing, "", "k") and None,
            "unbind exchange from ''": lambda c, ch: ch.exchange_unbind(exchange, "", "k") and None,
            "publish to '' missing queue": dropped,
            "publish to '' missing queue, mandatory": mandatory,
            "passive declare amq.direct": lambda c, ch: ch.exchange_declare("amq.direct", passive=True) and None,
            "redeclare amq.topic": lambda c, ch: ch.exchange_declare("amq.topic", "topic", durable=True) and None,
            "redeclare amq.direct non-durable": lambda c, ch: ch.exchange_declare("amq.direct", "direct") and None,
            "redeclare amq.fanout as direct": lambda c, ch: ch.exchange_declare("amq.fanout", durable=True) and None,
            "declare amq.mine": lambda c, ch: ch.exchange_declare("amq.mine", "direct") and None,
            "passive declare amq.mine": lambda c, ch: ch.exchange_declare("amq.mine", passive=True) and None,
            "delete amq.direct": lambda c, ch: ch.exchange_delete("amq.direct") and None,
            "delete amq.mine": lambda c, ch: ch.exchange_delete("amq.mine") and None,
            "bind missing queue to missing exchange": lambda c, ch: ch.queue_bind(missing, missing, "k") and None,
            "bind missing queue to amq.direct": lambda c, ch: ch.queue_bind(missing, "amq.direct", "k") and None,
            "publish to amq.mine": lambda c, ch: ch.basic_publish("amq.mine", "k", b"x") or ch.basic_qos() and None,
            "declare queue amq.mine": lambda c, ch: ch.queue_declare("amq.mine") and None,
        }

    def scenario(target):
        setup = pika_connection(target)
        channel = setup.channel()
        queue, exchange = fresh("q"), fresh("x")
        channel.queue_declare(queue, auto_delete=False)
        channel.exchange_declare(exchange, "fanout")
        try:
            observed = {}
            for name, action in cases(queue, exchange).items():
                observation = attempt(target, action)
                observed[name] = (
                    observation
                    if observation[0] == "ok"
                    else observation[:2] + (observation[2].replace(queue, "QUEUE").replace(exchange, "EXCHANGE"),)
                )
            return observed
        finally:
            channel.queue_delete(queue)
            channel.exchange_delete(exchange)
            setup.close()

    observed = same_on_both(scenario, broker, rabbitmq)
    assert observed["passive declare ''"] == (
        "channel closed",
        403,
        "ACCESS_REFUSED - operation not permitted on the default exchange",
    )
