"""The two kinds of AMQP 1.0 link a client attaches (part 2.6 of the specification), named from
the broker's side:

IncomingLink   the client sends: each message goes through the broker's one publish path
               (Broker.admit, Broker.publish) to the link's target, and is settled with
               RabbitMQ 4's outcomes (accepted once every queue has it, a durable one once
               the journal has synced; released when no queue took it; rejected with the
               reason when a gate or a queue refused it).
OutgoingLink   the client receives from a queue or a stream: the session of a core Consumer
               (core/session.py), delivering as the link's credit and its session's window
               allow; the client's outcomes settle as 0-9-1 acks do (accepted: ack, released:
               requeue, rejected: dead letter, modified: either).
"""

from ..codec.errors import (
    ACCESS_REFUSED,
    INTERNAL_ERROR,
    NOT_ALLOWED,
    NOT_FOUND,
    NOT_IMPLEMENTED,
    RESOURCE_ERROR,
    RESOURCE_LOCKED,
    Refused,
)
from ..codec.wire import encode_properties, text
from ..core.broker import JOURNALLED, REFUSED, ROUTED
from ..core.content import body_tail, header_tail
from ..core.content import tails as message_tails
from ..core.message import Message
from ..core.queue import Consumer
from ..core.session import MESSAGE, REDELIVERED
from .addresses import AddressError, target_of
from .delivery import from_message
from .message import body_091, properties_091
from .performatives import ACCEPTED, RELEASED, rejected
from .sections import NotMessage, Sections, data_body
from .types import DecodeError

KNOWN_MOST = 64  # runs of octets before a body each sending link keeps the meaning of
# what the broker refuses with (core/session.py Refused) -> the 1.0 condition that says the same
# (its text goes as the error's description, as RabbitMQ 4 words it: no "NOT_FOUND - ")
CONDITIONS = {
    ACCESS_REFUSED: "amqp:unauthorized-access",
    NOT_FOUND: "amqp:not-found",
    RESOURCE_LOCKED: "amqp:resource-locked",
    NOT_ALLOWED: "amqp:not-allowed",
    NOT_IMPLEMENTED: "amqp:not-implemented",
    RESOURCE_ERROR: "amqp:resource-limit-exceeded",
    INTERNAL_ERROR: "amqp:internal-error",
}


def condition_of(refused):
    """The 1.0 condition that words a broker refusal (codec/errors.py Refused)."""
    return CONDITIONS.get(refused.condition, "amqp:precondition-failed")


class IncomingLink:
    """A link on which the client sends (see the module's docstring)."""

    detached = False  # we ended it: what still comes on it until the client's detach is let go
    unroutable_said = False  # the broker logged that a message on it went to no queue

    def __init__(self, session, handle, name, exchange, routing_key, credit):
        self.session = session
        self.handle = handle
        self.name = name
        self.exchange = exchange  # bytes, or None: each message's `to`
        self.routing_key = routing_key  # bytes, or None: each message's subject
        self.delivery_count = 0
        self.credit = credit
        # [delivery id, settled, [payload parts], size] while a message comes in frames
        self.partial = None  # type: list | None
        self.known = {}  # the octets before a data body -> what they mean (message())

    def _learn(self, prefix):
        """What the sections before a data body mean: (0-9-1 properties encoded, to, subject,
        where the bare message starts), kept for the next message that has the same (at most
        KNOWN_MOST of them: a sender whose every message differs fills it, then starts over)."""
        found = Sections(prefix)
        known = (encode_properties(properties_091(found)), found.prop(2), found.prop(3), found.bare_at)
        if len(self.known) >= KNOWN_MOST:
            self.known = {}
        self.known[prefix] = known
        return known

    def message(self, broker, payload, publisher):
        """One whole message through the broker's publish path: (its outcome, the journal
        sequence number its acceptance waits for, or 0).

        The common message, sections then one data section (data_body), is read by what the
        octets before its body mean, learnt once per link for each such run of octets (a
        sender's header and properties are most often alike from one message to the next):
        its 0-9-1 properties encoded, `to`, subject and where the bare message starts. Any
        other message is read whole (Sections)."""
        try:
            shape = data_body(payload)
            if shape is not None:
                known = self.known.get(payload[: shape[0]])
                if known is None:
                    known = self._learn(payload[: shape[0]])
                encoded, to, subject, bare_at = known
                body = memoryview(payload)[shape[1] :]
                size = len(body)
                tails = header_tail(encoded, size), body_tail(body), size
            else:
                found = Sections(payload)
                props = properties_091(found)
                body = body_091(found)
                tails = message_tails(props, body)
                to, subject, bare_at = found.prop(2), found.prop(3), found.bare_at
        except (NotMessage, DecodeError) as e:
            return rejected("amqp:decode-error", "not an AMQP 1.0 message: %s" % e), 0
        exchange = self.exchange
        routing_key = self.routing_key
        if exchange is None:  # a null target: the message's `to` says where
            try:
                exchange, routing_key = target_of(broker, to)
            except AddressError as e:
                return rejected(e.args[0], e.args[1]), 0
        if routing_key is None:  # /exchanges/NAME: the message's subject
            routing_key = subject.encode() if isinstance(subject, str) else b""
        route = bytes((len(exchange),)) + exchange + bytes((len(routing_key),)) + routing_key
        message = Message(exchange, routing_key, route, tails[0], tails[1], tails[2])
        message.native = (payload, bare_at)
        try:
            target, message = broker.admit(publisher, exchange, message)
        except Refused as e:
            return rejected(condition_of(e), e.text), 0
        result = broker.publish(target, message, publisher)
        if not result & ROUTED:
            if not self.unroutable_said:  # once a link: a sender may send thousands so
                self.unroutable_said = True
                broker.log(
                    "warning",
                    "%s: AMQP 1.0 link '%s': a message to exchange '%s' with routing key '%s' went to no queue "
                    "(released; said once a link): declare and bind a queue for it"
                    % (self.session.conn.name, self.name, text(exchange), text(routing_key)),
                )
            return RELEASED, 0
        if result & REFUSED:
            return rejected("amqp:resource-limit-exceeded", "a queue refused the message: it is full"), 0
        journal = broker.journal
        return ACCEPTED, (journal.seq if result & JOURNALLED and journal is not None else 0)


class OutgoingLink:
    """A link on which the client receives: the session (core/session.py) of its Consumer.
    Its credit is the consumer's window: consumer.prefetch is what it holds unsettled plus the
    credit it has left, as a 0-9-1 consumer's prefetch bounds what it holds, so 1.0 and 0-9-1
    consumers take turns on a queue alike."""

    prefetch_global = 0  # (no bound beyond the link's credit)
    detached = False

    def __init__(self, session, handle, name, queue, settled):
        self.conn = session.conn
        self.stats = session.stats  # (as its consumer's session: core/counters.py)
        self.session = session
        self.handle = handle
        self.name = name
        self.queue = queue
        self.settled = settled  # the client asked for pre-settled deliveries (at most once)
        self.credit = 0
        self.delivery_count = 0
        self.drain = False
        self.consumer_unacked = 0
        tag = name.encode() if isinstance(name, str) else bytes(name)
        self.consumer = Consumer(self, tag, queue, settled, False, 0)

    @property
    def number(self):
        """Its session's channel (as hutch ctl lists a consumer's channel)."""
        return self.session.channel

    def grant(self, credit, drain):
        """The client's flow for this link: its credit counts from the delivery count it has
        seen (2.6.7)."""
        self.credit = credit
        self.drain = drain
        self.consumer.prefetch = self.consumer.unacked + credit if not self.settled else 0

    # ------------------------------------------------------------ the session protocol (core/session.py)

    def can_deliver(self):
        return self.credit > 0 and self.session.can_send()

    def deliver(self, consumer, queue, entry):
        message = entry[MESSAGE]
        if self.settled or message.journal_id:
            self.conn.broker.delivered(queue, entry, self.settled)
        delivery_id = self.session.next_delivery(self, None if self.settled else (queue, entry))
        if not self.settled:
            consumer.unacked += 1
            self.consumer_unacked += 1
        self.credit -= 1
        self.delivery_count += 1
        self.session.send_delivery(self, delivery_id, self.settled, from_message(message, entry[REDELIVERED]))

    def deliver_records(self, consumer, stream, cursor, room):
        """A stream's records, each as a message (core/streams/streamlog.py read_messages); each
        is settled with stream.entry, as a 0-9-1 channel settles its stream deliveries."""
        from ..core.streams.streamlog import read_messages

        found, status = read_messages(cursor, stream.visible, min(room, self.credit))
        for _offset, message in found:
            delivery_id = self.session.next_delivery(self, (stream, stream.entry))
            consumer.unacked += 1
            self.consumer_unacked += 1
            self.credit -= 1
            self.delivery_count += 1
            self.session.send_delivery(self, delivery_id, False, from_message(message, False))
        return len(found), status

    def server_cancel(self, consumer):
        """The queue was deleted: the link ends, as RabbitMQ 4 ends it."""
        from .performatives import error

        self.session.end_link(self, error("amqp:resource-deleted", "queue '%s' was deleted" % self.queue.name.decode()))
