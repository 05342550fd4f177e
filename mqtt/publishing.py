"""What an MQTT client publishes, as a message of the broker's, and its acknowledgement.

A PUBLISH goes to the MQTT exchange (`[mqtt] exchange`, amq.topic) with its topic as the
routing key (mqtt/topics.py), as RabbitMQ maps it:

    MQTT                                AMQP 0-9-1 (the stored form, core/message.py)
    QoS                                 header x-mqtt-publish-qos; QoS 1 and 2
                                        persistent (delivery-mode 2), QoS 0 not
    DUP                                 header x-mqtt-dup
    5.0 user properties                 headers (name: value; x-sensor-seq as an integer)
    JSON payload fields [mqtt]          headers x-sensor-id, x-sensor-seq (mqtt/identity.py)
      sensor_id_field, sensor_seq_field
    5.0 content type                    content-type
    a topic holding a dot               header x-mqtt-topic: the topic (mqtt/topics.py)
    5.0 response topic                  reply-to (as a routing key); one holding a dot, also
                                        header x-mqtt-response-topic
    5.0 correlation data                correlation-id
    5.0 message expiry interval (s)     expiration (ms); to a subscriber, what is left of it
    5.0 payload format indicator        header x-mqtt-payload-format (1: UTF-8 text)

and back (properties_5) for a version 5 subscriber. A QoS 1 PUBLISH is answered with PUBACK
once every durable queue that took it has it on disk (the journal's sync), as a publisher
confirm is; a QoS 2 one with PUBREC at the same point, its packet id then held until the
client's PUBREL (answered PUBCOMP), so a PUBLISH repeated meanwhile is not taken twice. A
version 5 client is told in the acknowledgement's reason code when no queue took it (0x10)
or it may not publish there (0x87).
"""

from ..codec.errors import Refused
from ..codec.wire import encode_properties, text
from ..core import counters
from ..core.broker import HELD, REFUSED, ROUTED
from ..core.content import body_tail, header_tail, tails
from ..core.message import Message
from . import own_queues, packets, retained
from .packets import (
    CONTENT_TYPE,
    CORRELATION_DATA,
    MESSAGE_EXPIRY_INTERVAL,
    NO_MATCHING_SUBSCRIBERS,
    NOT_AUTHORIZED,
    PACKET_IDENTIFIER_NOT_FOUND,
    PAYLOAD_FORMAT_INDICATOR,
    PUBACK,
    PUBCOMP,
    PUBREC,
    QUOTA_EXCEEDED,
    RESPONSE_TOPIC,
    SUBSCRIPTION_IDENTIFIER,
    SUCCESS,
    TOPIC_ALIAS,
    TOPIC_ALIAS_INVALID,
    TOPIC_NAME_INVALID,
    USER_PROPERTY,
    V5,
    Malformed,
)
from .topics import TOPIC_HEADER, remember, routing_key, topic_of, valid_topic

QOS_HEADER = b"\x12x-mqtt-publish-qos"  # (as a shortstr: Message.has_header looks for it so)
ALIASES_MOST = 16  # topic aliases a version 5 client may set (its Topic Alias Maximum)
FORMAT_HEADER = "x-mqtt-payload-format"
RESPONSE_HEADER = "x-mqtt-response-topic"
KEPT_HEADERS = ("x-mqtt-publish-qos", "x-mqtt-dup", FORMAT_HEADER, TOPIC_HEADER, RESPONSE_HEADER)
PLAIN = {}  # (QoS, DUP, carried topic or None) -> the encoded properties of a publish without version 5 properties  # not user properties to a version 5 subscriber


class Publishing:
    """A session's publisher (core/session.py's publisher: client, confirming, hold_for,
    resume, direct_reply_to)."""

    confirming = False  # held back while a queue is full or publishers are blocked (MQTT has no nack)

    @property
    def stats(self):
        """(As a publisher) MQTT's counters (core/counters.py)."""
        return self.session.serving.stats

    zero_said = False  # a 3.1.1 client's packet id 0 was logged
    aliases = None  # a version 5 client's topic aliases, once it sets one: number -> topic

    def __init__(self, session):
        self.session = session
        self.conn = session.conn
        self.broker = session.broker
        self.client = session.conn.client
        self.exchange = exchange = session.serving.exchange
        self.route_start = bytes((len(exchange),)) + exchange  # (a message's route: exchange and key as shortstrs)
        self.routes = session.serving.routes
        self.waiting = []  # [journal seq, acknowledgement packet]: sent once the journal has synced
        self.held_by = None

    # ------------------------------------------------------------ PUBLISH

    def publish(self, first, buf, start, end):
        """A PUBLISH packet, taken and answered; True if a full queue held it back unread."""
        conn = self.conn
        level = conn.level
        qos = (first >> 1) & 3
        topic, packet_id, props, payload = packets.read_publish(first, buf, start, end, level)
        if qos and not packet_id:
            if qos == 2 or level == V5:
                raise Malformed(packets.PROTOCOL_ERROR, "a QoS %d PUBLISH with packet id 0" % qos)
            # umqtt.simple's packet id wraps from 65535 to 0 (micropython-lib#94): a sensor that
            # has published that often is answered, not hung up on; said once a connection
            if not self.zero_said:
                self.zero_said = True
                self.broker.log(
                    "warning",
                    "%s: MQTT client '%s' sent packet id 0 (taken, as umqtt's wrap makes it)"
                    % (conn.name, text(self.session.client_id)),
                )
        if props:
            topic = self._aliased(topic, props)
            if SUBSCRIPTION_IDENTIFIER in props:
                raise Malformed(packets.PROTOCOL_ERROR, "a PUBLISH from a client with a subscription identifier")
        awaiting = self.session.awaiting() if qos == 2 else None
        if awaiting is not None and packet_id in awaiting:
            conn.send(packets.ack(PUBREC, packet_id, SUCCESS, level))  # a repeat: taken once already
            return
        key, route, exact = self.routes.get(topic) or self._route(topic)
        code, seq = self.send(key, payload, qos, bool(first & 8), props, first & 1, route, exact)
        if code is None:
            return True  # held back by a full queue: read again once it has room (hold_for)
        if qos == 2 and code < 0x80:  # held, on disk right after the message, until the PUBREL
            seq = max(seq, awaiting.hold(packet_id))
        if first & 1 and code < 0x80:  # RETAIN: kept for the subscriptions to come (mqtt/retained.py)
            kept = retained.retain(self.broker, topic, properties_091(qos, False, props), payload)
            if kept is None:
                self.broker.log(
                    "warning", "%s: MQTT retained message to '%s' not kept: topic too long" % (conn.name, text(topic))
                )
            elif kept > seq:
                seq = kept
        if qos:
            self.stats[counters.CONFIRMED] += 1
        if qos == 1:
            self.after_sync(seq, packets.ack(PUBACK, packet_id, code, level))
        elif qos == 2:
            self.after_sync(seq, packets.ack(PUBREC, packet_id, code, level))
        if self.broker.flow.blocked:
            conn.pause()

    def _route(self, topic):
        """(routing key, route octets, the topic if the key cannot say it, else None) of a topic
        not published lately, checked."""
        if not valid_topic(topic):
            why = "is empty" if not topic else "holds a wildcard (+ or #): a PUBLISH names one topic"
            raise Malformed(TOPIC_NAME_INVALID, "topic name '%s' %s" % (text(topic), why))
        key = routing_key(topic)
        if len(key) > 255:
            raise Malformed(TOPIC_NAME_INVALID, "topic name longer than 255 octets as a routing key")
        exact = topic if b"." in topic else None  # (x-mqtt-topic: mqtt/topics.py)
        return remember(self.routes, topic, (key, self.route_start + bytes((len(key),)) + key, exact))

    def _aliased(self, topic, props):
        """The topic of a version 5 PUBLISH that sets or uses a topic alias (3.3.2.3.4)."""
        alias = props.get(TOPIC_ALIAS)
        if alias is None:
            return topic
        if not 0 < alias <= ALIASES_MOST:
            raise Malformed(TOPIC_ALIAS_INVALID, "topic alias %d (at most %d)" % (alias, ALIASES_MOST))
        if topic:
            if self.aliases is None:
                self.aliases = {}
            self.aliases[alias] = topic
            return topic
        found = self.aliases.get(alias) if self.aliases is not None else None
        if found is None:
            raise Malformed(packets.PROTOCOL_ERROR, "topic alias %d was never set" % alias)
        return found

    def send(self, key, payload, qos, dup, props, retain=False, route=None, exact=None):
        """One publish through the broker: (reason code, the journal sequence its acknowledgement
        waits for, or 0); (None, 0) if a full queue held it back (hold_for). exact: the topic,
        where its routing key cannot say it."""
        global _identity
        broker = self.broker
        exchange = self.exchange
        if route is None:
            route = self.route_start + bytes((len(key),)) + key
        identity = None
        fields = self.session.serving.sensor_fields
        if fields is not None and fields[2] in payload and not _identified(props):
            if _identity is None:
                from . import identity as _identity
            identity = _identity.from_json(payload, fields)
        if props:
            parts = tails(properties_091(qos, dup, props, identity, exact), payload)
        else:
            encoded = PLAIN.get((qos, dup, exact)) or plain_properties(qos, dup, exact)
            if identity:
                encoded = _identity.with_identity(encoded, identity)
            parts = header_tail(encoded, len(payload)), body_tail(payload), len(payload)
        message = Message(exchange, key, route, *parts)
        if qos == 2:
            message.paired = 8  # (core/store/journal.py PAIRED: its packet id's record follows)
        if self.session.serving.origins:
            message.origin = self.session.client_id
        if retain:
            message.retain = True
        try:
            target, message = broker.admit(self, exchange, message)
        except Refused as e:
            return self._refused(e, key), 0
        result = broker.publish(target, message, self, None, identity)  # (the dedup reads it here)
        if result & HELD:
            return None, 0
        if qos:  # (Broker.publish counts a confirming publisher's; this one is held back instead)
            self.stats[counters.RECEIVED_CONFIRM] += 1
        seq = own_queues.waits_for(broker, result)
        if result & REFUSED and qos:
            return self._full(key), seq
        if not result & ROUTED:
            return NO_MATCHING_SUBSCRIBERS, seq
        return SUCCESS, seq

    def _full(self, key):
        """A publish a queue refused (full: x-overflow reject-publish, a bridge class's budget) or
        the broker did (short of memory or disk), as a publisher's nack: a version 5 client is
        told QUOTA_EXCEEDED in its acknowledgement; an older one, whose PUBACK cannot say no,
        is hung up on, so that it sends the message again later rather than count it taken."""
        why = "publish to '%s' refused: a queue is full, or the broker short of memory or disk" % text(topic_of(key))
        if self.conn.level == V5:
            return QUOTA_EXCEEDED
        raise Malformed(QUOTA_EXCEEDED, why)

    def _refused(self, e, key):
        """A publish the broker refused (no permission, a missing exchange): a version 5 client
        is told in its acknowledgement (or, at QoS 0, in a DISCONNECT); an older one, whose
        protocol has no word for it, is hung up on, as RabbitMQ does."""
        conn = self.conn
        why = "publish to '%s' refused: %s" % (text(topic_of(key)), e.text)
        if conn.level == V5:
            self.broker.log("warning", "%s: MQTT %s" % (conn.name, why))
            return NOT_AUTHORIZED
        raise Malformed(NOT_AUTHORIZED, why)

    def after_sync(self, seq, ack):
        """ack (or a QoS 2 delivery's PUBLISH or PUBREL: mqtt/session.py) sent once the journal
        has synced up to seq (0: now), after those due before it (MQTT 4.6: in the order of what
        they answer)."""
        journal = self.broker.journal
        if self.waiting:
            seq = max(seq, self.waiting[-1][0])
        if seq and journal is not None and journal.synced < seq:
            self.waiting.append([seq, ack])
            self.broker.wait_for_journal(self.conn)
        else:
            self._send(ack)

    def _send(self, ack):
        if callable(ack):  # (what follows a SUBACK: mqtt/session.py _after_journal)
            ack()
        else:
            self.conn.send(ack)

    def flush_acks(self):
        """The acknowledgements whose messages the journal has synced (in the order they were due)."""
        if not self.waiting:
            return
        synced = self.broker.journal.synced
        waiting = self.waiting
        done = 0
        while done < len(waiting) and waiting[done][0] <= synced:
            self._send(waiting[done][1])
            done += 1
        self.waiting = waiting[done:]
        if self.waiting:
            self.broker.wait_for_journal(self.conn)

    def released(self, packet_id):
        """PUBREL: the QoS 2 exchange for packet_id is over. The PUBCOMP waits until the id's
        release is on disk: after it the client may use the id again, and a broker that came
        back from a crash still holding it would take the new message for a repeat."""
        awaiting = self.session.awaiting_release
        code = SUCCESS if awaiting is not None and awaiting.release(packet_id) else PACKET_IDENTIFIER_NOT_FOUND
        journal = self.broker.journal
        seq = journal.seq + 1 if code == SUCCESS and journal is not None else 0  # (written with the next group commit)
        self.after_sync(seq, packets.ack(PUBCOMP, packet_id, code, self.conn.level))

    def publish_will(self, will):
        topic, payload, qos, retain, props = will
        try:
            exact = topic if b"." in topic else None
            code, _seq = self.send(routing_key(topic), payload, qos, False, props, retain, None, exact)
            if retain and code < 0x80:
                retained.retain(self.broker, topic, properties_091(qos, False, props), payload)
        except Malformed as e:
            self.broker.log("warning", "%s: MQTT will not published: %s" % (self.conn.name, e.args[1]))

    # ------------------------------------------------------------ the publisher's contract (core/session.py)

    def hold_for(self, queue):
        """A full queue holds this publisher back: the PUBLISH stays unread (publish() returns
        True), read again once the queue has room (resume). A will is taken: its client is gone."""
        if self.conn.closed:
            return False
        queue.hold(self)
        self.conn.pause()
        return True

    def resume(self):
        self.held_by = None
        self.conn.resume_reading()

    def direct_reply_to(self, message):
        from ..codec.errors import PRECONDITION_FAILED

        raise Refused(PRECONDITION_FAILED, "direct reply-to is not served to MQTT clients")


def plain_properties(qos, dup, exact):
    """The encoded properties of a publish without version 5 properties (most publishes), made
    once for each QoS, DUP and carried topic (exact: the topic, where its routing key cannot
    say it) and kept in PLAIN."""
    encoded = PLAIN.get((qos, dup, exact))
    if encoded is None:
        encoded = encode_properties(properties_091(qos, dup, None, None, exact))
        if exact is None:
            PLAIN[qos, dup, None] = encoded
        else:  # (one per topic holding a dot, as many as remember keeps)
            remember(PLAIN, (qos, dup, exact), encoded)
    return encoded


# mqtt/identity.py, once the first reading that says who sent it has loaded it (a board whose
# sensors send no identity never does): kept here, as an import statement at each such reading
# cost it about 1 µs of the import system's lookups. Its two readers bind it themselves: a
# loader function of its own cost the board's first MQTT connection 48 B.
_identity = None


def _identified(props):
    """Whether a version 5 publish names its reading in user properties (mqtt/identity.py)."""
    if props:
        for name, _ in props.get(USER_PROPERTY, ()):
            if name == b"x-sensor-seq":
                return True
    return False


def properties_091(qos, dup, props, identity=None, topic=None):
    """The stored form's properties of an MQTT publish (the module's docstring has the table). A
    QoS 2 publish says QoS 2, where RabbitMQ, which delivers no QoS 2, says 1: a QoS 2
    subscriber is given it at QoS 2 (mqtt/session.py). identity: the headers a JSON payload
    named its reading with (mqtt/identity.py). topic: the topic, where the routing key cannot
    say it (mqtt/topics.py)."""
    global _identity
    headers = {"x-mqtt-publish-qos": qos, "x-mqtt-dup": dup}
    if topic is not None:
        headers[TOPIC_HEADER] = topic
    found = {"headers": headers, "delivery-mode": 2 if qos else 1}
    if identity:
        headers.update(identity)
    if props:
        for name, value in props.get(USER_PROPERTY, ()):
            if name == b"x-sensor-seq":
                if _identity is None:
                    from . import identity as _identity
                value = _identity.user_sequence(value)
            headers[name.decode()] = value
        if CONTENT_TYPE in props:
            found["content-type"] = props[CONTENT_TYPE]
        if RESPONSE_TOPIC in props:
            response = props[RESPONSE_TOPIC]
            found["reply-to"] = routing_key(response)
            if b"." in response:
                headers[RESPONSE_HEADER] = response
        data = props.get(CORRELATION_DATA)
        if data is not None:
            if len(data) <= 255:
                found["correlation-id"] = data
            else:
                headers["x-correlation-id"] = data
        expiry = props.get(MESSAGE_EXPIRY_INTERVAL)
        if expiry is not None:
            found["expiration"] = b"%d" % (expiry * 1000)
        if props.get(PAYLOAD_FORMAT_INDICATOR):
            headers[FORMAT_HEADER] = 1
    return found


def properties_5(message, left_ms=None):
    """A version 5 PUBLISH's properties for a message of the broker's (the table, read back).
    left_ms: how long its entry has left before it expires (core/session.py EXPIRES_AT - now),
    which a Message Expiry Interval says rather than the one published (MQTT 3.3.2.3.3)."""
    if not message.flags() & 0xA700:  # none of content-type, headers, correlation-id, reply-to, expiration
        return None
    props = {}
    found = message.properties()
    value = found.get("content-type")
    if value is not None:
        props[CONTENT_TYPE] = value
    value = found.get("reply-to")
    if value is not None:
        exact = (found.get("headers") or {}).get(RESPONSE_HEADER)
        props[RESPONSE_TOPIC] = bytes(exact) if exact is not None else topic_of(value)
    value = found.get("correlation-id")
    if value is not None:
        props[CORRELATION_DATA] = value
    value = found.get("expiration")
    if value is not None:
        try:
            left = int(value) if left_ms is None else min(int(value), max(0, left_ms))
            props[MESSAGE_EXPIRY_INTERVAL] = (left + 999) // 1000
        except ValueError:
            pass
    user = []
    for name, value in (found.get("headers") or {}).items():
        if name in KEPT_HEADERS:
            if name == FORMAT_HEADER and value:
                props[PAYLOAD_FORMAT_INDICATOR] = 1
            continue
        if isinstance(value, (bytes, bytearray)):
            user.append((name, bytes(value)))
        elif isinstance(value, str):
            user.append((name, value))
        elif isinstance(value, (bool, int, float)):
            user.append((name, str(value).lower() if isinstance(value, bool) else str(value)))
    if user:
        props[USER_PROPERTY] = user
    return props or None
