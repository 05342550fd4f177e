"""An AMQP 1.0 client's connection (part 2 of the specification), on the same port as 0-9-1:
server/frontends.py hands it the clients whose protocol header is AMQP 1.0's (amqp10.HEADERS).

It is what every front end's connection is to its port (core/connections.py PortConnection) and to
the broker (core/session.py: tick, close, client, counted, unsettled). SASL comes
first, as RabbitMQ 4 asks: PLAIN against the broker's users, EXTERNAL as the user a verified
TLS client certificate names, ANONYMOUS where the config names an anonymous user. Then open,
and sessions (amqp10/session.py) with their links (amqp10/links.py).

hutch's own limits are what it says in open (never an echo of the client's): its frame size
(Limits.frame_max), channel-max (Limits.amqp10_sessions - 1) and idle time-out (half of
Limits.heartbeat). A client's frame size below 512, the smallest the specification allows,
is refused. An error ends what it concerns: a link's its link, a session's its session (both
amqp10/session.py), the connection's (octets that are not frames, a frame out of place, a
handshake not finished in time, a client that went silent) the connection.
"""

from ..core import counters
from ..core.auth import Login, credentials
from ..core.connections import PortConnection
from . import spec
from .frames import AMQP_FRAME, field, split
from .performatives import (
    BEGIN_HANDLE_MAX,
    BEGIN_INCOMING_WINDOW,
    BEGIN_NEXT_OUTGOING_ID,
    BEGIN_OUTGOING_WINDOW,
    BEGIN_REMOTE_CHANNEL,
    EMPTY_FRAME,
    OPEN_HOSTNAME,
    OPEN_IDLE_TIME_OUT,
    OPEN_MAX_FRAME_SIZE,
    begin_frame,
    close_frame,
    end_frame,
    error,
    open_frame,
)
from .session import Session, SessionError
from .types import Array, DecodeError, Symbol, Ubyte, Uint

SASL_HEADER = b"AMQP\x03\x01\x00\x00"
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
MIN_MAX_FRAME = 512  # the smallest frame size a peer may ask for, and ours until open (2.7.1)
MIN_IDLE_TIME_OUT = 1000  # ms: a client asking for less would have us send a frame too often
CONTAINER_ID = "hutch"

(SASL_WAIT, SASL_INIT, AMQP_WAIT, OPEN_WAIT, OPEN, CLOSED) = range(6)
SASL_OK = Ubyte(0)
SASL_AUTH = Ubyte(1)


class ConnectionError_(Exception):
    """(condition, description): the connection closes with this error."""


def framing(description):
    return ConnectionError_("amqp:connection:framing-error", description)


class Connection(PortConnection):
    """One AMQP 1.0 client (see the module's docstring); its port's side is core/connections.py's."""

    protocol = "AMQP 1.0"
    metrics_label = "amqp10"

    def __init__(self, broker, peer):
        PortConnection.__init__(self, broker, peer)
        limits = broker.limits
        self.stats = counters.of(broker, self.metrics_label)  # (its own: core/counters.py)
        self.state = SASL_WAIT
        self.max_frame = MIN_MAX_FRAME  # until open: the smallest every peer takes
        self.our_max_frame = max(MIN_MAX_FRAME, limits.frame_max)
        self.idle_ms = limits.heartbeat * 1000 // 2  # what we ask of the client (RabbitMQ 4: half the heartbeat)
        self.client_idle_ms = 0  # what it asks of us: a frame at least every half of this
        self.sessions = {}  # channel -> Session
        self.ending = set()  # channels whose session we ended, until the client's end answers
        self.channels = self.sessions  # (what the snapshot counts)
        self.auth_mechanism = None
        self.waiting = []  # [journal seq, session, delivery id, outcome]: settled once the journal syncs
        self.confirming = True  # a publisher that can be told no: refused rather than held back

    # ------------------------------------------------------------ the port's side

    def send(self, data):
        self.out.append(data)
        self.output_added(len(data))

    @property
    def want_read(self):
        return not self.closed

    def parse(self, data):
        """(PortConnection.feed) The protocol headers, then every whole frame: where the rest begins."""
        if not isinstance(data, bytes):
            data = bytes(data)
        pos = self._headers(data)
        while pos >= 0 and not self.closed:
            found, pos_after = split(data, pos, self.our_max_frame if self.state >= OPEN else MIN_MAX_FRAME)
            if found is None:
                break
            pos = pos_after
            self._frame(found)
        if not self.closed:  # what was read, answered: each session's window, its outcomes
            for session in self.sessions.values():
                session.reopen()
                session.send_outcomes()
        return pos

    protocol_errors = (DecodeError, ConnectionError_)

    def close_for(self, e):
        """(PortConnection) A close with the condition that says e: a frame that does not decode,
        an error of the connection, out of memory, an internal error."""
        if isinstance(e, DecodeError):
            self._close(error("amqp:decode-error", str(e)))
        elif isinstance(e, ConnectionError_):
            self._close(error(e.args[0], e.args[1]))
        elif isinstance(e, MemoryError):
            self._close(error("amqp:resource-limit-exceeded", "broker out of memory"))
        else:
            self._close(error("amqp:internal-error", repr(e)))

    def caught_up(self):
        if self.state == OPEN:
            for session in list(self.sessions.values()):  # the client caught up: deliver again
                session.redispatch()

    def read_wanted(self):
        """How many more octets complete the frame whose start is pending (0: none is)."""
        pending = self.pending
        if len(pending) < 4 or self.state < OPEN_WAIT:
            return 0
        return max(0, (pending[0] << 24 | pending[1] << 16 | pending[2] << 8 | pending[3]) - len(pending))

    def tick(self, now):
        if self.closed:
            return
        if self.deaf:
            if now > self.deadline:
                self.lost()
        elif self.state < OPEN and now > self.deadline:
            self.broker.log("warning", "%s: AMQP 1.0 handshake timed out" % self.name)
            self._close(error("amqp:resource-limit-exceeded", "handshake not finished in time"))
        elif self.state == OPEN:
            if now - self.last_recv > 2 * self.idle_ms:
                self._close(error("amqp:resource-limit-exceeded", "no frame from the client in %d ms" % self.idle_ms))
            elif self.client_idle_ms and now - self.last_send >= self.client_idle_ms // 2 and not self.out:
                self.send(EMPTY_FRAME)

    def eof(self):
        self.lost()

    def give_back(self):
        """(PortConnection.end) Every session lets go of what it holds; the state closed."""
        for session in self.sessions.values():
            session.release_all()
        self.stats[counters.CHANNELS_CLOSED] += len(self.sessions)
        self.sessions.clear()
        self.state = CLOSED

    def close(self, reason="broker shutdown"):
        """From the broker's side (a shutdown, an operator)."""
        if self.state == OPEN:
            self._close(error("amqp:connection:forced", reason))
        else:
            self.lost()

    def unsettled(self):
        return [
            (queue, entry) for session in self.sessions.values() for _link, queue, entry in session.unsettled.values()
        ]

    def notify_blocked(self, reason):
        pass  # (its senders get no more credit while publishers are blocked: Session.grant)

    def notify_unblocked(self):
        """Publishers may go on: the senders that ran short of credit get it."""
        if self.state != OPEN:
            return
        from .links import IncomingLink

        limit = self.broker.limits.amqp10_link_credit // 2
        for session in self.sessions.values():
            for link in session.links.values():
                if type(link) is IncomingLink and not link.detached and link.credit <= limit:
                    session.grant(link)

    # ------------------------------------------------------------ the handshake

    def _headers(self, data):
        """Where frames start in data after the protocol headers it holds (-1: not yet)."""
        pos = 0
        if self.state == SASL_WAIT:
            if len(data) < 8:
                self.pending = data
                return -1
            if data[:8] != SASL_HEADER:  # SASL first, as RabbitMQ 4 asks: our header, then hang up
                self.send(SASL_HEADER)
                self.lost()
                return -1
            self.send(SASL_HEADER + _frame_sasl(spec.SASL_MECHANISMS, [Array(0xA3, self._mechanisms())]))
            self.state = SASL_INIT
            pos = 8
        if self.state == AMQP_WAIT:
            if len(data) - pos < 8:
                self.pending = data[pos:]
                return -1
            if data[pos : pos + 8] != AMQP_HEADER:
                self.send(AMQP_HEADER)
                self.lost()
                return -1
            self.send(AMQP_HEADER)
            self.state = OPEN_WAIT
            pos += 8
        return pos

    def _mechanisms(self):
        """PLAIN; EXTERNAL where the client's verified certificate names a user (ports/certname.py);
        ANONYMOUS where the config names its user."""
        offered = []
        tls = getattr(self, "tls", None)  # (server/frontends.py sets it for a TLS listener's client)
        if tls is not None and tls.get("login") is not None:
            offered.append(Symbol("EXTERNAL"))
        offered.append(Symbol("PLAIN"))
        if getattr(self.broker.users, "anonymous", None) is not None:
            offered.append(Symbol("ANONYMOUS"))
        return offered

    def _sasl_init(self, f):
        mechanism = field(f, 0)
        name = mechanism.value if type(mechanism) is Symbol else None
        broker = self.broker
        users = broker.users
        self.stats[counters.AUTH_ATTEMPTS] += 1
        user, reason = None, "mechanism %r is not offered" % (name,)
        if Symbol(name or "") in self._mechanisms():
            if name == "PLAIN":
                try:
                    user, password = credentials(b"PLAIN", field(f, 1, b""))
                    reason = users.check(user, password, self.loopback)
                except Exception as e:  # (a malformed response: refused, said in the log)
                    reason = "malformed PLAIN response: %s" % e
            else:
                from ..core.passwordless import login  # EXTERNAL, ANONYMOUS (loaded with the first)

                user, reason = login(users, name.encode(), getattr(self, "tls", None), self.loopback)
        if reason is not None:
            self.stats[counters.AUTH_ATTEMPTS_FAILED] += 1
            if broker.guard.login_failed(self.source):
                self.end(True)  # (without a word)
                return
            # code 1 (auth); the client closes, or the refusal's deadline hangs up on it
            broker.guard.say(self.source, "%s: AMQP 1.0 %s login refused: %s" % (self.name, name, reason))
            self.send(_frame_sasl(spec.SASL_OUTCOME, [SASL_AUTH]))
            self.deaf = True  # (what it sends is not read; hung up on at its deadline)
            self.deadline = min(self.deadline, broker.now + broker.limits.auth_failure_delay_ms)
            return
        self.auth_mechanism = name.encode()
        self.client = Login(user.encode() if isinstance(user, str) else user, self.name)
        self.send(_frame_sasl(spec.SASL_OUTCOME, [SASL_OK]))
        self.state = AMQP_WAIT

    def _frame(self, f):
        if f.code is None:
            return  # an empty frame: the peer is alive
        if f.kind != AMQP_FRAME:
            if self.state == SASL_INIT and f.code == spec.SASL_INIT:
                self._sasl_init(f)
                return
            raise framing("a SASL frame out of place")
        handler = HANDLERS.get(f.code)
        if handler is None:
            raise framing("0x%02x is not a performative" % f.code)
        if (self.state == OPEN_WAIT) != (f.code == spec.OPEN):
            raise framing("%s out of place" % spec.TYPES.get(f.code, ("frame",))[0])
        if f.code in SESSION_FRAMES:
            session = self.sessions.get(f.channel)
            if session is None:
                if f.channel in self.ending:
                    if f.code == spec.END:
                        self.ending.discard(f.channel)  # the answer to our end
                    return  # (in flight when we ended the session)
                raise framing("no session on channel %d" % f.channel)
            try:
                handler(session, f)
            except SessionError as e:
                self._end_session(session, error(e.args[0], e.args[1]))
            return
        handler(self, f)

    def _open(self, f):
        broker = self.broker
        limits = broker.limits
        user = self.client.user.decode()
        hostname = field(f, OPEN_HOSTNAME)
        if isinstance(hostname, str) and hostname.startswith("vhost:") and hostname != "vhost:/":
            raise ConnectionError_("amqp:not-found", "virtual host '%s' does not exist" % hostname[6:])
        allowed, permissions = broker.users.access(user)  # as 0-9-1's connection.open checks
        if not allowed:
            raise ConnectionError_("amqp:unauthorized-access", "access to vhost '/' refused for user '%s'" % user)
        self.client.permissions = permissions
        max_frame = field(f, OPEN_MAX_FRAME_SIZE, Uint(0xFFFFFFFF)).value
        if max_frame < MIN_MAX_FRAME:
            raise ConnectionError_(
                "amqp:frame-size-too-small", "max-frame-size %d is below the smallest, %d" % (max_frame, MIN_MAX_FRAME)
            )
        idle = field(f, OPEN_IDLE_TIME_OUT, Uint(0)).value
        if 0 < idle < MIN_IDLE_TIME_OUT:
            raise ConnectionError_("amqp:not-allowed", "idle-time-out %d ms is below %d ms" % (idle, MIN_IDLE_TIME_OUT))
        if broker.open_connections >= limits.max_connections:
            raise ConnectionError_(
                "amqp:resource-limit-exceeded", "connection limit (%d) is reached" % limits.max_connections
            )
        broker.open_connections += 1
        self.stats[counters.CONNECTIONS_OPENED] += 1
        broker.guard.settled(self, self.source)
        self.counted = True
        self.max_frame = min(self.our_max_frame, max_frame)
        self.client_idle_ms = idle
        self.state = OPEN
        self.send(open_frame(CONTAINER_ID, self.our_max_frame, limits.amqp10_sessions - 1, self.idle_ms))
        broker.log("info", "%s: AMQP 1.0 connection open (user '%s')" % (self.name, user))

    def _begin(self, f):
        channel = f.channel
        if field(f, BEGIN_REMOTE_CHANNEL) is not None:
            raise framing("a begin answering one we never sent")
        if channel >= self.broker.limits.amqp10_sessions or channel in self.sessions or channel in self.ending:
            raise framing("channel %d is not free" % channel)
        next_outgoing = field(f, BEGIN_NEXT_OUTGOING_ID)
        incoming = field(f, BEGIN_INCOMING_WINDOW)
        outgoing = field(f, BEGIN_OUTGOING_WINDOW)
        if next_outgoing is None or incoming is None or outgoing is None:
            raise ConnectionError_("amqp:invalid-field", "a begin needs next-outgoing-id and both windows")
        session = Session(self, channel, channel, next_outgoing.value, incoming.value, outgoing.value)
        handle_max = field(f, BEGIN_HANDLE_MAX)
        if handle_max is not None:
            session.handle_max = min(session.handle_max, handle_max.value)
        self.sessions[channel] = session
        self.stats[counters.CHANNELS_OPENED] += 1
        self.send(
            begin_frame(
                channel, channel, session.next_outgoing_id, session.incoming_window, session.outgoing_window,
                session.handle_max,
            )
        )  # fmt: skip

    def _end(self, session, f):
        """The client ends a session: its links let go of what they hold, and we answer."""
        self._forget_session(session)
        self.send(end_frame(session.channel))

    def _end_session(self, session, why):
        """We end a session with an error; its channel stays taken until the client answers."""
        self._forget_session(session)
        self.ending.add(session.channel)
        self.send(end_frame(session.channel, why))
        self.broker.log("warning", "%s: AMQP 1.0 session %d ended: %s" % (self.name, session.channel, why.value[1]))

    def _forget_session(self, session):
        session.release_all()
        del self.sessions[session.channel]
        self.stats[counters.CHANNELS_CLOSED] += 1
        self.waiting = [entry for entry in self.waiting if entry[1] is not session]

    def _close_in(self, f):
        why = field(f, 0)
        if why is not None:
            self.broker.log("info", "%s: AMQP 1.0 client closed the connection: %r" % (self.name, why))
        self.send(close_frame())
        self.broker.log("info", "%s: AMQP 1.0 connection closed" % self.name)
        self.lost()

    def _close(self, why):
        if self.state >= OPEN_WAIT:  # (before the AMQP header there is no close to send)
            self.send(close_frame(why))
        self.broker.log("warning", "%s: AMQP 1.0 connection closed: %s" % (self.name, why.value[1]))
        self.lost()

    # ------------------------------------------------------------ settling what clients send

    def settle_when_synced(self, session, delivery_id, outcome, seq):
        """The outcome of a message the client sent: now, or once the journal has synced up to
        seq (a durable message in a durable queue is accepted once it is on disk)."""
        journal = self.broker.journal
        if seq and journal is not None and journal.synced < seq:
            self.waiting.append([seq, session, delivery_id, outcome])
            self.broker.wait_for_journal(self)
        else:
            self._settled(session, delivery_id, outcome)

    def flush_confirms(self):
        """Outcomes that waited for the journal, now that it synced (Broker.journal_synced)."""
        if not self.waiting or self.closed:
            return
        synced = self.broker.journal.synced
        still = []
        touched = []
        for entry in self.waiting:
            if entry[0] <= synced:
                self._settled(entry[1], entry[2], entry[3])
                if entry[1] not in touched:
                    touched.append(entry[1])
            else:
                still.append(entry)
        self.waiting = still
        for session in touched:
            session.send_outcomes()
        if still:
            self.broker.wait_for_journal(self)

    def _settled(self, session, delivery_id, outcome):
        if outcome.descriptor.value == spec.ACCEPTED:
            self.stats[counters.CONFIRMED] += 1
        elif outcome.descriptor.value == spec.RELEASED:
            self.stats[counters.RETURNED] += 1
        session.settle(delivery_id, outcome)

    # ------------------------------------------------------------ publishing (core/session.py)

    def hold_for(self, queue):
        pass  # (never called: a confirming publisher is refused, not held back)

    def resume(self):
        pass

    def direct_reply_to(self, message):
        from ..codec.errors import PRECONDITION_FAILED, Refused

        raise Refused(PRECONDITION_FAILED, "direct reply-to over AMQP 1.0 is not served")


def _frame_sasl(code, fields):
    from .frames import frame

    return frame(0, code, fields, sasl=True)


SESSION_FRAMES = (spec.ATTACH, spec.FLOW, spec.TRANSFER, spec.DISPOSITION, spec.DETACH, spec.END)
HANDLERS = {
    spec.OPEN: Connection._open,
    spec.BEGIN: Connection._begin,
    spec.CLOSE: Connection._close_in,
    spec.ATTACH: Session.attach,
    spec.FLOW: Session.flow,
    spec.TRANSFER: Session.on_transfer,
    spec.DISPOSITION: Session.disposition,
    spec.DETACH: Session.detach,
    spec.END: lambda session, f: session.conn._end(session, f),
}
