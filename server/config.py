"""The broker's config file: TOML on CPython (tomllib), JSON where tomllib is missing.

    [server]
    bind = "0.0.0.0"        # the short form of one [[listener]]
    port = 5672
    data = "hutch-data"     # the journal: durable definitions and persistent messages
    journal_max_bytes = 1073741824   # disk budget (default: the board profile's)
    segment_bytes = 8388608          # one journal segment file (default: the board profile's)
    serial = ["/dev/ttyUSB0"]   # also serve AMQP on these serial links (ports/serial.py)
    baud = 115200

    [limits]              # any field of hutch.core.limits.Limits
    frame_max = 131072

    [users.guest]         # no [users] table at all means the built-in guest/guest
    password_hash = "..."  # from `hutch passwd`, or a RabbitMQ SHA-256 hash

    [auth]
    loopback_users = ["guest"]   # these users may only log in from 127.0.0.1/::1
    anonymous_login_user = "sensor"  # offer ANONYMOUS, logging in as this user (default: not offered)

    [[listener]]          # as many as you like, instead of [server] bind/port
    protocol = "amqp"     # (the default; AMQP 0-9-1, and 1.0 once it is served)
    bind = "0.0.0.0"
    port = 5672

    [[listener]]          # AMQP over TLS (amqps)
    port = 5671
    tls = {certfile = "server.pem", keyfile = "server.key", cacertfile = "ca.pem", verify_peer = true}

Every mistake is reported as ConfigError with the file and key, so `hutch
serve` can print one readable line instead of a traceback.
"""

try:
    import tomllib
except ImportError:  # MicroPython: no TOML parser in the firmware
    tomllib = None
import json

from ..core.auth import Users, decode_hash
from ..core.limits import Limits
from . import schema
from .listeners import LISTENERS, SECTION
from .schema import ConfigError  # noqa: F401 (config.ConfigError: what every reader of the config raises)

# Each section's keys (server/schema.py); None: a section whose keys are checked where it is read
# ([limits]: core/limits.py, [users.NAME]: USER_KEYS, [[bridge]]: server/bridges/config.py and
# [[device]]: server/devices/config.py, by their rows in server/schema.py's format).
SECTIONS = {
    "wifi": schema.keys_of("wifi"),  # used by firmware/main.py on boards with a network module
    "server": schema.keys_of("server"),
    "limits": None,
    "users": None,
    "auth": schema.keys_of("auth"),
    "bridge": None,
    "device": None,  # [[device]]: server/devices/config.py
    "fleet": None,  # [fleet]: server/fleet/config.py
    "listener": schema.keys_of("listener"),  # [[listener]]: a list of tables, each with these keys
    "metrics": schema.keys_of("metrics"),  # the metrics port: Prometheus and the status page
    "uplink": schema.keys_of("uplink"),  # the bridges' shared budget and windows (core/bridge/uplink.py)
}

for _row in LISTENERS.values():  # a front end's own section ([mqtt]): its row in server/listeners.py
    if _row[SECTION] is not None:
        SECTIONS[_row[SECTION]] = schema.keys_of(_row[SECTION])

# The keys of a [[listener]]'s tls table, checked by server/options.py.
TLS_KEYS = schema.keys_of("listener.tls")


# The keys of a [users.NAME] table.
USER_KEYS = ("password_hash", "tags", "permissions", "topic_permissions")


def read(path):
    """The config file as a dict of sections (an empty dict for no file)."""
    if path is None:
        return {}
    if tomllib is None and path.endswith(".toml"):
        raise ConfigError(
            "cannot read %s: this Python has no TOML parser (MicroPython); "
            "write the same sections as a JSON file instead" % path
        )
    try:
        if tomllib is not None and not path.endswith(".json"):
            with open(path, "rb") as f:
                data = tomllib.load(f)
        else:
            with open(path) as f:
                data = json.load(f)
    except OSError as e:
        raise ConfigError("cannot read config file %s: %s" % (path, e))
    except ValueError as e:  # tomllib.TOMLDecodeError and JSON errors are ValueErrors
        raise ConfigError("config file %s is not valid: %s" % (path, e))
    for section in data:
        if section not in SECTIONS:
            raise ConfigError("%s: unknown section [%s] (known: %s)" % (path, section, ", ".join(sorted(SECTIONS))))
        if section in (
            "bridge",
            "device",
        ):  # (checked where they are read: server/bridges/config.py, server/devices/config.py)
            continue
        if section == "listener":
            tables = data[section]
            if not isinstance(tables, list) or not tables or not all(isinstance(t, dict) for t in tables):
                raise ConfigError("%s: listener must be one or more [[listener]] tables" % path)
            for table in tables:
                _known_keys(path, "[[listener]]", table, SECTIONS[section])
            continue
        if not isinstance(data[section], dict):
            raise ConfigError("%s: [%s] must be a table" % (path, section))
        allowed = SECTIONS[section]
        if allowed is not None:
            _known_keys(path, "[%s]" % section, data[section], allowed)
    return data


def _known_keys(path, where, table, allowed):
    for key in table:
        if key not in allowed:
            raise ConfigError(
                "%s: unknown key '%s' in %s%s (known: %s)"
                % (path, key, where, did_you_mean(key, allowed), ", ".join(allowed))
            )


def did_you_mean(word, known):
    """' (did you mean 'NAME'?)' for the known name a misspelt word is nearest to (at most two
    letters off, or the start of it), else ''."""
    best, fewest = None, 3
    for name in known:
        edits = min(_edits(word, name), 2 if name.startswith(word) and len(word) > 3 else 3)  # (password)
        if edits < fewest:
            best, fewest = name, edits
    return " (did you mean '%s'?)" % best if best is not None else ""


def _edits(a, b):
    """The edit distance of two words: letters added, removed or changed, and two neighbours
    swapped ("prot" is one edit from "port"): Damerau-Levenshtein's optimal string alignment."""
    before = above = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        row = [i]
        for j in range(1, len(b) + 1):
            cost = min(above[j] + 1, row[j - 1] + 1, above[j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                cost = min(cost, before[j - 2] + 1)
            row.append(cost)
        before, above = above, row
    return above[-1]


def limits_from(data, path="config", base=None):
    """Limits from the [limits] section, on top of `base` (a board profile's LIMITS)."""
    values = dict(base or {})
    values.update(data.get("limits", {}))
    known = Limits().as_dict()
    for name in values:
        if name not in known:
            raise ConfigError("%s: [limits]: unknown limit '%s'%s" % (path, name, did_you_mean(name, known)))
    try:
        return Limits(**values)
    except ValueError as e:
        raise ConfigError("%s: [limits]: %s" % (path, e))


def users_from(data, path="config"):
    """The [users.NAME] tables: each user's password hash, tags and permissions on "/" (every
    permission unless `permissions` or `topic_permissions` says otherwise)."""
    auth = data.get("auth", {})
    loopback = schema.check("users", auth.get("loopback_users", ["guest"]), "%s: [auth] loopback_users" % path)
    if "users" not in data:
        return Users(loopback_users=loopback)
    hashes, permissions, tags = {}, {}, {}
    for name, entry in data["users"].items():
        where = "%s: [users.%s]" % (path, name)
        if not isinstance(entry, dict):
            raise ConfigError('%s must be a table: [users.%s] password_hash = "..."' % (where, name))
        unknown = [k for k in entry if k not in USER_KEYS]
        if unknown:  # first: a misspelt password_hash is that, not a missing one
            raise ConfigError(
                "%s: unknown key '%s' in [users.%s]%s (known: %s)"
                % (path, unknown[0], name, did_you_mean(unknown[0], USER_KEYS), ", ".join(USER_KEYS))
            )
        if not isinstance(entry.get("password_hash"), str):
            raise ConfigError('%s needs password_hash = "..." (make one with `hutch passwd`)' % where)
        if decode_hash(entry["password_hash"]) is None:
            raise ConfigError("%s password_hash is not a password hash: make one with `hutch passwd`" % where)
        hashes[name] = entry["password_hash"]
        user_tags = entry.get("tags", [])
        if not isinstance(user_tags, list) or not all(isinstance(t, str) for t in user_tags):
            raise ConfigError("%s tags must be a list of strings (administrator, monitoring, management)" % where)
        tags[name] = user_tags
        permissions[name] = _permissions(entry, where)
    return Users(hashes, loopback_users=loopback, permissions=permissions, tags=tags)


def _permissions(entry, where):
    """A user's core/access.py Permissions, or None for every permission (no `permissions`, no
    `topic_permissions`). A pattern that is not one (or that MicroPython's re would mis-match,
    on a board) is refused here, naming it."""
    given = entry.get("permissions")
    topics = entry.get("topic_permissions")
    if given is None and topics is None:
        return None
    from ..core.access import Permissions  # only a config with permissions loads their code

    patterns = []
    given = {} if given is None else given
    if not isinstance(given, dict) or [k for k in given if k not in ("configure", "write", "read")]:
        raise ConfigError("%s permissions must be a table of configure, write and read patterns" % where)
    for kind in ("configure", "write", "read"):
        patterns.append(given.get(kind, ".*"))
    by_exchange = {}
    for exchange, pair in (topics or {}).items():
        if not isinstance(pair, dict) or [k for k in pair if k not in ("write", "read")]:
            raise ConfigError("%s topic_permissions.%s must be a table of write and read patterns" % (where, exchange))
        by_exchange[exchange.encode()] = (pair.get("write", ".*"), pair.get("read", ".*"))
    try:
        return Permissions(patterns[0], patterns[1], patterns[2], by_exchange)
    except ValueError as e:
        raise ConfigError("%s %s" % (where, e))
