"""Exchanges, queues and bindings: declaring, deleting, binding, with RabbitMQ's rules.

Protocol-neutral operations on the broker's entities: the 0-9-1 methods
(amqp091/declare.py), the journal's replay and any other front end call them. They
refuse with core/session.py Refused in RabbitMQ's conditions and words, so a client sees
the errors it would see from RabbitMQ; the journal hears of every durable change.
"""

from ..codec import spec
from ..codec.errors import ACCESS_REFUSED, NOT_FOUND, PRECONDITION_FAILED, RESOURCE_LOCKED, Refused
from ..codec.wire import text
from .access import CONFIGURE, READ, WRITE
from .arguments import EXCHANGE_ARGUMENTS, QUEUE_ARGUMENTS, as_bytes, check_equivalent, check_queue_arguments
from .exchange import ROUTERS, Exchange
from .queue import Queue

# ------------------------------------------------------------ who may


def permit(who, permission, kind, name, method):
    """403 unless who may do permission (core/access.py) on the queue or exchange called name.
    A client with every permission (permissions None) costs a look-up: its board does not even
    load core/access.py."""
    if who is not None and who.permissions is not None:
        from .access import check

        check(who, permission, kind, name, method)


def permit_topic(who, permission, exchange, key, method):
    """403 unless who's topic permissions on exchange allow key (core/access.py)."""
    if who is not None and who.permissions is not None:
        from .access import check_topic

        check_topic(who, permission, exchange, key, method)


# ------------------------------------------------------------ exchanges


def declare_exchange(
    broker, who, name, kind, *, passive=False, durable=False, auto_delete=False, internal=False, arguments=None
):
    """RabbitMQ's order: the type (active only), the default exchange (403, passive too), then
    an existing exchange (amq.* among them) must be equivalent, and a new name must not take
    the reserved prefix."""
    if arguments is None:
        arguments = {}
    method = spec.EXCHANGE_DECLARE
    if not passive and kind not in ROUTERS:
        raise Refused(PRECONDITION_FAILED, "invalid exchange type '%s'" % text(kind), method)
    if not name:
        raise default_exchange_refused(method)
    if not passive:  # (a passive declare needs no permission, as in RabbitMQ 3.10)
        permit(who, CONFIGURE, "exchange", name, method)
    exchange = broker.exchange(name)
    if passive:
        if exchange is None:
            raise Refused(NOT_FOUND, "no exchange '%s' in vhost '/'" % text(name), method)
        return exchange
    if exchange is not None:
        what = "exchange '%s'" % text(name)
        _equivalent("type", what, kind, exchange.kind, method)
        _equivalent("durable", what, durable, exchange.durable, method)
        _equivalent("auto_delete", what, auto_delete, exchange.auto_delete, method)
        _equivalent("internal", what, internal, exchange.internal, method)
        check_equivalent(what, arguments, exchange.arguments, EXCHANGE_ARGUMENTS, method)
        return exchange
    if name.startswith(b"amq."):
        raise Refused(
            ACCESS_REFUSED,
            "exchange name '%s' contains reserved prefix 'amq.*'" % text(name),
            method,
        )
    alternate = arguments.get("alternate-exchange")
    if alternate is not None and not isinstance(alternate, (bytes, str)):
        raise Refused(
            PRECONDITION_FAILED,
            "invalid arg 'alternate-exchange' for exchange '%s'" % text(name),
            method,
        )
    if alternate is not None:  # reading from this exchange, writing to its alternate
        permit(who, READ, "exchange", name, method)
        permit(who, WRITE, "exchange", as_bytes(alternate), method)
    limit = broker.limits.max_exchanges
    if sum(1 for n in broker.exchanges if not n.startswith(b"amq.") and n) >= limit:
        raise Refused(
            PRECONDITION_FAILED,
            "cannot declare exchange '%s': exchange limit (%d) is reached" % (text(name), limit),
            method,
        )
    exchange = Exchange(name, kind, durable, auto_delete, internal, arguments, broker.routers)
    broker.exchanges[name] = exchange
    if durable and broker.journal is not None:
        broker.journal.exchange_declared(exchange)
    return exchange


def delete_exchange_named(broker, who, name, if_unused):
    method = spec.EXCHANGE_DELETE
    if not name:
        raise default_exchange_refused(method)
    if name.startswith(b"amq."):
        raise Refused(
            ACCESS_REFUSED,
            "deletion of system exchange '%s' in vhost '/' not allowed" % text(name),
            method,
        )
    permit(who, CONFIGURE, "exchange", name, method)
    exchange = broker.exchange(name)
    if exchange is None:
        return  # deleting what is not there succeeds, as in RabbitMQ
    if if_unused and exchange.bindings:
        raise Refused(PRECONDITION_FAILED, "exchange '%s' in vhost '/' in use" % text(name), method)
    delete_exchange(broker, exchange)


def delete_exchange(broker, exchange):
    if broker.exchanges.get(exchange.name) is not exchange:
        return
    del broker.exchanges[exchange.name]
    if exchange.durable and broker.journal is not None:
        broker.journal.exchange_deleted(exchange)  # its bindings go with it, here and at replay
    for binding in list(exchange.bindings.values()):
        remove_binding(broker, binding)
    for binding in list(exchange.inbound):
        remove_binding(broker, binding)


def exchange_for_publish(broker, name):
    """The exchange a publish names: it must exist and not be internal."""
    if not name:
        return broker.default_exchange
    exchange = broker.exchange(name)
    if exchange is None:
        raise Refused(NOT_FOUND, "no exchange '%s' in vhost '/'" % text(name), spec.BASIC_PUBLISH)
    if exchange.internal:
        raise Refused(
            ACCESS_REFUSED,
            "cannot publish to internal exchange '%s' in vhost '/'" % text(name),
            spec.BASIC_PUBLISH,
        )
    return exchange


# ------------------------------------------------------------ bindings


def named_exchange(broker, name, method):
    """An exchange that bind/unbind names: never the default one, and it must exist."""
    if not name:
        raise default_exchange_refused(method)
    exchange = broker.exchange(name)
    if exchange is None:
        raise Refused(NOT_FOUND, "no exchange '%s' in vhost '/'" % text(name), method)
    return exchange


def _binding_checks(broker, who, source_name, to_queue, destination_name, key, method):
    """What a bind and an unbind check first, in RabbitMQ's order: write on the destination, the
    default exchange at either end (403), read on the source, and the source's topic permission
    on the key (when the source exists). The source exchange, or None."""
    permit(who, WRITE, "queue" if to_queue else "exchange", destination_name, method)
    if not source_name or (not to_queue and not destination_name):
        raise default_exchange_refused(method)
    permit(who, READ, "exchange", source_name, method)
    source = broker.exchange(source_name)
    if source is not None:
        permit_topic(who, READ, source, key, method)
    return source


def bind(broker, who, source_name, destination_name, key, arguments, method, *, to_queue):
    """queue.bind (to_queue) or exchange.bind, by names: after _binding_checks, a missing source,
    then a missing destination is 404, another client's exclusive queue 405."""
    source = _binding_checks(broker, who, source_name, to_queue, destination_name, key, method)
    if source is None:
        raise Refused(NOT_FOUND, "no exchange '%s' in vhost '/'" % text(source_name), method)
    if to_queue:
        destination = broker.queues.get(destination_name)
        if destination is None:
            raise Refused(NOT_FOUND, "no queue '%s' in vhost '/'" % text(destination_name), method)
        check_exclusive(destination, who, method)
    else:
        destination = named_exchange(broker, destination_name, method)
    add_binding(broker, source, destination, key, arguments, method)


def add_binding(broker, source, destination, key, arguments, method):
    """Bind destination (a queue or an exchange) to the exchange source; binding what is bound
    already is no error."""
    limit = broker.limits.max_bindings
    if broker.binding_count >= limit:
        raise Refused(PRECONDITION_FAILED, "binding limit (%d) is reached" % limit, method)
    binding = source.bind(destination, key, arguments)
    if binding is not None:
        broker.binding_count += 1
        if broker.journal is not None:
            broker.journal.bound(binding)


def unbind(broker, who, source_name, destination_name, key, arguments, method, *, to_queue):
    """Remove a binding, as RabbitMQ 3.10 answers: after _binding_checks (the default exchange
    is refused, 403), a missing source, a missing destination or a missing binding is no error
    (an auto-delete exchange may be gone with its last binding: clients unbind from it at
    teardown). Only a binding that exists is checked against its queue's exclusive owner (405)."""
    source = _binding_checks(broker, who, source_name, to_queue, destination_name, key, method)
    destination = broker.queues.get(destination_name) if to_queue else broker.exchange(destination_name)
    if source is None or destination is None:
        return
    binding = source.find(destination, key, arguments)
    if binding is None:
        return
    if destination.is_queue:
        check_exclusive(destination, who, method)
    remove_binding(broker, binding)


def remove_binding(broker, binding):
    source = binding.source
    if binding.identity not in source.bindings:
        return
    source.unbind(binding)
    broker.binding_count -= 1
    if broker.journal is not None:
        broker.journal.unbound(binding)
    if source.auto_delete and not source.bindings:
        delete_exchange(broker, source)


# ------------------------------------------------------------ queues


def declare_queue(
    broker, who, name, *, passive=False, durable=False, exclusive=False, auto_delete=False, arguments=None
):
    """who: the client declaring it (core/auth.py Login: an exclusive queue's owner), or None."""
    if arguments is None:
        arguments = {}
    method = spec.QUEUE_DECLARE
    if passive:
        queue = broker.queues.get(name)
        if queue is None:
            raise Refused(NOT_FOUND, "no queue '%s' in vhost '/'" % text(name), method)
        check_exclusive(queue, who, method)
        return queue
    stream = as_bytes(arguments.get("x-queue-type")) == b"stream"  # a stream: core/streams/stream.py
    if not name and not stream:  # (a stream may not be server-named: core/streams/streamrules.py)
        name = broker.new_name(b"amq.gen-")
    elif name.startswith(b"amq."):
        raise Refused(ACCESS_REFUSED, "queue name '%s' contains reserved prefix 'amq.*'" % text(name), method)
    permit(who, CONFIGURE, "queue", name, method)  # (a server-named queue's generated name)
    queue = broker.queues.get(name)
    if queue is not None:
        if (queue.owner is not None and queue.owner is not who) or (queue.owner is not None) != bool(exclusive):
            raise _locked(queue, method)
        what = "queue '%s'" % text(name)
        _equivalent("durable", what, durable, queue.durable, method)
        _equivalent("auto_delete", what, auto_delete, queue.auto_delete, method)
        check_equivalent(what, arguments, queue.arguments, QUEUE_ARGUMENTS, method)
        queue.last_used = broker.now
        return queue
    dlx = arguments.get("x-dead-letter-exchange")
    if isinstance(dlx, (bytes, str)):  # reading from this queue, writing to its dead-letter exchange
        permit(who, READ, "queue", name, method)
        permit(who, WRITE, "exchange", as_bytes(dlx), method)
    if stream:
        from .streams.streamrules import check_declare  # only a broker with streams holds their code

        check_declare(name, durable, exclusive, auto_delete, arguments, method)
    else:
        check_queue_arguments(name, arguments)
    limit = broker.limits.max_queues
    if len(broker.queues) >= limit:
        raise Refused(
            PRECONDITION_FAILED,
            "cannot declare queue '%s': queue limit (%d) is reached" % (text(name), limit),
            method,
        )
    if stream:
        from .streams.stream import new_stream

        queue = new_stream(broker, name, arguments, method)
    elif arguments.get("x-max-priority"):  # (0: a plain queue, as in RabbitMQ)
        from .priority import PriorityQueue  # only a broker with priority queues holds their code

        queue = PriorityQueue(broker, name, durable, who if exclusive else None, auto_delete, arguments)
    else:
        queue = Queue(broker, name, durable, who if exclusive else None, auto_delete, arguments)
    broker.queues[name] = queue
    if queue.journalled and broker.journal is not None:
        broker.journal.queue_declared(queue)
    if queue.expires:
        broker.expirable.append(queue)
    return queue


def queue_for(broker, who, name, permission, method):
    """The queue a client's operation names (consume, get, purge), in RabbitMQ's order: who's
    permission (403), the queue (404), another client's exclusive queue (405)."""
    permit(who, permission, "queue", name, method)
    queue = broker.queues.get(name)
    if queue is None:
        raise Refused(NOT_FOUND, "no queue '%s' in vhost '/'" % text(name), method)
    check_exclusive(queue, who, method)
    return queue


def purge_queue(broker, who, name, method):
    """queue.purge: how many ready messages went (a stream has no purge: RabbitMQ's refusal)."""
    queue = queue_for(broker, who, name, READ, method)
    if queue.is_stream:
        from .streams.streamrules import refused  # a stream exists: its modules are loaded

        raise refused(queue, method)
    return queue.purge()


def delete_queue_named(broker, who, name, if_unused, if_empty, method, cancel_later=None):
    """queue.delete by name: configure permission (403), then deleting what is not there
    succeeds (0), as in RabbitMQ; another client's exclusive queue is 405, one in use or not
    empty 406 when asked. How many ready messages it held (cancel_later: as delete_queue)."""
    permit(who, CONFIGURE, "queue", name, method)
    queue = broker.queues.get(name)
    if queue is None:
        return 0
    check_exclusive(queue, who, method)
    if if_unused and queue.consumers:
        raise Refused(PRECONDITION_FAILED, "queue '%s' in vhost '/' in use" % text(name), method)
    if if_empty and queue.message_count():
        raise Refused(PRECONDITION_FAILED, "queue '%s' in vhost '/' is not empty" % text(name), method)
    return delete_queue(broker, queue, cancel_later)


def check_exclusive(queue, who, method):
    """An exclusive queue is its client's alone (405 for any other): the one check of who asks
    that the broker makes of a client's topology and consuming calls."""
    if queue.owner is not None and queue.owner is not who:
        raise _locked(queue, method)


def delete_queue(broker, queue, cancel_later=None):
    """Delete a queue; returns how many ready messages it held. Its consumers are cancelled
    (server_cancel), or, given a list cancel_later, put in it for the caller to cancel
    (queue.delete does once it has answered)."""
    if queue.deleted:
        return 0
    queue.deleted = True
    del broker.queues[queue.name]
    if queue.journalled and broker.journal is not None:
        broker.journal.queue_deleted(queue)  # its messages and bindings go with it
    if queue in broker.expirable:
        broker.expirable.remove(queue)
    for binding in list(queue.inbound):
        remove_binding(broker, binding)
    consumers = queue.consumers
    queue.consumers = []
    count = queue.purge()
    if cancel_later is not None:
        cancel_later += consumers
    else:
        for consumer in consumers:
            consumer.session.server_cancel(consumer)
    return count


# ------------------------------------------------------------ RabbitMQ's refusals, worded as it does


def default_exchange_refused(method):
    return Refused(ACCESS_REFUSED, "operation not permitted on the default exchange", method)


def _locked(queue, method):
    return Refused(
        RESOURCE_LOCKED,
        "cannot obtain exclusive access to locked queue '%s' in vhost '/'. "
        "It could be originally declared on another connection or the exclusive property value does not "
        "match that of the original declaration." % text(queue.name),
        method,
    )


def _equivalent(field, what, received, current, method):
    if received != current:
        if isinstance(received, bool) or isinstance(current, bool):
            received, current = _flag(received), _flag(current)
        else:
            received, current = text(received), text(current)
        raise Refused(
            PRECONDITION_FAILED,
            "inequivalent arg '%s' for %s in vhost '/': "
            "received '%s' but current is '%s'" % (field, what, received, current),
            method,
        )


def _flag(value):
    return "true" if value else "false"
