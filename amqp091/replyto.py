"""Direct reply-to: the pseudo-queue amq.rabbitmq.reply-to, with RabbitMQ's rules.

A requester consumes from amq.rabbitmq.reply-to (no-ack only, one such consumer per
channel) and then publishes requests with reply_to = amq.rabbitmq.reply-to: the broker
rewrites that to a name of the channel's own, amq.rabbitmq.reply-to.<opaque>. A reply
published to the default exchange with that name as routing key goes straight to the
requester's channel as a basic.deliver: it is never queued, and if the requester is gone it
is dropped. It is routed to no queue, so a mandatory reply comes back (312 NO_ROUTE) even
when it was delivered, as in RabbitMQ 3.10.

Loaded when a client first uses it: the channel (amqp091/basic.py, amqp091/channel.py,
amqp091/declare.py) calls in here. The live names are kept in the 0-9-1 front end's share of the broker (connection.py Serving).
"""

from ..codec import spec
from ..codec.errors import NOT_ALLOWED, NOT_FOUND, PRECONDITION_FAILED, Refused
from ..codec.wire import encode_properties, tail, text
from ..core.message import Message
from . import output

QUEUE = b"amq.rabbitmq.reply-to"
PREFIX = b"amq.rabbitmq.reply-to."
CHANNEL_OPEN = 0  # amqp091/channel.py's OPEN (that module imports this one)


def consume(ch, tag, no_ack, nowait):
    """basic.consume from amq.rabbitmq.reply-to (tag: the client's, or one made for it)."""
    if tag in ch.consumers:
        raise Refused(NOT_ALLOWED, "attempt to reuse consumer tag '%s'" % text(tag), spec.BASIC_CONSUME)
    if not no_ack:
        raise Refused(PRECONDITION_FAILED, "reply consumer cannot acknowledge", spec.BASIC_CONSUME)
    if ch.reply_tag is not None:
        raise Refused(PRECONDITION_FAILED, "reply consumer already set", spec.BASIC_CONSUME)
    name = ch.broker.new_name(PREFIX)
    serving = ch.conn.serving
    if serving.reply_channels is None:
        serving.reply_channels = {}
    serving.reply_channels[name] = ch
    ch.reply_tag = tag
    ch.reply_name = name
    if not nowait:
        ch.reply(spec.BASIC_CONSUME_OK, (tag,))


def forget(ch):
    """The channel's reply consumer ends (basic.cancel, or the channel closes): replies to its
    name are dropped from now on."""
    channels = ch.conn.serving.reply_channels
    if channels is not None and channels.get(ch.reply_name) is ch:
        del channels[ch.reply_name]
    ch.reply_tag = ch.reply_name = None


def rewritten(ch, message):
    """A message published on ch with reply_to = amq.rabbitmq.reply-to: the same message with
    the channel's reply name instead (406 if the channel has no reply consumer)."""
    if ch.reply_name is None:
        raise Refused(PRECONDITION_FAILED, "fast reply consumer does not exist", spec.BASIC_PUBLISH)
    props = dict(message.properties())
    props["reply-to"] = ch.reply_name
    header = bytes(message.header()[:12]) + encode_properties(props)
    return Message(
        message.exchange, message.routing_key, message.route, tail(header), message.body_tail, message.body_size
    )


def deliver(channels, message):
    """A message the default exchange routed to no queue: if its routing key names a live reply
    consumer (channels: the live reply names), deliver it there. RabbitMQ 3.10 gives it the channel's next delivery tag without
    taking it (a no-ack delivery's tag is never acked): so does this."""
    ch = channels.get(message.routing_key) if channels else None
    if ch is None or ch.state != CHANNEL_OPEN:  # gone or closing: the reply is dropped
        return
    output.with_content(
        ch, spec.BASIC_DELIVER, (ch.reply_tag, ch.next_tag, False, message.exchange, message.routing_key), message
    )


def declare(ch, name, nowait):
    """queue.declare (passive or not) of a name starting amq.rabbitmq.reply-to: the pseudo-queue
    itself and a live reply name exist (0 messages, 1 consumer); any other is 404."""
    channels = ch.conn.serving.reply_channels
    if name != QUEUE and not (channels and name in channels):
        raise Refused(NOT_FOUND, "no queue '%s' in vhost '/'" % text(name), spec.QUEUE_DECLARE)
    ch.last_queue = name
    if not nowait:
        ch.reply(spec.QUEUE_DECLARE_OK, (name, 0, 1))
