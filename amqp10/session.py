"""An AMQP 1.0 session (part 2.5 of the specification): its links, its windows and its
deliveries.

Flow control is counted in transfer frames at the session (2.5.6) and in messages on each link
(2.6.7):

- the client may send `incoming_window` transfer frames (Limits.amqp10_session_window), which
  the session opens again, once half are used, after what came in one read is done with; one
  more is a window-violation, and the session ends;
- a client's sending link gets Limits.amqp10_link_credit messages, granted again at half;
  one more is a transfer-limit-exceeded, and the link ends. While publishers are blocked
  (core/flow.py: memory or disk) no credit is granted;
- we send a client no more transfer frames than its incoming window allows: what does not
  fit waits in `backlog`, and its receiving links take nothing new until it has gone.

Errors end what they concern and no more (2.8.x): a link's (an address, a refused attach, a
message too large) detaches that link; a session's (an unknown handle, a window exceeded)
ends this session; the connection goes on.
"""

from ..codec.errors import ACCESS_REFUSED, RESOURCE_LOCKED, Refused
from ..codec.spec import BASIC_CONSUME
from ..core.broker import ACCEPT, REJECT, REQUEUE, add_to_group
from . import spec
from .addresses import AddressError, source_of, target_of
from .frames import field
from .links import IncomingLink, OutgoingLink, condition_of
from .performatives import (
    ATTACH_HANDLE,
    ATTACH_INCOMPLETE_UNSETTLED,
    ATTACH_NAME,
    ATTACH_RCV_SETTLE_MODE,
    ATTACH_ROLE,
    ATTACH_SND_SETTLE_MODE,
    ATTACH_SOURCE,
    ATTACH_TARGET,
    ATTACH_UNSETTLED,
    DETACH_HANDLE,
    DISPOSITION_FIRST,
    DISPOSITION_LAST,
    DISPOSITION_ROLE,
    DISPOSITION_STATE,
    FIRST,
    FLOW_DELIVERY_COUNT,
    FLOW_DRAIN,
    FLOW_ECHO,
    FLOW_HANDLE,
    FLOW_INCOMING_WINDOW,
    FLOW_LINK_CREDIT,
    FLOW_NEXT_INCOMING_ID,
    RECEIVER,
    SECOND,
    SENDER,
    SETTLED,
    SOURCE_ADDRESS,
    SOURCE_DYNAMIC,
    SOURCE_FILTER,
    TARGET_ADDRESS,
    TARGET_DYNAMIC,
    UNSETTLED,
    attach_frame,
    detach_frame,
    disposition_frame,
    error,
    flow_frame,
    transfer_frames,
)
from .types import Described, Symbol, Timestamp, Uint, Ulong

TRANSFER_OVERHEAD = 64  # a frame's header and a transfer's fields take fewer octets
SERIAL = 0x100000000  # transfer and delivery numbers wrap at 2**32 (RFC 1982)
STREAM_OFFSET_SPEC = Symbol("rabbitmq:stream-offset-spec")


class RefusedLink:
    """The handle of a link whose attach was refused, until the client detaches it."""

    detached = True


REFUSED = RefusedLink()


class SessionError(Exception):
    """(condition, description): the session ends with this error; the connection goes on."""


class LinkRefused(Exception):
    """(condition, description): an attach answered, then its link detached with this error."""


class Session:
    def __init__(self, conn, channel, remote_channel, next_incoming_id, remote_incoming_window, remote_outgoing_window):
        limits = conn.broker.limits
        self.conn = conn
        self.stats = conn.stats  # (as a publisher: core/counters.py)
        self.channel = channel
        self.remote_channel = remote_channel
        self.window = limits.amqp10_session_window  # what we open the client's sending to
        self.next_incoming_id = next_incoming_id
        self.incoming_window = self.window
        self.next_outgoing_id = 0
        self.outgoing_window = self.window
        self.remote_incoming_window = remote_incoming_window
        self.remote_outgoing_window = remote_outgoing_window
        self.next_delivery_id = 0
        self.handle_max = limits.amqp10_links - 1
        self.links = {}  # handle -> IncomingLink or OutgoingLink
        self.unsettled = {}  # delivery id -> (OutgoingLink, queue, entry) until the client settles it
        self.backlog = []  # transfer frames that wait for the client's incoming window
        self.outcomes = []  # (delivery id, outcome) of what the client sent, to be said (send_outcomes)

    # ------------------------------------------------------------ as hutch ctl lists a channel

    prefetch_consumer = prefetch_global = 0  # (credit bounds each link: no channel-wide prefetch)
    confirming = True  # (each message a client sends unsettled gets its outcome)
    tx = None

    @property
    def number(self):
        return self.channel

    @property
    def consumers(self):
        return {link.handle: link.consumer for link in self.links.values() if type(link) is OutgoingLink}

    @property
    def unacked(self):
        return self.unsettled

    # ------------------------------------------------------------ attach

    def attach(self, f):
        name, handle = field(f, ATTACH_NAME), field(f, ATTACH_HANDLE)
        if name is None or handle is None:
            raise SessionError("amqp:invalid-field", "an attach must name its link and handle")
        handle = handle.value
        if handle in self.links:
            raise SessionError("amqp:session:handle-in-use", "handle %d is in use" % handle)
        if handle > self.handle_max:
            raise SessionError(
                "amqp:resource-limit-exceeded", "handle %d is over handle-max %d" % (handle, self.handle_max)
            )
        role = field(f, ATTACH_ROLE)
        try:
            if field(f, ATTACH_UNSETTLED) or field(f, ATTACH_INCOMPLETE_UNSETTLED):
                raise LinkRefused("amqp:not-implemented", "resuming a link (its unsettled map) is not supported")
            if role is RECEIVER:  # the client receives
                self._attach_outgoing(f, name, handle)
            else:
                self._attach_incoming(f, name, handle)
        except LinkRefused as e:
            # RabbitMQ 4's way: the attach answered with a null terminus, then the link ends with why
            self.conn.send(attach_frame(self.channel, name, handle, not role, None, None, None, None))
            self.conn.send(detach_frame(self.channel, handle, error(e.args[0], e.args[1])))
            self.links[handle] = REFUSED  # its handle is taken until the client's detach answers

    def _attach_incoming(self, f, name, handle):
        conn = self.conn
        target = field(f, ATTACH_TARGET)
        if type(target) is not Described:
            raise LinkRefused("amqp:invalid-field", "a sending link needs a target")
        if target.descriptor in (Ulong(spec.COORDINATOR), Symbol("amqp:coordinator:list")):
            raise LinkRefused("amqp:not-implemented", "transactions are not supported")
        fields = target.value if type(target.value) is list else []
        if len(fields) > TARGET_DYNAMIC and fields[TARGET_DYNAMIC] is True:
            raise LinkRefused("amqp:not-implemented", "dynamic targets are not supported")
        snd_settle = field(f, ATTACH_SND_SETTLE_MODE)
        if field(f, ATTACH_RCV_SETTLE_MODE) == SECOND and snd_settle != SETTLED:
            raise LinkRefused("amqp:not-implemented", "rcv-settle-mode second is not supported")
        address = fields[TARGET_ADDRESS] if fields else None
        exchange = routing_key = None
        if address is not None:
            try:
                exchange, routing_key = target_of(conn.broker, address)
            except AddressError as e:
                raise LinkRefused(e.args[0], e.args[1])
        link = IncomingLink(self, handle, name, exchange, routing_key, 0)
        self.links[handle] = link
        conn.send(
            attach_frame(self.channel, name, handle, RECEIVER, snd_settle, FIRST, field(f, ATTACH_SOURCE), target)
        )
        self.grant(link)

    def _attach_outgoing(self, f, name, handle):
        conn = self.conn
        broker = conn.broker
        source = field(f, ATTACH_SOURCE)
        fields = source.value if type(source) is Described and type(source.value) is list else []
        if len(fields) > SOURCE_DYNAMIC and fields[SOURCE_DYNAMIC] is True:
            raise LinkRefused("amqp:not-implemented", "dynamic sources are not supported")
        if field(f, ATTACH_RCV_SETTLE_MODE) == SECOND:
            raise LinkRefused("amqp:not-implemented", "rcv-settle-mode second is not supported")
        settled = field(f, ATTACH_SND_SETTLE_MODE) == SETTLED  # at most once: a no-ack consumer
        try:
            queue_name = source_of(fields[SOURCE_ADDRESS] if fields else None)
        except AddressError as e:
            raise LinkRefused(e.args[0], e.args[1])
        from ..core import topology
        from ..core.access import READ

        try:
            queue = topology.queue_for(broker, conn.client, queue_name, READ, BASIC_CONSUME)
        except Refused as e:
            raise LinkRefused(condition_of(e), e.text)
        arguments = None
        filters = fields[SOURCE_FILTER] if len(fields) > SOURCE_FILTER and type(fields[SOURCE_FILTER]) is dict else {}
        applied = {}
        if queue.is_stream:
            if settled:
                raise LinkRefused("amqp:not-implemented", "a stream is read with unsettled deliveries")
            spec_value = filters.get(STREAM_OFFSET_SPEC)
            if spec_value is not None:
                applied[STREAM_OFFSET_SPEC] = spec_value
                arguments = {"x-stream-offset": stream_offset(spec_value)}
        link = OutgoingLink(self, handle, name, queue, settled)
        if queue.is_stream:
            link.consumer.prefetch = broker.limits.amqp10_link_credit  # (a stream wants one; credit rules)
        try:
            broker.consume(conn.client, queue, link.consumer, BASIC_CONSUME, arguments)
        except Refused as e:
            # (a queue another connection uses exclusively: 0-9-1's 403, 1.0's resource-locked)
            exclusive = e.condition == ACCESS_REFUSED or e.condition == RESOURCE_LOCKED
            raise LinkRefused("amqp:resource-locked" if exclusive else condition_of(e), e.text)
        self.links[handle] = link
        if applied and type(source) is Described:  # the filters in force, as the answer's source says
            fields = list(fields) + [None] * (SOURCE_FILTER + 1 - len(fields))
            fields[SOURCE_FILTER] = applied
            source = Described(source.descriptor, fields)
        conn.send(
            attach_frame(
                self.channel,
                name,
                handle,
                SENDER,
                SETTLED if settled else UNSETTLED,
                FIRST,
                source,
                field(f, ATTACH_TARGET),
                initial=Uint(link.delivery_count),
            )
        )

    # ------------------------------------------------------------ flow

    def grant(self, link):
        """A sending link's credit, given again (none while publishers are blocked)."""
        if self.conn.broker.flow.blocked:
            return
        link.credit = self.conn.broker.limits.amqp10_link_credit
        self.conn.send(flow_frame(self, link))

    def flow(self, f):
        """The client's flow: its window for what we send, and a link's credit (or, for a link it
        sends on, its delivery count: our credit stands), with drain and echo."""
        next_incoming = field(f, FLOW_NEXT_INCOMING_ID)
        window = field(f, FLOW_INCOMING_WINDOW)
        if window is not None:
            base = next_incoming.value if next_incoming is not None else 0
            self.remote_incoming_window = (base + window.value - self.next_outgoing_id) % SERIAL
        handle = field(f, FLOW_HANDLE)
        link = None
        if handle is not None:
            link = self.links.get(handle.value)
            if link is None:
                raise SessionError("amqp:session:unattached-handle", "no link with handle %d" % handle.value)
        if type(link) is OutgoingLink and not link.detached:
            count = field(f, FLOW_DELIVERY_COUNT)
            seen = count.value if count is not None else 0  # (none: it has seen none of ours yet)
            credit = field(f, FLOW_LINK_CREDIT)
            credit = credit.value if credit is not None else 0
            link.grant(
                max(0, (seen + credit - link.delivery_count) % SERIAL) if credit else 0, field(f, FLOW_DRAIN) is True
            )
            self.pump()
            link.queue.dispatch()
            if link.drain and link.credit and not self.backlog:  # drain: what is not used now is given up
                link.delivery_count = (link.delivery_count + link.credit) % SERIAL
                link.grant(0, True)
                self.conn.send(flow_frame(self, link))
                return
        else:
            self.pump()
            if self.remote_incoming_window:
                self.redispatch()
        if field(f, FLOW_ECHO) is True:
            self.conn.send(flow_frame(self, link))

    # ------------------------------------------------------------ transfers from the client

    def on_transfer(self, f):
        conn = self.conn
        if self.incoming_window <= 0:
            raise SessionError("amqp:session:window-violation", "a transfer past the session's incoming window")
        self.incoming_window -= 1
        self.next_incoming_id = (self.next_incoming_id + 1) % SERIAL
        handle, delivery_id, settled, more, aborted = f.transfer
        link = self.links.get(handle)
        if link is None:
            raise SessionError("amqp:session:unattached-handle", "no link with handle %s" % handle)
        if link.detached:
            return  # (in flight when we ended or refused the link)
        if type(link) is not IncomingLink:
            raise SessionError("amqp:session:errant-link", "a transfer on a link the client receives on")
        payload = f.payload
        partial = link.partial
        if partial is None:
            if delivery_id is None:
                raise SessionError("amqp:invalid-field", "the first transfer of a delivery has no delivery-id")
            if link.credit <= 0:
                self.end_link(link, error("amqp:link:transfer-limit-exceeded", "a transfer past the link's credit"))
                return
            if not more and not aborted:  # a message in one frame (most are): no parts to keep
                self._whole(link, delivery_id, settled, payload)
                return
            partial = link.partial = [delivery_id, settled, [], 0]
        elif delivery_id is not None and delivery_id != partial[0]:
            raise SessionError("amqp:invalid-field", "a continuation transfer's delivery-id differs from the first's")
        if aborted:  # the client gave it up: nothing of it is kept or settled
            link.partial = None
            link.credit -= 1
            link.delivery_count = (link.delivery_count + 1) % SERIAL
            return
        partial[2].append(payload)
        partial[3] += len(payload)
        if partial[3] > conn.broker.limits.max_message_bytes:
            link.partial = None
            self.end_link(
                link,
                error(
                    "amqp:link:message-size-exceeded",
                    "message size %d is larger than the %d allowed"
                    % (partial[3], conn.broker.limits.max_message_bytes),
                ),
            )
            return
        if more:
            return
        link.partial = None
        self._whole(link, partial[0], partial[1], b"".join(partial[2]))

    def _whole(self, link, delivery_id, settled, payload):
        """A whole message from the client: published, its outcome given (unless it came
        settled), its link's credit granted again at half."""
        conn = self.conn
        broker = conn.broker
        if len(payload) > broker.limits.max_message_bytes:
            self.end_link(
                link,
                error(
                    "amqp:link:message-size-exceeded",
                    "message size %d is larger than the %d allowed" % (len(payload), broker.limits.max_message_bytes),
                ),
            )
            return
        link.credit -= 1
        link.delivery_count = (link.delivery_count + 1) % SERIAL
        outcome, seq = link.message(broker, payload, conn)
        if not settled:  # the client waits for our outcome
            conn.settle_when_synced(self, delivery_id, outcome, seq)
        if link.credit <= broker.limits.amqp10_link_credit // 2:
            self.grant(link)

    def reopen(self):
        """After what the client sent has been read (Connection.feed): its window opened again
        once half is used. A client that sends more than the window without waiting for this
        violates it."""
        if self.incoming_window < self.window // 2:
            self.incoming_window = self.window
            self.conn.send(flow_frame(self))

    def settle(self, delivery_id, outcome):
        """A message the client sent, settled with outcome: said with the others due
        (send_outcomes), once what came in one read is done with."""
        self.outcomes.append((delivery_id, outcome))

    def send_outcomes(self):
        """The outcomes due, one disposition for each run of consecutive deliveries with the
        same outcome (a thousand messages accepted in a read: one frame, not a thousand)."""
        outcomes = self.outcomes
        if not outcomes:
            return
        self.outcomes = []
        first, outcome = outcomes[0]
        last = first
        for delivery_id, this in outcomes[1:]:
            if this is outcome and delivery_id == (last + 1) % SERIAL:
                last = delivery_id
                continue
            self.conn.send(disposition_frame(self.channel, first, last, outcome))
            first = last = delivery_id
            outcome = this
        self.conn.send(disposition_frame(self.channel, first, last, outcome))

    # ------------------------------------------------------------ deliveries to the client

    def can_send(self):
        """A receiving link may be given a message now: nothing waits for the client's window
        and the connection is not behind on its output."""
        return not self.backlog and self.remote_incoming_window > 0 and not self.conn.saturated()

    def next_delivery(self, link, held):
        """A delivery id for link's next delivery; held (queue, entry) kept until the client settles."""
        delivery_id = self.next_delivery_id
        self.next_delivery_id = (delivery_id + 1) % SERIAL
        if held is not None:
            self.unsettled[delivery_id] = (link, held[0], held[1])
        return delivery_id

    def transfer_out(self, frames):
        """Transfer frames to the client, as many as its window takes; the rest in backlog."""
        for data in frames:
            if self.backlog or self.remote_incoming_window <= 0:
                self.backlog.append(data)
                continue
            self.remote_incoming_window -= 1
            self.next_outgoing_id = (self.next_outgoing_id + 1) % SERIAL
            self.conn.send(data)

    def send_delivery(self, link, delivery_id, settled, payload):
        """One delivery to the client, in as many transfer frames as its frame size needs."""
        room = self.conn.max_frame - TRANSFER_OVERHEAD
        self.transfer_out(transfer_frames(self.channel, link.handle, delivery_id, settled, payload, room))

    def pump(self):
        """Frames that waited for the client's window, as far as it now goes."""
        backlog = self.backlog
        sent = 0
        while sent < len(backlog) and self.remote_incoming_window > 0:
            self.remote_incoming_window -= 1
            self.next_outgoing_id = (self.next_outgoing_id + 1) % SERIAL
            self.conn.send(backlog[sent])
            sent += 1
        if sent:
            del backlog[:sent]

    def redispatch(self):
        """The client can take more: its receiving links' queues deliver again."""
        for link in list(self.links.values()):
            if type(link) is OutgoingLink and link.credit:
                link.queue.dispatch()

    def disposition(self, f):
        """The client settles what it received (role receiver): accepted is an ack, released a
        requeue, rejected a dead letter, modified either (undeliverable-here: a dead letter).
        About what it sent (role sender), it only settles its side: nothing to do."""
        if field(f, DISPOSITION_ROLE) is not RECEIVER:
            return
        first = field(f, DISPOSITION_FIRST)
        if first is None:
            raise SessionError("amqp:invalid-field", "a disposition must say which deliveries")
        first = first.value
        last = field(f, DISPOSITION_LAST, first)
        last = last.value if type(last) is not int else last
        state = field(f, DISPOSITION_STATE)
        code = state.descriptor.value if type(state) is Described and type(state.descriptor) is Ulong else spec.ACCEPTED
        if code == spec.ACCEPTED:
            outcome = ACCEPT
        elif code == spec.REJECTED:
            outcome = REJECT
        elif code == spec.MODIFIED and type(state.value) is list and len(state.value) > 1 and state.value[1] is True:
            outcome = REJECT
        elif code in (spec.RELEASED, spec.MODIFIED):
            outcome = REQUEUE
        else:
            return  # (received: not an outcome; the delivery stays unsettled)
        unsettled = self.unsettled
        count = (last - first) % SERIAL + 1
        if count <= len(unsettled):
            ids = [(first + i) % SERIAL for i in range(count)]
        else:  # (a wide range over few deliveries: look at those)
            ids = sorted((d for d in unsettled if (d - first) % SERIAL < count), key=lambda d: (d - first) % SERIAL)
        groups = []  # [queue, its entries], in the order the queues first appear
        for delivery_id in ids:
            held = unsettled.pop(delivery_id, None)
            if held is None:
                continue
            link, queue, entry = held
            link.consumer.unacked -= 1
            link.consumer_unacked -= 1
            add_to_group(groups, queue, entry)
        self.conn.broker.settle_groups(groups, outcome, self.stats)
        for queue, _entries in groups:
            queue.dispatch()

    # ------------------------------------------------------------ ending links and the session

    def detach(self, f):
        """The client detaches a link (or answers our detach)."""
        handle = field(f, DETACH_HANDLE)
        if handle is None:
            raise SessionError("amqp:invalid-field", "a detach must name its handle")
        link = self.links.pop(handle.value, None)
        if link is None:
            raise SessionError("amqp:session:unattached-handle", "no link with handle %d" % handle.value)
        if link.detached:
            return  # the answer to ours
        if type(link) is OutgoingLink:
            self._release(link)
        self.conn.send(detach_frame(self.channel, handle.value))

    def end_link(self, link, why):
        """We end a link with an error: detach it, and let go of what it holds; its handle
        stays taken until the client answers."""
        if link.detached:
            return
        link.detached = True
        if type(link) is OutgoingLink:
            self._release(link)
        if not self.conn.closed:
            self.conn.send(detach_frame(self.channel, link.handle, why))

    def _release(self, link):
        """A receiving link ends: its consumer goes, and what it held unsettled goes back to its
        queue, as a closed 0-9-1 channel's does."""
        broker = self.conn.broker
        queue = link.queue
        if link.consumer in queue.consumers:
            broker.cancel(link.consumer, serve_next=False)
        back = [delivery_id for delivery_id, held in self.unsettled.items() if held[0] is link]
        for delivery_id in back:
            _link, held_queue, entry = self.unsettled.pop(delivery_id)
            broker.settle(held_queue, [entry], REQUEUE, self.stats)
        if back or queue.consumers:
            queue.dispatch()

    def release_all(self):
        """The session ends (or its connection): every link lets go of what it holds."""
        for link in list(self.links.values()):
            if type(link) is OutgoingLink and not link.detached:
                link.detached = True
                self._release(link)
        self.links = {}
        self.backlog = []


def stream_offset(value):
    """rabbitmq:stream-offset-spec (as RabbitMQ 4 takes it: first, last, next, an offset, a
    timestamp, or an interval such as 1h) as the x-stream-offset a stream consumer is given."""
    if type(value) is Described:
        value = value.value
    if isinstance(value, str):
        return value.encode()
    if type(value) is Timestamp:
        from ..codec.wire import Timestamp as Seconds

        return Seconds(value.value // 1000)
    if hasattr(value, "value") and isinstance(value.value, int):
        return value.value
    return value
