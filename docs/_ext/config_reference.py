"""The configuration reference (docs/configuration.md), generated from the code that reads the file.

Every key comes from the schema the broker checks a config file against: the sections and
their keys, with their descriptions, from server/schema.py (`SECTIONS` in server/config.py),
the limits from `Limits` (core/limits.py), the bridge keys from `KEYS`, `DECLARE_KEYS` and
`URI_OPTIONS` (server/bridge_config.py). Every default comes from the code too: `settings()`
(server/options.py) run on an empty config, `Limits()`, each board profile (boards/),
`bridges_from()` on a minimal bridge. What the limits', users' and bridges' keys are for is
written here, in DESCRIPTIONS: a key of the schema without a description, or a description
of a key the schema no longer has, fails the docs build (ConfigReferenceError), so a new key
cannot ship undocumented.

docs/configuration.md holds each table NAME of TABLES (below) in a region
`<!-- generated: config-reference NAME -->`, written by `python docs/_ext/generated.py`
(docs/_ext/generated.py), which the site's build and tests/docs/test_docs.py check.
"""

from hutch import boards
from hutch.core.limits import Limits
from hutch.server import bridge_config, config, options, schema


class ConfigReferenceError(Exception):
    pass


# What each key is for, by "section.key" ("bridge.declare.queue", "bridge.uri?heartbeat" for a
# URI option): those of server/schema.py's rows, and below the limits', the users' and the
# bridges' keys. Present tense, for users; defaults come from the code, not from here.
DESCRIPTIONS = {
    "%s.%s" % (row[schema.SECTION], row[schema.KEY]): row[schema.DESCRIPTION]
    for row in schema.KEYS
    if row[schema.SECTION] is not None
}
DESCRIPTIONS.update(
    {
        # [limits]: core/limits.py
        "limits.frame_max": "The largest frame, offered in `connection.tune`. A larger frame closes the connection "
        "with 501 (a client's frame may be 8 octets over, as RabbitMQ allows).",
        "limits.channel_max": "Channels open at once on a connection, offered in `connection.tune`. One more closes "
        "the connection with 530; any channel number from 1 to 65535 opens.",
        "limits.heartbeat": "The heartbeat interval in seconds offered in `connection.tune` (the client may "
        "choose less, or 0 for none). A client silent for two intervals is disconnected.",
        "limits.max_connections": "Connections at once; `connection.open` beyond it is refused with 530.",
        "limits.max_queues": "Queues at once; a declare beyond it closes the channel with 406.",
        "limits.max_exchanges": "Exchanges at once (the predeclared ones included); beyond it: 406.",
        "limits.max_bindings": "Bindings at once; beyond it: 406.",
        "limits.max_consumers": "Consumers at once; beyond it: 406.",
        "limits.max_message_bytes": "The largest message body; a larger publish closes the channel with 406.",
        "limits.queue_max_messages": "Messages in one queue. A full queue nacks publishers in confirm mode and "
        "stops reading the others until it drains.",
        "limits.queue_max_bytes": "Body bytes in one queue, with the same answer as `queue_max_messages`.",
        "limits.total_max_messages": "Messages in memory in all queues together. Past it, `connection.blocked` "
        "goes to the clients that support it, confirm-mode publishers get `basic.nack`, others are not read.",
        "limits.total_max_bytes": "Body bytes in memory in all queues together, with the same answer.",
        "limits.low_water_percent": "Publishers blocked by the total budgets are released once the broker is "
        "under this percentage of them.",
        "limits.queue_window_messages": "Messages a durable queue keeps in memory once it has a backlog; the rest "
        "waits in the journal on disk ([Backlogs](backlogs.md)).",
        "limits.queue_window_bytes": "Body bytes of that window.",
        "limits.page_read_bytes": "How much a queue reads back from the journal at a time.",
        "limits.output_high_water": "Bytes waiting to be sent to one client before the broker stops delivering "
        "to it (a consumer that does not read cannot fill the memory).",
        "limits.stream_segment_bytes": "A stream's segment file when `x-stream-max-segment-size-bytes` does not "
        "say; retention drops whole segments.",
        "limits.handshake_timeout_ms": "From the TCP connection to `connection.open`: a client that takes longer "
        "is disconnected.",
        "limits.handshakes_per_source": "Connections from one address still in their handshake at once; a new "
        "one drops the oldest, so a source that opens sockets and says nothing holds this many.",
        "limits.failed_logins_per_source": "Failed logins from one address in 10 s before its next failing "
        "connection is dropped at once (no delayed 403 holding its socket); the log says so once per 10 s.",
        "limits.auth_failure_delay_ms": "A refused login is answered (403) only after this delay, so a guessing "
        "client gets few tries.",
        "limits.close_timeout_ms": "How long the broker waits for `connection.close-ok` after it closed a "
        "connection, before it hangs up.",
        "limits.amqp10_sessions": "Sessions one AMQP 1.0 connection may have at once (its open says `channel-max`, "
        "one less); a `begin` past it closes the connection.",
        "limits.amqp10_links": "Links one AMQP 1.0 session may have at once (its begin says `handle-max`, one less).",
        "limits.amqp10_session_window": "Transfer frames an AMQP 1.0 client may send on a session before the broker "
        "opens its window again (at half); one more ends the session with `amqp:session:window-violation`.",
        "limits.amqp10_link_credit": "Messages an AMQP 1.0 client may send on a link before it is given more credit "
        "(again at half; none while publishers are blocked).",
        "limits.max_sensors": "Sensors whose readings are deduplicated by their `x-sensor-id` and `x-sensor-seq` "
        "([Exactly once from the sensor](exactly-once.md)); past it the sensor first heard from longest ago is "
        "forgotten (counted in `hutch_sensors_forgotten_total`). `0`: readings are taken as they come.",
        "limits.sensor_window": "How far behind a sensor's highest sequence number a repeat is still told from a "
        "new reading (a whole number of bits; each sensor costs about a byte per 8 of them). A number further "
        "behind starts the sensor's count over.",
        # [users.NAME] and [auth]
        "users.password_hash": '`[users.NAME] password_hash = "..."`: the user NAME and the hash of its '
        "password, as `hutch passwd` prints it, or a RabbitMQ `rabbit_password_hashing_sha256` hash from a "
        "definitions export. With a `[users]` table, only the users listed exist; without one, the user "
        "`guest` (password `guest`) exists.",
        "users.tags": "The user's tags, as RabbitMQ's: `administrator`, `monitoring`, `management`.",
        "users.permissions": '`{configure = "...", write = "...", read = "..."}`: regular expressions the '
        'names of queues and exchanges must match (searched, not anchored; `""` matches nothing), as '
        "RabbitMQ's permissions on the virtual host `/`. A pattern not given is `.*`.",
        "users.topic_permissions": '`{"amq.topic" = {write = "...", read = "..."}}`: per topic exchange, the '
        "routing keys the user may publish with (write) and bind with (read).",
        # [[bridge]]: server/bridge_config.py
        "bridge.name": "The bridge's name, unique in the file: logs, `hutch ctl bridges`, the `x-hutch-origin` "
        "header, and the queue `hutch.bridge.NAME` of a `source_exchange` bridge. Required.",
        "bridge.direction": "`up`: a local queue forwarded to upstream. `down`: an upstream queue consumed and "
        "published here.",
        "bridge.uri": "The upstream broker: `amqp://user:password@host:port/vhost` (`amqps://` for TLS), or a "
        "list of them, tried in order; over AMQP 1.0 `amqp10://user:password@host:port` (`amqps10://` for "
        "TLS); to an MQTT broker `mqtt://user:password@host:1883` (`mqtts://`, port 8883, for TLS). Query "
        "options below. Required.",
        "bridge.queue": "Up: the local queue to forward (declared durable if missing). Down: the upstream queue "
        "to consume (it must exist; from MQTT, `topic` instead). Required, unless `source_exchange` is given.",
        "bridge.source_exchange": "Up only, instead of `queue`: a local exchange; the bridge forwards what a "
        "durable queue of its own, `hutch.bridge.NAME`, bound to it takes.",
        "bridge.binding_key": "The binding key of that queue to `source_exchange`.",
        "bridge.exchange": "Where messages are published (upstream for an up bridge, here for a down one). "
        "None: each message's own exchange (from MQTT: `amq.topic`). Over AMQP 1.0, with `routing_key`, the link's target "
        "(`/exchanges/X/RK`, `/queues/RK` for the default exchange).",
        "bridge.routing_key": "The routing key they are published with. None: each message's own.",
        "bridge.ack_mode": "`on-confirm`: a message leaves the source queue once the destination confirmed it. "
        "`on-publish` and `no-ack`: once it is written to the socket (faster, loses what is in flight).",
        "bridge.prefetch": "Messages in flight at most. None: 1000, or a quarter of `total_max_messages` "
        "when that is less (esp32: 24).",
        "bridge.reconnect_delay": "Seconds before the first retry after a failed connection; doubled after each "
        "failed round.",
        "bridge.max_reconnect_delay": "The longest retry delay in seconds: each wait is between half of the "
        "delay and the delay (jitter), never past this.",
        "bridge.watchdog": "A link that confirms nothing for this many seconds while messages wait is torn down "
        "and replaced. 0: off.",
        "bridge.declare": "Up only: what to set up upstream at each connect (durable): a table of the keys below.",
        "bridge.max_rate": "Messages per second at most; 0: no limit.",
        "bridge.max_byte_rate": "Body bytes per second at most (a metered link); 0: no limit.",
        "bridge.ca_file": "`amqps://` (and `amqps10://`, `mqtts://`): the CA certificate (PEM) upstream's certificate is checked against. "
        "None: the system's CAs (a board needs one).",
        "bridge.cert_file": "`amqps://`: a client certificate (PEM) to present.",
        "bridge.key_file": "`amqps://`: its private key (needs `cert_file`).",
        "bridge.verify": "`amqps://`: check upstream's certificate and name.",
        "bridge.server_name": "`amqps://`: the name sent (SNI) and checked. None: the URI's host. Over AMQP 1.0 "
        "also the `open`'s hostname, and an IoT Hub's host name in its user and tokens.",
        "bridge.protocol": "`0-9-1`, or `1.0`: `amqp://` and `amqps://` URIs speak AMQP 1.0 (as "
        "`amqp10://` and `amqps10://` do). One protocol per bridge; up bridges only.",
        "bridge.address": "AMQP 1.0: the target address, as upstream names it (`/exchange/X/RK` or "
        "`/amq/queue/Q` for RabbitMQ 3.x). None: RabbitMQ 4's address of `exchange` and `routing_key`, "
        "or each message's own (a null target); with `device_id`, `/devices/DEVICE/messages/events`.",
        "bridge.device_id": "AMQP 1.0, Azure IoT Hub: the device the bridge logs in as (`DEVICE@sas.HUB`), with `sas_key`.",
        "bridge.sas_key": "AMQP 1.0, Azure IoT Hub: the device's key (base64, as the portal shows it); the "
        "bridge makes its SAS tokens from it. Needs `amqps10://`.",
        "bridge.token_lifetime": "Seconds each SAS token is valid (10 at least); renewed at half of it.",
        "bridge.cbs": "Put the SAS tokens on `$cbs` (SASL ANONYMOUS, renewed on the same connection) "
        "rather than log in with them (SASL PLAIN, renewed by logging in again).",
        "bridge.topic": "MQTT only. Up: the topic each message is published to, a template: `{routing_key}` "
        "(the message's routing key, or `routing_key`, as a topic: `.` becomes `/`), `{exchange}`, "
        "`{client_id}`. Down: the topic filter subscribed to (QoS 1), or a list of them (required).",
        "bridge.client_id": "MQTT only: the client id (AWS IoT Core: the thing's name). None: the node's "
        "name and the bridge's, `NODE-NAME`.",
        "bridge.mqtt_version": "MQTT only: `3.1.1`, or `5` (headers travel as user properties; the "
        "broker's receive maximum bounds what is in flight).",
        "bridge.session_expiry": "MQTT 5 only: seconds the broker keeps the bridge's session (its "
        "subscriptions and what they queue) after the link drops. 3.1.1 sessions are kept until cleaned.",
        "bridge.alarm_backlog": "Up: raise the bridge's alarm (`hutch_bridge_alarm`, a warning line, the status page) "
        "while this many messages or more wait to be forwarded. None: no such alarm. A class takes its bridge's.",
        "bridge.alarm_age": "Up: ... while the oldest waiting message is this many seconds old or more.",
        "bridge.alarm_bytes": "Up: ... while the bytes waiting in its queue reach this (set it below a class's "
        "`max_bytes`: before anything is dropped or refused).",
        "bridge.priority": "0 to 9 (default 0): with an `[uplink]` budget, while an up bridge of a higher "
        "priority has messages waiting and its link is up or coming up, this one sends nothing.",
        "bridge.always_connected": "`true`: the bridge connects at any time, outside the `[uplink]`'s "
        "`hours` and `every` windows too (alarms that must not wait for a window). Default `false`.",
        "bridge.classes": "Up, with `source_exchange`: classes of messages, each a table of the keys below "
        "with a queue of its own (`hutch.bridge.NAME.CLASS`, shown as `NAME.CLASS`), all sent by the "
        "bridge's one link, by priority. None: one class, the bridge itself.",
        "bridge.classes.name": "The class's name (required; no `/`).",
        "bridge.classes.binding_key": "What of `source_exchange` it takes (required).",
        "bridge.classes.priority": "0 to 9: while a class of a higher priority has messages to send, this one "
        "sends nothing (after an outage, alarms go before telemetry).",
        "bridge.classes.ttl": "Seconds a message may wait: older ones are dropped, not forwarded stale, and "
        "counted. None: no limit.",
        "bridge.classes.max_bytes": "The class's budget, in bytes of messages waiting. None: the broker's disk "
        "budget only.",
        "bridge.classes.when_full": "Past `max_bytes`: `refuse` new messages (a publisher's nack, an MQTT 5 "
        "PUBACK error), or `drop-oldest` (counted).",
        "bridge.classes.always_connected": "As the bridge's `always_connected`, for this class (default: "
        "the bridge's): the link stays up for it outside the windows, the other classes waiting for theirs.",
        "bridge.declare.exchange_type": "The type of `exchange` to declare upstream: `direct`, `fanout`, `topic` "
        "or `headers` (needs `exchange`).",
        "bridge.declare.queue": "A queue to declare upstream and bind to `exchange`.",
        "bridge.declare.binding_key": "Its binding key. None: `routing_key`, else `#`.",
        "bridge.uri?heartbeat": "Heartbeat interval in seconds offered to upstream (`?heartbeat=30`); over "
        "AMQP 1.0 the idle time-out.",
        "bridge.uri?frame_max": "The largest frame for the link; 0: this broker's `frame_max`.",
        "bridge.uri?connection_timeout": "Milliseconds to wait for upstream's handshake before trying the next URI.",
        "bridge.uri?auth_mechanism": "`plain` (the URI's user and password) or `external`: over `amqps://` with "
        "`cert_file`, upstream takes the user from the client certificate; over AMQP 1.0 also `anonymous`.",
    }
)

# The sections whose keys come from elsewhere than SECTIONS' tuple (None there).
FREE_FORM = {
    "limits": lambda: sorted(Limits().as_dict()),
    "users": lambda: list(config.USER_KEYS),
    "bridge": lambda: list(bridge_config.KEYS),
}

PROFILE_COLUMNS = ("rpi", "esp32", "esp32s3-psram", "rp2-pico-w")


def schema_keys():
    """Every documented key, "section.key", in the schema's order."""
    keys = []
    for section, names in config.SECTIONS.items():
        if names is None:
            if section not in FREE_FORM:
                raise ConfigReferenceError(
                    "config section [%s] has no fixed keys (None in SECTIONS), and docs/_ext/config_reference.py "
                    "does not know where its keys are listed: add it to FREE_FORM" % section
                )
            names = FREE_FORM[section]()
        keys.extend("%s.%s" % (section, name) for name in names)
    keys.extend("listener.tls.%s" % name for name in config.TLS_KEYS)
    keys.extend("bridge.declare.%s" % name for name in bridge_config.DECLARE_KEYS)
    keys.extend("bridge.classes.%s" % name for name in bridge_config.CLASS_KEYS)
    keys.extend("bridge.uri?%s" % name for name in bridge_config.URI_OPTIONS)
    return keys


def check():
    """Raise ConfigReferenceError naming each key without a description, and each stale description."""
    keys = schema_keys()
    missing = [key for key in keys if not DESCRIPTIONS.get(key, "").strip()]
    stale = sorted(set(DESCRIPTIONS) - set(keys))
    problems = []
    if missing:
        problems.append(
            "config keys without a description in docs/_ext/config_reference.py DESCRIPTIONS: %s" % ", ".join(missing)
        )
    if stale:
        problems.append("descriptions of keys the config schema does not have: %s" % ", ".join(stale))
    if problems:
        raise ConfigReferenceError("; ".join(problems))
    return keys


# ---------------------------------------------------------------- defaults, from the code


def size(value):
    """A byte count as the file takes it, with its size in KiB/MiB/GiB when it is a round one."""
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= factor and value % factor == 0:
            return "`%d` (%d %s)" % (value, value // factor, unit)
    return "`%d`" % value


def shown(value, key=""):
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "`%s`" % ("true" if value else "false")
    if isinstance(value, int) and ("bytes" in key or key.endswith(("high_water", "frame_max"))):
        return size(value)
    if isinstance(value, float) and value == int(value):
        return "`%s`" % value
    if isinstance(value, (list, tuple)):
        return "`[%s]`" % ", ".join('"%s"' % v for v in value)
    if isinstance(value, str):
        return '`"%s"`' % value
    return "`%s`" % (value,)


def server_defaults():
    settings = options.settings(options.Options())  # no config file, no options: the defaults
    given = {key: settings.get(key) for key in config.SECTIONS["server"]}
    for row in schema.KEYS:  # (a key settings() turns into something else: its schema default)
        if row[schema.SECTION] == "server" and given.get(row[schema.KEY]) is None:
            given[row[schema.KEY]] = row[schema.DEFAULT]
    return given


def bridge_defaults():
    """The defaults of a bridge with only its required keys, as the checks fill them in."""
    bridge = bridge_config.bridges_from({"bridge": [{"name": "b", "uri": "amqp://upstream", "queue": "q"}]})[0]
    out = {}
    for key in bridge_config.KEYS:
        if key in bridge["tls"]:
            out[key] = bridge["tls"][key]
        elif key in bridge:
            out[key] = bridge[key]
        else:
            out[key] = None
    out["name"] = out["uri"] = out["queue"] = "required"
    out["binding_key"] = bridge["binding_key"] or None
    uri = bridge_config.parse_uri("amqp://upstream")
    for name in bridge_config.URI_OPTIONS:
        out["uri?" + name] = uri[name]
    return out


# ---------------------------------------------------------------- the tables


def row(*cells):
    return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"


def key_table(section, names, defaults):
    lines = [row("key", "default", "what it does"), row("---", "---", "---")]
    for name in names:
        default = defaults.get(name)
        cell = default if default == "required" else shown(default, name)
        lines.append(row("`%s`" % name, cell, DESCRIPTIONS["%s.%s" % (section, name)]))
    return lines


def table_server():
    return key_table("server", config.SECTIONS["server"], server_defaults())


def table_listener():
    defaults = {row[schema.KEY]: row[schema.DEFAULT] for row in schema.KEYS if row[schema.SECTION] == "listener"}
    return key_table("listener", config.SECTIONS["listener"], defaults)


def table_listener_tls():
    """A TLS listener's keys, with the defaults its checks fill in (server/options.py) on a table
    with only the required keys (any readable file will do for them there)."""
    defaults = options.tls_settings({"certfile": __file__, "keyfile": __file__}, "docs")
    defaults.update(certfile="required", keyfile="required")
    return key_table("listener.tls", config.TLS_KEYS, defaults)


def table_limits():
    defaults = Limits().as_dict()
    return key_table("limits", sorted(defaults), defaults)


def table_profiles():
    """Each limit and storage value per board profile: what `--board NAME` sets."""
    columns = ["unix (default)"] + list(PROFILE_COLUMNS)
    profiles = [boards.load("unix")] + [boards.load(name) for name in PROFILE_COLUMNS]
    values = [Limits(**profile.LIMITS).as_dict() for profile in profiles]
    lines = [row("", *columns), row(*["---"] * (len(columns) + 1))]
    for name in sorted(values[0]):
        lines.append(row("`%s`" % name, *[shown(v[name], name) for v in values]))
    lines.append(row("`journal_max_bytes`", *[size(p.STORAGE["max_bytes"]) for p in profiles]))
    lines.append(row("`segment_bytes`", *[size(p.STORAGE["segment_bytes"]) for p in profiles]))
    largest = [size(p.STORAGE.get("max_segment_bytes", options.MAX_SCALED_SEGMENT)) for p in profiles]
    lines.append(row("`segment_bytes` grows to, at most", *largest))
    lines.append(row("`data`", *['`"%s"`' % p.STORAGE["path"] for p in profiles]))
    lines.append(row("read buffer", *[size(p.READ_SIZE) for p in profiles]))
    lines.append(row("heap sized for", *[size(p.HEAP) if p.HEAP else "the machine's" for p in profiles]))
    lines.append(row("`amqp10`", *["true" if getattr(p, "AMQP10", True) else "false" for p in profiles]))
    return lines


def table_users():
    return key_table(
        "users",
        config.USER_KEYS,
        {"password_hash": "required", "tags": "[]", "permissions": "every permission", "topic_permissions": "none"},
    )


def table_auth():
    users = config.users_from({})
    return key_table("auth", config.SECTIONS["auth"], {"loopback_users": list(users.loopback_users)})


def table_wifi():
    return key_table("wifi", config.SECTIONS["wifi"], {})


def table_bridge():
    return key_table("bridge", bridge_config.KEYS, bridge_defaults())


def table_bridge_declare():
    defaults = {"binding_key": None}
    return key_table("bridge.declare", bridge_config.DECLARE_KEYS, defaults)


def table_bridge_classes():
    defaults = {"name": "required", "binding_key": "required", "priority": 0, "ttl": None, "max_bytes": None,
                "when_full": "refuse"}  # fmt: skip
    return key_table("bridge.classes", bridge_config.CLASS_KEYS, defaults)


def table_bridge_uri():
    defaults = bridge_defaults()
    return key_table("bridge.uri", (), {}) + [
        row("`%s`" % name, shown(defaults["uri?" + name], name), DESCRIPTIONS["bridge.uri?" + name])
        for name in bridge_config.URI_OPTIONS
    ]


# The sections with a table of their own above; every other section of SECTIONS is shown by
# table_other_sections, so a section added to the schema appears in the reference at once.
OWN_TABLES = ("server", "listener", "limits", "users", "auth", "wifi", "bridge")


def table_other_sections():
    settings = options.settings(options.Options())
    lines = []
    for section, names in config.SECTIONS.items():
        if section in OWN_TABLES:
            continue
        names = FREE_FORM[section]() if names is None else names
        given = settings.get(section)
        if not isinstance(given, dict):  # (a section settings() does not give whole: its schema defaults)
            given = {row[schema.KEY]: row[schema.DEFAULT] for row in schema.KEYS if row[schema.SECTION] == section}
        defaults = given
        lines += ["", "## `[%s]`" % section, ""] + key_table(section, names, defaults)
    return lines


TABLES = {
    "other-sections": table_other_sections,
    "server": table_server,
    "listener": table_listener,
    "listener-tls": table_listener_tls,
    "limits": table_limits,
    "profiles": table_profiles,
    "users": table_users,
    "auth": table_auth,
    "wifi": table_wifi,
    "bridge": table_bridge,
    "bridge-declare": table_bridge_declare,
    "bridge-classes": table_bridge_classes,
    "bridge-uri": table_bridge_uri,
}
