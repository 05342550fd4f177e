"""The exchange and queue classes' methods: declare, delete, bind, unbind, purge.

Each handler takes (channel, decoded argument list), calls the protocol-neutral
operation of core/topology.py and writes the reply (unless nowait).
"""

from ..codec import spec
from ..codec.errors import ChannelException
from ..codec.spec import PRECONDITION_FAILED
from ..codec.wire import text
from ..core.topology import (
    bind,
    check_exclusive,
    declare_exchange,
    declare_queue,
    default_exchange_refused,
    delete_exchange_named,
    delete_queue,
    named_exchange,
    unbind,
)


def exchange_declare(ch, args):
    _ticket, name, kind, passive, durable, auto_delete, internal, nowait, arguments = args
    declare_exchange(ch.broker, ch.client, name, kind, passive, durable, auto_delete, internal, arguments)
    if not nowait:
        ch.reply(spec.EXCHANGE_DECLARE_OK)


def exchange_delete(ch, args):
    _ticket, name, if_unused, nowait = args
    delete_exchange_named(ch.broker, ch.client, name, if_unused)
    if not nowait:
        ch.reply(spec.EXCHANGE_DELETE_OK)


def exchange_bind(ch, args):
    _ticket, destination, source, key, nowait, arguments = args
    destination = _bound_exchange(ch.broker, destination, source, spec.EXCHANGE_BIND)
    bind(ch.broker, ch.client, source, destination, key, arguments, spec.EXCHANGE_BIND)
    if not nowait:
        ch.reply(spec.EXCHANGE_BIND_OK)


def exchange_unbind(ch, args):
    _ticket, destination, source, key, nowait, arguments = args
    if not destination:
        raise default_exchange_refused(spec.EXCHANGE_UNBIND)
    unbind(ch.broker, ch.client, source, ch.broker.exchange(destination), key, arguments, spec.EXCHANGE_UNBIND)
    if not nowait:
        ch.reply(spec.EXCHANGE_UNBIND_OK)


def _bound_exchange(broker, destination, source, method):
    """The destination of exchange.bind, refused in RabbitMQ's order: the default
    exchange at either end (403) before a missing source, then a missing destination (404)."""
    if destination:  # (else named_exchange's 403 for the default exchange comes first)
        named_exchange(broker, source, method)
    return named_exchange(broker, destination, method)


def queue_declare(ch, args):
    _ticket, name, passive, durable, exclusive, auto_delete, nowait, arguments = args
    if name.startswith(b"amq.rabbitmq.reply-to"):  # direct reply-to's pseudo-queue, or a reply name
        from .replyto import declare

        declare(ch, name, nowait)
        return
    queue = declare_queue(ch.broker, ch.client, name, passive, durable, exclusive, auto_delete, arguments)
    ch.last_queue = queue.name
    if not nowait:
        ch.reply(spec.QUEUE_DECLARE_OK, (queue.name, queue.message_count(), len(queue.consumers)))


def queue_bind(ch, args):
    _ticket, name, exchange, key, nowait, arguments = args
    # RabbitMQ's order: the empty name's last queue (404), the default exchange (403) and a
    # missing exchange (404) before a missing queue (404) or another connection's exclusive one (405)
    name = ch.queue_name(name, spec.QUEUE_BIND)
    named_exchange(ch.broker, exchange, spec.QUEUE_BIND)
    queue = ch.queue_named(name, spec.QUEUE_BIND)
    bind(ch.broker, ch.client, exchange, queue, key, arguments, spec.QUEUE_BIND)
    if not nowait:
        ch.reply(spec.QUEUE_BIND_OK)


def queue_unbind(ch, args):
    _ticket, name, exchange, key, arguments = args
    name = ch.queue_name(name, spec.QUEUE_UNBIND)
    unbind(ch.broker, ch.client, exchange, ch.broker.queues.get(name), key, arguments, spec.QUEUE_UNBIND)
    ch.reply(spec.QUEUE_UNBIND_OK)


def queue_purge(ch, args):
    _ticket, name, nowait = args
    queue = ch.queue_named(name, spec.QUEUE_PURGE)
    if queue.is_stream:
        from ..core.streams.streamrules import refused  # a stream exists: its modules are loaded

        raise refused(queue, spec.QUEUE_PURGE)
    count = queue.purge()
    if not nowait:
        ch.reply(spec.QUEUE_PURGE_OK, (count,))


def queue_delete(ch, args):
    _ticket, name, if_unused, if_empty, nowait = args
    queue = ch.broker.queues.get(ch.queue_name(name, spec.QUEUE_DELETE))
    count = 0
    consumers = []
    if queue is not None:  # deleting what is not there succeeds, as in RabbitMQ
        check_exclusive(queue, ch.client, spec.QUEUE_DELETE)
        if if_unused and queue.consumers:
            raise ChannelException(
                PRECONDITION_FAILED,
                "PRECONDITION_FAILED - queue '%s' in vhost '/' in use" % text(name),
                spec.QUEUE_DELETE,
            )
        if if_empty and queue.message_count():
            raise ChannelException(
                PRECONDITION_FAILED,
                "PRECONDITION_FAILED - queue '%s' in vhost '/' is not empty" % text(name),
                spec.QUEUE_DELETE,
            )
        count = delete_queue(ch.broker, queue, consumers)
    if not nowait:
        ch.reply(spec.QUEUE_DELETE_OK, (count,))
    # RabbitMQ's order: the consumers hear of it (basic.cancel) after delete-ok, on this channel
    # too (py-amqp and kombu fail on a cancel that comes while they wait for delete-ok)
    for consumer in consumers:
        consumer.session.server_cancel(consumer)
