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

from .config import ConfigError, did_you_mean

KEYS = (
    "name",
    "direction",
    "uri",
    "queue",
    "source_exchange",
    "binding_key",
    "exchange",
    "routing_key",
    "ack_mode",
    "prefetch",
    "reconnect_delay",
    "max_reconnect_delay",
    "watchdog",
    "declare",
    "max_rate",
    "max_byte_rate",
    "ca_file",
    "cert_file",
    "key_file",
    "verify",
    "server_name",
    "protocol",
    "address",
    "device_id",
    "sas_key",
    "token_lifetime",
    "cbs",
    "topic",
    "client_id",
    "mqtt_version",
    "session_expiry",
    "classes",
    "alarm_backlog",
    "alarm_age",
    "alarm_bytes",
    "priority",
    "always_connected",
)
PROTOCOLS = ("0-9-1", "1.0")
SCHEMES = {
    "amqp": (False, None),
    "amqps": (True, None),
    "amqp10": (False, "1.0"),
    "amqps10": (True, "1.0"),
    "mqtt": (False, "mqtt"),
    "mqtts": (True, "mqtt"),
}
DEFAULT_PORTS = {None: (5672, 5671), "1.0": (5672, 5671), "mqtt": (1883, 8883)}
ACK_MODES = ("on-confirm", "on-publish", "no-ack")
URI_OPTIONS = ("heartbeat", "frame_max", "connection_timeout", "auth_mechanism")
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


CLASS_KEYS = ("name", "binding_key", "priority", "ttl", "max_bytes", "when_full", "always_connected")
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
        key = _optional_text(one, "binding_key", where)
        if key is None:
            raise ConfigError(
                '%s: class %s needs binding_key = "..." (what of %s it takes)'
                % (where, name, bridge["source_exchange"])
            )
        when_full = one.get("when_full", "refuse")
        if when_full not in WHEN_FULL:
            raise ConfigError(
                '%s: class %s: when_full must be "refuse" or "drop-oldest", not %r' % (where, name, when_full)
            )
        out.append(
            {
                "name": "%s.%s" % (bridge["name"], name),
                "queue": "hutch.bridge.%s.%s" % (bridge["name"], name),
                "binding_key": key,
                "priority": _whole(one, "priority", 0, where, 0, 9),
                "always_connected": _flag(one, "always_connected", bridge["always_connected"], where),
                "ttl": _number(one, "ttl", 0, where) or None,
                "max_bytes": _whole(one, "max_bytes", 0, where, 0, 1 << 50) or None,
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
    direction = table.get("direction", "up")
    if direction not in ("up", "down"):
        raise ConfigError('%s: direction must be "up" or "down", not %r' % (where, direction))
    uris = table.get("uri")
    if isinstance(uris, str):
        uris = [uris]
    if not isinstance(uris, list) or not uris:
        raise ConfigError('%s needs uri = "amqp://user:password@host:port/vhost" (or a list of them)' % where)
    queue = table.get("queue")
    source_exchange = _optional_text(table, "source_exchange", where)
    mqtt_down = direction == "down" and _names_mqtt(uris)
    if (
        direction == "down"
        and not mqtt_down
        and (source_exchange is not None or not isinstance(queue, str) or not queue)
    ):
        raise ConfigError('%s: a down bridge needs queue = "..." (the upstream queue it consumes)' % where)
    if mqtt_down:
        if queue is not None or source_exchange is not None:
            raise ConfigError(
                '%s: a down bridge from MQTT subscribes to topic = "..." (its filter, or a list of them), '
                "not a queue" % where
            )
    elif source_exchange is not None:
        if queue is not None:
            raise ConfigError("%s: queue or source_exchange, not both" % where)
        queue = "hutch.bridge." + name
    elif not isinstance(queue, str) or not queue:
        raise ConfigError('%s needs queue = "..." (the local queue it forwards) or source_exchange = "..."' % where)
    ack_mode = table.get("ack_mode", "on-confirm")
    if ack_mode not in ACK_MODES:
        raise ConfigError("%s: ack_mode must be one of %s, not %r" % (where, ", ".join(ACK_MODES), ack_mode))
    delay = _number(table, "reconnect_delay", 1.0, where)
    uris = [parse_uri(uri, where) for uri in uris]
    tls = _tls(table, where)
    protocol = _protocol(table, uris, where)
    for uri in uris:
        if uri["auth_mechanism"] == "EXTERNAL" and not (uri["tls"] and tls["cert_file"]):
            raise ConfigError(
                "%s: auth_mechanism=external in '%s' needs an amqps:// URI and cert_file (the client "
                "certificate that names the user)" % (where, uri["uri"])
            )
    amqp10 = _amqp10(table, uris, protocol, direction, where)
    mqtt = _mqtt(table, protocol, direction, where)
    if protocol == "mqtt" and direction == "down":
        queue = None  # (an MQTT subscription: its topic filters)
    bridge = {
        "name": name,
        "direction": direction,
        "uris": uris,
        "queue": queue,
        "source_exchange": source_exchange,
        "binding_key": _optional_text(table, "binding_key", where) or "",
        "exchange": _optional_text(table, "exchange", where),
        "routing_key": _optional_text(table, "routing_key", where),
        "ack_mode": ack_mode,
        "prefetch": _whole(table, "prefetch", None, where, 1, 65535) if "prefetch" in table else None,
        "reconnect_delay": delay,
        "max_reconnect_delay": max(delay, _number(table, "max_reconnect_delay", 30.0, where)),
        "watchdog": _number(table, "watchdog", 60.0, where),
        "max_rate": _number(table, "max_rate", 0, where, "messages per second"),
        "max_byte_rate": _number(table, "max_byte_rate", 0, where, "bytes per second"),
        "tls": tls,
        "alarm_backlog": _whole(table, "alarm_backlog", 0, where, 0, 1 << 50) or None,
        "alarm_age": _number(table, "alarm_age", 0, where) or None,
        "alarm_bytes": _whole(table, "alarm_bytes", 0, where, 0, 1 << 50) or None,
        "declare": _declare(table, where),
        "protocol": protocol,
        "priority": _whole(table, "priority", 0, where, 0, 9),
        "always_connected": _flag(table, "always_connected", False, where),
    }
    bridge.update(amqp10)
    bridge.update(mqtt)
    return bridge


def _protocol(table, uris, where):
    """The protocol of every URI of the bridge: "1.0" for amqp10:// and amqps10://, and for
    amqp:// and amqps:// with protocol = "1.0"; else "0-9-1". One protocol per bridge."""
    protocol = table.get("protocol")
    if protocol is not None and protocol not in PROTOCOLS:
        raise ConfigError('%s: protocol must be "0-9-1" or "1.0", not %r' % (where, protocol))
    named = [uri["protocol"] for uri in uris if uri["protocol"] is not None]
    if named and protocol is not None and (protocol == "0-9-1" or named[0] == "mqtt"):
        raise ConfigError('%s: protocol = "%s", but a uri is %s' % (where, protocol, _spoken(named[0])))
    if named and (len(named) != len(uris) or len(set(named)) > 1):
        raise ConfigError(
            "%s: all its URIs must speak one protocol (amqp10:// with amqp10://, mqtt:// with mqtt://)" % where
        )
    protocol = named[0] if named else protocol or "0-9-1"
    for uri in uris:
        uri["protocol"] = protocol
        if protocol == "0-9-1" and uri["auth_mechanism"] == "ANONYMOUS":
            raise ConfigError("%s: auth_mechanism=anonymous in '%s' is AMQP 1.0's only" % (where, uri["uri"]))
        if protocol == "mqtt" and (uri["vhost"] != "/" or uri["auth_mechanism"] != "PLAIN" or uri["frame_max"]):
            raise ConfigError(
                "%s: '%s': an MQTT URI names no vhost, auth_mechanism or frame_max (the options are heartbeat, "
                "its keep-alive in seconds, and connection_timeout)" % (where, uri["uri"])
            )
        if protocol == "1.0" and uri["vhost"] != "/":
            raise ConfigError(
                "%s: '%s' names a vhost: an AMQP 1.0 link has none (its host is the open's hostname)"
                % (where, uri["uri"])
            )
    return protocol


def _spoken(protocol):
    return "MQTT (mqtt:// or mqtts://)" if protocol == "mqtt" else "AMQP 1.0 (amqp10:// or amqps10://)"


AMQP10_KEYS = ("address", "device_id", "sas_key", "token_lifetime", "cbs")
IOT_HUB_TARGET = "/devices/%s/messages/events"


def _amqp10(table, uris, protocol, direction, where):
    """The keys of an AMQP 1.0 uplink: the target `address`; for Azure IoT Hub, the device,
    its key and the lifetime of the SAS tokens made from it, and whether they go on $cbs."""
    out = {"address": None, "device_id": None, "sas_key": None, "token_lifetime": 3600, "cbs": False}
    if protocol != "1.0":
        for key in AMQP10_KEYS:
            if key in table:
                raise ConfigError('%s: %s is for AMQP 1.0 links (amqp10:// URIs, or protocol = "1.0")' % (where, key))
        if protocol == "mqtt" and table.get("declare") is not None:
            raise ConfigError("%s: declare is AMQP 0-9-1's: an MQTT broker needs nothing declared" % where)
        return out
    if direction != "up":
        raise ConfigError("%s: a down bridge speaks AMQP 0-9-1 only (its uri is AMQP 1.0)" % where)
    if table.get("declare") is not None:
        raise ConfigError(
            "%s: declare is AMQP 0-9-1's: over AMQP 1.0 the target must exist upstream (set it up there)" % where
        )
    address = _optional_text(table, "address", where)
    if address is not None and (table.get("exchange") is not None or table.get("routing_key") is not None):
        raise ConfigError("%s: address or exchange/routing_key, not both (address is the whole target)" % where)
    if address == "":
        raise ConfigError('%s: address must name a target ("/queues/NAME", "/exchange/X/KEY", ...)' % where)
    device = _optional_text(table, "device_id", where)
    key = _optional_text(table, "sas_key", where)
    if (device is None) != (key is None) or device == "":
        raise ConfigError("%s: device_id and sas_key go together (an IoT Hub device and its key)" % where)
    if key is not None:
        import binascii  # (a bridge with a sas_key)

        try:
            if not binascii.a2b_base64(key):
                raise ValueError
        except ValueError:
            raise ConfigError("%s: sas_key must be the device's key in base64, as Azure shows it" % where)
        for uri in uris:
            if not uri["tls"]:
                raise ConfigError("%s: '%s': a SAS token goes over TLS only (amqps10://)" % (where, uri["uri"]))
            if uri["login"]:
                raise ConfigError(
                    "%s: '%s' names a user: with device_id and sas_key the bridge makes its own" % (where, uri["uri"])
                )
        if address is None:
            address = IOT_HUB_TARGET % device
    for name in ("token_lifetime", "cbs"):
        if name in table and key is None:
            raise ConfigError("%s: %s needs sas_key (the key its tokens are made from)" % (where, name))
    cbs = _flag(table, "cbs", False, where)
    out.update(
        address=address,
        device_id=device,
        sas_key=key,
        token_lifetime=_whole(table, "token_lifetime", 3600, where, 10, 365 * 86400),
        cbs=cbs,
    )
    return out


MQTT_KEYS = ("topic", "client_id", "mqtt_version", "session_expiry")
MQTT_VERSIONS = {"3.1.1": "3.1.1", "5": "5", "5.0": "5"}


def _names_mqtt(uris):
    """Whether the (unparsed) uri setting names MQTT brokers (mqtt:// or mqtts://)."""
    return any(isinstance(uri, str) and uri.partition("://")[0] in ("mqtt", "mqtts") for uri in uris)


def _mqtt(table, protocol, direction, where):
    """The keys of an MQTT link: up, the `topic` template each message goes to ("{routing_key}",
    the message's routing key with `.` as `/`; "{exchange}", "{client_id}"); down, the topic
    filter (or filters) it subscribes to; the client id (default: the node's name and the
    bridge's), the protocol version and a version 5 session's expiry (seconds)."""
    out = {"topic": None, "filters": None, "client_id": None, "mqtt_version": "3.1.1", "session_expiry": 86400}
    if protocol != "mqtt":
        for key in MQTT_KEYS:
            if key in table:
                raise ConfigError("%s: %s is for MQTT links (mqtt:// or mqtts:// URIs)" % (where, key))
        return out
    topic = table.get("topic")
    if direction == "down":
        filters = [topic] if isinstance(topic, str) else topic
        if not isinstance(filters, list) or not filters or not all(isinstance(f, str) and f for f in filters):
            raise ConfigError('%s: a down bridge from MQTT needs topic = "..." (the filter it subscribes to)' % where)
        out["filters"] = filters
    else:
        if topic is not None and (not isinstance(topic, str) or not topic):
            raise ConfigError('%s: topic must be a template such as "dt/gateway-7/{routing_key}"' % where)
        out["topic"] = topic or "{routing_key}"
        if "+" in out["topic"] or "#" in out["topic"]:
            raise ConfigError("%s: topic '%s' holds a wildcard: a message goes to one topic" % (where, topic))
    out["client_id"] = _optional_text(table, "client_id", where)
    version = table.get("mqtt_version", "3.1.1")
    if version not in MQTT_VERSIONS:
        raise ConfigError('%s: mqtt_version must be "3.1.1" or "5", not %r' % (where, version))
    out["mqtt_version"] = MQTT_VERSIONS[version]
    out["session_expiry"] = _whole(table, "session_expiry", 86400, where, 0, 0xFFFFFFFF)
    if "session_expiry" in table and out["mqtt_version"] != "5":
        raise ConfigError(
            '%s: session_expiry is MQTT 5\'s (mqtt_version = "5"): 3.1.1 keeps a session until it is cleaned' % where
        )
    return out


DECLARE_KEYS = ("exchange_type", "queue", "binding_key")


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
    out = {key: _optional_text(declare, key, where) for key in DECLARE_KEYS}
    if out["exchange_type"] not in (None, "direct", "fanout", "topic", "headers"):
        raise ConfigError("%s: declare.exchange_type must be direct, fanout, topic or headers" % where)
    if out["exchange_type"] and not table.get("exchange"):
        raise ConfigError('%s: declare.exchange_type needs exchange = "..." (the one to declare)' % where)
    if out["binding_key"] is None:
        out["binding_key"] = table.get("routing_key") or "#"
    return out


def _tls(table, where):
    """The TLS settings of an amqps:// bridge (its files are read when the broker starts:
    server/startup.py bridge_tls_files)."""
    tls = {"verify": _flag(table, "verify", True, where), "server_name": _optional_text(table, "server_name", where)}
    for key in ("ca_file", "cert_file", "key_file"):
        tls[key] = _optional_text(table, key, where)
    if tls["key_file"] and not tls["cert_file"]:
        raise ConfigError("%s: key_file needs cert_file (the client certificate it belongs to)" % where)
    return tls


def parse_uri(uri, where="uri"):
    """amqp[s]://user:password@host:port/vhost?options (amqp[s]10:// for AMQP 1.0) as a dict;
    ConfigError if it is not one."""
    if not isinstance(uri, str):
        raise ConfigError("%s: a uri must be a string, not %r" % (where, uri))
    scheme, sep, rest = uri.partition("://")
    if not sep or scheme not in SCHEMES:
        raise ConfigError(
            "%s: '%s' is not an amqp://, amqps://, amqp10://, amqps10://, mqtt:// or mqtts:// URI"
            % (where, _hide_password(uri))
        )
    tls, protocol = SCHEMES[scheme]
    rest, _, query = rest.partition("?")
    authority, slash, vhost = rest.partition("/")
    credentials, at, hostport = authority.rpartition("@")
    user, _, password = credentials.partition(":") if at else ("guest", "", "guest")
    host, port = hostport, DEFAULT_PORTS[protocol][1 if tls else 0]
    if hostport.startswith("["):  # [ipv6]:port
        end = hostport.find("]")
        host, tail = hostport[1:end], hostport[end + 1 :]
        if tail.startswith(":"):
            port = _port(tail[1:], uri, where)
    elif ":" in hostport:
        host, _, text = hostport.rpartition(":")
        port = _port(text, uri, where)
    if not host:
        raise ConfigError("%s: '%s' names no host" % (where, _hide_password(uri)))
    options = {"heartbeat": 60, "frame_max": 0, "connection_timeout": 30000}  # frame_max 0: the broker's
    mechanism = "PLAIN"
    for pair in query.split("&") if query else ():
        key, _, value = pair.partition("=")
        if key not in URI_OPTIONS:
            raise ConfigError(
                "%s: unknown option '%s' in '%s' (known: %s)"
                % (where, key, _hide_password(uri), ", ".join(URI_OPTIONS))
            )
        if key == "auth_mechanism":
            mechanism = AUTH_MECHANISMS.get(value.lower())
            if mechanism is None:
                raise ConfigError(
                    "%s: auth_mechanism must be plain, external or anonymous, not '%s' in '%s'"
                    % (where, value, _hide_password(uri))
                )
            continue
        if not value.isdigit():
            raise ConfigError("%s: %s must be a whole number in '%s'" % (where, key, _hide_password(uri)))
        options[key] = int(value)
    return {
        "uri": _hide_password(uri),
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
        raise ConfigError("%s: '%s' has no valid port" % (where, _hide_password(uri)))
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


def _hide_password(uri):
    """The URI as logs and status may show it: without its password."""
    scheme, sep, rest = uri.partition("://")
    authority, slash, tail = rest.partition("/")
    credentials, at, hostport = authority.rpartition("@")
    if at and ":" in credentials:
        credentials = credentials.partition(":")[0] + ":***"
    return scheme + sep + credentials + at + hostport + slash + tail


def _optional_text(table, key, where):
    value = table.get(key)
    if value is not None and not isinstance(value, str):
        raise ConfigError("%s: %s must be a string, not %r" % (where, key, value))
    return value


def _flag(table, key, default, where):
    value = table.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError("%s: %s must be true or false, not %r" % (where, key, value))
    return value


def _whole(table, key, default, where, low, high):
    value = table.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ConfigError("%s: %s must be a whole number from %d to %d, not %r" % (where, key, low, high, value))
    return value


def _number(table, key, default, where, unit="a number of seconds"):
    value = table.get(key, default)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
        raise ConfigError("%s: %s must be %s, not %r" % (where, key, unit, value))
    return float(value)
