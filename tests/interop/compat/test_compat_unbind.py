"""Unbinding and deleting what is already gone, hutch against the run's RabbitMQ (3.10.8):
RabbitMQ answers unbind-ok when the exchange, the destination or the binding is missing (an
auto-delete exchange goes with its last binding, and clients unbind from it at teardown), and
is lenient with deletes and cancels of things already gone; hutch answers the same."""

import asyncio

import aio_pika
from aio_pika.patterns import RPC
from differential import MARKS, attempt, fresh, same_on_both, url

pytestmark = MARKS


def test_unbinding_what_is_gone(broker, rabbitmq):
    def scenario(target):
        src, dst, dst2, queue = fresh("s.src"), fresh("s.dst"), fresh("s.dst2"), fresh("q")
        other = "no.such.queue"  # a name no test declares: it appears in a reply text

        def auto_deleted(connection, channel):
            """source and destination auto-deleted (each with its last binding), then unbound"""
            channel.exchange_declare(src, "fanout", auto_delete=True)
            channel.exchange_declare(dst, "fanout", auto_delete=True)
            channel.exchange_declare(dst2, "fanout", auto_delete=True)
            channel.exchange_bind(dst, src)
            channel.exchange_bind(dst2, dst)
            channel.exchange_unbind(dst2, dst)  # dst's last binding as a source: dst goes
            channel.exchange_unbind(dst, src)  # src's last binding: src goes
            channel.exchange_unbind(dst, src)  # both gone

        def exclusive_elsewhere(bound):
            """another connection's exclusive queue: 405 only for a binding that exists"""

            def action(connection, channel):
                owner = connection.channel()
                name = owner.queue_declare("", exclusive=True).method.queue
                if bound:
                    owner.queue_bind(name, "amq.direct", "k")
                other_connection = type(connection)(connection._impl.params)
                try:
                    other_connection.channel().queue_unbind(name, "amq.direct", "k")
                finally:
                    if other_connection.is_open:
                        other_connection.close()

            return action

        rows = {
            "exchange.unbind after source and destination were auto-deleted": auto_deleted,
            "queue.unbind from a missing exchange": lambda c, ch: (
                ch.queue_declare(queue) and ch.queue_unbind(queue, "no.such.x", "k") and None
            ),
            "exchange.unbind, destination missing": lambda c, ch: ch.exchange_unbind("nope.dst", "amq.direct") and None,
            "exchange.unbind, source missing": lambda c, ch: ch.exchange_unbind("amq.direct", "nope.src") and None,
            "exchange.unbind, both missing": lambda c, ch: ch.exchange_unbind("nope.dst", "nope.src") and None,
            "queue.unbind, queue missing": lambda c, ch: ch.queue_unbind(other, "amq.direct", "k") and None,
            "queue.unbind, queue and exchange missing": lambda c, ch: ch.queue_unbind(other, "nope.x", "k") and None,
            "queue.unbind, not bound": lambda c, ch: (
                ch.queue_declare(queue) and ch.queue_unbind(queue, "amq.direct", "nokey") and None
            ),
            "queue.unbind from the default exchange": lambda c, ch: (
                ch.queue_declare(queue) and ch.queue_unbind(queue, "", "k") and None
            ),
            "exchange.unbind, default destination, source missing": lambda c, ch: (
                ch.exchange_unbind("", "nope.src") and None
            ),
            "queue.unbind '' with no queue declared": lambda c, ch: ch.queue_unbind("", "nope.x", "k") and None,
            "queue.bind '' to '' with no queue declared": lambda c, ch: ch.queue_bind("", "", "k") and None,
            "queue.unbind, another connection's exclusive queue, bound": exclusive_elsewhere(True),
            "queue.unbind, another connection's exclusive queue, not bound": exclusive_elsewhere(False),
            "exchange.delete, missing": lambda c, ch: ch.exchange_delete("no.such.x", if_unused=True) and None,
            "queue.delete, missing": lambda c, ch: ch.queue_delete(other, if_unused=True, if_empty=True) and None,
            "queue.delete '' with no queue declared": lambda c, ch: ch.queue_delete("") and None,
            "queue.purge, missing": lambda c, ch: ch.queue_purge(other) and None,
            "basic.cancel, unknown tag": lambda c, ch: ch.basic_cancel("no-such-tag") and None,
        }
        observed = {}
        for name, action in rows.items():
            outcome = attempt(target, action)
            observed[name] = tuple(part.split(" 'amq.gen-")[0] if isinstance(part, str) else part for part in outcome)
        return observed

    observed = same_on_both(scenario, broker, rabbitmq)
    assert observed["exchange.unbind after source and destination were auto-deleted"] == ("ok", None)
    assert observed["queue.unbind, another connection's exclusive queue, bound"][:2] == ("channel closed", 405)


def test_aio_pika_rpc_pattern_twice_on_one_connection(broker, rabbitmq):
    """aio_pika.patterns.RPC: create, register, call, close, two rounds on one connection. Its
    close() unbinds from the auto-delete exchange rpc.dlx, gone with its last binding."""

    def scenario(target):
        async def main():
            connection = await aio_pika.connect(url(target))
            results = []
            try:
                for round_number in range(2):
                    rpc = await RPC.create(await connection.channel())
                    name = fresh("double")

                    async def double(*, x):
                        return 2 * x

                    await rpc.register(name, double, auto_delete=True)
                    results.append(await rpc.call(name, kwargs={"x": round_number + 1}))
                    await rpc.close()
                    results.append("closed")
            finally:
                await connection.close()
            return results

        return asyncio.run(main())

    assert same_on_both(scenario, broker, rabbitmq) == [2, "closed", 4, "closed"]
