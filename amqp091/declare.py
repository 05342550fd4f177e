"""The exchange and queue classes' methods: declare, delete, bind, unbind, purge.

Each handler takes (channel, decoded argument list), calls the protocol-neutral
operation of core/topology.py and writes the reply (unless nowait).
"""

from ..codec import spec
from ..core.topology import (
    bind,
    declare_exchange,
    declare_queue,
    delete_exchange_named,
    delete_queue_named,
    purge_queue,
    unbind,
)


def exchange_declare(ch, args):
    _ticket, name, kind, passive, durable, auto_delete, internal, nowait, arguments = args
    declare_exchange(
        ch.broker,
        ch.client,
        name,
        kind,
        passive=passive,
        durable=durable,
        auto_delete=auto_delete,
        internal=internal,
        arguments=arguments,
    )
    if not nowait:
        ch.reply(spec.EXCHANGE_DECLARE_OK)


def exchange_delete(ch, args):
    _ticket, name, if_unused, nowait = args
    delete_exchange_named(ch.broker, ch.client, name, if_unused)
    if not nowait:
        ch.reply(spec.EXCHANGE_DELETE_OK)


def exchange_bind(ch, args):
    _ticket, destination, source, key, nowait, arguments = args
    bind(ch.broker, ch.client, source, destination, key, arguments, spec.EXCHANGE_BIND, to_queue=False)
    if not nowait:
        ch.reply(spec.EXCHANGE_BIND_OK)


def exchange_unbind(ch, args):
    _ticket, destination, source, key, nowait, arguments = args
    unbind(ch.broker, ch.client, source, destination, key, arguments, spec.EXCHANGE_UNBIND, to_queue=False)
    if not nowait:
        ch.reply(spec.EXCHANGE_UNBIND_OK)


def queue_declare(ch, args):
    _ticket, name, passive, durable, exclusive, auto_delete, nowait, arguments = args
    if name.startswith(b"amq.rabbitmq.reply-to"):  # direct reply-to's pseudo-queue, or a reply name
        from .replyto import declare

        declare(ch, name, nowait)
        return
    queue = declare_queue(
        ch.broker,
        ch.client,
        name,
        passive=passive,
        durable=durable,
        exclusive=exclusive,
        auto_delete=auto_delete,
        arguments=arguments,
    )
    ch.last_queue = queue.name
    if not nowait:
        ch.reply(spec.QUEUE_DECLARE_OK, (queue.name, queue.message_count(), len(queue.consumers)))


def queue_bind(ch, args):
    _ticket, name, exchange, key, nowait, arguments = args
    name = ch.queue_name(name, spec.QUEUE_BIND)  # (the empty name's last queue: its 404 comes first)
    bind(ch.broker, ch.client, exchange, name, key, arguments, spec.QUEUE_BIND, to_queue=True)
    if not nowait:
        ch.reply(spec.QUEUE_BIND_OK)


def queue_unbind(ch, args):
    _ticket, name, exchange, key, arguments = args
    name = ch.queue_name(name, spec.QUEUE_UNBIND)
    unbind(ch.broker, ch.client, exchange, name, key, arguments, spec.QUEUE_UNBIND, to_queue=True)
    ch.reply(spec.QUEUE_UNBIND_OK)


def queue_purge(ch, args):
    _ticket, name, nowait = args
    count = purge_queue(ch.broker, ch.client, ch.queue_name(name, spec.QUEUE_PURGE), spec.QUEUE_PURGE)
    if not nowait:
        ch.reply(spec.QUEUE_PURGE_OK, (count,))


def queue_delete(ch, args):
    _ticket, name, if_unused, if_empty, nowait = args
    name = ch.queue_name(name, spec.QUEUE_DELETE)
    consumers = []
    count = delete_queue_named(ch.broker, ch.client, name, if_unused, if_empty, spec.QUEUE_DELETE, consumers)
    if not nowait:
        ch.reply(spec.QUEUE_DELETE_OK, (count,))
    # RabbitMQ's order: the consumers hear of it (basic.cancel) after delete-ok, on this channel
    # too (py-amqp and kombu fail on a cancel that comes while they wait for delete-ok)
    for consumer in consumers:
        consumer.session.server_cancel(consumer)
