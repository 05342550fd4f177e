"""The connection's life on channel 0: protocol header, login, tuning, opening, a refreshed
secret (connection.update-secret, in amqp091/secret.py), the client's close.

States follow the 0-9-1 handshake (requirements.md R093): protocol header,
start/start-ok, tune/tune-ok, open/open-ok; then channels; then the close
handshake in either direction. The functions here take the Connection
(amqp091/connection.py), which calls them for channel 0's frames.
"""

from ..codec import spec
from ..codec.errors import ACCESS_REFUSED, CHANNEL_ERROR, COMMAND_INVALID, NOT_ALLOWED, DecodeError, Refused
from ..codec.wire import PROTOCOL_HEADER, PROTOCOL_HEADER_0_9, decode_args, method_name, signature, text
from ..core import counters
from ..core.auth import MECHANISMS, Login, credentials
from ..core.broker import VERSION
from .channel import WANTS_AUTH_CLOSE, WANTS_BLOCKED, WANTS_CANCEL, raise_unexpected

# What connection.start says this broker can do (RabbitMQ's names).
CAPABILITIES = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
    "direct_reply_to": True,
    "consumer_priorities": True,
}

AWAIT_HEADER = 0
AWAIT_START_OK = 1
AUTH_FAILED = 2  # login refused: waiting out the delay before we say so
AWAIT_TUNE_OK = 3
AWAIT_OPEN = 4
OPEN = 5
CLOSING = 6  # we sent connection.close and wait for close-ok
CLOSED = 7

STATE_NAMES = (
    "awaiting protocol header",
    "starting",
    "refusing login",
    "tuning",
    "opening",
    "open",
    "closing",
    "closed",
)
EXPECTED = {
    AWAIT_START_OK: spec.CONNECTION_START_OK,
    AWAIT_TUNE_OK: spec.CONNECTION_TUNE_OK,
    AWAIT_OPEN: spec.CONNECTION_OPEN,
}


def read_header(conn, data):
    """The protocol header at the start of data: where the frames start, or -1 (not all of it
    yet, or one we do not speak: then refused)."""
    n = len(data)
    if n < 8:
        if bytes(data[: min(n, 4)]) != PROTOCOL_HEADER[: min(n, 4)]:
            refuse_header(conn, data)
        else:
            conn.pending = bytes(data)
        return -1
    header = bytes(data[:8])
    if header != PROTOCOL_HEADER and header != PROTOCOL_HEADER_0_9:
        refuse_header(conn, header)
        return -1
    conn.state = AWAIT_START_OK
    offered = MECHANISMS
    tls = getattr(conn, "tls", None)  # a TLS listener's client (server/frontends.py); a plain one has none
    if tls is not None or getattr(conn.broker.users, "anonymous", None) is not None:
        from ..core.passwordless import mechanisms  # EXTERNAL, ANONYMOUS: loaded when they may be offered

        offered = mechanisms(conn.broker.users, tls)
    conn.send_method(0, spec.CONNECTION_START, (0, 9, server_properties(conn), offered, b"en_US"))
    return 8


def refuse_header(conn, header):
    """Say what we speak (the 0-9-1 header), then hang up."""
    conn.broker.log(
        "warning", "%s: unsupported protocol header %r, answered with AMQP 0-9-1" % (conn.name, bytes(header))
    )
    conn.out.append(PROTOCOL_HEADER)
    conn.end()


def connection_method(conn, method_id, buf, pos, end):
    """A method frame on channel 0 (its arguments from pos to end)."""
    if method_id >> 16 != spec.CLASS_CONNECTION:
        raise Refused(CHANNEL_ERROR, "unexpected method %s on channel 0" % method_name(method_id), method_id)
    sig = signature(method_id)
    if sig is None:
        raise_unexpected(method_id)
    args = decode_args(sig, buf, pos, end)
    if method_id == spec.CONNECTION_CLOSE:
        code, reply_text = args[0], args[1]
        if code not in (0, spec.REPLY_SUCCESS):  # py-amqp closes with 0 by default: not a problem
            conn.broker.log("warning", "%s: client closed the connection: %d %s" % (conn.name, code, text(reply_text)))
        elif conn.client is not None:
            conn.broker.log("info", "%s: connection closed (user '%s')" % (conn.name, text(conn.client.user)))
        conn.send_method(0, spec.CONNECTION_CLOSE_OK)
        conn.end()
        return
    if method_id == spec.CONNECTION_UPDATE_SECRET and conn.state == OPEN:
        from .secret import update_secret  # loaded with the first: most clients never refresh a secret

        update_secret(conn, args[0], args[1])
        return
    expected = EXPECTED.get(conn.state)
    if method_id != expected:
        raise Refused(
            COMMAND_INVALID,
            "%s is not allowed while the connection is %s" % (method_name(method_id), STATE_NAMES[conn.state]),
            method_id,
        )
    if method_id == spec.CONNECTION_START_OK:
        _start_ok(conn, *args)
    elif method_id == spec.CONNECTION_TUNE_OK:
        _tune_ok(conn, *args)
    elif method_id == spec.CONNECTION_OPEN:
        _open(conn, args[0])


def _start_ok(conn, client_properties, mechanism, response, _locale):
    caps = client_properties.get("capabilities")
    if isinstance(caps, dict):
        wants = 0
        if caps.get("connection.blocked") is True:
            wants |= WANTS_BLOCKED
        if caps.get("consumer_cancel_notify") is True:
            wants |= WANTS_CANCEL
        if caps.get("authentication_failure_close") is True:
            wants |= WANTS_AUTH_CLOSE
        if wants:
            conn.wants = wants
    product = client_properties.get("product")
    if isinstance(product, bytes):
        conn.product = product
    provided = client_properties.get("connection_name")
    if isinstance(provided, bytes):
        conn.provided_name = provided
    broker = conn.broker
    if mechanism == b"PLAIN" or mechanism == b"AMQPLAIN":
        conn.auth_mechanism = mechanism
        try:
            user, password = credentials(mechanism, response)
        except DecodeError as e:
            user, reason = "?", "malformed %s response: %s" % (text(mechanism), e)
        else:
            reason = broker.users.check(user, password, conn.loopback)
    else:
        from ..core.passwordless import login, mechanisms  # EXTERNAL, ANONYMOUS (loaded with the first)

        tls = getattr(conn, "tls", None)
        if mechanism not in mechanisms(broker.users, tls).split():
            raise Refused(
                COMMAND_INVALID,
                "unknown authentication mechanism '%s'" % text(mechanism),
                spec.CONNECTION_START_OK,
            )
        conn.auth_mechanism = mechanism
        user, reason = login(broker.users, mechanism, tls, conn.loopback)
    stats = broker.stats
    stats[counters.AUTH_ATTEMPTS] += 1
    if reason is not None:
        stats[counters.AUTH_ATTEMPTS_FAILED] += 1
        guard = broker.guard
        if guard.login_failed(conn.source):  # its source is over its budget: no answer, no wait
            guard.say(
                conn.source,
                "%s: %s login refused: %s; too many from %s: dropped"
                % (conn.name, text(mechanism), reason, conn.source),
            )
            conn.end(True)  # (without a word)
            return
        # Hold the answer back a moment: a guessing client gets few tries (requirements R147).
        broker.log("warning", "%s: %s login refused: %s" % (conn.name, text(mechanism), reason))
        conn.state = AUTH_FAILED
        conn.deaf = True  # (what it sends meanwhile is dropped unread)
        conn.deadline = broker.now + broker.limits.auth_failure_delay_ms
        return
    conn.client = Login(user.encode(), conn.name)
    limits = broker.limits
    conn.send_method(0, spec.CONNECTION_TUNE, (limits.channel_max, limits.frame_max, limits.heartbeat))
    conn.state = AWAIT_TUNE_OK


def refuse_login(conn):
    """The delay after a refused login is over: say so (403) to a client that asked, else hang up."""
    conn.deaf = False  # (its close-ok is read)
    if conn.wants & WANTS_AUTH_CLOSE:
        conn.close_with(
            Refused(
                ACCESS_REFUSED,
                "Login was refused using authentication mechanism %s. "
                "For details see the broker logfile." % text(conn.auth_mechanism),
                spec.CONNECTION_START_OK,
            )
        )
    else:
        conn.end()  # older clients expect the socket to close (as RabbitMQ does)


def _tune_ok(conn, channel_max, frame_max, heartbeat):
    limits = conn.broker.limits
    if frame_max and frame_max < spec.FRAME_MIN_SIZE:
        raise Refused(
            NOT_ALLOWED,
            "frame_max=%d < %d min size" % (frame_max, spec.FRAME_MIN_SIZE),
            spec.CONNECTION_TUNE_OK,
        )
    if frame_max == 0 or frame_max > limits.frame_max:
        raise Refused(
            NOT_ALLOWED,
            "negotiated frame_max = %d is higher than the maximum allowed value (%d)" % (frame_max, limits.frame_max),
            spec.CONNECTION_TUNE_OK,
        )
    if channel_max == 0 or channel_max > limits.channel_max:
        raise Refused(
            NOT_ALLOWED,
            "negotiated channel_max = %d is higher than the maximum allowed value (%d)"
            % (channel_max, limits.channel_max),
            spec.CONNECTION_TUNE_OK,
        )
    conn.frame_max = frame_max
    conn.max_payload = frame_max - 8
    conn.accept_payload = frame_max  # (Connection.__init__ says why)
    conn.channel_max = channel_max
    conn.heartbeat_ms = heartbeat * 1000
    conn.state = AWAIT_OPEN


def _open(conn, vhost):
    broker = conn.broker
    if vhost != b"/":
        raise Refused(NOT_ALLOWED, "vhost %s not found" % text(vhost), spec.CONNECTION_OPEN)
    user = text(conn.client.user)
    allowed, permissions = broker.users.access(user)
    if not allowed:
        raise Refused(NOT_ALLOWED, "access to vhost '/' refused for user '%s'" % user, spec.CONNECTION_OPEN)
    conn.client.permissions = permissions
    flow = broker.flow
    if flow.refuse_connections is not None:
        raise Refused(NOT_ALLOWED, "connection refused: " + flow.refuse_connections, spec.CONNECTION_OPEN)
    limit = broker.limits.max_connections
    if broker.open_connections >= limit:
        raise Refused(
            NOT_ALLOWED,
            "access to vhost '/' refused for user '%s': "
            "connection limit (%d) is reached" % (text(conn.client.user), limit),
            spec.CONNECTION_OPEN,
        )
    broker.open_connections += 1
    broker.stats[counters.CONNECTIONS_OPENED] += 1
    broker.guard.settled(conn, conn.source)
    conn.counted = True
    conn.send_method(0, spec.CONNECTION_OPEN_OK, (b"",))
    conn.state = OPEN
    broker.log(
        "info", "%s: connection open (user '%s', client %s)" % (conn.name, text(conn.client.user), text(conn.product))
    )
    try:
        del conn.product  # (said: a board keeps no attribute it will not read again)
    except AttributeError:
        pass  # (it sent none)
    if flow.blocked:
        conn.notify_blocked(flow.reason)


def server_properties(conn):
    """connection.start's server properties: made once per broker, with its first client."""
    serving = conn.serving
    if serving.properties is None or serving.properties["cluster_name"] != conn.broker.name:  # (renamed)
        serving.properties = {
            "product": "hutch",
            "version": VERSION,
            "platform": conn.broker.platform,
            "information": "AMQP 0-9-1 and 1.0 broker for edge and IoT hardware",
            "copyright": "the hutch developers",
            "capabilities": CAPABILITIES,
            # (RabbitMQ's key: a hutch is a cluster of one, named as its gateway; a bridge whose
            # URI list leads into another cluster says so)
            "cluster_name": conn.broker.name,
        }
    return serving.properties
