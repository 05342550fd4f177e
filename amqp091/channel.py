"""One AMQP 0-9-1 channel: its frames, its publishes, its deliveries and their acks.

The channel assembles each publish from its three frames and hands the message to
Broker.publish; it delivers what its consumers' queues give it and settles what the
client acks through Broker.settle. Its methods are handled by subject, each in a
module of functions (channel, method arguments): the exchange and queue classes in
amqp091/declare.py, basic in amqp091/basic.py, tx in amqp091/tx.py, confirm in
amqp091/confirms.py (which also holds the confirms the channel owes its publisher);
the channel class itself (flow, close) is here. Anything wrong raises core/session.py
Refused; the connection closes this channel, or itself for a hard error (amqp091/replies.py).
"""

import struct

from ..codec import spec
from ..codec.errors import (
    CHANNEL_ERROR,
    COMMAND_INVALID,
    FRAME_ERROR,
    NOT_FOUND,
    NOT_IMPLEMENTED,
    PRECONDITION_FAILED,
    UNEXPECTED_FRAME,
    Refused,
)
from ..codec.wire import FRAME_END_BYTE, check_property_list, decode_args, method_name, signature
from ..core import counters
from ..core.access import READ
from ..core.broker import ACCEPT, HELD, REJECT, REQUEUE, ROUTED, add_to_group
from ..core.message import Message
from ..core.queue import stop_waiting
from ..core.session import MESSAGE, REDELIVERED
from ..core.topology import queue_for
from . import basic, declare, output
from .confirms import Confirms, confirm_select  # noqa: F401 (Confirms: read by type checkers)

OPEN = 0
CLOSING = 1  # we sent channel.close and wait for close-ok

# The client capabilities (its start-ok) the broker acts on, as bits of its connection's wants.
WANTS_BLOCKED = 1  # connection.blocked / unblocked
WANTS_CANCEL = 2  # consumer_cancel_notify: basic.cancel when a queue goes
WANTS_AUTH_CLOSE = 4  # authentication_failure_close: 403 instead of a hang-up

IDLE = 0  # expecting a method frame
WANT_HEADER = 1  # basic.publish seen, expecting the content header
WANT_BODY = 2  # header seen, expecting body frames


def publish_arguments(buf, pos, end):
    """basic.publish's arguments at buf[pos:end] (after its class and method ids): (exchange,
    routing key, route, bits), route being the two as shortstrs (what a message keeps) and
    bits the mandatory (1) and immediate (2) flags."""
    # ticket short, exchange shortstr, routing-key shortstr, mandatory/immediate bits
    if end - pos < 5:
        raise Refused(FRAME_ERROR, "malformed basic.publish", spec.BASIC_PUBLISH)
    n = buf[pos + 2]
    k = pos + 3 + n
    if k >= end:
        raise Refused(FRAME_ERROR, "malformed basic.publish", spec.BASIC_PUBLISH)
    m = buf[k]
    bits_at = k + 1 + m
    if bits_at != end - 1:
        raise Refused(FRAME_ERROR, "malformed basic.publish", spec.BASIC_PUBLISH)
    route = buf[pos + 2 : bits_at]
    if type(route) is not bytes:  # a memoryview of the port's buffer: copy what is kept
        route = bytes(route)  # (bytes() of bytes would cost as much as the slice again)
    return route[1 : 1 + n], route[2 + n :], route, buf[bits_at]


class Channel:
    # Direct reply-to (amqp091/replyto.py): the reply consumer's tag and the channel's reply name,
    # set on the channels that have one (class-level None: the others pay nothing).
    reply_tag = None
    reply_name = None
    held_by = None  # the full queues this publisher waits for (hold_for), while it does
    held_publish = None  # (message, mandatory): the publish a full queue held back, published again at resume
    # What most channels never change, class-level until one does (each attribute an instance
    # holds costs a board's heap, per channel):
    # content assembly (a consumer's channel never publishes)
    content_state = IDLE
    publishing = None  # (exchange, routing key, route, mandatory) of the publish whose content comes
    header_tail = None
    body_size = 0
    received = 0
    chunks = None  # a large body's frames, while they come
    prefetch_global = 0  # basic.qos global: a bound on what all its consumers hold (0: none)
    active = True  # channel.flow from the client
    last_queue = None  # for the empty queue name shortcut
    confirming = False  # confirm.select: every publish gets a basic.ack or basic.nack
    confirms: "Confirms | None" = (
        None  # what it owes its publisher (amqp091/confirms.py), from confirm.select or tx.commit
    )
    tx = None  # the open transaction (amqp091/tx.py), from tx.select
    stats = None  # its counters (core/counters.py): 0-9-1's are the broker's own list

    def __init__(self, conn, number):
        self.conn = conn
        self.broker = conn.broker
        self.client = conn.client  # who publishes and consumes here: the broker's `who`
        self.number = number
        self.state = OPEN
        self.header_prefix = bytes((2, number >> 8, number & 255))
        self.body_prefix = bytes((3, number >> 8, number & 255))
        # consuming
        self.consumers = {}
        self.prefetch_consumer = 0
        self.consumer_unacked = 0
        self.unacked = {}  # delivery tag -> (queue, entry, consumer or None)
        self.next_tag = 1
        self.lowest_unacked = 1

    # ------------------------------------------------------------ frames in

    def on_method(self, method_id, buf, pos, end):
        if self.state == CLOSING:
            if method_id == spec.CHANNEL_CLOSE_OK:
                self.conn.forget_channel(self)
            elif method_id == spec.CHANNEL_CLOSE:
                self.conn.send_method(self.number, spec.CHANNEL_CLOSE_OK)
            return  # everything else is discarded until close-ok (requirements R086)
        if self.content_state != IDLE:
            raise Refused(
                UNEXPECTED_FRAME,
                "expected content %s, got method frame" % ("header" if self.content_state == WANT_HEADER else "body"),
                method_id,
            )
        if method_id == spec.BASIC_PUBLISH:
            self.on_publish(buf, pos, end)
            return
        if method_id == spec.BASIC_ACK:
            # hot path: ack(delivery-tag longlong, multiple bit), decoded without the generic codec
            if end - pos != 9:
                raise Refused(FRAME_ERROR, "malformed basic.ack", method_id)
            tag = struct.unpack_from(">Q", buf, pos)[0]
            self.settle(tag, buf[pos + 8] & 1, True, False, method_id)
            return
        handler = HANDLERS.get(method_id)
        if handler is None:
            if method_id >> 16 == spec.CLASS_TX:  # amqp091/tx.py, loaded with the first transaction
                from .tx import HANDLERS as TX_HANDLERS

                handler = TX_HANDLERS.get(method_id)
            if handler is None:
                raise_unexpected(method_id)
        handler(self, decode_args(signature(method_id), buf, pos, end))

    def on_publish(self, buf, pos, end):
        exchange, routing_key, route, bits = publish_arguments(buf, pos, end)
        if bits & 2:
            raise Refused(NOT_IMPLEMENTED, "immediate=true", spec.BASIC_PUBLISH)
        self.publishing = (exchange, routing_key, route, bits & 1)
        self.content_state = WANT_HEADER

    def on_header(self, buf, start, end):
        """A content header frame; buf[start] is the frame type octet, buf[end] its frame-end."""
        if self.state == CLOSING:
            return
        if self.content_state != WANT_HEADER:
            raise Refused(UNEXPECTED_FRAME, "content header frame without a publish")
        pos = start + 7
        if end - pos < 14:
            raise Refused(FRAME_ERROR, "content header shorter than 14 octets")
        if buf[pos] != 0 or buf[pos + 1] != spec.CLASS_BASIC:
            raise Refused(
                UNEXPECTED_FRAME,
                "content header for class %d, expected 60" % ((buf[pos] << 8) | buf[pos + 1]),
            )
        if buf[pos + 2] or buf[pos + 3]:
            raise Refused(UNEXPECTED_FRAME, "content header weight must be 0")
        check_property_list(buf, pos, end)  # (a frame error: the connection closes with 501)
        size = struct.unpack_from(">Q", buf, pos + 4)[0]
        limit = self.broker.limits.max_message_bytes
        if size > limit:
            self.content_state = IDLE
            raise Refused(
                PRECONDITION_FAILED,
                "message size %d is larger than configured max size %d" % (size, limit),
                spec.BASIC_PUBLISH,
            )
        header_tail = buf[start + 3 : end + 1]
        self.header_tail = header_tail if type(header_tail) is bytes else bytes(header_tail)
        self.body_size = size
        self.received = 0
        self.chunks = None
        if size == 0:
            self._complete(None)
        else:
            self.content_state = WANT_BODY

    def on_body(self, buf, start, end):
        if self.state == CLOSING:
            return
        if self.content_state != WANT_BODY:
            raise Refused(UNEXPECTED_FRAME, "content body frame without a content header")
        size = end - start - 7
        if size == 0:
            return  # empty body frames are legal and mean nothing (requirements R053)
        received = self.received + size
        if received > self.body_size:
            raise Refused(
                FRAME_ERROR,
                "content body is larger than the %d bytes its header announced" % self.body_size,
            )
        if received == self.body_size and self.chunks is None:
            body_tail = buf[start + 3 : end + 1]  # the whole body in one frame: keep it as it came
            self._complete(body_tail if type(body_tail) is bytes else bytes(body_tail))
            return
        if self.chunks is None:
            self.chunks = []
        self.chunks.append(bytes(buf[start + 7 : end]))
        self.received = received
        if received == self.body_size:
            body = b"".join(self.chunks)
            self.chunks = None
            self._complete(struct.pack(">I", len(body)) + body + FRAME_END_BYTE)

    def _complete(self, body_tail):
        exchange, routing_key, route, mandatory = self.publishing  # pyright: ignore[reportGeneralTypeIssues] (set by on_publish)
        self.publishing = None
        self.content_state = IDLE
        message = Message(exchange, routing_key, route, self.header_tail, body_tail, self.body_size)
        self.header_tail = None
        self.publish(message, mandatory)
        if not self.confirming:
            self.conn.after_publish()

    # ------------------------------------------------------------ publishing

    def publish(self, message, mandatory):
        """Through the broker's gates (Broker.admit); into the open transaction if there is one,
        else into the broker now."""
        exchange, message = self.broker.admit(self, message.exchange, message)
        if self.tx is not None:
            self.tx.publishes.append((message, mandatory))
            return
        self.publish_now(exchange, message, mandatory)

    def publish_now(self, exchange, message, mandatory):
        """Into the broker; then what 0-9-1 says of it: basic.return, and the confirm."""
        broker = self.broker
        result = broker.publish(exchange, message, self)
        if result & HELD:
            self.held_publish = (message, mandatory)
            return
        if mandatory and not result & ROUTED:
            self.send_return(spec.NO_ROUTE, "NO_ROUTE", message)
        if self.confirming:
            self.confirms.published(result)
        replies = self.conn.serving.reply_channels
        if replies and exchange is broker.default_exchange and not result & ROUTED:
            from .replyto import deliver  # perhaps a reply to a direct reply-to requester

            deliver(replies, message)

    def hold_for(self, queue):
        """A full queue asks this publisher (without confirms) to wait: its connection is not read
        until the queue has room (resume). Outside a transaction the publish waits too, here
        (held_publish: Broker.publish takes nothing of it); a commit's publishes are taken."""
        queue.hold(self)
        self.conn.pause()
        return self.tx is None

    def resume(self):
        """The queue this publisher waited for has room: the publish it held back goes in (or
        is held back again), then the connection is read again, unless another of its
        channels still holds one back (each channel's publishes stay in their order)."""
        self.held_by = None
        held = self.held_publish
        if held is not None and self.state == OPEN:
            self.held_publish = None
            message, mandatory = held
            try:
                self.publish_now(self.broker.exchange_for_publish(message.exchange), message, mandatory)
            except Refused as e:  # its exchange deleted meanwhile: 404, as if published now
                self.conn.channel_error(self, e)
        for channel in self.conn.channels.values():
            if channel.held_publish is not None:
                return
        self.conn.resume_reading()

    def direct_reply_to(self, message):
        """(Broker.admit) A publish with reply-to amq.rabbitmq.reply-to: the message as it goes,
        naming this channel's reply consumer (amqp091/replyto.py)."""
        from .replyto import rewritten

        return rewritten(self, message)

    def flush_confirms(self):
        """Send the confirms that are due; True if some still wait for the journal."""
        return self.confirms.flush() if self.confirms is not None else False

    def send_return(self, code, reply_text, message):
        self.broker.stats[counters.RETURNED] += 1
        output.with_content(self, spec.BASIC_RETURN, (code, reply_text, message.exchange, message.routing_key), message)

    # ------------------------------------------------------------ delivering

    def can_deliver(self):
        return self.active and self.state == OPEN and not self.conn.saturated()

    def deliver(self, consumer, queue, entry):
        message = entry[MESSAGE]
        tag = self.next_tag
        self.next_tag = tag + 1
        no_ack = consumer.no_ack
        if no_ack or message.journal_id:  # else the broker has nothing to do (the hot path)
            self.broker.delivered(queue, entry, no_ack)
        if not no_ack:
            self.unacked[tag] = (queue, entry, consumer)
            consumer.unacked += 1
            self.consumer_unacked += 1
        output.deliver(self, consumer, tag, message, entry[REDELIVERED])

    def deliver_records(self, consumer, stream, cursor, room):
        """Up to room deliveries of a stream's records, read ahead by cursor, their frames made in
        one call (amqp091/output.py): (how many, why it stopped). Each is booked as deliver()
        books one; until settled they are all alike, one entry (stream.entry) for every tag."""
        tag = self.next_tag
        given, status = output.deliver_records(self, consumer, cursor, stream.visible, room)
        if given:
            self.next_tag = tag + given
            record = (stream, stream.entry, consumer)
            unacked = self.unacked
            for t in range(tag, tag + given):
                unacked[t] = record
            consumer.unacked += given
            self.consumer_unacked += given
        return given, status

    # ------------------------------------------------------------ acks

    def settle(self, tag, multiple, ack, requeue, method_id):
        """basic.ack / nack / reject: validate the tags, then apply (or stash under tx)."""
        tags = self._collect(tag, multiple, method_id)
        if self.tx is not None:
            self.tx.stash(tags, ack, requeue)
            return
        self.apply(tags, ack, requeue)

    def _collect(self, tag, multiple, method_id):
        unacked = self.unacked
        pending = self.tx.pending if self.tx is not None else None
        if not multiple:
            if tag not in unacked or (pending and tag in pending):
                raise Refused(PRECONDITION_FAILED, "unknown delivery tag %d" % tag, method_id)
            return [tag]
        if tag == 0:
            tag = self.next_tag - 1
        elif tag >= self.next_tag:
            raise Refused(PRECONDITION_FAILED, "unknown delivery tag %d" % tag, method_id)
        tags = []
        for t in range(self.lowest_unacked, tag + 1):
            if t in unacked and not (pending and t in pending):
                tags.append(t)
        return tags

    def apply(self, tags, ack, requeue):
        """Settle the deliveries tags name, a queue at a time (in the order the queues first
        appear): ack, requeue or reject them."""
        unacked = self.unacked
        groups = []  # [queue, its entries in tag order]
        for t in tags:
            record = unacked.pop(t, None)
            if record is None:
                continue
            queue, entry, consumer = record
            if consumer is not None:
                consumer.unacked -= 1
                self.consumer_unacked -= 1
            add_to_group(groups, queue, entry)
        self._advance_lowest()
        self.broker.settle_groups(groups, ACCEPT if ack else REQUEUE if requeue else REJECT, None)
        self.redispatch([group[0] for group in groups])

    def _advance_lowest(self):
        low = self.lowest_unacked
        unacked = self.unacked
        while low < self.next_tag and low not in unacked:
            low += 1
        self.lowest_unacked = low

    def redispatch(self, queues):
        """Let queues deliver again (room was made); with a channel-wide prefetch, every queue
        this channel consumes from."""
        if self.prefetch_global:
            for consumer in self.consumers.values():
                if consumer.queue not in queues:
                    queues.append(consumer.queue)
        for queue in queues:
            queue.dispatch()

    def requeue_all(self):
        """Every unacknowledged message goes back to its queue, in order, marked redelivered."""
        if not self.unacked:
            return
        tags = sorted(self.unacked)
        if self.tx is not None:
            self.tx.pending = {}
        self.apply(tags, False, True)

    def server_cancel(self, consumer):
        """The broker ends a consumer (its queue was deleted): tell clients that asked."""
        if self.consumers.get(consumer.tag) is consumer:
            del self.consumers[consumer.tag]
            self.broker.cancel(consumer)
        if self.state == OPEN and self.conn.wants & WANTS_CANCEL:
            self.reply(spec.BASIC_CANCEL, (consumer.tag, False))

    # ------------------------------------------------------------ closing

    def cleanup(self):
        """The channel is going away (close from either side, or the connection ended)."""
        self.content_state = IDLE
        self.publishing = None
        self.chunks = None
        consumers = list(self.consumers.values())
        self.consumers = {}
        for consumer in consumers:
            self.broker.cancel(consumer, False)
        self.tx = None
        if self.held_publish is not None:  # it goes with its channel, as its octets unread would: said
            self.held_publish = None
            self.broker.log(
                "warning", "%s: channel %d went while held back, its publish not taken" % (self.conn.name, self.number)
            )
        stop_waiting(self)
        if self.reply_tag is not None:
            from .replyto import forget

            forget(self)
        self.requeue_all()  # what they held goes back before the next single active consumer starts
        for consumer in consumers:
            queue = consumer.queue
            if getattr(queue, "single_active", False) and not queue.deleted:
                queue.dispatch()

    # ------------------------------------------------------------ helpers for handlers

    def reply(self, method_id, args=()):
        self.conn.send_method(self.number, method_id, args)

    def queue_name(self, name, method_id):
        """The name of the queue a method names: the empty name means the last queue declared
        here (RabbitMQ expands it before any other check of the method)."""
        if name:
            return name
        if self.last_queue is None:
            raise Refused(NOT_FOUND, "no previously declared queue", method_id)
        return self.last_queue

    def queue_named(self, name, method_id):
        """The queue a consume or a get names, read permission (403), existence (404) and
        another client's exclusive queue (405) checked (core/topology.py queue_for)."""
        return queue_for(self.broker, self.client, self.queue_name(name, method_id), READ, method_id)


def raise_unexpected(method_id):
    if signature(method_id) is None:
        raise Refused(
            NOT_IMPLEMENTED,
            "unknown method class %d method %d" % (method_id >> 16, method_id & 0xFFFF),
            method_id,
        )
    if method_id >> 16 == spec.CLASS_CONNECTION:
        raise Refused(COMMAND_INVALID, "%s is only allowed on channel 0" % method_name(method_id), method_id)
    raise Refused(COMMAND_INVALID, "%s is not a method a client may send" % method_name(method_id), method_id)


# ---------------------------------------------------------------- the channel class's methods
# Each takes (channel, decoded argument list) and writes its reply, as the handlers of the
# other classes do.


def channel_flow(ch, args):
    ch.active = args[0]
    ch.reply(spec.CHANNEL_FLOW_OK, (ch.active,))
    if ch.active:
        for consumer in list(ch.consumers.values()):
            consumer.queue.dispatch()


def channel_close(ch, args):
    ch.cleanup()
    ch.reply(spec.CHANNEL_CLOSE_OK)
    ch.conn.forget_channel(ch)


def channel_close_ok(ch, args):
    pass  # close-ok for a channel we did not close: nothing to do


def channel_open(ch, args):
    raise Refused(CHANNEL_ERROR, "second 'channel.open' seen", spec.CHANNEL_OPEN)


def access_request(ch, args):
    ch.reply(spec.ACCESS_REQUEST_OK, (1,))  # obsolete, but old clients still ask (RabbitMQ answers too)


# Every method a client may send on a channel, but basic.publish and basic.ack (on_method
# reads those itself) and the tx class's (amqp091/tx.py's HANDLERS, loaded with the first
# transaction: a board whose clients never use one does not hold it): a method of a new
# class gets its handler module and its rows here.
HANDLERS = {
    spec.CHANNEL_OPEN: channel_open,
    spec.CHANNEL_FLOW: channel_flow,
    spec.CHANNEL_CLOSE: channel_close,
    spec.CHANNEL_CLOSE_OK: channel_close_ok,
    spec.ACCESS_REQUEST: access_request,
    spec.EXCHANGE_DECLARE: declare.exchange_declare,
    spec.EXCHANGE_DELETE: declare.exchange_delete,
    spec.EXCHANGE_BIND: declare.exchange_bind,
    spec.EXCHANGE_UNBIND: declare.exchange_unbind,
    spec.QUEUE_DECLARE: declare.queue_declare,
    spec.QUEUE_BIND: declare.queue_bind,
    spec.QUEUE_UNBIND: declare.queue_unbind,
    spec.QUEUE_PURGE: declare.queue_purge,
    spec.QUEUE_DELETE: declare.queue_delete,
    spec.BASIC_QOS: basic.basic_qos,
    spec.BASIC_CONSUME: basic.basic_consume,
    spec.BASIC_CANCEL: basic.basic_cancel,
    spec.BASIC_GET: basic.basic_get,
    spec.BASIC_ACK: basic.basic_ack,
    spec.BASIC_REJECT: basic.basic_reject,
    spec.BASIC_NACK: basic.basic_nack,
    spec.BASIC_RECOVER_ASYNC: basic.basic_recover_async,
    spec.BASIC_RECOVER: basic.basic_recover,
    spec.CONFIRM_SELECT: confirm_select,
}
