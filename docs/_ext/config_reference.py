"""The configuration reference (docs/configuration.md), generated from the code that reads the file.

Every key comes from the schema the broker checks a config file against: the sections and
their keys, with their descriptions, from server/schema.py (`SECTIONS` in server/config.py)
and server/bridges/config.py's ROWS, the limits from `Limits` (core/limits.py). Every default
comes from the code: `settings()` (server/options.py) run on an empty config, `Limits()`, each
board profile (boards/), `bridges_from()` on a minimal bridge, the schema's rows. What the
limits' and users' keys are for is written here, in DESCRIPTIONS: a key of the schema without
a description, or a description of a key the schema no longer has, fails the docs build
(ConfigReferenceError), so a new key cannot ship undocumented.

docs/configuration.md holds each table NAME of TABLES (below) in a region
`<!-- generated: config-reference NAME -->`, written by `python docs/_ext/generated.py`
(docs/_ext/generated.py), which the site's build and tests/docs/test_docs.py check.
"""

from hutch import boards
from hutch.core.limits import Limits
from hutch.server import config, options, schema
from hutch.server.bridges import config as bridge_config
from hutch.server.devices import config as device_config
from hutch.server.fleet import config as fleet_config

ROWS = schema.KEYS + bridge_config.ROWS + device_config.ROWS + fleet_config.ROWS


class ConfigReferenceError(Exception):
    pass


# What each key is for, by "section.key" ("bridge.declare.queue", "bridge.uri.heartbeat" for a
# URI option): those of server/schema.py's rows, and below the limits' and the users' keys. Present tense, for users; defaults come from the code, not from here.
DESCRIPTIONS = {
    "%s.%s" % (row[schema.SECTION], row[schema.KEY]): row[schema.DESCRIPTION]
    for row in ROWS
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
        "limits.max_connections": "Connections at once (AMQP and MQTT together); `connection.open` beyond it is "
        "refused with 530, an MQTT CONNECT with CONNACK 0x89, Server busy (3.1.1: 3). Without a board profile, on CPython, "
        "the default is what the process's file descriptors allow, when that is more: `hutch serve` raises its "
        "soft limit (`ulimit -n`) to the hard one and keeps 100 for its own files.",
        "limits.max_queues": "Queues at once; a declare beyond it closes the channel with 406.",
        "limits.max_exchanges": "Exchanges at once (the predeclared ones included); beyond it: 406.",
        "limits.max_bindings": "Bindings at once; beyond it: 406.",
        "limits.max_consumers": "Consumers at once; beyond it: 406.",
        "limits.max_message_bytes": "The largest message body; a larger publish closes the channel with 406.",
        "limits.queue_max_messages": "Messages in one queue. A full queue nacks publishers in confirm mode; the "
        "others (MQTT, 0-9-1 without confirms) are not read until it has room, their next publish left unread.",
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
    }
)

# The sections whose keys come from elsewhere than SECTIONS' tuple (None there).
FREE_FORM = {
    "limits": lambda: sorted(Limits().as_dict()),
    "users": lambda: list(config.USER_KEYS),
    "bridge": lambda: list(bridge_config.KEYS),
    "device": lambda: list(device_config.KEYS),
    "fleet": lambda: list(fleet_config.KEYS),
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
    keys.extend("bridge.uri.%s" % name for name in bridge_config.URI_OPTIONS)
    keys.extend("device.registers.%s" % name for name in device_config.REGISTER_KEYS)
    keys.extend("device.uri.%s" % name for name in device_config.URI_OPTIONS)
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
        else:  # (another protocol's key: its row's default)
            out[key] = schema.row_of("bridge", key, bridge_config.ROWS)[schema.DEFAULT]
    out["name"] = out["uri"] = out["queue"] = "required"
    out["binding_key"] = bridge["binding_key"] or None
    uri = bridge_config.parse_uri("amqp://upstream")
    for name in bridge_config.URI_OPTIONS:
        out["uri." + name] = uri[name]
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


def section_defaults(section):
    """The defaults of a section's rows in server/schema.py."""
    return {row[schema.KEY]: row[schema.DEFAULT] for row in ROWS if row[schema.SECTION] == section}


def table_listener():
    return key_table("listener", config.SECTIONS["listener"], section_defaults("listener"))


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
    free = [size(p.STORAGE["disk_free_limit"]) if p.STORAGE.get("disk_free_limit") else "none" for p in profiles]
    lines.append(row("`disk_free_limit`", *free))
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
    defaults = section_defaults("bridge.classes")
    defaults.update(name="required", binding_key="required", ttl=None, max_bytes=None)  # (0: none)
    return key_table("bridge.classes", bridge_config.CLASS_KEYS, defaults)


def table_bridge_uri():
    defaults = bridge_defaults()
    return key_table("bridge.uri", (), {}) + [
        row("`%s`" % name, shown(defaults["uri." + name], name), DESCRIPTIONS["bridge.uri." + name])
        for name in bridge_config.URI_OPTIONS
    ]


def table_device():
    defaults = section_defaults("device")
    defaults.update(name="required", uri="required", registers="required")
    return key_table("device", device_config.KEYS, defaults)


def table_device_registers():
    defaults = section_defaults("device.registers")
    defaults.update(name="required", address="required", type="uint16")
    return key_table("device.registers", device_config.REGISTER_KEYS, defaults)


def table_device_uri():
    return key_table("device.uri", device_config.URI_OPTIONS, section_defaults("device.uri"))


# The keys a section cannot do without, shown so rather than with a default.
REQUIRED = {"fleet": {"uri": "required", "keys": "required"}}

# The sections with a table of their own above; every other section of SECTIONS is shown by
# table_other_sections, so a section added to the schema appears in the reference at once.
OWN_TABLES = ("server", "listener", "limits", "users", "auth", "wifi", "bridge", "device")


def table_other_sections():
    settings = options.settings(options.Options())
    lines = []
    for section, names in config.SECTIONS.items():
        if section in OWN_TABLES:
            continue
        names = FREE_FORM[section]() if names is None else names
        given = settings.get(section)
        if not isinstance(given, dict):  # (a section settings() does not give whole: its schema defaults)
            given = section_defaults(section)
        defaults = dict(given, **REQUIRED.get(section, {}))
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
    "device": table_device,
    "device-registers": table_device_registers,
    "device-uri": table_device_uri,
}
