"""An MQTT session: what a client subscribes to, and what it is delivered (RabbitMQ's model).

A session's subscriptions are bindings of its queues to the MQTT exchange (amq.topic): one queue
per QoS, `mqtt-subscription-{client id}qos0`, `...qos1` and `...qos2`, each filter bound by its
binding key (mqtt/topics.py) to the queue of the QoS it was granted. So a session
that outlives its connection is its queues: durable, kept for the session expiry interval
(x-expires; 3.1.1's clean session 0 keeps them for the longest, `[mqtt] max_session_expiry`),
with their bindings and their messages, through a restart. A session that ends with its
connection has queues of that connection alone (exclusive).

A version 5 subscription's options and identifier are kept in its binding's arguments
(mqtt/options.py); a shared subscription (`$share/{group}/{filter}`) is a queue of the group's,
which the session consumes beside its own (mqtt/shared.py).

Deliveries: the session is its consumers' session (core/session.py): QoS 1 ones are numbered
by packet id and held until the client's PUBACK, at most `[mqtt] prefetch` at a time (or the
version 5 client's Receive Maximum, if less); what was in flight when the connection went is
delivered again, with DUP, to the next connection of the session. A message is delivered at
the lower of its subscription's QoS and its own: an MQTT QoS 0 publish at 0, a QoS 2 publish
at 2, any other (a QoS 1 publish, an AMQP publish) at 1. A QoS 2 delivery leaves its queue for
one of the session's own, on disk from its PUBLISH to the client's PUBCOMP (mqtt/qos2_out.py).
"""

from ..codec.errors import Refused
from ..codec.wire import text
from ..core import topology
from ..core.broker import ACCEPT, REQUEUE
from ..core.queue import Consumer, stop_waiting
from ..core.session import EXPIRES_AT, MESSAGE, REDELIVERED
from . import options, own_queues, packets, retained, shared
from .packets import (
    NO_SUBSCRIPTION_EXISTED,
    NOT_AUTHORIZED,
    RECEIVE_MAXIMUM,
    SESSION_EXPIRY_INTERVAL,
    SUBSCRIPTION_IDENTIFIER,
    SUCCESS,
    TOPIC_FILTER_INVALID,
    UNSPECIFIED_ERROR,
    V5,
)
from .publishing import ALIASES_MOST, QOS_HEADER, Publishing, properties_5
from .topics import (
    FILTER_ARGUMENT,
    binding_key,
    carried_topic,
    exact_filter,
    remember,
    share_of,
    topic_of,
    valid_filter,
    wanted,
    with_filter,
)

QUEUE_PREFIX = b"mqtt-subscription-"
PUBLISH_FIRST = packets.PUBLISH << 4
QOSES = (0, 1, 2)
# What a packet id in flight holds besides (queue, entry, consumer), its first item None: a
# retained message delivered at QoS 1 until its PUBACK; a QoS 2 delivery until its PUBCOMP
# (mqtt/qos2_out.py UNFINISHED)
RETAINED = (None, None, "retained")
NO_SHARED = {}
NO_METHOD = 0  # the request a core refusal names: none (MQTT answers with reason codes, not 0-9-1 method ids)


class Session:
    """One client's session (see the module's docstring); conn is its connection."""

    prefetch_global = 0  # (core/session.py: no bound beyond each consumer's)
    consumer_unacked = 0
    ended = False
    most_out = 0  # a version 5 client's Maximum Packet Size (0: none said)
    too_large_said = False
    dotted = False  # whether a filter of its subscriptions holds a dot (mqtt/topics.py)
    # Made when first needed (class defaults: a sensor that only publishes at QoS 0 or 1 holds
    # neither, which saves a few hundred bytes a connection): its QoS 2 packet ids between
    # PUBREC and PUBREL (mqtt/qos2.py), and its version 5 subscription options (mqtt/options.py)
    awaiting_release = None
    optioned = None  # (only while one of its subscriptions has options)
    # queue name -> its consumer: the shared subscriptions it is a member of (mqtt/shared.py);
    # NO_SHARED, never written to, until it is a member of one
    shared = NO_SHARED
    # its QoS 2 deliveries (mqtt/qos2_out.py), once there is one. (A class default: on a board an
    # attribute every session sets in __init__ costs each connection's heap.)
    unfinished = None

    @property
    def stats(self):
        """(As its consumers' session) MQTT's counters (core/counters.py)."""
        return self.serving.stats

    def __init__(self, conn, connect):
        self.conn = conn
        self.broker = conn.broker
        self.serving = conn.serving
        self.level = conn.level
        self.client_id = conn.client_id
        self.consumers_by_qos = [None, None, None]  # type: list  # the consumer of each QoS's queue, once there is one
        self.inflight = {}  # packet id -> (queue, entry, consumer): QoS 1 deliveries awaiting PUBACK; QoS 2's
        self.next_id = 1
        self.expiry = 0  # s the session outlives its connection
        self.window = self.serving.prefetch

    _publishing = None

    @property
    def publishing(self):
        """Its publisher (mqtt/publishing.py), made at its first PUBLISH or will: a subscriber or
        an idle sensor holds none."""
        publishing = self._publishing
        if publishing is None:
            publishing = self._publishing = Publishing(self)
        return publishing

    def flush_acks(self):
        """Acknowledgements that waited for the journal's sync, if it published (Publishing.flush_acks)."""
        if self._publishing is not None:
            self._publishing.flush_acks()

    # ------------------------------------------------------------ as hutch ctl lists a channel

    prefetch_consumer = 0  # (each QoS 1 consumer's window is its own prefetch)
    confirming = True  # (a QoS 1 or 2 publish is acknowledged once it is safe)
    tx = None

    @property
    def number(self):
        return 0  # (its connection's one channel)

    @property
    def consumers(self):
        found = {qos: consumer for qos, consumer in enumerate(self.consumers_by_qos) if consumer is not None}
        for name, consumer in self.shared.items():
            found[name] = consumer
        return found

    @property
    def unacked(self):
        return self.inflight

    def queue_name(self, qos):
        return QUEUE_PREFIX + self.client_id + (b"qos0" if not qos else b"qos1" if qos == 1 else b"qos2")

    def _own_queue_names(self):
        """Its subscriptions' queues and those its QoS 2 packet ids are kept in."""
        names = [self.queue_name(qos) for qos in QOSES]
        names.append(own_queues.INBOUND_PREFIX + self.client_id)
        names.append(own_queues.OUTBOUND_PREFIX + self.client_id)
        return names

    def awaiting(self):
        """Its QoS 2 packet ids between PUBREC and PUBREL (mqtt/qos2.py)."""
        if self.awaiting_release is None:
            from .qos2 import AwaitingRelease  # (loaded with a session's first QoS 2 publish)

            self.awaiting_release = AwaitingRelease(self)
        return self.awaiting_release

    def qos2_deliveries(self):
        """Its QoS 2 deliveries (mqtt/qos2_out.py: its PUBREC and PUBCOMP go there)."""
        if self.unfinished is None:
            from .qos2_out import Unfinished  # (loaded with a session's first QoS 2 delivery)

            self.unfinished = Unfinished(self)
        return self.unfinished

    # ------------------------------------------------------------ beginning and ending

    def begin(self, clean, props):
        """The session of this client id: a new one (clean), or the one it left, if there is one.
        Returns Session Present."""
        serving = self.serving
        if self.level == V5:
            self.expiry = min(props.get(SESSION_EXPIRY_INTERVAL, 0), serving.max_session_expiry)
            self.most_out = props.get(packets.MAXIMUM_PACKET_SIZE, 0)
            maximum = props.get(RECEIVE_MAXIMUM)
            if maximum == 0:
                raise packets.Malformed(packets.PROTOCOL_ERROR, "Receive Maximum 0")
            if maximum is not None:
                self.window = min(self.window, maximum)
        elif not clean:
            self.expiry = serving.max_session_expiry
        queues = self.broker.queues
        if clean:  # (what a session of this client id left ends: its queues and its group memberships)
            own_queues.drop(self.broker, self._own_queue_names())
            for queue, _granted in shared.memberships(self.broker, serving.exchange, self.client_id):
                shared.leave(self, queue, NO_METHOD)
            return False
        # its state: its queues, QoS 2 packet ids it holds (mqtt/qos2.py), shared subscriptions
        if any(queues.get(name) is not None for name in self._own_queue_names()):
            return True
        return bool(shared.memberships(self.broker, serving.exchange, self.client_id))

    def connack_properties(self, assigned):
        """What a version 5 CONNACK says (3.2.2.3): what hutch does not do, and the session's terms.
        (No Maximum QoS: QoS 2 is taken and delivered.)"""
        props = {
            packets.TOPIC_ALIAS_MAXIMUM: ALIASES_MOST,
            packets.RECEIVE_MAXIMUM: 65535,
            packets.MAXIMUM_PACKET_SIZE: self.conn.most_in,
            SESSION_EXPIRY_INTERVAL: self.expiry,
        }
        if assigned is not None:
            props[packets.ASSIGNED_CLIENT_IDENTIFIER] = assigned
        return props

    def start(self):
        """A session that was there goes on: its queues (and its shared subscriptions') are
        consumed again."""
        if self.broker.queues.get(own_queues.INBOUND_PREFIX + self.client_id) is not None:
            self.awaiting().start()
        if self.broker.queues.get(own_queues.OUTBOUND_PREFIX + self.client_id) is not None:
            self.qos2_deliveries().start()  # (first: what was under way goes on before anything new)
        for qos in QOSES:
            queue = self.broker.queues.get(self.queue_name(qos))
            if queue is not None:
                self._consume(queue, qos)
        for queue, granted in shared.memberships(self.broker, self.serving.exchange, self.client_id):
            self._consume(queue, granted, True)
        self._options_changed()
        self.redispatch()

    def expire_in(self, seconds):
        """A version 5 DISCONNECT's Session Expiry Interval, which replaces its CONNECT's
        (3.14.2.2.2): 0 ends the session with its connection, another keeps its queues that long
        (held to `[mqtt] max_session_expiry`). A session that was to end with its connection
        cannot be kept after all: a Protocol Error [MQTT-3.14.2-2]."""
        if seconds and not self.expiry:
            raise packets.Malformed(
                packets.PROTOCOL_ERROR, "a Session Expiry Interval at DISCONNECT for a session that had none"
            )
        self.expiry = min(seconds, self.serving.max_session_expiry)
        if self.expiry:  # (its queues' x-expires, as they were declared with; a restart reads the declaration's)
            for name in self._own_queue_names():
                queue = self.broker.queues.get(name)
                if queue is not None and queue.expires:
                    queue.expires = queue.arguments["x-expires"] = self.expiry * 1000

    def end(self):
        """The connection is gone: what was in flight goes back to its queue (delivered again,
        with DUP, to the session's next connection), and a session without an expiry ends."""
        broker = self.broker
        self.ended = True  # (nothing more is delivered to it: the requeued go to the next connection)
        if self._publishing is not None:
            stop_waiting(self._publishing)  # (a full queue it was held back by forgets it)
        for qos in QOSES:
            consumer = self.consumers_by_qos[qos]
            if consumer is not None:
                self.consumers_by_qos[qos] = None
                broker.cancel(consumer)
        consumers = self.shared
        if consumers is not NO_SHARED:
            self.shared = {}
        for consumer in consumers.values():
            broker.cancel(consumer)
        for pid in list(self.inflight):
            held = self.inflight.pop(pid)
            if held[0] is None:  # (RETAINED, a QoS 2 delivery's: nothing of a subscription's queue)
                continue
            queue, entry, consumer = held
            consumer.unacked -= 1
            broker.settle(queue, [entry], REQUEUE, self.stats)
        if self.awaiting_release is not None:
            self.awaiting_release.end(not self.expiry)
        if self.unfinished is not None:
            self.unfinished.end(not self.expiry)
        if not self.expiry:
            own_queues.drop(broker, [self.queue_name(qos) for qos in QOSES])
            for queue, _granted in shared.memberships(broker, self.serving.exchange, self.client_id):
                shared.leave(self, queue, NO_METHOD)

    # ------------------------------------------------------------ SUBSCRIBE, UNSUBSCRIBE

    def subscribe(self, packet_id, props, filters):
        sub_id = None
        given = props.get(SUBSCRIPTION_IDENTIFIER)
        if given is not None:
            if len(given) > 1 or given[0] == 0:
                raise packets.Malformed(packets.PROTOCOL_ERROR, "subscription identifier %r" % given)
            sub_id = given[0]
        codes = []
        started = []
        kept = []
        for topic_filter, opts in filters:
            code, existed = self._subscribe(topic_filter, opts, sub_id)
            codes.append(code)
            if code < 0x80:
                started.append(self.broker.queues.get(self.queue_name(code)))
                handling = (opts >> 4) & 3  # version 5's retain handling: 1, only if new; 2, none
                if handling == 0 or (handling == 1 and not existed):
                    kept.append((topic_filter, code))
        self._options_changed()
        self._after_journal(packets.suback(packet_id, codes, self.level))
        if kept or started:  # (after the SUBACK: the retained messages, then the queues')
            self._after_journal(lambda: self._subscribed(kept, sub_id, started))

    def _subscribed(self, kept, sub_id, started):
        for topic_filter, granted in kept:
            for topic, message, expires_at in retained.matching(self.broker, topic_filter):
                self._deliver_retained(topic, message, granted, sub_id, expires_at)
        for queue in started:
            if queue is not None:
                queue.dispatch()

    def _deliver_retained(self, topic, message, granted, sub_id, expires_at):
        """A retained message, with RETAIN set, at the lower of the subscription's QoS and its
        own; a QoS 1 one is held by packet id until its PUBACK like any delivery (its queue
        keeps it: nothing to settle), a QoS 2 one as any QoS 2 delivery."""
        qos = min(granted, (message.properties().get("headers") or {}).get("x-mqtt-publish-qos", 1))
        packet_id = 0
        if qos:
            packet_id = self._packet_id()
        if qos == 1:
            self.inflight[packet_id] = RETAINED
        props = self._properties(message, sub_id, expires_at)
        packet = packets.publish(topic, bytes(message.body()), qos, True, False, packet_id, props, self.level)
        if qos == 2:
            self.qos2_deliveries().send(packet_id, message, topic, packet)
        else:
            self.conn.send(packet)

    def _subscribe(self, topic_filter, opts, sub_id):
        """(the granted QoS, or the reason code the subscription is refused with; whether the
        session had a subscription with that filter)."""
        group, found = share_of(topic_filter)
        if not valid_filter(found):
            return TOPIC_FILTER_INVALID if self.level == V5 else 0x80, False
        granted = opts & 3
        key = binding_key(found)
        if len(key) > 255:
            return TOPIC_FILTER_INVALID if self.level == V5 else 0x80, False
        if group is not None:  # (QoS 1 at most: a group's queue has one consumer per member)
            return self._share(group, found, key, opts, min(granted, 1), sub_id)
        broker = self.broker
        who = self.conn.client
        exchange = self.serving.exchange
        arguments = with_filter(options.arguments(opts, sub_id), found)
        existed = False
        try:
            queue = self._queue(granted)
            for qos in QOSES:  # a filter lives in one binding: the latest's QoS and options
                for old in self._bindings(qos, key, found):
                    existed = True
                    if qos != granted or old.arguments != arguments:
                        topology.unbind(
                            broker,
                            who,
                            exchange,
                            old.destination.name,
                            key,
                            old.arguments,
                            NO_METHOD,
                            to_queue=True,
                        )
            topology.bind(broker, who, exchange, queue.name, key, arguments, NO_METHOD, to_queue=True)
            if self.consumers_by_qos[granted] is None:
                self._consume(queue, granted)
        except Refused as e:
            broker.log(
                "warning", "%s: MQTT subscription to '%s' refused: %s" % (self.conn.name, text(topic_filter), e.text)
            )
            return NOT_AUTHORIZED if self.level == V5 else 0x80, existed
        if opts & 4:
            self.serving.origins = True  # (from now on a publish says who sent it: mqtt/options.py)
        return granted, existed

    def _share(self, group, topic_filter, key, opts, granted, sub_id):
        """A shared subscription (mqtt/shared.py): (granted QoS or reason code, True: never a
        retained message at subscribe)."""
        if opts & 4:
            raise packets.Malformed(packets.PROTOCOL_ERROR, "no local on a shared subscription")
        try:
            extra = with_filter(options.arguments(opts, sub_id), topic_filter)
            queue, _was = shared.join(self, group, topic_filter, key, granted, extra, NO_METHOD)
            consumer = self.shared.get(queue.name)
            if consumer is not None and consumer.no_ack != (not granted):
                del self.shared[queue.name]
                self.broker.cancel(consumer)
                consumer = None
            if consumer is None:
                self._consume(queue, granted, True)
        except Refused as e:
            self.broker.log(
                "warning",
                "%s: MQTT shared subscription to '%s' refused: %s" % (self.conn.name, text(topic_filter), e.text),
            )
            return NOT_AUTHORIZED if self.level == V5 else 0x80, True
        return granted, True

    def _bindings(self, qos, key, topic_filter):
        """The bindings of the session's queue of that QoS to the MQTT exchange with this key,
        of this filter (`v1.2/x` and `v1/2/x` have one key)."""
        queue = self.broker.queues.get(self.queue_name(qos))
        if queue is None:
            return []
        exchange = self.serving.exchange
        return [
            b for b in queue.inbound if b.key == key and b.source.name == exchange and exact_filter(b) == topic_filter
        ]

    def _options_changed(self):
        queues = [self.broker.queues.get(self.queue_name(q)) for q in QOSES]
        queues.extend(consumer.queue for consumer in self.shared.values())
        optioned = self.optioned or options.Optioned()
        optioned.remake(self.serving.exchange, queues, self.client_id)
        if optioned.by_queue or self.optioned is not None:
            self.optioned = optioned if optioned.by_queue else None
        dotted = any(
            binding.arguments and FILTER_ARGUMENT in binding.arguments
            for queue in queues
            if queue is not None
            for binding in queue.inbound
        )
        if dotted != self.dotted:
            self.dotted = dotted
        if any(table and table.get("no-local") for found in optioned.by_queue.values() for _, table in found):
            self.serving.origins = True

    def _queue(self, qos):
        """The session's queue of that QoS, declared if it is not there (durable with an expiry
        when the session outlives its connection, else its connection's alone)."""
        name = self.queue_name(qos)
        queue = self.broker.queues.get(name)
        if queue is not None:
            return queue
        who = self.conn.client
        if self.expiry:
            arguments = {"x-expires": self.expiry * 1000}
            return topology.declare_queue(self.broker, who, name, durable=True, arguments=arguments)
        return topology.declare_queue(self.broker, who, name, exclusive=True)

    def _consume(self, queue, qos, in_group=False):
        tag = (b"mqtt-shared-qos%d" if in_group else b"mqtt-qos%d") % qos
        consumer = Consumer(self, tag, queue, not qos, False, self.window if qos else 0)
        self.broker.consume(self.conn.client, queue, consumer, NO_METHOD)
        if in_group:
            if self.shared is NO_SHARED:
                self.shared = {}
            self.shared[queue.name] = consumer
        else:
            self.consumers_by_qos[qos] = consumer

    def unsubscribe(self, packet_id, filters):
        codes = []
        broker = self.broker
        exchange = broker.exchange(self.serving.exchange)
        for topic_filter in filters:
            group, found = share_of(topic_filter)
            if group is not None:
                codes.append(self._unshare(group, found))
                continue
            key = binding_key(topic_filter)
            code = NO_SUBSCRIPTION_EXISTED
            for qos in QOSES:
                for binding in self._bindings(qos, key, topic_filter) if exchange is not None else ():
                    try:
                        topology.unbind(
                            broker, self.conn.client, exchange.name, binding.destination.name, key, binding.arguments, NO_METHOD, to_queue=True,
                        )  # fmt: skip
                        code = SUCCESS
                    except Refused as e:
                        broker.log(
                            "warning",
                            "%s: MQTT unsubscribe from '%s' refused: %s" % (self.conn.name, text(topic_filter), e.text),
                        )
                        code = NOT_AUTHORIZED
            codes.append(code)
        self._options_changed()
        self._after_journal(packets.unsuback(packet_id, codes, self.level))

    def _after_journal(self, ack):
        """A SUBACK or UNSUBACK (or what follows it: a function) of a session that outlives its
        connection goes once the journal holds the change (its queues, bindings): a power cut
        after it cannot take a subscription the client was told of (or bring back one it
        ended). Others go at once, as does everything after one that waits, in order."""
        journal = self.broker.journal
        publishing = self._publishing
        if (self.expiry and journal is not None and journal.synced < journal.seq) or (
            publishing and publishing.waiting
        ):
            self.publishing.after_sync(journal.seq if journal is not None else 0, ack)
        elif callable(ack):
            ack()
        else:
            self.conn.send(ack)

    def _unshare(self, group, topic_filter):
        queue = self.broker.queues.get(shared.queue_name(group, topic_filter))
        if queue is None:
            return NO_SUBSCRIPTION_EXISTED
        try:
            was = shared.leave(self, queue, NO_METHOD)  # (first: the queue may end with its consumer)
        except Refused as e:
            self.broker.log(
                "warning", "%s: MQTT unsubscribe from '%s' refused: %s" % (self.conn.name, text(topic_filter), e.text)
            )
            return NOT_AUTHORIZED
        consumer = self.shared.pop(queue.name, None)
        if consumer is not None:
            self.broker.cancel(consumer)
        return SUCCESS if was else NO_SUBSCRIPTION_EXISTED

    # ------------------------------------------------------------ deliveries (core/session.py)

    def can_deliver(self):
        conn = self.conn
        return not self.ended and conn.out_bytes < conn.high_water

    def deliver(self, consumer, queue, entry):
        message = entry[MESSAGE]
        broker = self.broker
        retain = False
        ids = None
        key = message.routing_key
        exact = carried_topic(message)  # (None: the routing key says the topic)
        if exact is not None or self.dotted or key.startswith(b"$"):
            # a binding key may have routed what no filter of the queue matches (mqtt/topics.py)
            if not wanted(queue, self.serving.exchange, exact or topic_of(key)):
                broker.delivered(queue, entry, True)
                return
        if self.optioned is not None and self.optioned.by_queue:  # (a session with version 5 subscription options)
            deliver, retain, ids = self.optioned.delivery(queue, message, exact or topic_of(key), self.client_id)
            if not deliver:  # no local: its own publish
                broker.delivered(queue, entry, True)
                return
        qos = 0 if consumer.no_ack else 1
        if qos and not message.persistent() and message.has_header(QOS_HEADER):
            qos = 0  # an MQTT QoS 0 publish (x-mqtt-publish-qos 0): delivered at most once
        elif qos and consumer is self.consumers_by_qos[2]:
            qos = self.qos2_deliveries().qos_of(message)
        packet_id = 0
        if qos == 1:
            packet_id = self._packet_id()
            self.inflight[packet_id] = (queue, entry, consumer)
            consumer.unacked += 1
            if message.journal_id:
                broker.delivered(queue, entry, False)
        elif qos == 0:
            broker.delivered(queue, entry, True)
        else:  # (a QoS 2 delivery takes its packet id with it: mqtt/qos2_out.py)
            packet_id = self._packet_id()
        serving = self.serving
        level = self.level
        # A QoS 0 delivery to a client below version 5 (3.1 or 3.1.1: no packet id, no
        # properties) is the same octets for every such subscriber of the message: made once,
        # for the first of them, and shared by the rest, as Mosquitto shares one stored message.
        # The Serving keeps the last one made, (message, PUBLISH), from the first such delivery
        # on (a board that makes none holds no attribute for it).
        plain = not qos and not retain and level != V5
        last = getattr(serving, "last_plain", None) if plain else None
        if last is not None and last[0] is message:
            packet = last[1]
        else:
            props = self._properties(message, ids, entry[EXPIRES_AT])
            if exact is not None:
                topic = packets.binary(exact)
            else:
                topic = serving.topics.get(key) or remember(serving.topics, key, packets.binary(topic_of(key)))
            first = PUBLISH_FIRST | qos << 1 | (8 if entry[REDELIVERED] and qos == 1 else 0) | (1 if retain else 0)
            packet = packets.publish_parts(first, topic, packet_id, props, level, message.body())
            if plain:
                serving.last_plain = (message, packet)
        if self.most_out and len(packet) > self.most_out:
            if qos == 2:
                broker.delivered(queue, entry, True)
                packet_id = 0
            self._too_large(queue, packet_id, len(packet))
            return
        if qos == 2:
            self.qos2_deliveries().send(packet_id, message, exact or topic_of(key), packet, queue, entry)
            return
        self.conn.send(packet)

    def _properties(self, message, ids, expires_at=None):
        """A version 5 delivery's properties: the message's (a Message Expiry Interval less the
        time it waited: expires_at, the broker's ms clock), and its subscription identifiers
        (one, or a list; None: none). None for an older client."""
        if self.level != V5:
            return None
        props = properties_5(message, None if expires_at is None else expires_at - self.broker.now)
        if ids is not None:
            props = dict(props or ())
            props[SUBSCRIPTION_IDENTIFIER] = ids
        return props

    def _too_large(self, queue, packet_id, size):
        """A delivery larger than the version 5 client's Maximum Packet Size: not sent, and taken
        as delivered (MQTT 3.1.2.11.4), said once a session."""
        if packet_id:
            self.acked(packet_id)
        if not self.too_large_said:
            self.too_large_said = True
            self.broker.log(
                "warning",
                "%s: a message of queue '%s' (%d octets as a PUBLISH) is larger than the MQTT client's "
                "Maximum Packet Size (%d): not delivered (said once a session)"
                % (self.conn.name, text(queue.name), size, self.most_out),
            )

    def _packet_id(self):
        inflight = self.inflight
        pid = self.next_id
        while pid in inflight:
            pid = pid % 65535 + 1
        self.next_id = pid % 65535 + 1
        return pid

    def acked(self, packet_id):
        """The client's PUBACK: the delivery is settled (one it does not hold is let be)."""
        held = self.let_go(packet_id)
        if held is not None:
            queue = held[0]
            self.broker.settle(queue, [held[1]], ACCEPT, self.stats)
            queue.dispatch()

    def let_go(self, packet_id):
        """(acked, and mqtt/runs.py for a read's PUBACKs) The QoS 1 delivery a PUBACK of packet_id
        settles, out of flight: (queue, entry, consumer), or None where there is none."""
        held = self.inflight.get(packet_id)
        if held is None or held[0] is None:  # (a QoS 2 delivery's id: PUBACK is not its answer)
            if held is RETAINED:
                del self.inflight[packet_id]
            return None
        del self.inflight[packet_id]
        held[2].unacked -= 1
        return held

    def deliver_records(self, consumer, stream, cursor, room):
        return 0, None  # (a session's queues are never streams)

    def server_cancel(self, consumer):
        """Its queue was deleted (by an operator, or its expiry): the session cannot go on."""
        for qos in QOSES:
            if self.consumers_by_qos[qos] is consumer:
                self.consumers_by_qos[qos] = None
        if self.shared.get(consumer.queue.name) is consumer:
            del self.shared[consumer.queue.name]  # (an operator deleted a shared subscription's queue)
            return
        self.conn.refuse(UNSPECIFIED_ERROR, "the session's queue '%s' was deleted" % text(consumer.queue.name))

    def redispatch(self):
        for consumer in self.consumers_by_qos:
            if consumer is not None:
                consumer.queue.dispatch()
        for consumer in self.shared.values():
            consumer.queue.dispatch()

    def unsettled(self):
        return [(held[0], held[1]) for held in self.inflight.values() if held[0] is not None]
