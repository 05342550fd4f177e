"""The client side of MQTT 3.1.1 and 5.0, sans-IO: a bridge's link to an MQTT broker (AWS IoT
Core, HiveMQ, Mosquitto...), driven by server/bridges/driver.py as it drives the AMQP clients
(client/protocol.py, amqp10/client.py). The packets are mqtt/packets.py's, the mapping of
messages mqtt/publishing.py's and mqtt/topics.py's: one implementation of each, both sides.

In the style of h11: no socket and no clock of its own (the time comes in, in milliseconds),
bytes in, events and bytes out.

    p = Protocol(max_packet=65536, level=V311)
    p.connect(now, client_id, user, password, keep_alive, session_expiry, topic, filters)
    loop:
        write every p.data_to_send()
        n = sock.readinto(p.read_buffer()); p.received(n)   # or p.receive_data(data)
        while (event := p.next_event()) is not None: handle it
        p.tick(now) < 0: the broker said nothing for one and a half keep-alives (it is gone)
    up:   p.room(), then p.forward(exchange, routing_key, header_tail, body_tail, mandatory):
          one message as a QoS 1 PUBLISH, numbered from 1 on each connection
    down: the subscriptions (filters) are made after CONNACK; each PUBLISH that comes is a
          delivery, PUBACKed once the bridge acks it (p.send)

A persistent session: CONNECT with clean session 0 (3.1.1) or clean start 0 and a session
expiry (5.0), so the broker keeps a down bridge's subscription and its messages while the
link is down. p.channel_open is true once the broker accepted the CONNECT (and the
subscriptions, down).

Events, in the bridge's words (codec/upstream.py): accepted, the PUBACK of the message
numbered seq (5.0: any reason code below 0x80, "no matching subscribers" included: the broker
took it); rejected, a 5.0 PUBACK with an error (0x87 not authorized...); delivered, a PUBLISH
as the down machine takes it: to `exchange` (amq.topic, as this broker's MQTT front end
publishes) with the topic as routing key, the properties mapped as mqtt/publishing.py maps a
client's PUBLISH; ended, when the login was refused, the broker disconnected, or sent what is
not MQTT.

MicroPython-clean: a board's bridge to an MQTT cloud runs it (imported only by such a bridge).
"""

from ..codec.upstream import ACCEPTED, DELIVERED, ENDED, REJECTED
from ..codec.upstream_client import NO_LIMIT, Upstream
from ..codec.wire import text
from ..core.content import tails
from ..core.message import Message
from . import packets
from .packets import (
    CONNACK,
    DISCONNECT,
    PINGREQ,
    PINGRESP,
    PUBACK,
    PUBLISH,
    REASON_STRING,
    RECEIVE_MAXIMUM,
    SESSION_EXPIRY_INTERVAL,
    SUBACK,
    V5,
    Malformed,
)
from .publishing import properties_091, properties_5
from .topics import carried_topic, routing_key, topic_of

MAX_IN_FLIGHT = 65535  # packet ids: what may be unacknowledged at once
PINGREQ_PACKET = bytes((PINGREQ << 4, 0))
LOCAL_EXCHANGE = b"amq.topic"  # where a delivery goes unless the bridge names another
CONNACK_CODES = {1: "unacceptable protocol version", 2: "client identifier rejected", 3: "server unavailable",
                 4: "bad user name or password", 5: "not authorized"}  # fmt: skip
(CLOSED, CONNECTING, RUNNING) = range(3)


class Protocol(Upstream):
    def __init__(self, max_packet=65536, level=packets.V311):
        self.max_packet = self._most = max(512, max_packet)  # the largest packet we take (and send)
        self._rx = bytearray(self.max_packet)
        self._rxm = memoryview(self._rx)
        self._pos = self._n = 0
        self._heard = False
        self.level = level
        self._out = []
        self._events = []
        self.state = CLOSED
        self.channel_open = False
        self.awaiting = 0  # (what the bridge's driver asks of a protocol: no reply is awaited)
        self.in_flight = []  # (up) seqs sent, not yet acknowledged
        self._ids = {}  # packet id -> seq (up) or delivery tag -> packet id (down)
        self.next_id = 0
        self.seq = 0
        self.receive_max = MAX_IN_FLIGHT
        self.filters = None
        self.delivered = 0  # (down) the last delivery's tag
        self.keep_alive_ms = 0
        self._sent_at = self._heard_at = 0
        self._spoke = False

    def connect(self, now, client_id, user, password, keep_alive, session_expiry, topic=None, filters=None,
                exchange=None, clean=False):  # fmt: skip
        """Queue the CONNECT of a persistent session (clean: of a clean one, which the broker
        keeps nothing of: a probe's). topic: the template of an up link's topics
        ("{routing_key}", "{exchange}" and "{client_id}" filled in; the routing key as a topic,
        `.` as `/`); filters: a down link's subscriptions (QoS 1), its deliveries to exchange
        (default amq.topic)."""
        props = {SESSION_EXPIRY_INTERVAL: 0 if clean else session_expiry} if self.level == V5 else None
        self._send(
            packets.connect(
                client_id, clean, keep_alive, user or None, password if user else None, level=self.level, props=props
            )
        )
        self.client_id = client_id.encode() if isinstance(client_id, str) else client_id
        self.template = (topic or "{routing_key}").encode()
        self.filters = filters
        self.exchange = exchange.encode() if isinstance(exchange, str) else exchange or LOCAL_EXCHANGE
        self.keep_alive_ms = keep_alive * 1000
        self._sent_at = self._heard_at = now
        self.state = CONNECTING
        self.channel_open = False

    def close(self, why=None):
        """DISCONNECT (a clean end: the broker keeps the session, drops no will)."""
        if self.state != CLOSED:
            self._send(bytes((DISCONNECT << 4, 0)))
        self.channel_open = False

    # -- output ---------------------------------------------------------------------------

    def tick(self, now):
        """A PINGREQ when we sent nothing for half the keep-alive. How long (ms) the caller may
        wait before calling again; -1 when nothing came for one and a half keep-alives."""
        self._clock(now)
        period = self.keep_alive_ms
        if not period or self.state == CLOSED:
            return NO_LIMIT
        if now - self._heard_at > period + period // 2:
            return -1
        half = period // 2
        if self.state == RUNNING and now - self._sent_at >= half:
            self._send(PINGREQ_PACKET)
            self._sent_at = now
        return max(0, half - (now - self._sent_at))

    # -- up: messages sent -----------------------------------------------------------------

    def room(self):
        """How many messages may go now: the broker's receive maximum (5.0), less what is in
        flight."""
        if not self.channel_open or self.filters:
            return 0
        return max(0, self.receive_max - len(self.in_flight))

    def forward(self, exchange, routing_key, header_tail, body_tail, mandatory=False):
        """One message, as a broker keeps it (core/message.py), as a QoS 1 PUBLISH to its topic
        (version 5: the properties mqtt/publishing.py gives a subscriber, the headers as user
        properties). Its number (seq)."""
        size = len(body_tail) - 5 if body_tail is not None else 0
        payload = body_tail[4:-1] if body_tail is not None else b""
        message = Message(_bytes(exchange), _bytes(routing_key), None, header_tail, body_tail, size)
        exact = carried_topic(message)  # (an MQTT publish's topic holding a dot: mqtt/topics.py)
        topic = (
            self.template.replace(b"{routing_key}", exact or topic_of(message.routing_key))
            .replace(b"{exchange}", message.exchange)
            .replace(b"{client_id}", self.client_id)
        )
        props = None
        if self.level == V5:
            props = properties_5(message)
        packet_id = self._packet_id()
        self.seq += 1
        self._ids[packet_id] = self.seq
        self.in_flight.append(self.seq)
        self._send(packets.publish(topic, bytes(payload), 1, False, False, packet_id, props, self.level))
        return self.seq

    def _packet_id(self):
        ids = self._ids
        n = self.next_id
        while True:
            n = n % MAX_IN_FLIGHT + 1
            if n not in ids:
                self.next_id = n
                return n

    # -- down: deliveries acked ------------------------------------------------------------

    def ack(self, tag, multiple=False):
        """Deliveries held here as promised (the down machine's to_ack, server/bridges/driver.py): the
        PUBACK of tag, or of every delivery up to it, in order."""
        self._puback(tag, multiple, packets.SUCCESS)

    def nack(self, tag, requeue):
        """A delivery refused here: without requeue (no local queue takes it) PUBACKed too (5.0:
        "no matching subscribers"); with requeue nothing is sent: the link ends and the broker
        sends it again on the next one."""
        if not requeue:
            self._puback(tag, False, packets.NO_MATCHING_SUBSCRIBERS)

    def _puback(self, tag, multiple, code):
        ids = self._ids
        for held in sorted(ids):
            if held > tag:
                break
            if held == tag or multiple:
                self._send(packets.ack(PUBACK, ids.pop(held), code, self.level))

    # -- input ----------------------------------------------------------------------------

    def _step(self):
        """Read one packet (codec/readbuffer.py Upstream): False when it has not all arrived."""
        if self.state == CLOSED:
            return False
        buf = self._rxm[: self._n]
        try:
            found = packets.split(buf, self._pos, self.max_packet)
            if found is None:
                return False
            first, body, end = found
            self._pos = end
            self._packet(first, buf, body, end)
        except Malformed as e:
            self._end("upstream sent what is not MQTT: %s" % e.args[1])
        return True

    def _packet(self, first, buf, pos, end):
        kind = first >> 4
        level = self.level
        if kind == PUBACK:
            packet_id, code = packets.read_ack(buf, pos, end, level)
            seq = self._ids.pop(packet_id, None)
            if seq is None:
                return  # (not ours: a PUBACK the session held from before)
            self.in_flight.remove(seq)
            if code < 0x80:
                self._events.append((ACCEPTED, seq, False))
            else:
                self._events.append((REJECTED, seq, False, "PUBACK 0x%02x%s" % (code, _reason(buf, pos, end))))
        elif kind == PUBLISH:
            self._publish(first, buf, pos, end)
        elif kind == CONNACK:
            self._connack(buf, pos, end)
        elif kind == SUBACK:
            self._suback(buf, pos, end)
        elif kind == DISCONNECT:
            code, props = packets.read_disconnect(buf, pos, end, level)
            reason = props.get(REASON_STRING)
            self._end("upstream disconnected: 0x%02x%s" % (code, ": " + text(reason) if reason else ""))
        elif kind != PINGRESP:
            raise Malformed(packets.PROTOCOL_ERROR, "a %s packet from a server" % packets.NAMES[kind])

    def _connack(self, buf, pos, end):
        if end - pos < 2:
            raise Malformed(packets.MALFORMED_PACKET, "a CONNACK of %d octets" % (end - pos))
        code = buf[pos + 1]
        if self.level == V5:
            props = packets.read_properties(buf, pos + 2, end)[0]
            self.receive_max = min(MAX_IN_FLIGHT, props.get(RECEIVE_MAXIMUM, MAX_IN_FLIGHT))
            if code >= 0x80:
                reason = props.get(REASON_STRING)
                self._end("login refused: CONNACK 0x%02x%s" % (code, ": " + text(reason) if reason else ""))
                return
        elif code:
            self._end("login refused: CONNACK %d (%s)" % (code, CONNACK_CODES.get(code, "refused")))
            return
        self.state = RUNNING
        if self.filters:
            self._send(packets.subscribe(1, [(f, 1) for f in self.filters], self.level))
            self.awaiting = 1
        else:
            self.channel_open = True

    def _suback(self, buf, pos, end):
        packet_id, pos = packets.read_u16(buf, pos, end)
        if self.level == V5:
            pos = packets.read_properties(buf, pos, end)[1]
        codes = bytes(buf[pos:end])
        for topic_filter, code in zip(self.filters or (), codes):
            if code >= 0x80:
                self._end("upstream refused the subscription to '%s': 0x%02x" % (text(topic_filter), code))
                return
        self.awaiting = 0
        self.channel_open = True

    def _publish(self, first, buf, pos, end):
        """A delivery (down): to the local exchange, its topic as routing key."""
        topic, packet_id, props, payload = packets.read_publish(first, buf, pos, end, self.level)
        qos = (first >> 1) & 3
        self.delivered += 1
        tag = self.delivered
        if qos:
            self._ids[tag] = packet_id
        exact = topic if b"." in topic else None  # (carried: mqtt/topics.py)
        header_tail, body_tail, size = tails(properties_091(qos, bool(first & 8), props, None, exact), payload)
        self._events.append((DELIVERED, tag, self.exchange, routing_key(topic), header_tail, body_tail, size))

    def _end(self, reason):
        self._events.append((ENDED, reason, None))
        self.state = CLOSED
        self.channel_open = False


def _reason(buf, pos, end):
    """A 5.0 acknowledgement's reason string, as ": text", or ""."""
    if end - pos > 3:
        reason = packets.read_properties(buf, pos + 3, end)[0].get(REASON_STRING)
        if reason:
            return ": " + text(reason)
    return ""


def _bytes(value):
    return value.encode() if isinstance(value, str) else bytes(value)
