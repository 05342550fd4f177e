"""An AMQP 1.0 client's connection (part 2 of the specification), on the same port as 0-9-1:
server/frontends.py hands it the clients whose protocol header is AMQP 1.0's.

It has the shape every front end's connection has for its port and the broker (core/session.py:
feed, take_output, tick, lost, eof, wake, close, name, client, counted, unsettled). What it
serves today: SASL (PLAIN against the broker's users, ANONYMOUS where the config names an
anonymous user), open, begin, and links on which a client sends messages, attached to
RabbitMQ 4's addresses `/queues/NAME`, `/exchanges/NAME/ROUTING-KEY`, `/exchanges/NAME`, or a
null target with a `to` on each message. Each message goes through the broker's one publish
path (Broker.admit, Broker.publish) and is settled with RabbitMQ 4's outcomes: accepted once
every queue has it (a durable one: once the journal has synced), released when no queue took
it, rejected (with the reason) when a gate refused it. A missing queue or exchange, or an
address that is not one, is a link error (the attach answered with a null target, then a
detach with amqp:not-found or amqp:invalid-field); the session and connection go on. A client
receives from `/queues/NAME` on a link whose credit it grants (Receiver: the core's Consumer
session); its outcomes settle as 0-9-1 acks do (accepted: ack, released: requeue, rejected:
dead letter, modified: either), and what it holds unsettled when the link ends goes back.
"""

from ..codec.errors import ChannelException
from ..codec.spec import BASIC_CONSUME
from ..core.auth import Client, credentials
from ..core.broker import ACCEPT, JOURNALLED, REFUSED, REJECT, REQUEUE, ROUTED
from ..core.message import Message
from ..core.queue import Consumer
from ..core.session import MESSAGE, REDELIVERED
from . import spec
from .frames import AMQP_FRAME, field, frame, split
from .message import NotConvertible, from_message, tails, to_parts
from .types import Array, DecodeError, Described, Symbol, Ubyte, Uint, Ulong, Ushort

SASL_HEADER = b"AMQP\x03\x01\x00\x00"
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
MAX_FRAME = 131072  # RabbitMQ 4's (the smallest it takes: 512)
CHANNEL_MAX = 63
SESSION_WINDOW = 400  # frames
LINK_CREDIT = 170  # messages a sender may send before we grant more (RabbitMQ 4's)
IDLE_TIME_OUT = 30000

(SASL_WAIT, SASL_INIT, AMQP_WAIT, OPEN_WAIT, OPEN, CLOSED) = range(6)

ACCEPTED = Described(Ulong(spec.ACCEPTED), [])
RELEASED = Described(Ulong(spec.RELEASED), [])


def error(condition, description):
    return Described(Ulong(spec.ERROR), [Symbol(condition), description])


def rejected(condition, description):
    return Described(Ulong(spec.REJECTED), [error(condition, description)])


class LinkError(Exception):
    """An attach that cannot be served: (condition, description), said on the link alone."""


def _unquote(text):
    """A percent-encoded address segment, decoded."""
    if "%" not in text:
        return text
    out = bytearray()
    raw = text.encode()
    i = 0
    while i < len(raw):
        if raw[i] == 0x25 and i + 2 < len(raw):
            out.append(int(raw[i + 1 : i + 3], 16))
            i += 3
        else:
            out.append(raw[i])
            i += 1
    return out.decode()


def address_of(broker, address):
    """(exchange name, routing key or None: the message's subject) of a target address, or
    LinkError. RabbitMQ 4's v2 addresses."""
    if not isinstance(address, str) or not address.startswith("/"):
        raise LinkError("amqp:invalid-field", "address '%s' is not /queues/NAME or /exchanges/NAME[/KEY]" % (address,))
    parts = address.split("/")
    if len(parts) == 3 and parts[1] == "queues" and parts[2]:
        name = _unquote(parts[2]).encode()
        if name not in broker.queues:
            raise LinkError("amqp:not-found", "no queue '%s' in vhost '/'" % name.decode())
        return b"", name
    if parts[1] == "exchanges" and len(parts) in (3, 4) and parts[2]:
        name = _unquote(parts[2]).encode()
        if broker.exchange(name) is None:
            raise LinkError("amqp:not-found", "no exchange '%s' in vhost '/'" % name.decode())
        return name, (_unquote(parts[3]).encode() if len(parts) == 4 else None)
    raise LinkError("amqp:invalid-field", "address '%s' is not /queues/NAME or /exchanges/NAME[/KEY]" % address)


class Link:
    """A link on which the client sends (we receive): where its messages go."""

    def __init__(self, session, handle, name, target, exchange, routing_key):
        self.session = session
        self.handle = handle
        self.name = name
        self.target = target
        self.exchange = exchange  # bytes, or None: each message's `to`
        self.routing_key = routing_key  # bytes, or None: each message's subject
        self.delivery_count = 0
        self.credit = LINK_CREDIT
        self.partial = None  # [delivery id, settled, [payload parts]] while a message comes in frames


class Receiver:
    """A link on which the client receives from a queue: the session of its core Consumer
    (core/session.py), delivering as its link credit allows."""

    prefetch_global = 0  # (no bound beyond the link's credit)

    def __init__(self, conn, session, handle, name, source, queue, settled):
        self.conn = conn
        self.session = session
        self.handle = handle
        self.name = name
        self.source = source
        self.queue = queue
        self.settled = settled  # the client asked for pre-settled deliveries (at most once)
        self.credit = 0
        self.delivery_count = 0
        self.consumer_unacked = 0
        self.consumer = Consumer(self, name.encode() if isinstance(name, str) else name, queue, settled, False, 0)

    def can_deliver(self):
        return self.credit > 0 and not self.conn.closed

    def deliver(self, consumer, queue, entry):
        conn = self.conn
        session = self.session
        message = entry[MESSAGE]
        delivery_id = session.next_outgoing_id
        session.next_outgoing_id += 1
        self.credit -= 1
        self.delivery_count += 1
        if self.settled or message.journal_id:
            conn.broker.delivered(queue, entry, self.settled)
        if not self.settled:
            session.unsettled[delivery_id] = (self, queue, entry)
            consumer.unacked += 1
            self.consumer_unacked += 1
        payload = from_message(message, entry[REDELIVERED])
        room = conn.max_frame - 64  # (the transfer's own fields take fewer)
        fields = [Uint(self.handle), Uint(delivery_id), struct_tag(delivery_id), Uint(0), self.settled]
        while len(payload) > room:  # a message larger than a frame: in parts (more=true)
            conn._send(frame(session.channel, spec.TRANSFER, fields + [True], payload[:room]))
            payload = payload[room:]
            fields = [Uint(self.handle)]
        conn._send(frame(session.channel, spec.TRANSFER, fields, payload))

    def deliver_records(self, consumer, stream, cursor, room):
        return 0, None  # (a stream is refused at attach)

    def server_cancel(self, consumer):
        """The queue was deleted: the link ends, as RabbitMQ 4 ends it."""
        self.conn._end_receiver(
            self, error("amqp:resource-deleted", "queue '%s' was deleted" % self.queue.name.decode())
        )


def struct_tag(delivery_id):
    return delivery_id.to_bytes(4, "big")


class Session:
    def __init__(self, conn, channel, remote_channel, next_incoming_id):
        self.conn = conn
        self.channel = channel
        self.remote_channel = remote_channel
        self.next_incoming_id = next_incoming_id  # the transfer id of the client's next frame
        self.window = SESSION_WINDOW  # transfer frames the client may still send
        self.next_outgoing_id = 0
        self.links = {}  # handle -> Link (the client sends) or Receiver (the client receives)
        self.unsettled = {}  # delivery id -> (Receiver, queue, entry), until the client settles it


class Connection:
    """One AMQP 1.0 client (see the module's docstring)."""

    counted = False
    client = None
    refused = False  # its login failed: it is hung up on at its deadline

    def __init__(self, broker, peer):
        self.broker = broker
        self.name = "%s:%s" % (peer.get("address", "?"), peer.get("port", "?"))
        self.loopback = peer.get("transport") in ("local", "serial") or peer.get("address") in ("127.0.0.1", "::1")
        self.state = SASL_WAIT
        self.closed = False
        self.want_read = True
        self.wake = None
        self.out = []
        self.pending = b""
        self.max_frame = 512  # until open: the smallest every peer takes
        self.sessions = {}  # our channel -> Session
        self.channels = self.sessions  # (what the snapshot counts)
        self.deadline = broker.now + broker.limits.handshake_timeout_ms
        self.auth_mechanism = None
        self.waiting = []  # [journal seq, session, link handle, delivery id, outcome] until synced
        self.confirming = True  # a publisher that can be told no: refused rather than held back
        self.idle_ms = 0  # the client's idle-time-out: we send an empty frame at half of it
        self.last_sent = broker.now
        broker.connections.append(self)

    # ------------------------------------------------------------ the port's side

    def feed(self, data):
        if self.closed or self.refused:
            return
        data = self.pending + bytes(data)
        self.pending = b""
        try:
            pos = self._headers(data)
            while pos >= 0 and not self.closed:
                found, pos_after = split(data, pos, self.max_frame if self.state >= OPEN else MAX_FRAME)
                if found is None:
                    break
                pos = pos_after
                self._frame(found)
            if pos >= 0 and not self.closed:
                self.pending = data[pos:]
        except DecodeError as e:
            self._close(error("amqp:decode-error", str(e)))
        except LinkError as e:
            self._close(error(e.args[0], e.args[1]))
        self.flush_confirms()

    def take_output(self):
        out = b"".join(self.out)
        self.out = []
        return out

    def saturated(self):
        return False

    def read_wanted(self):
        """How many more octets complete the frame whose start is pending (0: none is)."""
        pending = self.pending
        if len(pending) < 4 or self.state < OPEN_WAIT:
            return 0
        return max(0, (pending[0] << 24 | pending[1] << 16 | pending[2] << 8 | pending[3]) - len(pending))

    def tick(self, now):
        if self.refused and now > self.deadline:
            self.lost()
        elif self.state < OPEN and not self.closed and now > self.deadline:
            self._close(error("amqp:resource-limit-exceeded", "handshake not finished in time"))
        elif self.state == OPEN and self.idle_ms and now - self.last_sent >= self.idle_ms // 2:
            self._send(b"\x00\x00\x00\x08\x02\x00\x00\x00")  # an empty frame: we are alive

    def eof(self):
        self.lost()

    def _end_links(self, session):
        for link in list(session.links.values()):
            if type(link) is Receiver:
                self._end_receiver(link)

    def lost(self):
        if self.closed:
            return
        for session in self.sessions.values():
            self._end_links(session)
        self.closed = True
        self.state = CLOSED
        self.broker.connection_gone(self)
        self.broker.forget(self)
        if self.wake is not None:
            self.wake()

    def close(self, code=None, reply_text="broker shutdown"):
        """From the broker's side (a shutdown, an operator)."""
        if self.state == OPEN:
            self._close(error("amqp:connection:forced", reply_text))
        else:
            self.lost()

    def unsettled(self):
        return [(queue, entry) for session in self.sessions.values() for _r, queue, entry in session.unsettled.values()]

    def notify_blocked(self, reason):
        pass  # (a 1.0 sender is held back by its link credit, not by a notice)

    def notify_unblocked(self):
        pass

    def resume_reading(self):
        pass

    # ------------------------------------------------------------ the handshake

    def _headers(self, data):
        """Where frames start in data after the protocol headers it holds (-1: not yet)."""
        pos = 0
        if self.state == SASL_WAIT:
            if len(data) < 8:
                self.pending = data
                return -1
            if data[:8] != SASL_HEADER:  # SASL first, as RabbitMQ 4 asks: our header, then hang up
                self._send(SASL_HEADER)
                self.lost()
                return -1
            mechanisms = [Symbol("PLAIN")]
            if getattr(self.broker.users, "anonymous", None):
                mechanisms.append(Symbol("ANONYMOUS"))
            self._send(SASL_HEADER + frame(0, spec.SASL_MECHANISMS, [Array(0xA3, mechanisms)], sasl=True))
            self.state = SASL_INIT
            pos = 8
        if self.state == AMQP_WAIT:
            if len(data) - pos < 8:
                self.pending = data[pos:]
                return -1
            if data[pos : pos + 8] != AMQP_HEADER:
                self._send(AMQP_HEADER)
                self.lost()
                return -1
            self._send(AMQP_HEADER)
            self.state = OPEN_WAIT
            pos += 8
        return pos

    def _sasl_init(self, f):
        mechanism = field(f, 0)
        response = field(f, 1, b"")
        name = mechanism.value if isinstance(mechanism, Symbol) else None
        users = self.broker.users
        user, reason = None, "unknown mechanism %r" % (name,)
        if name == "PLAIN":
            try:
                user, password = credentials(b"PLAIN", response)
                reason = users.check(user, password, self.loopback)
            except Exception as e:  # (a malformed response: refused, said in the log)
                reason = "malformed PLAIN response: %s" % e
        elif name == "ANONYMOUS" and getattr(users, "anonymous", None):
            user, reason = users.anonymous, None
        if reason is not None:
            # code 1 (auth); the client closes, or the handshake's deadline hangs up on it. What it
            # sends meanwhile is not read.
            self.broker.log("warning", "%s: AMQP 1.0 %s login refused: %s" % (self.name, name, reason))
            self._send(frame(0, spec.SASL_OUTCOME, [Ubyte(1)], sasl=True))
            self.refused = True
            self.deadline = min(self.deadline, self.broker.now + self.broker.limits.auth_failure_delay_ms)
            return
        self.auth_mechanism = name.encode()
        self.client = Client(user.encode() if isinstance(user, str) else user, self.name)
        self._send(frame(0, spec.SASL_OUTCOME, [Ubyte(0)], sasl=True))
        self.state = AMQP_WAIT

    def _frame(self, f):
        if f.code is None:
            return  # an empty frame: the peer is alive
        if f.kind != AMQP_FRAME:
            if self.state == SASL_INIT and f.code == spec.SASL_INIT:
                self._sasl_init(f)
                return
            raise DecodeError("a SASL frame out of place")
        handler = HANDLERS.get(f.code)
        if handler is None or (self.state == OPEN_WAIT) != (f.code == spec.OPEN):
            raise DecodeError("%s out of place" % spec.TYPES.get(f.code, ("frame",))[0])
        handler(self, f)

    def _open(self, f):
        broker = self.broker
        limits = broker.limits
        user = self.client.user.decode()
        allowed, permissions = broker.users.access(user)  # as 0-9-1's connection.open checks
        if not allowed:
            self._close(error("amqp:unauthorized-access", "access to vhost '/' refused for user '%s'" % user))
            return
        self.client.permissions = permissions
        if broker.open_connections >= limits.max_connections:
            self._close(
                error("amqp:resource-limit-exceeded", "connection limit (%d) is reached" % limits.max_connections)
            )
            return
        broker.open_connections += 1
        self.counted = True
        self.max_frame = min(MAX_FRAME, max(512, field(f, 2, Uint(MAX_FRAME)).value))
        self.idle_ms = field(f, 4, Uint(0)).value
        self.last_sent = broker.now
        self.state = OPEN
        self._send(frame(0, spec.OPEN, ["hutch", None, Uint(MAX_FRAME), Ushort(CHANNEL_MAX), Uint(IDLE_TIME_OUT)]))
        broker.log("info", "%s: AMQP 1.0 connection open (user '%s')" % (self.name, self.client.user.decode()))

    def _begin(self, f):
        channel = f.channel
        if channel > CHANNEL_MAX or channel in self.sessions:
            raise LinkError("amqp:connection:framing-error", "channel %d is not free" % channel)
        next_incoming = field(f, 1, Uint(0)).value
        self.sessions[channel] = Session(self, channel, channel, next_incoming)
        self._send(
            frame(
                channel, spec.BEGIN, [Ushort(channel), Uint(0), Uint(SESSION_WINDOW), Uint(SESSION_WINDOW), Uint(255)]
            )
        )

    def _attach(self, f):
        session = self._session(f)
        name, handle, role = field(f, 0), field(f, 1).value, field(f, 2)
        if role is True:  # the client receives
            self._attach_receiver(session, f, name, handle)
            return
        target = field(f, 6)
        address = target.value[0] if type(target) is Described and target.value else None
        try:
            exchange, routing_key = address_of(self.broker, address) if address is not None else (None, None)
        except LinkError as e:
            # RabbitMQ 4: the attach answered with a null target, then the link ends with why
            self._send(frame(session.channel, spec.ATTACH, [name, Uint(handle), True, None, None, None, None]))
            self._detach(session, handle, error(e.args[0], e.args[1]))
            return
        link = session.links[handle] = Link(session, handle, name, target, exchange, routing_key)
        self._send(frame(session.channel, spec.ATTACH, [name, Uint(handle), True, None, None, None, target]))
        self._flow(session, link)

    def _attach_receiver(self, session, f, name, handle):
        source = field(f, 5)
        address = source.value[0] if type(source) is Described and source.value else None
        settled = field(f, 3, Ubyte(2)) == Ubyte(1)  # snd-settle-mode settled: at most once
        try:
            parts = address.split("/") if isinstance(address, str) else []
            if len(parts) != 3 or parts[1] != "queues" or not parts[2]:
                raise LinkError("amqp:invalid-field", "source address '%s' is not /queues/NAME" % (address,))
            from ..core import topology
            from ..core.access import READ

            try:
                queue = topology.queue_for(self.broker, self.client, _unquote(parts[2]).encode(), READ, BASIC_CONSUME)
            except ChannelException as e:
                raise LinkError("amqp:not-found" if e.code == 404 else "amqp:unauthorized-access", e.text)
            if queue.is_stream:
                raise LinkError("amqp:not-implemented", "reading a stream over AMQP 1.0 is not served yet")
            receiver = Receiver(self, session, handle, name, source, queue, settled)
            try:
                self.broker.consume(self.client, queue, receiver.consumer, BASIC_CONSUME)
            except ChannelException as e:
                raise LinkError("amqp:resource-locked" if e.code == 405 else "amqp:precondition-failed", e.text)
        except LinkError as e:
            self._send(frame(session.channel, spec.ATTACH, [name, Uint(handle), False, None, None, None, None]))
            self._detach(session, handle, error(e.args[0], e.args[1]))
            return
        session.links[handle] = receiver
        mode = Ubyte(1) if settled else Ubyte(0)
        self._send(
            frame(
                session.channel, spec.ATTACH, [name, Uint(handle), False, mode, None, source, None, None, None, Uint(0)]
            )
        )

    def _flow(self, session, link):
        session.window = SESSION_WINDOW
        self._send(
            frame(
                session.channel,
                spec.FLOW,
                [
                    Uint(session.next_incoming_id),
                    Uint(SESSION_WINDOW),
                    Uint(0),
                    Uint(SESSION_WINDOW),
                    Uint(link.handle),
                    Uint(link.delivery_count),
                    Uint(LINK_CREDIT),
                ],
            )
        )
        link.credit = LINK_CREDIT

    def _flow_in(self, f):
        session = self._session(f)
        handle = field(f, 4)
        receiver = session.links.get(handle.value) if handle is not None else None
        if type(receiver) is not Receiver:
            return  # (a sender's flow tells us its delivery count: our credit stands)
        # the credit it grants counts from the delivery count it has seen (2.6.7)
        count = field(f, 5, Uint(receiver.delivery_count)).value
        receiver.credit = max(0, count + field(f, 6, Uint(0)).value - receiver.delivery_count)
        receiver.queue.dispatch()
        if field(f, 8, False) and receiver.credit:  # drain: what is not used now is given up
            receiver.delivery_count += receiver.credit
            receiver.credit = 0
            self._send(
                frame(
                    session.channel,
                    spec.FLOW,
                    [Uint(session.next_incoming_id), Uint(SESSION_WINDOW), Uint(session.next_outgoing_id),
                     Uint(SESSION_WINDOW), Uint(receiver.handle), Uint(receiver.delivery_count), Uint(0), None, True],
                )
            )  # fmt: skip

    def _transfer(self, f):
        session = self._session(f)
        handle = field(f, 0).value
        link = session.links.get(handle)
        if link is None:
            raise LinkError("amqp:session:unattached-handle", "no link with handle %d" % handle)
        more = field(f, 5, False)
        # each frame is a transfer of the session's window (2.5.6): widened again at half
        session.next_incoming_id = (session.next_incoming_id + 1) & 0xFFFFFFFF
        session.window -= 1
        if session.window <= SESSION_WINDOW // 2:
            session.window = SESSION_WINDOW
            self._send(
                frame(session.channel, spec.FLOW, [Uint(session.next_incoming_id), Uint(SESSION_WINDOW),
                                                   Uint(session.next_outgoing_id), Uint(SESSION_WINDOW)])
            )  # fmt: skip
        if link.partial is None:
            delivery_id = field(f, 1).value
            link.partial = [delivery_id, field(f, 4, False), []]
        link.partial[2].append(f.payload)
        if more:
            return
        delivery_id, settled, parts = link.partial
        link.partial = None
        link.delivery_count += 1
        link.credit -= 1
        outcome, seq = self._publish(link, b"".join(parts))
        if not settled:
            if seq and self.broker.journal is not None and self.broker.journal.synced < seq:
                self.waiting.append([seq, session, delivery_id, outcome])
                self.broker.wait_for_journal(self)
            else:
                self._settle(session, delivery_id, outcome)
        if link.credit <= LINK_CREDIT // 2:
            self._flow(session, link)

    def _publish(self, link, payload):
        """One message through the broker's publish path: (its outcome, the journal sequence
        number its acceptance waits for, or 0)."""
        broker = self.broker
        try:
            props, body = to_parts(payload)
        except NotConvertible as e:
            return rejected("amqp:not-implemented", str(e)), 0
        exchange = link.exchange
        routing_key = link.routing_key
        if exchange is None:  # a null target: the message's `to` says where
            to = _property(payload, 2)
            try:
                exchange, routing_key = address_of(broker, to)
            except LinkError as e:
                return rejected(e.args[0], e.args[1]), 0
        if routing_key is None:
            routing_key = props.get("type", b"")  # (the subject)
        header_tail, body_tail, size = tails(props, body)
        route = bytes((len(exchange),)) + exchange + bytes((len(routing_key),)) + routing_key
        message = Message(exchange, routing_key, route, header_tail, body_tail, size)
        try:
            target, message = broker.admit(self, exchange, message)
        except ChannelException as e:
            condition = (
                "amqp:unauthorized-access"
                if e.code == 403
                else "amqp:not-found"
                if e.code == 404
                else "amqp:precondition-failed"
            )
            return rejected(condition, e.text), 0
        result = broker.publish(target, message, self)
        if not result & ROUTED:
            return RELEASED, 0
        if result & REFUSED:
            return rejected("amqp:resource-limit-exceeded", "a queue refused the message (full)"), 0
        journal = broker.journal
        return ACCEPTED, (journal.seq if result & JOURNALLED and journal is not None else 0)

    def flush_confirms(self):
        """Dispositions that waited for the journal, now that it synced (Broker.journal_synced)."""
        if not self.waiting or self.closed:
            return
        synced = self.broker.journal.synced
        still = []
        for entry in self.waiting:
            if entry[0] <= synced:
                self._settle(entry[1], entry[2], entry[3])
            else:
                still.append(entry)
        self.waiting = still
        if still:
            self.broker.wait_for_journal(self)

    def _settle(self, session, delivery_id, outcome):
        # role receiver (true), first, last, settled, state
        self._send(frame(session.channel, spec.DISPOSITION, [True, Uint(delivery_id), None, True, outcome]))

    def _disposition(self, f):
        """The client settles what it received (role receiver): accepted is an ack, released a
        requeue, rejected a dead letter, modified either (undeliverable-here: dead letter)."""
        session = self._session(f)
        if field(f, 0) is not True:
            return  # (about what it sent: we settle those ourselves)
        first = field(f, 1).value
        last = field(f, 2, Uint(first)).value
        state = field(f, 4)
        code = state.descriptor.value if type(state) is Described else spec.ACCEPTED
        if code == spec.ACCEPTED:
            outcome = ACCEPT
        elif code == spec.REJECTED:
            outcome = REJECT
        elif code == spec.MODIFIED and len(state.value) > 1 and state.value[1] is True:
            outcome = REJECT
        else:
            outcome = REQUEUE
        touched = []
        for delivery_id in range(first, last + 1):
            held = session.unsettled.pop(delivery_id, None)
            if held is None:
                continue
            receiver, queue, entry = held
            receiver.consumer.unacked -= 1
            receiver.consumer_unacked -= 1
            self.broker.settle(queue, [entry], outcome)
            if queue not in touched:
                touched.append(queue)
        for queue in touched:
            queue.dispatch()

    def _end_receiver(self, receiver, why=None):
        """A receiving link ends (detached, its session or connection gone, its queue deleted):
        what it held unsettled goes back to its queue, as a closed 0-9-1 channel's does."""
        session = receiver.session
        if session.links.get(receiver.handle) is receiver:
            del session.links[receiver.handle]
        if receiver.consumer in receiver.queue.consumers:
            self.broker.cancel(receiver.consumer, serve_next=False)
        back = [delivery_id for delivery_id, held in session.unsettled.items() if held[0] is receiver]
        for delivery_id in back:
            _receiver, queue, entry = session.unsettled.pop(delivery_id)
            self.broker.settle(queue, [entry], REQUEUE)
        if back or receiver.queue.consumers:
            receiver.queue.dispatch()
        if why is not None and not self.closed:
            self._send(frame(session.channel, spec.DETACH, [Uint(receiver.handle), True, why]))

    def _detach_in(self, f):
        session = self._session(f)
        handle = field(f, 0).value
        link = session.links.get(handle)
        if type(link) is Receiver:
            self._end_receiver(link)
        if session.links.pop(handle, None) is not None or type(link) is Receiver:  # (else: the answer to ours)
            self._send(frame(session.channel, spec.DETACH, [Uint(handle), True]))

    def _detach(self, session, handle, why):
        session.links.pop(handle, None)
        self._send(frame(session.channel, spec.DETACH, [Uint(handle), True, why]))

    def _end(self, f):
        session = self._session(f)
        self._end_links(session)
        del self.sessions[session.channel]
        self._send(frame(session.channel, spec.END, []))

    def _close_in(self, f):
        self._send(frame(0, spec.CLOSE, []))
        self.broker.log("info", "%s: AMQP 1.0 connection closed" % self.name)
        self.lost()

    def _session(self, f):
        session = self.sessions.get(f.channel)
        if session is None:
            raise LinkError("amqp:connection:framing-error", "no session on channel %d" % f.channel)
        return session

    def _close(self, why):
        if self.state >= OPEN_WAIT:  # (before the AMQP header there is no close to send)
            self._send(frame(0, spec.CLOSE, [why]))
        self.broker.log("warning", "%s: AMQP 1.0 connection closed: %s" % (self.name, why.value[1]))
        self.lost()

    # ------------------------------------------------------------ publishing (core/session.py)

    def hold_for(self, queue):
        pass  # (never called: a confirming publisher is refused, not held back)

    def resume(self):
        pass

    def direct_reply_to(self, message):
        raise ChannelException(406, "PRECONDITION_FAILED - direct reply-to over AMQP 1.0 is not served", 0)

    # ------------------------------------------------------------ output

    def _send(self, data):
        self.out.append(data)
        self.last_sent = self.broker.now
        if self.wake is not None:
            self.wake()


def _property(payload, index):
    """One field of a message's properties section (2: `to`), or None."""
    from .message import sections

    properties = sections(payload).get(spec.PROPERTIES) or []
    return properties[index] if len(properties) > index else None


HANDLERS = {
    spec.OPEN: Connection._open,
    spec.BEGIN: Connection._begin,
    spec.ATTACH: Connection._attach,
    spec.FLOW: Connection._flow_in,
    spec.TRANSFER: Connection._transfer,
    spec.DISPOSITION: Connection._disposition,
    spec.DETACH: Connection._detach_in,
    spec.END: Connection._end,
    spec.CLOSE: Connection._close_in,
}
