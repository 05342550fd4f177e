"""The [[bridge]] tables of the config file, checked: one dict per bridge, or ConfigError.

    [[bridge]]
    name = "uplink"
    direction = "up"                  # local queue -> upstream exchange; "down": upstream queue -> local exchange
    uri = ["amqp://edge:secret@central:5672/%2F?heartbeat=30", "amqp://backup:5672"]
    queue = "readings"                # the local source (declared durable if absent), or:
    # source_exchange = "sensors"     # ... a local exchange: the bridge's own durable queue
    # binding_key = "site.#"          # (hutch.bridge.NAME) bound to it with this key
    exchange = "sensors"              # upstream destination (default: the message's own)
    routing_key = "site-7"            # (default: the message's own)
    ack_mode = "on-confirm"           # or "on-publish", "no-ack"
    prefetch = 1000                   # messages in flight at most (default 1000, less on a board)
    reconnect_delay = 1.0             # seconds before the first retry, doubled up to ...
    max_reconnect_delay = 30.0        # ... this, with jitter
    watchdog = 60.0                   # no confirm for this long while messages wait: reconnect (0: off)
    declare = { exchange_type = "topic", queue = "readings", binding_key = "#" }  # set up upstream
    max_rate = 100                    # messages per second at most (default: no limit)
    max_byte_rate = 20000             # body bytes per second at most (a metered link)
    priority = 5                      # 0-9: with an [uplink] budget, a higher one sends first
    always_connected = false          # true: connects outside the [uplink]'s windows too
    # amqps:// only: the CA that signs upstream's certificate (default: the system's), a client
    # certificate and its key, whether to check upstream's certificate and name, and the
    # name to send and check (SNI; default: the URI's host)
    ca_file = "/etc/hutch/ca.pem"
    cert_file = "/etc/hutch/edge.pem"
    key_file = "/etc/hutch/edge.key"
    verify = true
    server_name = "central.example.com"

    # AMQP 1.0 (amqp10:// or amqps10:// URIs, or protocol = "1.0" with amqp:// ones)
    address = "/exchange/sensors/site-7"   # the link's target (default: RabbitMQ 4's /exchanges/X/RK)
    device_id = "gateway-7"           # Azure IoT Hub: the device, its key (base64) and the
    sas_key = "..."                   # lifetime of the SAS tokens made from it (seconds);
    token_lifetime = 3600             # cbs = true: tokens put on $cbs (SASL ANONYMOUS)
    cbs = false

    # MQTT (mqtt:// or mqtts:// URIs)
    topic = "dt/gateway-7/{routing_key}"   # up: the topic template; down: the filter(s) subscribed to
    client_id = "gateway-7"           # (default: the node's name and the bridge's)
    mqtt_version = "3.1.1"            # or "5": headers as user properties
    session_expiry = 86400            # (5 only) seconds the broker keeps the session after a drop

A URI is RabbitMQ's: amqp://user:password@host:port/vhost, with the query options
heartbeat (seconds), frame_max (bytes), connection_timeout (milliseconds) and
auth_mechanism (plain, or external: amqps:// with cert_file, the user named by the
client certificate). An AMQP 1.0 URI is amqp10://user:password@host:port (amqps10:// over
TLS) with the same options (heartbeat: the idle time-out in seconds; auth_mechanism also
anonymous), and names no vhost; an MQTT URI is mqtt://user:password@host:port (mqtts:// over
TLS, ports 1883 and 8883) with heartbeat (its keep-alive) and connection_timeout. Every
mistake is one ConfigError naming the bridge and the key, so `hutch serve` says it in one
line and exits with 2 rather than running a bridge that does nothing.
"""

from .. import schema
from ..config import ConfigError, did_you_mean
from . import upstreams

TYPE_CHECKING = False
if TYPE_CHECKING:  # read by type checkers only: MicroPython has no typing module
    from typing import Any  # noqa: F401 (_setting's type comment)

# One row per key, as server/schema.py's rows: (section, key, kind, default, flag, help,
# description), flag and help None (no command-line option sets a bridge). section: "bridge"
# (a [[bridge]] table), "bridge.classes" (each of its classes), "bridge.declare" (its declare
# table), "bridge.uri" (its URI's query options). kind: server/schema.py KINDS, or "number" (at
# least 0, a fraction allowed, in its unit: UNITS) and "whole" (within its bounds: RANGES);
# "uris" and "tables" are checked by the code below. Each value is checked by its row
# (_setting), and in code what goes with what (a down bridge's queue, TLS with amqps://, ...);
# docs/_ext/config_reference.py makes the reference's tables from the rows.
# fmt: off
ROWS = (
    # [[bridge]]
    ("bridge", "name", "text", None, None, None,
     "The bridge's name, unique in the file: logs, `hutch ctl bridges`, the `x-hutch-origin` "
     "header, and the queue `hutch.bridge.NAME` of a `source_exchange` bridge. Required."),
    ("bridge", "direction", "text", "up", None, None,
     "`up`: a local queue forwarded to upstream. `down`: an upstream queue consumed and published "
     "here."),
    ("bridge", "uri", "uris", None, None, None,
     "The upstream broker: `amqp://user:password@host:port/vhost` (`amqps://` for TLS), or a list "
     "of them, tried in order; over AMQP 1.0 `amqp10://user:password@host:port` (`amqps10://` for "
     "TLS); to an MQTT broker `mqtt://user:password@host:1883` (`mqtts://`, port 8883, for TLS). "
     "Query options below. Required."),
    ("bridge", "queue", "text", None, None, None,
     "Up: the local queue to forward (declared durable if missing). Down: the upstream queue to "
     "consume (it must exist; from MQTT, `topic` instead). Required, unless `source_exchange` is "
     "given."),
    ("bridge", "source_exchange", "text", None, None, None,
     "Up only, instead of `queue`: a local exchange; the bridge forwards what a durable queue of "
     "its own, `hutch.bridge.NAME`, bound to it takes."),
    ("bridge", "binding_key", "text", "", None, None,
     "The binding key of that queue to `source_exchange`."),
    ("bridge", "exchange", "text", None, None, None,
     "Where messages are published (upstream for an up bridge, here for a down one). None: each "
     "message's own exchange (from MQTT: `amq.topic`). Over AMQP 1.0, with `routing_key`, the "
     "link's target (`/exchanges/X/RK`, `/queues/RK` for the default exchange)."),
    ("bridge", "routing_key", "text", None, None, None,
     "The routing key they are published with. None: each message's own."),
    ("bridge", "ack_mode", "text", "on-confirm", None, None,
     "`on-confirm`: a message leaves the source queue once the destination confirmed it. `on-"
     "publish` and `no-ack`: once it is written to the socket (faster, loses what is in flight)."),
    ("bridge", "prefetch", "whole", None, None, None,
     "Messages in flight at most. None: 1000, or a quarter of `total_max_messages` when that is "
     "less (esp32: 24)."),
    ("bridge", "reconnect_delay", "number", 1.0, None, None,
     "Seconds before the first retry after a failed connection; doubled after each failed round."),
    ("bridge", "max_reconnect_delay", "number", 30.0, None, None,
     "The longest retry delay in seconds: each wait is between half of the delay and the delay "
     "(jitter), never past this."),
    ("bridge", "watchdog", "number", 60.0, None, None,
     "A link that confirms nothing for this many seconds while messages wait is torn down and "
     "replaced. 0: off."),
    ("bridge", "declare", "table", None, None, None,
     "Up only: what to set up upstream at each connect (durable): a table of the keys below."),
    ("bridge", "max_rate", "number", 0, None, None,
     "Messages per second at most; 0: no limit."),
    ("bridge", "max_byte_rate", "number", 0, None, None,
     "Body bytes per second at most (a metered link); 0: no limit."),
    ("bridge", "ca_file", "text", None, None, None,
     "`amqps://` (and `amqps10://`, `mqtts://`): the CA certificate (PEM) upstream's certificate "
     "is checked against. None: the system's CAs (a board needs one)."),
    ("bridge", "cert_file", "text", None, None, None,
     "`amqps://`: a client certificate (PEM) to present."),
    ("bridge", "key_file", "text", None, None, None,
     "`amqps://`: its private key (needs `cert_file`)."),
    ("bridge", "verify", "bool", True, None, None,
     "`amqps://`: check upstream's certificate and name."),
    ("bridge", "server_name", "text", None, None, None,
     "`amqps://`: the name sent (SNI) and checked. None: the URI's host. Over AMQP 1.0 also the "
     "`open`'s hostname, and an IoT Hub's host name in its user and tokens."),
    ("bridge", "protocol", "text", None, None, None,
     "`0-9-1`, or `1.0`: `amqp://` and `amqps://` URIs speak AMQP 1.0 (as `amqp10://` and "
     "`amqps10://` do). One protocol per bridge; up bridges only."),
    ("bridge", "address", "text", None, None, None,
     "AMQP 1.0: the target address, as upstream names it (`/exchange/X/RK` or `/amq/queue/Q` for "
     "RabbitMQ 3.x). None: RabbitMQ 4's address of `exchange` and `routing_key`, or each message's"
     " own (a null target); with `device_id`, `/devices/DEVICE/messages/events`."),
    ("bridge", "device_id", "text", None, None, None,
     "AMQP 1.0, Azure IoT Hub: the device the bridge logs in as (`DEVICE@sas.HUB`), with "
     "`sas_key`."),
    ("bridge", "sas_key", "text", None, None, None,
     "AMQP 1.0, Azure IoT Hub: the device's key (base64, as the portal shows it); the bridge makes"
     " its SAS tokens from it. Needs `amqps10://`."),
    ("bridge", "token_lifetime", "whole", 3600, None, None,
     "Seconds each SAS token is valid (10 at least); renewed at half of it."),
    ("bridge", "cbs", "bool", False, None, None,
     "Put the SAS tokens on `$cbs` (SASL ANONYMOUS, renewed on the same connection) rather than "
     "log in with them (SASL PLAIN, renewed by logging in again)."),
    ("bridge", "topic", "text", None, None, None,
     "MQTT only. Up: the topic each message is published to, a template: `{routing_key}` (the "
     "message's routing key, or `routing_key`, as a topic: `.` becomes `/`), `{exchange}`, "
     "`{client_id}`. Down: the topic filter subscribed to (QoS 1), or a list of them (required)."),
    ("bridge", "client_id", "text", None, None, None,
     "MQTT only: the client id (AWS IoT Core: the thing's name). None: the node's name and the "
     "bridge's, `NODE-NAME`."),
    ("bridge", "mqtt_version", "text", "3.1.1", None, None,
     "MQTT only: `3.1.1`, or `5` (headers travel as user properties; the broker's receive maximum "
     "bounds what is in flight)."),
    ("bridge", "session_expiry", "whole", 86400, None, None,
     "MQTT 5 only: seconds the broker keeps the bridge's session (its subscriptions and what they "
     "queue) after the link drops. 3.1.1 sessions are kept until cleaned."),
    ("bridge", "classes", "tables", None, None, None,
     "Up, with `source_exchange`: classes of messages, each a table of the keys below with a queue"
     " of its own (`hutch.bridge.NAME.CLASS`, shown as `NAME.CLASS`), all sent by the bridge's one"
     " link, by priority. None: one class, the bridge itself."),
    ("bridge", "alarm_backlog", "whole", 0, None, None,
     "Up: raise the bridge's alarm (`hutch_bridge_alarm`, a warning line, the status page) while "
     "this many messages or more wait to be forwarded. None: no such alarm. A class takes its "
     "bridge's."),
    ("bridge", "alarm_age", "number", 0, None, None,
     "Up: ... while the oldest waiting message is this many seconds old or more."),
    ("bridge", "alarm_bytes", "whole", 0, None, None,
     "Up: ... while the bytes waiting in its queue reach this (set it below a class's `max_bytes`:"
     " before anything is dropped or refused)."),
    ("bridge", "priority", "whole", 0, None, None,
     "0 to 9 (default 0): with an `[uplink]` budget, while an up bridge of a higher priority has "
     "messages waiting and its link is up or coming up, this one sends nothing."),
    ("bridge", "always_connected", "bool", False, None, None,
     "`true`: the bridge connects at any time, outside the `[uplink]`'s `hours` and `every` "
     "windows too (alarms that must not wait for a window). Default `false`."),
    ("bridge", "prefer_first", "bool", False, None, None,
     "Up, `amqp://` or `mqtt://` URIs: `true` moves back to an earlier URI of `uri` once it "
     "answers again, make-before-break: while on a later one, a second connection tries the "
     "earlier ones every `max_reconnect_delay` (AMQP: the handshake, the login, `confirm.select`, "
     "a passive declare of what the bridge sends to; MQTT: CONNECT and its CONNACK); only when one "
     "answers does the link stop sending, let its confirms come (5 s at most) and move. A primary and a standby want it; a cluster, whose "
     "nodes are alike, does not. Default `false`."),
    # a bridge's classes = [{...}]
    ("bridge.classes", "name", "text", None, None, None,
     "The class's name (required; no `/`)."),
    ("bridge.classes", "binding_key", "text", None, None, None,
     "What of `source_exchange` it takes (required)."),
    ("bridge.classes", "priority", "whole", 0, None, None,
     "0 to 9: while a class of a higher priority has messages to send, this one sends nothing "
     "(after an outage, alarms go before telemetry)."),
    ("bridge.classes", "ttl", "number", 0, None, None,
     "Seconds a message may wait: older ones are dropped, not forwarded stale, and counted. None: "
     "no limit."),
    ("bridge.classes", "max_bytes", "whole", 0, None, None,
     "The class's budget, in bytes of messages waiting. None: the broker's disk budget only."),
    ("bridge.classes", "when_full", "text", "refuse", None, None,
     "Past `max_bytes`: `refuse` new messages (a publisher's nack, an MQTT 5 PUBACK error), or "
     "`drop-oldest` (counted)."),
    ("bridge.classes", "always_connected", "bool", None, None, None,
     "As the bridge's `always_connected`, for this class (default: the bridge's): the link stays "
     "up for it outside the windows, the other classes waiting for theirs."),
    # a bridge's declare = {...}
    ("bridge.declare", "exchange_type", "text", None, None, None,
     "The type of `exchange` to declare upstream: `direct`, `fanout`, `topic` or `headers` (needs "
     "`exchange`)."),
    ("bridge.declare", "queue", "text", None, None, None,
     "A queue to declare upstream and bind to `exchange`."),
    ("bridge.declare", "binding_key", "text", None, None, None,
     "Its binding key. None: `routing_key`, else `#`."),
    ("bridge.declare", "arguments", "table", None, None, None,
     "The queue's arguments, as upstream takes them at a declare: `{ \"x-queue-type\" = "
     "\"quorum\" }` for a cluster's quorum queue (or `\"stream\"`). A queue that exists must have "
     "the same (RabbitMQ refuses a declare that differs: 406)."),
    # the query options of a bridge's uri ("?heartbeat=30")
    ("bridge.uri", "heartbeat", "seconds", 60, None, None,
     "Heartbeat interval in seconds offered to upstream (`?heartbeat=30`); over AMQP 1.0 the idle "
     "time-out."),
    ("bridge.uri", "frame_max", "seconds", 0, None, None,
     "The largest frame for the link; 0: this broker's `frame_max`."),
    ("bridge.uri", "connection_timeout", "seconds", 30000, None, None,
     "Milliseconds to wait for upstream's handshake before trying the host's next address, then the next URI."),
    ("bridge.uri", "auth_mechanism", "text", "plain", None, None,
     "`plain` (the URI's user and password) or `external`: over `amqps://` with `cert_file`, "
     "upstream takes the user from the client certificate; over AMQP 1.0 also `anonymous`."),
)
# fmt: on
KEYS = schema.keys_of("bridge", ROWS)  # each key's kind, default, description
ACK_MODES = ("on-confirm", "on-publish", "no-ack")
URI_OPTIONS = schema.keys_of("bridge.uri", ROWS)
AUTH_MECHANISMS = {"plain": "PLAIN", "external": "EXTERNAL", "anonymous": "ANONYMOUS"}  # RabbitMQ's URI values


def bridges_from(data, path="config"):
    """The checked bridges of a config file's data (config.read): a list of dicts."""
    tables = data.get("bridge", [])
    if isinstance(tables, dict):  # JSON written as one object rather than a list of them
        tables = [tables]
    if not isinstance(tables, list):
        raise ConfigError("%s: [[bridge]] must be a list of tables" % path)
    bridges = []
    names = set()
    for i, table in enumerate(tables):
        if not isinstance(table, dict):
            raise ConfigError("%s: [[bridge]] #%d must be a table" % (path, i + 1))
        bridge = _bridge(table, path, i + 1)
        bridge["classes"] = _classes(table, bridge, "%s: bridge '%s'" % (path, bridge["name"]))
        if bridge["classes"] is not None:
            bridge["queue"] = None  # (each class has its own)
        for name in [bridge["name"]] + [one["name"] for one in bridge["classes"] or ()]:
            if name in names:
                raise ConfigError("%s: bridge '%s': a second bridge named '%s'" % (path, name, name))
            names.add(name)
        bridges.append(bridge)
    return bridges


CLASS_KEYS = schema.keys_of("bridge.classes", ROWS)
WHEN_FULL = {"refuse": b"reject-publish", "drop-oldest": b"drop-head"}


def _classes(table, bridge, where):
    """An up bridge's `classes` (None without): each a queue of its own, hutch.bridge.NAME.CLASS,
    bound to `source_exchange` with the class's binding key, and shown as the bridge NAME.CLASS.
    The bridge's one link sends from them by priority (core/bridge/up.py): while a class of a
    higher priority has messages to send, a lower one sends nothing. A class may have a
    time-to-live (seconds: older messages are dropped, not forwarded stale) and a disk budget
    (max_bytes) with what happens when it is full: refuse new messages (a publisher's nack, an
    MQTT 5 PUBACK error) or drop the oldest."""
    classes = table.get("classes")
    if classes is None:
        return None
    if bridge["direction"] != "up" or bridge["source_exchange"] is None:
        raise ConfigError('%s: classes need an up bridge with source_exchange = "..." (what they bind to)' % where)
    if not isinstance(classes, list) or not classes or not all(isinstance(one, dict) for one in classes):
        raise ConfigError("%s: classes must be a list of tables (name, binding_key, priority, ...)" % where)
    out = []
    for one in classes:
        for key in one:
            if key not in CLASS_KEYS:
                raise ConfigError(
                    "%s: unknown key '%s' in a class%s (known: %s)"
                    % (where, key, did_you_mean(key, CLASS_KEYS), ", ".join(CLASS_KEYS))
                )
        name = one.get("name")
        if not isinstance(name, str) or not name or "/" in name:
            raise ConfigError('%s: each class needs name = "..." (no "/")' % where)
        key = _setting(one, "binding_key", where, "bridge.classes")
        if key is None:
            raise ConfigError(
                '%s: class %s needs binding_key = "..." (what of %s it takes)'
                % (where, name, bridge["source_exchange"])
            )
        when_full = one.get("when_full", _default("when_full", "bridge.classes"))
        if when_full not in WHEN_FULL:
            raise ConfigError(
                '%s: class %s: when_full must be "refuse" or "drop-oldest", not %r' % (where, name, when_full)
            )
        out.append(
            {
                "name": "%s.%s" % (bridge["name"], name),
                "queue": "hutch.bridge.%s.%s" % (bridge["name"], name),
                "binding_key": key,
                "priority": _setting(one, "priority", where, "bridge.classes"),
                "always_connected": _setting(
                    one, "always_connected", where, "bridge.classes", bridge["always_connected"]
                ),
                "ttl": _setting(one, "ttl", where, "bridge.classes") or None,
                "max_bytes": _setting(one, "max_bytes", where, "bridge.classes") or None,
                "when_full": WHEN_FULL[when_full],
            }
        )
    return out


def _bridge(table, path, number):
    where = "%s: [[bridge]] #%d" % (path, number)
    for key in table:
        if key not in KEYS:
            raise ConfigError(
                "%s: unknown key '%s'%s (known: %s)" % (where, key, did_you_mean(key, KEYS), ", ".join(KEYS))
            )
    name = table.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError('%s needs name = "..."' % where)
    where = "%s: bridge '%s'" % (path, name)
    direction = table.get("direction", _default("direction"))
    if direction not in ("up", "down"):
        raise ConfigError('%s: direction must be "up" or "down", not %r' % (where, direction))
    uris = table.get("uri")
    if isinstance(uris, str):
        uris = [uris]
    if not isinstance(uris, list) or not uris:
        raise ConfigError('%s needs uri = "amqp://user:password@host:port/vhost" (or a list of them)' % where)
    uris = [parse_uri(uri, where) for uri in uris]
    seen = {}
    for uri in uris:  # a node named twice: tried twice a round, and fail-over counts go wrong
        node = (uri["host"].lower(), uri["port"])
        if node in seen:
            raise ConfigError(
                "%s: uri names %s:%d twice (%s and %s): list each node once"
                % (where, node[0], node[1], seen[node], uri["uri"])
            )
        seen[node] = uri["uri"]
    protocol = _protocol(table, uris, direction, where)
    queue, source_exchange = _source(table, name, direction, protocol, where)
    ack_mode = table.get("ack_mode", _default("ack_mode"))
    if ack_mode not in ACK_MODES:
        raise ConfigError("%s: ack_mode must be one of %s, not %r" % (where, ", ".join(ACK_MODES), ack_mode))
    delay = _setting(table, "reconnect_delay", where)
    tls = _tls(table, where)
    for uri in uris:
        if uri["auth_mechanism"] == "EXTERNAL" and not (uri["tls"] and tls["cert_file"]):
            raise ConfigError(
                "%s: auth_mechanism=external in '%s' needs an amqps:// URI and cert_file (the client "
                "certificate that names the user)" % (where, uri["uri"])
            )
    bridge = {
        "name": name,
        "direction": direction,
        "uris": uris,
        "queue": queue,
        "source_exchange": source_exchange,
        "binding_key": _setting(table, "binding_key", where),
        "exchange": _setting(table, "exchange", where),
        "routing_key": _setting(table, "routing_key", where),
        "ack_mode": ack_mode,
        "prefetch": _setting(table, "prefetch", where),
        "reconnect_delay": delay,
        "max_reconnect_delay": max(delay, _setting(table, "max_reconnect_delay", where)),
        "watchdog": _setting(table, "watchdog", where),
        "max_rate": _setting(table, "max_rate", where),
        "max_byte_rate": _setting(table, "max_byte_rate", where),
        "tls": tls,
        "alarm_backlog": _setting(table, "alarm_backlog", where) or None,
        "alarm_age": _setting(table, "alarm_age", where) or None,
        "alarm_bytes": _setting(table, "alarm_bytes", where) or None,
        "declare": _declare(table, where),
        "protocol": protocol,
        "priority": _setting(table, "priority", where),
        "always_connected": _setting(table, "always_connected", where),
        "prefer_first": _prefer_first(table, protocol, direction, uris, where),
        "credit": protocol in upstreams.CREDIT,  # (what the driver and the machine read)
        "set_up": protocol in upstreams.SET_UP,
    }
    check = upstreams.CHECKS[protocol]  # (the protocol's own keys and URI rules)
    bridge.update(check(table, uris, direction, where, lambda key: _setting(table, key, where)))
    return bridge


def _source(table, name, direction, protocol, where):
    """(queue, source_exchange): what an up bridge forwards (a local queue, or its own queue
    bound to a local exchange) or the upstream queue a down bridge consumes (none for one that
    subscribes to topic filters: its protocol's checks read them)."""
    queue = table.get("queue")
    source_exchange = _setting(table, "source_exchange", where)
    if direction == "down" and protocol in upstreams.SUBSCRIBES:
        if queue is not None or source_exchange is not None:
            raise ConfigError(
                '%s: a down bridge from %s subscribes to topic = "..." (its filter, or a list of them), '
                "not a queue" % (where, _named(protocol))
            )
        return None, None
    if direction == "down":
        if source_exchange is not None or not isinstance(queue, str) or not queue:
            raise ConfigError('%s: a down bridge needs queue = "..." (the upstream queue it consumes)' % where)
    elif source_exchange is not None:
        if queue is not None:
            raise ConfigError("%s: queue or source_exchange, not both" % where)
        queue = "hutch.bridge." + name
    elif not isinstance(queue, str) or not queue:
        raise ConfigError('%s needs queue = "..." (the local queue it forwards) or source_exchange = "..."' % where)
    return queue, source_exchange


def _prefer_first(table, protocol, direction, uris, where):
    """prefer_first, where it can be had: an up bridge's, over a protocol whose probes go as far
    as the link's set-up (upstreams.PROBED: server/bridges/probe.py); with one URI it means
    nothing (said, not ignored)."""
    prefer = _setting(table, "prefer_first", where)
    if not prefer:
        return False
    if direction != "up" or protocol not in upstreams.PROBED:
        probed = " or ".join(upstreams.SCHEMES[one][0] + "://" for one in upstreams.PROBED)
        raise ConfigError("%s: prefer_first moves an up bridge back over %s URIs (not %s)"
                          % (where, probed, "a down bridge" if direction != "up" else _spoken(protocol)))  # fmt: skip
    if len(uris) < 2:
        raise ConfigError(
            "%s: prefer_first needs uri to be a list of two or more: it moves back to an earlier one" % where
        )
    return True


def _protocol(table, uris, direction, where):
    """The protocol every URI of the bridge speaks: its scheme's, or for amqp:// and amqps://
    the one protocol = "..." names (upstreams.SETTING, the first by default). One protocol per
    bridge; a key of another protocol's links is refused, naming the protocol it is for."""
    protocol = table.get("protocol")
    if protocol is not None and protocol not in upstreams.SETTING:
        raise ConfigError(
            "%s: protocol must be %s, not %r"
            % (where, " or ".join('"%s"' % one for one in upstreams.SETTING), protocol)
        )
    named = [uri["protocol"] for uri in uris if uri["protocol"] is not None]
    if named and protocol is not None and named[0] != protocol:
        raise ConfigError('%s: protocol = "%s", but a uri is %s' % (where, protocol, _spoken(named[0])))
    if named and (len(named) != len(uris) or len(set(named)) > 1):
        raise ConfigError(
            "%s: all its URIs must speak one protocol (amqp10:// with amqp10://, mqtt:// with mqtt://)" % where
        )
    protocol = named[0] if named else protocol or upstreams.SETTING[0]
    if direction == "down" and protocol not in upstreams.DOWN:
        raise ConfigError(
            "%s: a down bridge speaks %s, not %s"
            % (where, " or ".join(_named(one) for one in upstreams.DOWN), _spoken(protocol))
        )
    for other, keys in upstreams.KEYS.items():
        for key in keys:
            if other != protocol and key in table and key not in upstreams.KEYS[protocol]:
                raise ConfigError("%s: %s is for links over %s; this bridge speaks %s"
                                  % (where, key, _spoken(other), _spoken(protocol)))  # fmt: skip
    for uri in uris:
        uri["protocol"] = protocol
        uri["driver"] = upstreams.DRIVERS[protocol]  # (the module that connects it: driver.py)
    return protocol


def _spoken(protocol):
    return upstreams.SPOKEN[protocol]


def _named(protocol):
    """The protocol's name without its schemes ("MQTT")."""
    return _spoken(protocol).partition(" (")[0]


DECLARE_KEYS = schema.keys_of("bridge.declare", ROWS)


def _declare(table, where):
    """`declare`: what an up bridge declares upstream (durable) at each connect: its `exchange`
    of exchange_type, and a queue bound to it with binding_key (default: routing_key, or "#")."""
    declare = table.get("declare")
    if declare is None:
        return None
    if not isinstance(declare, dict):
        raise ConfigError("%s: declare must be a table (exchange_type, queue, binding_key)" % where)
    for key in declare:
        if key not in DECLARE_KEYS:
            raise ConfigError(
                "%s: unknown key '%s' in declare%s (known: %s)"
                % (where, key, did_you_mean(key, DECLARE_KEYS), ", ".join(DECLARE_KEYS))
            )
    out = {key: _setting(declare, key, where, "bridge.declare") for key in DECLARE_KEYS}
    if out["exchange_type"] not in (None, "direct", "fanout", "topic", "headers"):
        raise ConfigError("%s: declare.exchange_type must be direct, fanout, topic or headers" % where)
    if out["exchange_type"] and not table.get("exchange"):
        raise ConfigError('%s: declare.exchange_type needs exchange = "..." (the one to declare)' % where)
    if out["binding_key"] is None:
        out["binding_key"] = table.get("routing_key") or "#"
    arguments = out["arguments"]
    if arguments is not None:
        if not out["queue"]:
            raise ConfigError('%s: declare.arguments needs declare.queue = "..." (the queue they are for)' % where)
        for key, value in arguments.items():
            if isinstance(value, float) or not isinstance(value, (str, int)):  # (bool is an int)
                raise ConfigError(
                    "%s: declare.arguments.%s must be a string, an integer or true/false, not %r" % (where, key, value)
                )
    return out


def _tls(table, where):
    """The TLS settings of an amqps:// bridge (its files are read when the broker starts:
    server/startup.py bridge_tls_files)."""
    tls = {"verify": _setting(table, "verify", where), "server_name": _setting(table, "server_name", where)}
    for key in ("ca_file", "cert_file", "key_file"):
        tls[key] = _setting(table, key, where)
    if tls["key_file"] and not tls["cert_file"]:
        raise ConfigError("%s: key_file needs cert_file (the client certificate it belongs to)" % where)
    return tls


def parse_uri(uri, where="uri"):
    """amqp[s]://user:password@host:port/vhost?options (amqp[s]10:// for AMQP 1.0) as a dict;
    ConfigError if it is not one."""
    if not isinstance(uri, str):
        raise ConfigError("%s: a uri must be a string, not %r" % (where, uri))
    scheme, sep, rest = uri.partition("://")
    spoken = upstreams.scheme(scheme) if sep else None
    if spoken is None:
        raise ConfigError(
            "%s: '%s' is not an amqp://, amqps://, amqp10://, amqps10://, mqtt:// or mqtts:// URI"
            % (where, hide_password(uri))
        )
    protocol, tls = spoken
    rest, _, query = rest.partition("?")
    authority, slash, vhost = rest.partition("/")
    credentials, at, hostport = authority.rpartition("@")
    user, _, password = credentials.partition(":") if at else ("guest", "", "guest")
    host, port = hostport, upstreams.PORTS[protocol or upstreams.SETTING[0]][1 if tls else 0]
    if hostport.startswith("["):  # [ipv6]:port
        end = hostport.find("]")
        host, tail = hostport[1:end], hostport[end + 1 :]
        if tail.startswith(":"):
            port = _port(tail[1:], uri, where)
    elif ":" in hostport:
        host, _, text = hostport.rpartition(":")
        port = _port(text, uri, where)
    if not host:
        raise ConfigError("%s: '%s' names no host" % (where, hide_password(uri)))
    options = {name: _default(name, "bridge.uri") for name in URI_OPTIONS}  # frame_max 0: the broker's
    mechanism = AUTH_MECHANISMS[options.pop("auth_mechanism")]
    for pair in query.split("&") if query else ():
        key, _, value = pair.partition("=")
        if key not in URI_OPTIONS:
            raise ConfigError(
                "%s: unknown option '%s' in '%s' (known: %s)" % (where, key, hide_password(uri), ", ".join(URI_OPTIONS))
            )
        if key == "auth_mechanism":
            mechanism = AUTH_MECHANISMS.get(value.lower())
            if mechanism is None:
                raise ConfigError(
                    "%s: auth_mechanism must be plain, external or anonymous, not '%s' in '%s'"
                    % (where, value, hide_password(uri))
                )
            continue
        if not value.isdigit():
            raise ConfigError("%s: %s must be a whole number in '%s'" % (where, key, hide_password(uri)))
        options[key] = int(value)
    return {
        "uri": hide_password(uri),
        "tls": tls,
        "protocol": protocol,  # "1.0" for amqp10://; set for the others by the bridge's protocol
        "login": bool(at),  # the URI names a user
        "host": host,
        "port": port,
        "user": _unquote(user),
        "password": _unquote(password),
        "vhost": _unquote(vhost) if slash and vhost else "/",
        "heartbeat": options["heartbeat"],
        "frame_max": options["frame_max"],
        "connection_timeout": options["connection_timeout"],
        "auth_mechanism": mechanism,
    }


def _port(text, uri, where):
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ConfigError("%s: '%s' has no valid port" % (where, hide_password(uri)))
    return int(text)


def _unquote(text):
    """%XX escapes, as in RabbitMQ's URIs (the vhost "/" is %2F)."""
    if "%" not in text:
        return text
    out = bytearray()
    i = 0
    raw = text.encode()
    while i < len(raw):
        if raw[i] == 37 and _is_hex(raw[i + 1 : i + 3]):  # %XX
            out.append(int(raw[i + 1 : i + 3].decode(), 16))
            i += 3
        else:
            out.append(raw[i])
            i += 1
    return bytes(out).decode()


def _is_hex(pair):
    return len(pair) == 2 and all(c in b"0123456789abcdefABCDEF" for c in pair)


def hide_password(uri):
    """The URI as logs and status may show it: without its password."""
    scheme, sep, rest = uri.partition("://")
    authority, slash, tail = rest.partition("/")
    credentials, at, hostport = authority.rpartition("@")
    if at and ":" in credentials:
        credentials = credentials.partition(":")[0] + ":***"
    return scheme + sep + credentials + at + hostport + slash + tail


def _default(key, section="bridge"):
    # type: (str, str) -> Any
    return schema.row_of(section, key, ROWS)[schema.DEFAULT]


# The numbers of [[bridge]] tables (ROWS: kind "number", at least 0 and a fraction allowed, in
# its unit; kind "whole", within its bounds), by key: names a board holds already, where kinds
# of their own would add theirs to its heap.
UNITS = {"max_rate": "messages per second", "max_byte_rate": "bytes per second"}  # else seconds
RANGES = {
    "prefetch": (1, 65535),
    "priority": (0, 9),
    "token_lifetime": (10, 365 * 86400),
    "session_expiry": (0, 0xFFFFFFFF),
}  # fmt: skip  (else a count: 0 to 2 ** 50)


def _setting(table, key, where, section="bridge", default=None):
    # type: (dict, str, str, str, object) -> Any
    """A key of a [[bridge]] table (or of its classes or declare: section), checked by its row of
    ROWS (schema.table_setting); absent, the row's default (or default, when the row's is None:
    a class's always_connected is its bridge's)."""
    return schema.table_setting(ROWS, table, key, where, section, RANGES, UNITS, default)
