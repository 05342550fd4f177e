"""One AMQP channel: its methods, content assembly, deliveries, acks, confirms, tx.

Entity operations (declare, bind, delete...) live in the broker; the channel
decodes the method, calls the broker and writes the reply. Anything wrong
raises ChannelException (the connection closes this channel) or
ConnectionException (the connection closes itself).
"""

import struct

from . import spec
from .errors import ChannelException, ConnectionException
from .message import FLAG_EXPIRATION, FLAG_USER_ID, Message, append_content
from .queue import Consumer
from .spec import (
    ACCESS_REFUSED,
    COMMAND_INVALID,
    FRAME_ERROR,
    NOT_ALLOWED,
    NOT_FOUND,
    NOT_IMPLEMENTED,
    PRECONDITION_FAILED,
    UNEXPECTED_FRAME,
)
from .wire import FRAME_END_BYTE, decode_args, method_name, signature, text

OPEN = 0
CLOSING = 1  # we sent channel.close and wait for close-ok

IDLE = 0  # expecting a method frame
WANT_HEADER = 1  # basic.publish seen, expecting the content header
WANT_BODY = 2  # header seen, expecting body frames

DELIVER_ID = struct.pack(">I", spec.BASIC_DELIVER)


class Transaction:
    def __init__(self):
        self.publishes = []  # (message, mandatory)
        self.settles = []  # (tags, ack, requeue)
        self.pending = {}  # tag -> True: settled inside this transaction, not yet committed


class Channel:
    def __init__(self, conn, number):
        self.conn = conn
        self.broker = conn.broker
        self.number = number
        self.state = OPEN
        self.header_prefix = bytes((2, number >> 8, number & 255))
        self.body_prefix = bytes((3, number >> 8, number & 255))
        # content assembly
        self.content_state = IDLE
        self.publishing = None
        self.header_tail = None
        self.body_size = 0
        self.received = 0
        self.chunks = None
        # consuming
        self.consumers = {}
        self.prefetch_consumer = 0
        self.prefetch_global = 0
        self.consumer_unacked = 0
        self.unacked = {}  # delivery tag -> (queue, entry, consumer or None)
        self.next_tag = 1
        self.lowest_unacked = 1
        self.active = True  # channel.flow from the client
        self.last_queue = None  # for the empty queue name shortcut
        # publishing modes
        self.confirming = False
        self.publish_seq = 0
        self.confirm_ready = 0  # every publish up to this one can be acked
        self.confirm_sent = 0
        # Confirms (and tx.commit-oks) held until the journal has made durable what they
        # promise, in publish order: (publish seq, journal seq needed, refused) and journal seqs.
        self.confirm_waits = []
        self.commit_waits = []
        self.tx = None

    # ------------------------------------------------------------ frames in

    def idle(self):
        """Open and between messages: the next frame must be a method."""
        return self.state == OPEN and self.content_state == IDLE

    def on_method(self, method_id, buf, pos, end):
        if self.state == CLOSING:
            if method_id == spec.CHANNEL_CLOSE_OK:
                self.conn.forget_channel(self)
            elif method_id == spec.CHANNEL_CLOSE:
                self.conn.send_method(self.number, spec.CHANNEL_CLOSE_OK)
            return  # everything else is discarded until close-ok (requirements R086)
        if self.content_state != IDLE:
            raise ConnectionException(
                UNEXPECTED_FRAME,
                "UNEXPECTED_FRAME - expected content %s, got method frame"
                % ("header" if self.content_state == WANT_HEADER else "body"),
                method_id,
            )
        if method_id == spec.BASIC_PUBLISH:
            self.on_publish(buf, pos, end)
            return
        if method_id == spec.BASIC_ACK:
            # hot path: ack(delivery-tag longlong, multiple bit), decoded without the generic codec
            if end - pos != 9:
                raise ConnectionException(FRAME_ERROR, "FRAME_ERROR - malformed basic.ack", method_id)
            tag = struct.unpack_from(">Q", buf, pos)[0]
            self.settle(tag, buf[pos + 8] & 1, True, False, method_id)
            return
        handler = HANDLERS.get(method_id)
        if handler is None:
            raise_unexpected(method_id)
        handler(self, decode_args(signature(method_id), buf, pos, end))

    def on_publish(self, buf, pos, end):
        # basic.publish: ticket short, exchange shortstr, routing-key shortstr, mandatory/immediate bits
        if end - pos < 5:
            raise ConnectionException(FRAME_ERROR, "FRAME_ERROR - malformed basic.publish", spec.BASIC_PUBLISH)
        n = buf[pos + 2]
        k = pos + 3 + n
        if k >= end:
            raise ConnectionException(FRAME_ERROR, "FRAME_ERROR - malformed basic.publish", spec.BASIC_PUBLISH)
        m = buf[k]
        bits_at = k + 1 + m
        if bits_at != end - 1:
            raise ConnectionException(FRAME_ERROR, "FRAME_ERROR - malformed basic.publish", spec.BASIC_PUBLISH)
        bits = buf[bits_at]
        if bits & 2:
            raise ConnectionException(NOT_IMPLEMENTED, "NOT_IMPLEMENTED - immediate=true", spec.BASIC_PUBLISH)
        route = buf[pos + 2 : bits_at]
        if type(route) is not bytes:  # a memoryview of the port's buffer: copy what is kept
            route = bytes(route)  # (bytes() of bytes would cost as much as the slice again)
        self.publishing = (route[1 : 1 + n], route[2 + n :], route, bits & 1)
        self.content_state = WANT_HEADER

    def on_header(self, buf, start, end):
        """A content header frame; buf[start] is the frame type octet, buf[end] its frame-end."""
        if self.state == CLOSING:
            return
        if self.content_state != WANT_HEADER:
            raise ConnectionException(UNEXPECTED_FRAME, "UNEXPECTED_FRAME - content header frame without a publish")
        pos = start + 7
        if end - pos < 14:
            raise ConnectionException(FRAME_ERROR, "FRAME_ERROR - content header shorter than 14 octets")
        if buf[pos] != 0 or buf[pos + 1] != spec.CLASS_BASIC:
            raise ConnectionException(
                UNEXPECTED_FRAME,
                "UNEXPECTED_FRAME - content header for class %d, expected 60" % ((buf[pos] << 8) | buf[pos + 1]),
            )
        if buf[pos + 2] or buf[pos + 3]:
            raise ConnectionException(UNEXPECTED_FRAME, "UNEXPECTED_FRAME - content header weight must be 0")
        size = struct.unpack_from(">Q", buf, pos + 4)[0]
        limit = self.broker.limits.max_message_bytes
        if size > limit:
            self.content_state = IDLE
            raise ChannelException(
                PRECONDITION_FAILED,
                "PRECONDITION_FAILED - message size %d is larger than configured max size %d" % (size, limit),
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
            raise ConnectionException(
                UNEXPECTED_FRAME, "UNEXPECTED_FRAME - content body frame without a content header"
            )
        size = end - start - 7
        if size == 0:
            return  # empty body frames are legal and mean nothing (requirements R053)
        received = self.received + size
        if received > self.body_size:
            raise ConnectionException(
                FRAME_ERROR,
                "FRAME_ERROR - content body is larger than the %d bytes its header announced" % self.body_size,
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
        broker = self.broker
        exchange = broker.exchange_for_publish(message.exchange)
        flags = message.flags()
        if flags & (FLAG_USER_ID | FLAG_EXPIRATION):
            self._check_properties(message, flags)
        if self.tx is not None:
            self.tx.publishes.append((message, mandatory))
            return
        self._route(exchange, message, mandatory)

    def _check_properties(self, message, flags):
        props = message.properties()
        if flags & FLAG_USER_ID:
            user_id = props.get("user-id")
            if user_id != self.conn.user:
                raise ChannelException(
                    PRECONDITION_FAILED,
                    "PRECONDITION_FAILED - user_id property set to '%s' but authenticated user was '%s'"
                    % (text(user_id), text(self.conn.user)),
                    spec.BASIC_PUBLISH,
                )
        if flags & FLAG_EXPIRATION:
            expiration = props.get("expiration")
            if not expiration or not expiration.isdigit():
                raise ChannelException(
                    PRECONDITION_FAILED,
                    "PRECONDITION_FAILED - invalid expiration '%s': no_integer" % text(expiration),
                    spec.BASIC_PUBLISH,
                )
            message.ttl = int(expiration)

    def _route(self, exchange, message, mandatory):
        broker = self.broker
        queues = broker.route(exchange, message)
        refused = False
        # Out of memory, a publisher with confirms is told no (basic.nack) and still read: its
        # connection may carry acks too, and they are what frees memory. Others are paused.
        refuse_all = self.confirming and broker.blocked
        targets = []
        for queue in queues:
            if refuse_all:
                refused = True
                continue
            if not queue.accepts(message):
                refused = True  # x-overflow reject-publish(-dlx)
                if queue.overflow == b"reject-publish-dlx" and queue.dead_letter_exchange is not None:
                    broker.dead_letter(queue, message, b"maxlen")
                continue
            if queue.is_full():
                if self.confirming:
                    refused = True  # the board's budget for this queue is spent: nack, never drop silently
                    continue
                self.conn.wait_for(queue)  # no confirms to say no with: slow the publisher down instead
            targets.append(queue)
        journal = broker.journal
        journalled = False
        if journal is not None:
            for queue in targets:
                if queue.journalled:
                    # into the journal before any queue has it: a consumer may take (and ack) it at once
                    journalled = journal.add_message(message, targets)
                    break
        for queue in targets:
            queue.publish(message, broker.expiry(queue, message))
        if not queues and mandatory:
            self.send_return(spec.NO_ROUTE, "NO_ROUTE", message)
        if self.confirming:
            self.publish_seq += 1
            if journalled or self.confirm_waits:
                # confirmed once the journal has it on disk (and after those before it)
                self.confirm_waits.append((self.publish_seq, journal.seq if journalled else 0, refused))
                self.conn.confirm_pending(self)
            elif refused:
                self.flush_confirms()
                self.conn.send_method(self.number, spec.BASIC_NACK, (self.publish_seq, False, False))
                self.confirm_sent = self.publish_seq
            else:
                self.confirm_ready = self.publish_seq
                self.conn.confirm_pending(self)

    def flush_confirms(self):
        """Send the confirms that are due; True if some still wait for the journal."""
        if self.confirm_waits or self.commit_waits:
            return self._flush_durable()
        self._send_acks()
        return False

    def _flush_durable(self):
        synced = self.broker.journal.synced
        waits = self.confirm_waits
        done = 0
        for seq, needed, refused in waits:
            if needed > synced:
                break
            done += 1
            if refused:
                self._send_acks()
                self.conn.send_method(self.number, spec.BASIC_NACK, (seq, False, False))
                self.confirm_sent = seq
            else:
                self.confirm_ready = seq
        if done:
            del waits[:done]
        self._send_acks()
        commits = self.commit_waits
        while commits and commits[0] <= synced:
            commits.pop(0)
            self.reply(spec.TX_COMMIT_OK)
        return bool(waits or commits)

    def _send_acks(self):
        if self.confirm_ready > self.confirm_sent:
            multiple = self.confirm_ready - self.confirm_sent > 1
            self.conn.send_method(self.number, spec.BASIC_ACK, (self.confirm_ready, multiple))
            self.confirm_sent = self.confirm_ready

    def send_return(self, code, reply_text, message):
        conn = self.conn
        conn.send_method(self.number, spec.BASIC_RETURN, (code, reply_text, message.exchange, message.routing_key))
        append_content(conn.out, self, message, conn.max_payload)
        conn.output_added(message.body_size)

    # ------------------------------------------------------------ delivering

    def can_deliver(self):
        return self.active and self.state == OPEN and not self.conn.saturated()

    def deliver(self, consumer, queue, entry):
        message = entry[0]
        tag = self.next_tag
        self.next_tag = tag + 1
        if consumer.no_ack:
            self.broker.release(message)  # queue.forget(message), written out: this is the hot path
            if message.pid and queue.journalled:
                self.broker.journal.removed(queue, message)
        else:
            self.unacked[tag] = (queue, entry, consumer)
            consumer.unacked += 1
            self.consumer_unacked += 1
            if message.pid and not entry[1] and queue.journalled:
                self.broker.journal.delivered(queue, message)  # so it comes back redelivered
        conn = self.conn
        tag_ss = consumer.tag_shortstr
        route = message.route
        out = conn.out
        out.append(
            b"".join(
                (
                    struct.pack(">BHI", 1, self.number, 13 + len(tag_ss) + len(route)),
                    DELIVER_ID,
                    tag_ss,
                    struct.pack(">QB", tag, entry[1]),
                    route,
                    FRAME_END_BYTE,
                )
            )
        )
        append_content(out, self, message, conn.max_payload)
        conn.output_added(message.body_size + 64)

    # ------------------------------------------------------------ acks

    def settle(self, tag, multiple, ack, requeue, method_id):
        """basic.ack / nack / reject: validate the tags, then apply (or stash under tx)."""
        tags = self._collect(tag, multiple, method_id)
        if self.tx is not None:
            for t in tags:
                self.tx.pending[t] = True
            self.tx.settles.append((tags, ack, requeue))
            return
        self._apply(tags, ack, requeue)

    def _collect(self, tag, multiple, method_id):
        unacked = self.unacked
        pending = self.tx.pending if self.tx is not None else None
        if not multiple:
            if tag not in unacked or (pending and tag in pending):
                raise ChannelException(
                    PRECONDITION_FAILED, "PRECONDITION_FAILED - unknown delivery tag %d" % tag, method_id
                )
            return [tag]
        if tag == 0:
            tag = self.next_tag - 1
        elif tag >= self.next_tag:
            raise ChannelException(
                PRECONDITION_FAILED, "PRECONDITION_FAILED - unknown delivery tag %d" % tag, method_id
            )
        tags = []
        for t in range(self.lowest_unacked, tag + 1):
            if t in unacked and not (pending and t in pending):
                tags.append(t)
        return tags

    def _apply(self, tags, ack, requeue):
        unacked = self.unacked
        touched = []
        requeues = None
        for t in tags:
            record = unacked.pop(t, None)
            if record is None:
                continue
            queue, entry, consumer = record
            if consumer is not None:
                consumer.unacked -= 1
                self.consumer_unacked -= 1
            if queue not in touched:
                touched.append(queue)
            if ack:
                message = entry[0]
                self.broker.release(message)  # queue.forget(message), written out: the hot path
                if message.pid and queue.journalled:
                    self.broker.journal.removed(queue, message)
            elif requeue:
                if requeues is None:
                    requeues = {}
                if queue not in requeues:
                    requeues[queue] = []
                requeues[queue].append(entry)
            else:
                queue.drop(entry, b"rejected")
        self._advance_lowest()
        if requeues:
            for queue in requeues:
                queue.requeue(requeues[queue])
        self._redispatch(touched)

    def _advance_lowest(self):
        low = self.lowest_unacked
        unacked = self.unacked
        while low < self.next_tag and low not in unacked:
            low += 1
        self.lowest_unacked = low

    def _redispatch(self, queues):
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
        self._apply(tags, False, True)

    def server_cancel(self, consumer):
        """The broker ends a consumer (its queue was deleted): tell clients that asked."""
        if self.consumers.get(consumer.tag) is consumer:
            del self.consumers[consumer.tag]
            self.broker.uncount_consumer()
        if self.state == OPEN and self.conn.wants_cancel:
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
            self.broker.uncount_consumer()
            consumer.queue.remove_consumer(consumer)
        self.tx = None
        self.requeue_all()

    # ------------------------------------------------------------ helpers for handlers

    def reply(self, method_id, args=()):
        self.conn.send_method(self.number, method_id, args)

    def queue_named(self, name, method_id):
        """The queue a method names; the empty name means the last queue declared here."""
        if not name:
            if self.last_queue is None:
                raise ChannelException(NOT_FOUND, "NOT_FOUND - no previously declared queue", method_id)
            name = self.last_queue
        queue = self.broker.queues.get(name)
        if queue is None:
            raise ChannelException(NOT_FOUND, "NOT_FOUND - no queue '%s' in vhost '/'" % text(name), method_id)
        self.broker.check_exclusive(queue, self.conn, method_id)
        return queue

    def new_consumer_tag(self):
        while True:
            tag = self.broker.new_name(b"amq.ctag-")
            if tag not in self.consumers:
                return tag


def raise_unexpected(method_id):
    if signature(method_id) is None:
        raise ConnectionException(
            NOT_IMPLEMENTED,
            "NOT_IMPLEMENTED - unknown method class %d method %d" % (method_id >> 16, method_id & 0xFFFF),
            method_id,
        )
    if method_id >> 16 == spec.CLASS_CONNECTION:
        raise ConnectionException(
            COMMAND_INVALID, "COMMAND_INVALID - %s is only allowed on channel 0" % method_name(method_id), method_id
        )
    raise ConnectionException(
        COMMAND_INVALID, "COMMAND_INVALID - %s is not a method a client may send" % method_name(method_id), method_id
    )


# ---------------------------------------------------------------- method handlers
# Each takes (channel, decoded argument list) and writes its reply.


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
    raise ConnectionException(spec.CHANNEL_ERROR, "CHANNEL_ERROR - second 'channel.open' seen", spec.CHANNEL_OPEN)


def access_request(ch, args):
    ch.reply(spec.ACCESS_REQUEST_OK, (1,))  # obsolete, but old clients still ask (RabbitMQ answers too)


def exchange_declare(ch, args):
    _ticket, name, kind, passive, durable, auto_delete, internal, nowait, arguments = args
    ch.broker.declare_exchange(name, kind, passive, durable, auto_delete, internal, arguments)
    if not nowait:
        ch.reply(spec.EXCHANGE_DECLARE_OK)


def exchange_delete(ch, args):
    _ticket, name, if_unused, nowait = args
    ch.broker.delete_exchange_named(name, if_unused)
    if not nowait:
        ch.reply(spec.EXCHANGE_DELETE_OK)


def exchange_bind(ch, args):
    _ticket, destination, source, key, nowait, arguments = args
    ch.broker.bind(
        source, ch.broker.named_exchange(destination, spec.EXCHANGE_BIND), key, arguments, spec.EXCHANGE_BIND
    )
    if not nowait:
        ch.reply(spec.EXCHANGE_BIND_OK)


def exchange_unbind(ch, args):
    _ticket, destination, source, key, nowait, arguments = args
    ch.broker.unbind(
        source, ch.broker.named_exchange(destination, spec.EXCHANGE_UNBIND), key, arguments, spec.EXCHANGE_UNBIND
    )
    if not nowait:
        ch.reply(spec.EXCHANGE_UNBIND_OK)


def queue_declare(ch, args):
    _ticket, name, passive, durable, exclusive, auto_delete, nowait, arguments = args
    queue = ch.broker.declare_queue(ch.conn, name, passive, durable, exclusive, auto_delete, arguments)
    ch.last_queue = queue.name
    if not nowait:
        ch.reply(spec.QUEUE_DECLARE_OK, (queue.name, queue.message_count(), len(queue.consumers)))


def queue_bind(ch, args):
    _ticket, name, exchange, key, nowait, arguments = args
    queue = ch.queue_named(name, spec.QUEUE_BIND)
    ch.broker.bind(exchange, queue, key, arguments, spec.QUEUE_BIND)
    if not nowait:
        ch.reply(spec.QUEUE_BIND_OK)


def queue_unbind(ch, args):
    _ticket, name, exchange, key, arguments = args
    queue = ch.queue_named(name, spec.QUEUE_UNBIND)
    ch.broker.unbind(exchange, queue, key, arguments, spec.QUEUE_UNBIND)
    ch.reply(spec.QUEUE_UNBIND_OK)


def queue_purge(ch, args):
    _ticket, name, nowait = args
    count = ch.queue_named(name, spec.QUEUE_PURGE).purge()
    if not nowait:
        ch.reply(spec.QUEUE_PURGE_OK, (count,))


def queue_delete(ch, args):
    _ticket, name, if_unused, if_empty, nowait = args
    if not name:
        name = ch.last_queue or b""
    queue = ch.broker.queues.get(name)
    count = 0
    if queue is not None:  # deleting what is not there succeeds, as in RabbitMQ
        ch.broker.check_exclusive(queue, ch.conn, spec.QUEUE_DELETE)
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
        count = ch.broker.delete_queue(queue)
    if not nowait:
        ch.reply(spec.QUEUE_DELETE_OK, (count,))


def basic_qos(ch, args):
    size, count, is_global = args
    if size:
        raise ConnectionException(NOT_IMPLEMENTED, "NOT_IMPLEMENTED - prefetch_size!=0 (%d)" % size, spec.BASIC_QOS)
    if is_global:
        ch.prefetch_global = count  # RabbitMQ's meaning: shared by the channel's consumers
    else:
        ch.prefetch_consumer = count  # each consumer started after this gets its own window
    ch.reply(spec.BASIC_QOS_OK)
    ch._redispatch([c.queue for c in ch.consumers.values()])


def basic_consume(ch, args):
    _ticket, name, tag, _no_local, no_ack, exclusive, nowait, _arguments = args
    queue = ch.queue_named(name, spec.BASIC_CONSUME)
    if not tag:
        tag = ch.new_consumer_tag()
    elif tag in ch.consumers:
        raise ConnectionException(
            NOT_ALLOWED, "NOT_ALLOWED - attempt to reuse consumer tag '%s'" % text(tag), spec.BASIC_CONSUME
        )
    if queue.exclusive_consumer is not None or (exclusive and queue.consumers):
        raise ChannelException(
            ACCESS_REFUSED,
            "ACCESS_REFUSED - queue '%s' in vhost '/' in exclusive use" % text(queue.name),
            spec.BASIC_CONSUME,
        )
    ch.broker.count_consumer(spec.BASIC_CONSUME)
    consumer = Consumer(ch, tag, queue, no_ack, exclusive, ch.prefetch_consumer)
    ch.consumers[tag] = consumer
    if not nowait:
        ch.reply(spec.BASIC_CONSUME_OK, (tag,))  # consume-ok goes out before the first delivery
    queue.add_consumer(consumer)


def basic_cancel(ch, args):
    tag, nowait = args
    consumer = ch.consumers.pop(tag, None)
    if not nowait:
        ch.reply(spec.BASIC_CANCEL_OK, (tag,))  # an unknown tag is not an error (RabbitMQ)
    if consumer is not None:
        ch.broker.uncount_consumer()
        consumer.queue.remove_consumer(consumer)


def basic_get(ch, args):
    _ticket, name, no_ack = args
    queue = ch.queue_named(name, spec.BASIC_GET)
    queue.last_used = ch.broker.now
    entry = queue.take()
    if entry is None:
        ch.reply(spec.BASIC_GET_EMPTY, (b"",))
        return
    message = entry[0]
    tag = ch.next_tag
    ch.next_tag = tag + 1
    if no_ack:
        queue.forget(message)
    else:
        ch.unacked[tag] = (queue, entry, None)
        if message.pid and not entry[1] and queue.journalled:
            ch.broker.journal.delivered(queue, message)
    conn = ch.conn
    conn.send_method(
        ch.number, spec.BASIC_GET_OK, (tag, entry[1], message.exchange, message.routing_key, queue.message_count())
    )
    append_content(conn.out, ch, message, conn.max_payload)
    conn.output_added(message.body_size)


def basic_ack(ch, args):
    ch.settle(args[0], args[1], True, False, spec.BASIC_ACK)


def basic_reject(ch, args):
    ch.settle(args[0], False, False, args[1], spec.BASIC_REJECT)


def basic_nack(ch, args):
    ch.settle(args[0], args[1], False, args[2], spec.BASIC_NACK)


def basic_recover_async(ch, args):
    if not args[0]:
        raise ConnectionException(NOT_IMPLEMENTED, "NOT_IMPLEMENTED - requeue=false", spec.BASIC_RECOVER)
    ch.requeue_all()


def basic_recover(ch, args):
    basic_recover_async(ch, args)
    ch.reply(spec.BASIC_RECOVER_OK)


def confirm_select(ch, args):
    if ch.tx is not None:
        raise ChannelException(
            PRECONDITION_FAILED, "PRECONDITION_FAILED - cannot switch from tx to confirm mode", spec.CONFIRM_SELECT
        )
    ch.confirming = True
    if not args[0]:
        ch.reply(spec.CONFIRM_SELECT_OK)


def tx_select(ch, args):
    if ch.confirming:
        raise ChannelException(
            PRECONDITION_FAILED, "PRECONDITION_FAILED - cannot switch from confirm to tx mode", spec.TX_SELECT
        )
    if ch.tx is None:
        ch.tx = Transaction()
    ch.reply(spec.TX_SELECT_OK)


def _require_tx(ch, method_id):
    if ch.tx is None:
        raise ChannelException(PRECONDITION_FAILED, "PRECONDITION_FAILED - channel is not transactional", method_id)
    tx = ch.tx
    ch.tx = Transaction()
    return tx


def tx_commit(ch, args):
    tx = _require_tx(ch, spec.TX_COMMIT)
    broker = ch.broker
    for message, mandatory in tx.publishes:
        ch._route(broker.exchange_for_publish(message.exchange), message, mandatory)
    for tags, ack, requeue in tx.settles:
        ch._apply(tags, ack, requeue)
    journal = broker.journal
    if journal is not None and (journal.unsynced() or ch.commit_waits):
        ch.commit_waits.append(journal.seq)  # commit-ok once what it wrote is on disk
        ch.conn.confirm_pending(ch)
        return
    ch.reply(spec.TX_COMMIT_OK)


def tx_rollback(ch, args):
    _require_tx(ch, spec.TX_ROLLBACK)
    ch.reply(spec.TX_ROLLBACK_OK)


HANDLERS = {
    spec.CHANNEL_OPEN: channel_open,
    spec.CHANNEL_FLOW: channel_flow,
    spec.CHANNEL_CLOSE: channel_close,
    spec.CHANNEL_CLOSE_OK: channel_close_ok,
    spec.ACCESS_REQUEST: access_request,
    spec.EXCHANGE_DECLARE: exchange_declare,
    spec.EXCHANGE_DELETE: exchange_delete,
    spec.EXCHANGE_BIND: exchange_bind,
    spec.EXCHANGE_UNBIND: exchange_unbind,
    spec.QUEUE_DECLARE: queue_declare,
    spec.QUEUE_BIND: queue_bind,
    spec.QUEUE_UNBIND: queue_unbind,
    spec.QUEUE_PURGE: queue_purge,
    spec.QUEUE_DELETE: queue_delete,
    spec.BASIC_QOS: basic_qos,
    spec.BASIC_CONSUME: basic_consume,
    spec.BASIC_CANCEL: basic_cancel,
    spec.BASIC_GET: basic_get,
    spec.BASIC_ACK: basic_ack,
    spec.BASIC_REJECT: basic_reject,
    spec.BASIC_NACK: basic_nack,
    spec.BASIC_RECOVER_ASYNC: basic_recover_async,
    spec.BASIC_RECOVER: basic_recover,
    spec.CONFIRM_SELECT: confirm_select,
    spec.TX_SELECT: tx_select,
    spec.TX_COMMIT: tx_commit,
    spec.TX_ROLLBACK: tx_rollback,
}
