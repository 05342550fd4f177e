"""One MQTT client's connection, sans-IO: bytes in with feed(), bytes out with take_output(), as
every front end's connection is to its port (core/connections.py PortConnection) and to the
broker (core/session.py: tick, close, client, counted, unsettled).

The client's first packet is its CONNECT, within the handshake time-out and no larger than
PRE_LOGIN_MOST; it logs in with its user name and password (PLAIN's check), or, without a
user name, as the user its verified TLS certificate names or, where the config names one,
the anonymous user; then its session begins (mqtt/session.py) and what it publishes goes
through mqtt/publishing.py. The keep alive it asks for is held to 1.5 times (MQTT 3.1.2.10;
0: none, as umqtt.simple asks), or to `[mqtt] max_keep_alive` where that is shorter (a version 5
client told so: Server Keep Alive). Its will is published when the connection is lost without a
DISCONNECT (or with a version 5 DISCONNECT 0x04), not after a DISCONNECT; a version 5 will with
a Will Delay Interval that much later (at most when its session ends), unless the client is back
first.

Anything malformed ends the connection: a version 5 client is told why in a DISCONNECT (or a
CONNACK) with its reason code, an older one is hung up on (MQTT 3.1.1 4.8).
"""

from ..core import counters
from ..core.auth import Login
from ..core.connections import PortConnection
from . import packets
from .packets import (
    ADMINISTRATIVE_ACTION,
    BAD_USER_NAME_OR_PASSWORD,
    CLIENT_IDENTIFIER_NOT_VALID,
    CONNECT,
    DISCONNECT,
    DISCONNECT_WITH_WILL,
    KEEP_ALIVE_TIMEOUT,
    MALFORMED_PACKET,
    NOT_AUTHORIZED,
    PINGREQ,
    PINGRESP_PACKET,
    PROTOCOL_ERROR,
    PUBACK,
    PUBCOMP,
    PUBLISH,
    PUBREC,
    PUBREL,
    QUOTA_EXCEEDED,
    SERVER_BUSY,
    SERVER_SHUTTING_DOWN,
    SESSION_TAKEN_OVER,
    SUBSCRIBE,
    UNSPECIFIED_ERROR,
    UNSUBSCRIBE,
    V5,
    V311,
    Malformed,
)

(CONNECT_WAIT, OPEN, CLOSED) = range(3)

# The largest packet read before the client has logged in (RabbitMQ's
# mqtt.max_packet_size_unauthenticated): a CONNECT with its will fits, a flood does not.
PRE_LOGIN_MOST = 65536
# Beyond a message's body, room for a PUBLISH's topic and properties.
PACKET_HEADROOM = 65536


class Serving:
    """What the MQTT front end keeps once per broker, in broker.front_ends["mqtt"] (made by
    serving_of with the first client, or set up from the config by server/startup.py): its
    settings, and the connection of each client id (a second CONNECT with the same id takes the
    session over). On CPython server/startup.py gives it `parse`, mqtt/runs.py's, which reads for
    every Connection.parse (a board's has none: its attribute would cost heap)."""

    stats: "list | None" = None  # MQTT's counters (core/counters.py), from the first connection (serving_of)
    sys_latest = None  # the $SYS topics' latest messages, where they are published (mqtt/sys_topics.py)

    def __init__(
        self, exchange=b"amq.topic", prefetch=20, max_session_expiry=86400, max_keep_alive=0, sensor_fields=None
    ):
        self.exchange = exchange  # where publishes go and subscriptions bind ([mqtt] exchange)
        # The fields of a JSON payload that identify a sensor's reading ([mqtt] sensor_id_field,
        # sensor_seq_field; mqtt/identity.py): (id field, seq field, the seq field's name as the
        # payload has it, quoted: looked for before any parsing), or None
        id_field, seq_field = sensor_fields or ("x-sensor-id", "x-sensor-seq")
        self.sensor_fields = (id_field, seq_field, b'"%s"' % seq_field.encode()) if id_field and seq_field else None
        self.prefetch = prefetch  # QoS 1 deliveries in flight per session ([mqtt] prefetch)
        self.max_session_expiry = max_session_expiry  # s a session outlives its connection, at most
        self.max_keep_alive = max_keep_alive  # s a client may stay silent, at most (0: as it asks)
        self.clients = {}  # client id -> its Connection
        self.wills = {}  # client id -> (when, its Publishing, will): version 5 wills published later
        self.origins = False  # whether a publish says who sent it (once a subscription asks for no local)
        self.routes = {}  # topic published -> (routing key, route octets) (mqtt/topics.py remember)
        self.topics = {}  # routing key delivered -> its topic, encoded as a PUBLISH holds it

    def delay_will(self, broker, client_id, publishing, will, when):
        """A version 5 will with a Will Delay Interval: published at `when` (ms), unless the
        client connects again first (3.1.3.2.2)."""
        self.wills[client_id] = (when, publishing, will)
        if self not in broker.tickers:
            broker.tickers = tuple(broker.tickers) + (self,)

    def connected(self, client_id, clean):
        """A client connected: its delayed will is not published, unless its new connection
        ends the session (a clean start), which publishes it now."""
        pending = self.wills.pop(client_id, None)
        if pending is not None and clean:
            pending[1].publish_will(pending[2])

    def tick(self, now):
        for client_id, (when, publishing, will) in list(self.wills.items()):
            if now >= when:
                del self.wills[client_id]
                publishing.publish_will(will)


def serving_of(broker):
    serving = broker.front_ends.get("mqtt")
    if serving is None:
        serving = broker.front_ends["mqtt"] = Serving()
    if serving.stats is None:
        serving.stats = counters.of(broker, "mqtt")
    return serving


class Connection(PortConnection):
    """One MQTT client (see the module's docstring)."""

    protocol = "MQTT"
    metrics_label = "mqtt"
    confirming = False  # a publisher held back (not read) while a queue is full or publishers are blocked
    level = V311  # its protocol level, from its CONNECT
    session = None  # its mqtt/session.py Session, once connected
    will = None  # (topic, payload, qos, retain, properties) to publish if it goes without a DISCONNECT
    keep_alive_ms = 0
    client_id = b""

    @property
    def stats(self):
        """MQTT's counters (core/counters.py), kept once for every MQTT connection and session."""
        return self.serving.stats

    def __init__(self, broker, peer):
        PortConnection.__init__(self, broker, peer)
        self.serving = serving_of(broker)
        self.state = CONNECT_WAIT
        self.most_in = PRE_LOGIN_MOST

    @property
    def channels(self):
        """Its session, once it has one, as channel 0: what the snapshot counts and `hutch ctl
        list channels` lists. Made when asked: a dict held by each of 10,000 idle sensors'
        connections would take 2 MB."""
        return {} if self.session is None else {0: self.session}

    # ------------------------------------------------------------ the port's side

    def send(self, data):
        self.out.append(data)
        self.output_added(len(data))

    @property
    def want_read(self):
        return not self.paused and not self.closed

    def read_wanted(self):
        """How many more octets complete the packet whose start is pending (0: none is)."""
        return 0 if self.paused or self.framing is not None else packets.wanted(self.pending)

    def caught_up(self):
        if self.session is not None:
            self.session.redispatch()

    def parse(self, data):
        """(PortConnection.feed) Every whole packet: where the rest begins. (On CPython, runs.py
        parse reads instead, set as Serving.parse: the same, with runs of QoS 0 PUBLISHes.)"""
        runs = getattr(self.serving, "parse", None)
        if runs:
            return runs(self, data)
        pos = 0
        n = len(data)
        while pos < n and not self.closed and not self.paused:
            found = packets.split(data, pos, self.most_in)
            if found is None:
                break
            first, start, end = found
            if self.packet(first, data, start, end):
                break  # a PUBLISH held back unread: read again from it at resume
            pos = end
        return pos

    protocol_errors = (Malformed,)

    def close_for(self, e):
        """(PortConnection) Refused with the reason code that says e (a version 5 client is told):
        a malformed packet's, out of memory (quota exceeded), an internal error."""
        if isinstance(e, Malformed):
            self.refuse(e.args[0], e.args[1])
        elif isinstance(e, MemoryError):
            self.refuse(QUOTA_EXCEEDED, "broker out of memory")
        else:
            self.refuse(UNSPECIFIED_ERROR, "internal error")

    def flush_confirms(self):
        """Acknowledgements that waited for the journal, now that it synced (Broker.journal_synced)."""
        if self.session is not None and not self.closed:
            self.session.flush_acks()

    def packet(self, first, buf, start, end):
        """One whole packet, handled; True if it is a PUBLISH a full queue held back unread."""
        kind = first >> 4
        flags = first & 0x0F
        if self.state == CONNECT_WAIT:
            if kind != CONNECT:
                raise Malformed(PROTOCOL_ERROR, "%s before CONNECT" % packets.NAMES[kind])
            if flags:
                raise Malformed(MALFORMED_PACKET, "CONNECT's flags are not 0")
            self.connect(packets.Connect(buf, start, end))
            return
        if kind == PUBLISH:
            return self.session.publishing.publish(first, buf, start, end)  # (True: held back unread)
        if flags != (2 if kind in (PUBREL, SUBSCRIBE, UNSUBSCRIBE) else 0):
            raise Malformed(MALFORMED_PACKET, "%s with flags 0x%x" % (packets.NAMES[kind], flags))
        session = self.session
        if kind == PUBACK:
            session.acked(packets.read_ack(buf, start, end, self.level)[0])
        elif kind == PUBREL:
            session.publishing.released(packets.read_ack(buf, start, end, self.level)[0])
        elif kind == PUBREC:
            session.qos2_deliveries().pubrec(*packets.read_ack(buf, start, end, self.level))
        elif kind == PUBCOMP:
            session.qos2_deliveries().pubcomp(packets.read_ack(buf, start, end, self.level)[0])
        elif kind == SUBSCRIBE:
            session.subscribe(*packets.read_subscribe(buf, start, end, self.level))
        elif kind == UNSUBSCRIBE:
            session.unsubscribe(*packets.read_unsubscribe(buf, start, end, self.level))
        elif kind == PINGREQ:
            self.send(PINGRESP_PACKET)
        elif kind == DISCONNECT:
            code, props = packets.read_disconnect(buf, start, end, self.level)
            expiry = props.get(packets.SESSION_EXPIRY_INTERVAL)
            if expiry is not None:
                session.expire_in(expiry)
            if code != DISCONNECT_WITH_WILL:
                self.will = None  # a DISCONNECT discards the will (3.14.4)
            self.broker.log("info", "%s: MQTT client disconnected" % self.name)
            self.lost()
        elif kind == CONNECT:
            raise Malformed(PROTOCOL_ERROR, "a second CONNECT")
        else:
            raise Malformed(PROTOCOL_ERROR, "%s from a client" % packets.NAMES[kind])

    # ------------------------------------------------------------ CONNECT

    def connect(self, c):
        broker = self.broker
        self.level = c.level
        client_id = c.client_id
        assigned = None
        if not client_id:
            if not c.clean and c.level != V5:
                self.refuse_connect(CLIENT_IDENTIFIER_NOT_VALID, "an empty client id needs a clean session")
                return
            client_id = assigned = broker.new_name(b"hutch-mqtt-").replace(b".", b"-")
        user, reason = self.login(c)
        if reason is not None:
            self.stats[counters.AUTH_ATTEMPTS_FAILED] += 1
            if broker.guard.login_failed(self.source):
                self.end(True)  # (without a word)
                return
            broker.guard.say(self.source, "%s: MQTT login refused: %s" % (self.name, reason))
            self.refuse_connect(NOT_AUTHORIZED if not c.user else BAD_USER_NAME_OR_PASSWORD, reason, said=True)
            return
        allowed, permissions = broker.users.access(user)
        if not allowed:
            self.refuse_connect(NOT_AUTHORIZED, "access to vhost '/' refused for user '%s'" % user)
            return
        flow = broker.flow
        if flow.refuse_connections or broker.open_connections >= broker.limits.max_connections:
            self.refuse_connect(SERVER_BUSY, flow.refuse_connections or "connection limit reached")
            return
        serving = self.serving
        older = serving.clients.get(client_id)
        if older is not None and not older.closed:
            broker.log(
                "info", "%s: MQTT client id '%s' connected again from %s" % (older.name, client_id.decode(), self.name)
            )
            older.taken_over()
        serving.clients[client_id] = self
        serving.connected(client_id, c.clean)
        self.client_id = client_id
        self.client = Login(user.encode() if isinstance(user, str) else user, self.name)
        self.client.permissions = permissions
        broker.open_connections += 1
        self.stats[counters.CONNECTIONS_OPENED] += 1
        broker.guard.settled(self, self.source)
        self.counted = True
        self.state = OPEN
        self.most_in = broker.limits.max_message_bytes + PACKET_HEADROOM
        keep_alive = c.keep_alive
        most = serving.max_keep_alive
        if most and (keep_alive == 0 or keep_alive > most):
            keep_alive = most  # (a version 5 client is told in its CONNACK: Server Keep Alive)
        self.keep_alive_ms = keep_alive * 1000
        self.will = c.will
        from .session import Session

        session = Session(self, c)
        present = session.begin(c.clean, c.properties)
        self.session = session
        props = None
        if self.level == V5:
            props = session.connack_properties(assigned)
            if keep_alive != c.keep_alive:
                props[packets.SERVER_KEEP_ALIVE] = keep_alive
        self.send(packets.connack(self.level, present, 0, props))
        broker.log(
            "info",
            "%s: MQTT %s connection open (user '%s', client id '%s'%s)"
            % (self.name, "5.0" if self.level == V5 else "3.1.1" if self.level == V311 else "3.1", user,
               client_id.decode(), ", session present" if present else ""),
        )  # fmt: skip
        session.start()

    def login(self, c):
        """(user, None) for a client that may log in, (user, the reason) for one that may not."""
        users = self.broker.users
        self.stats[counters.AUTH_ATTEMPTS] += 1
        if c.user:  # (an empty user name and password: anonymous, as Mosquitto takes it)
            user = c.user.decode()
            try:
                password = (c.password or b"").decode()
            except UnicodeError:
                return user, "user '%s' - invalid credentials: a password that is not UTF-8" % user
            return user, users.check(user, password, self.loopback)
        from ..core.passwordless import login  # (loaded with the first client without a user name)

        tls = getattr(self, "tls", None)
        if tls is not None and tls.get("login") is not None:
            return login(users, b"EXTERNAL", tls, self.loopback)
        if c.password:
            return "?", "a password without a user name"
        # [auth] anonymous_login_user, else guest (RabbitMQ 4's default; from loopback only)
        if getattr(users, "anonymous", None) is not None or "guest" in users.hashes:
            return login(users, b"ANONYMOUS", tls, self.loopback, "guest")
        return "?", "no user name, and no anonymous user ([auth] anonymous_login_user)"

    def refuse_connect(self, code, reason, said=False):
        """A CONNACK that refuses, with its reason (version 5), logged unless said already."""
        if not said:
            self.broker.log("warning", "%s: MQTT connection refused: %s" % (self.name, reason))
        self.send(
            packets.connack(self.level, False, code, {packets.REASON_STRING: reason} if self.level == V5 else None)
        )
        self.end()

    # ------------------------------------------------------------ ending

    def refuse(self, code, text):
        """The client broke the protocol (or the broker cannot go on with it): a version 5 client
        is told why, then the connection ends (its will is published: it did not DISCONNECT)."""
        self.broker.log("warning", "%s: MQTT connection closed: %s" % (self.name, text))
        if self.level == V5:
            if self.state == CONNECT_WAIT:
                self.send(packets.connack(V5, False, code, {packets.REASON_STRING: text}))
            elif self.state == OPEN:
                self.send(packets.disconnect(code, text))
        self.lost()

    def taken_over(self):
        """Another connection connected with this one's client id: this one ends (MQTT 3.1.4-3),
        its will published."""
        self.refuse(SESSION_TAKEN_OVER, "another connection took the session over")

    def close(self, reason=None):
        """From the broker's side: its shutdown (no reason: Server shutting down), or an
        operator's `hutch ctl` (Administrative action, as Mosquitto says when it kicks a client)."""
        if self.state == OPEN:
            if reason is None:
                self.refuse(SERVER_SHUTTING_DOWN, "broker shutdown")
            else:
                self.refuse(ADMINISTRATIVE_ACTION, reason)
        else:
            self.end()

    def eof(self):
        self.lost()

    def give_back(self):
        """(PortConnection.end) Its will goes out unless it disconnected, its session lets go of
        what it holds (a clean session ends), its client id is free; the state closed."""
        self.state = CLOSED
        session = self.session
        if session is not None:
            will, self.will = self.will, None
            if will is not None:
                delay = min(will[4].get(packets.WILL_DELAY_INTERVAL, 0), session.expiry)
                if delay:
                    self.serving.delay_will(
                        self.broker, self.client_id, session.publishing, will, self.broker.now + delay * 1000
                    )
                else:
                    session.publishing.publish_will(will)
            session.end()
        if self.serving.clients.get(self.client_id) is self:
            del self.serving.clients[self.client_id]

    def tick(self, now):
        if self.closed:
            return
        if self.state == CONNECT_WAIT:
            if now > self.deadline:
                self.broker.log("warning", "%s: no MQTT CONNECT in time" % self.name)
                self.end()
        elif self.keep_alive_ms and not self.paused and now - self.last_recv > self.keep_alive_ms * 3 // 2:
            self.refuse(KEEP_ALIVE_TIMEOUT, "nothing from the client in 1.5 times its keep alive")

    # ------------------------------------------------------------ the broker's calls (core/session.py)

    def unsettled(self):
        return self.session.unsettled() if self.session is not None else []

    def notify_blocked(self, reason):
        pass  # (MQTT has no word for it: its publishers are not read meanwhile)

    def notify_unblocked(self):
        pass
