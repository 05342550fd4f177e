"""The basic class's methods but publish and ack, which the channel reads itself: qos,
consume, cancel, get, reject, nack, recover.

Each handler takes (channel, decoded argument list) and writes its reply.
"""

from ..codec import spec
from ..codec.errors import NOT_ALLOWED, NOT_IMPLEMENTED, Refused
from ..codec.wire import text
from . import output


def basic_qos(ch, args):
    size, count, is_global = args
    if size:
        raise Refused(NOT_IMPLEMENTED, "prefetch_size!=0 (%d)" % size, spec.BASIC_QOS)
    if is_global:
        ch.prefetch_global = count  # RabbitMQ's meaning: shared by the channel's consumers
    else:
        ch.prefetch_consumer = count  # each consumer started after this gets its own window
    ch.reply(spec.BASIC_QOS_OK)
    ch.redispatch([c.queue for c in ch.consumers.values()])


def basic_consume(ch, args):
    _ticket, name, tag, _no_local, no_ack, exclusive, nowait, arguments = args
    if name == b"amq.rabbitmq.reply-to":  # direct reply-to's pseudo-queue
        from .replyto import consume

        consume(ch, tag or _new_consumer_tag(ch), no_ack, nowait)
        return
    queue = ch.queue_named(name, spec.BASIC_CONSUME)
    if not tag:
        tag = _new_consumer_tag(ch)
    elif tag in ch.consumers:
        raise Refused(NOT_ALLOWED, "attempt to reuse consumer tag '%s'" % text(tag), spec.BASIC_CONSUME)
    consumer = output.ChannelConsumer(ch, tag, queue, no_ack, exclusive, ch.prefetch_consumer)
    ch.broker.consume(ch.client, queue, consumer, spec.BASIC_CONSUME, arguments)
    ch.consumers[tag] = consumer
    if not nowait:
        ch.reply(spec.BASIC_CONSUME_OK, (tag,))  # consume-ok goes out before the first delivery
    queue.dispatch()


def _new_consumer_tag(ch):
    while True:
        tag = ch.broker.new_name(b"amq.ctag-")
        if tag not in ch.consumers:
            return tag


def basic_cancel(ch, args):
    tag, nowait = args
    if tag == ch.reply_tag:  # the direct reply-to consumer (reply_tag is None on most channels)
        from .replyto import forget

        forget(ch)
        if not nowait:
            ch.reply(spec.BASIC_CANCEL_OK, (tag,))
        return
    consumer = ch.consumers.pop(tag, None)
    if not nowait:
        ch.reply(spec.BASIC_CANCEL_OK, (tag,))  # an unknown tag is not an error (RabbitMQ)
    if consumer is not None:
        ch.broker.cancel(consumer)


def basic_get(ch, args):
    _ticket, name, no_ack = args
    queue = ch.queue_named(name, spec.BASIC_GET)
    if queue.is_stream:
        from ..core.streams.streamrules import refused  # a stream exists: its modules are loaded

        raise refused(queue, spec.BASIC_GET)
    entry = ch.broker.get(ch.client, queue, no_ack, spec.BASIC_GET)
    if entry is None:
        ch.reply(spec.BASIC_GET_EMPTY, (b"",))
        return
    message, redelivered, _expires_at = entry
    tag = ch.next_tag
    ch.next_tag = tag + 1
    if not no_ack:
        ch.unacked[tag] = (queue, entry, None)
    output.with_content(
        ch, spec.BASIC_GET_OK, (tag, redelivered, message.exchange, message.routing_key, queue.message_count()), message
    )


def basic_ack(ch, args):
    ch.settle(args[0], args[1], True, False, spec.BASIC_ACK)


def basic_reject(ch, args):
    ch.settle(args[0], False, False, args[1], spec.BASIC_REJECT)


def basic_nack(ch, args):
    ch.settle(args[0], args[1], False, args[2], spec.BASIC_NACK)


def basic_recover_async(ch, args):
    if not args[0]:
        raise Refused(NOT_IMPLEMENTED, "requeue=false", spec.BASIC_RECOVER)
    # A stream's deliveries are never redelivered (RabbitMQ 3.10 fails with 541 here): 540, as
    # for the other operations a stream does not have.
    for consumer in ch.consumers.values():
        if consumer.queue.is_stream:
            from ..core.streams.streamrules import refused

            raise refused(consumer.queue, spec.BASIC_RECOVER)
    ch.requeue_all()


def basic_recover(ch, args):
    basic_recover_async(ch, args)
    ch.reply(spec.BASIC_RECOVER_OK)
