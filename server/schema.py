"""The config file's sections and the command line's options, each key written once.

One row per key: (section, key, kind, default, flag, help, description).

    section      the config file's table ("server"; "listener" for each [[listener]];
                 "listener.tls" for a listener's tls table); None: the command line only
    kind         what a value must be: KINDS below, checked by check() with one wording each
    default      the value when neither the file nor the command line gives one (None: none,
                 or one server/options.py works out, such as the board profile's)
    flag         its command-line option ("--port"), or None
    help         the option's help line (`hutch serve --help`)
    description  what the key does, for docs/configuration.md (docs/_ext/config_reference.py)

server/config.py takes its SECTIONS from here (an unknown key is refused), server/options.py its
argparse options, its Options and its checks, and the docs their reference. Adding a key is one
row here, the line of settings() that uses it, and its test.

The [limits] keys are core/limits.py's Limits (each a field with its default and bounds). The
[[bridge]] tables' rows, in this format, are server/bridges/config.py's ROWS: a board loads this
module at every start, that one only with bridges to check (the names in the rows stay in a
board's heap once loaded).

Loaded only to start: a board forgets it with server/options.py (server/serve.py).
"""

# kind -> (what a value must be, as an error says it); check() holds the tests
KINDS = {
    "address": "an address",
    "port": "a number from 0 to 65535",
    "folder": "a folder's name",
    "file": "a file name",
    "level": "debug, info, warning or error",
    "board": "a board profile's name",
    "seconds": "a whole number of seconds",
    "bytes": "a number of bytes, at least 4096",
    "positive": "a positive number",
    "bool": "true or false",
    "devices": "a list of device names",
    "users": "a list of user names",
    "strings": "a list of strings",
    "watermark": "a number of bytes (at least 4096), or a fraction above 0 and at most 1",
    "user": "a user's name",
    "protocol": "a protocol",
    "table": "a table",
    "text": "a string",
    "hours": 'a list of windows "HH:MM-HH:MM" (local time)',
    "name": "1 to 64 letters, digits, '-' or '_' (it names the gateway in headers, metrics and Parquet partitions)",
}
# what a gateway's name may hold: a routing key's word, a header, a metric's label and a Parquet
# partition's folder carry it as it is (ASCII: MicroPython's str has no isalnum)
NAME_CHARACTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"
NAME_MOST = 64
INTEGERS = ("port", "seconds", "bytes", "positive")  # (their command-line options are numbers)
LEVELS = ("debug", "info", "warning", "error")

# fmt: off
KEYS = (
    # [wifi]: read by a board's main.py (firmware/main.py)
    ("wifi", "ssid", "text", None, None, None,
     "The Wi-Fi network a board joins at start (boards with a network module: ESP32, Pico W)."),
    ("wifi", "password", "text", None, None, None,
     "Its password."),
    # [server]
    ("server", "bind", "address", "0.0.0.0", "--bind", "address to listen on (default 0.0.0.0)",
     "The address to listen on for AMQP over TCP (`--bind`). `127.0.0.1` serves this machine only."),
    ("server", "port", "port", 5672, "--port", "TCP port (default 5672)",
     "The TCP port to listen on (`--port`)."),
    ("server", "data", "folder", None, "--data", "data folder (default ./hutch-data, or the board's)",
     "The data folder (`--data`): the journal, the streams, the lock, the status file. One broker "
     "per folder. Default: the board profile's path."),
    ("server", "name", "name", None, "--name", "this gateway's name (default: the host name)",
     "This gateway's name (`--name`): 1 to 64 letters, digits, `-` or `_`. Bridges carry it upstream "
     "(the header `x-hutch-gateway` on what they forward, where it has none, and their connections' "
     "names, `hutch bridge NAME/BRIDGE`), devices stamp it on their readings, `hutch pipeline` keys "
     "readings by it, and `hutch ctl status`, the status page and `/metrics` show it. Default: the "
     "host name (its first label, any other character as `-`); a board's network host name."),
    ("server", "log_level", "level", "info", "--log-level", "debug, info, warning or error (default info)",
     "`debug`, `info`, `warning` or `error` (`--log-level`)."),
    ("server", "board", "board", None, "--board", "board profile: %s (default: limits from the config)",
     "A board profile (`--board`): its limits, read buffer, storage and UARTs. None: the core's "
     "limits below."),
    ("server", "stats_interval", "seconds", None, "--stats-interval",
     "log heap and queue figures every N seconds (default 60 on MicroPython, 0 = off)",
     "Every N seconds, log connections, queued messages and the heap (`--stats-interval`). 0: "
     "never; on MicroPython the default is 60."),
    ("server", "serial", "devices", None, "--serial",
     "also serve AMQP over this serial port, e.g. /dev/ttyUSB0 (repeat for more)",
     "Serial devices to serve AMQP on too (`--serial`), e.g. `[\"/dev/ttyUSB0\"]`, or a board's UART"
     " by its profile name, `\"uart2\"`."),
    ("server", "baud", "positive", None, "--baud", "serial baud rate (default 115200)",
     "The baud rate of serial links whose profile entry sets none (`--baud`)."),
    ("server", "journal_max_bytes", "bytes", None, None, None,
     "The journal's and the streams' disk budget. From 90 % of it publishers are blocked until "
     "acks bring it under 75 %. Default: the board profile's."),
    ("server", "disk_free_limit", "bytes", None, None, None,
     "Publishers are blocked while less than this is free on the data folder's disk, so that "
     "acks, a bridge's confirms and segment deletions still have room to be written; cleared "
     "once a tenth more is free. Default: 50000000 (50 MB, as RabbitMQ) on a host's profile; "
     "none on a board's, whose `journal_max_bytes` fits its flash."),
    ("server", "memory_high_watermark", "watermark", None, None, None,
     "Publishers are blocked while the broker's resident memory is above this, and let go under "
     "90 % of it: bytes, or a fraction of the memory there is (the cgroup's limit, if set, else "
     "the machine's). Default: 0.4 on a host, as RabbitMQ's; a board's heap is watched by its profile."),
    ("server", "segment_bytes", "bytes", None, None, None,
     "The size of one journal segment file. Default: the profile's, grown in proportion when "
     "`journal_max_bytes` is raised above the profile's, up to the profile's largest (below: 16 "
     "KiB on esp32, 8 MiB on the others)."),
    ("server", "definitions", "file", None, "--definitions",
     "users, permissions, exchanges, queues and bindings to load at start (RabbitMQ's JSON)",
     "A definitions file in RabbitMQ's JSON format (`rabbitmqctl export_definitions`): its users, "
     "permissions, topic permissions, exchanges, queues and bindings are loaded at start "
     "(`--definitions FILE` too); what hutch has no counterpart for is logged by name."),
    ("server", "log_file", "file", None, "--log-file", "append the log to FILE (default: standard error)",
     "Append the log to this file (`--log-file`); without it the log goes to standard error, where"
     " a terminal or journald reads it. Not on a board."),
    ("server", "amqp10", "bool", None, None, None,
     "Serve AMQP 1.0 clients on the AMQP listeners beside 0-9-1 (the protocol header a client "
     "sends chooses). Default: true on CPython (false with the esp32 and rp2-pico-w profiles, "
     "`amqp10` below); false on MicroPython, where a board serves 1.0 when this says true."),
    ("server", "mqtt", "bool", False, None, None,
     "Serve MQTT (3.1, 3.1.1 and 5.0) on `bind`, port `mqtt_port`, beside AMQP ([MQTT](mqtt.md)). "
     "`[[listener]]`s with `protocol = \"mqtt\"` serve it too."),
    ("server", "mqtt_port", "port", None, "--mqtt-port", "also serve MQTT on this TCP port (1883 is MQTT's)",
     "The TCP port MQTT is served on (`--mqtt-port`, which serves MQTT without `mqtt = true`). "
     "Default 1883."),
    ("server", "mqtt_ws_port", "port", None, "--mqtt-ws-port",
     "also serve MQTT over WebSocket on this TCP port (8083 is the custom)",
     "The TCP port MQTT over WebSocket is served on (`--mqtt-ws-port`), any path: what a "
     "`[[listener]]` with `protocol = \"mqtt\"` and `websocket = true` serves."),
    # [[listener]]: server/options.py _listeners
    ("listener", "protocol", "protocol", "amqp", None, None,
     "`\"amqp\"`: AMQP 0-9-1 (RabbitMQ's name for its AMQP listener; a client's protocol header is "
     "read first, and any other header is answered with 0-9-1's before the socket closes), or "
     "`\"mqtt\"`: MQTT."),
    ("listener", "bind", "address", "0.0.0.0", None, None,
     "The address to listen on."),
    ("listener", "port", "port", 5672, None, None,
     "The TCP port. Two listeners on one address and port are refused. Default 5671 for a listener"
     " with `tls`; for MQTT, 1883, and 8883 with `tls`."),
    ("listener", "websocket", "bool", False, None, None,
     "With `protocol = \"mqtt\"`: serve MQTT over WebSocket (RFC 6455, subprotocols `mqtt` and "
     "`mqttv3.1`), for browsers and Node-RED; default port 8083, and 8084 with `tls`. CPython only."),
    ("listener", "path", "text", None, None, None,
     "With `websocket`: the one path served (`\"/mqtt\"`, `\"/ws\"`); another is answered 404. "
     "Default: any path, so that every client's default works."),
    ("listener", "allowed_origins", "table", None, None, None,
     "With `websocket`: the `Origin` headers a browser's upgrade may carry "
     "(`[\"https://dash.example\"]`); another is answered 403. Default: any."),
    ("listener", "tls", "table", None, None, None,
     "A table that makes this listener speak AMQP over TLS (amqps): its keys below. TLS 1.2 and "
     "1.3 only; see [Security](security.md)."),
    # [[listener]] tls = {...} (RabbitMQ's ssl_options names; login_from is its ssl_cert_login_from).
    # The flags are --tls-port's: the short form of one TLS listener.
    ("listener.tls", "certfile", "file", None, "--certfile", "the TLS listener's certificate (PEM)",
     "The listener's certificate (PEM; a chain: the certificate first). Required."),
    ("listener.tls", "keyfile", "file", None, "--keyfile", "its private key (PEM)",
     "Its private key (PEM, unencrypted). Required."),
    ("listener.tls", "cacertfile", "file", None, "--cacertfile",
     "the CA certificates client certificates are checked against",
     "The CA certificates a client certificate is checked against (PEM). Required with "
     "`verify_peer`."),
    ("listener.tls", "verify_peer", "bool", False, "--verify-peer",
     "check a client certificate when one is sent (needs --cacertfile)",
     "Check a client certificate when the client sends one: a certificate the CA did not sign, or "
     "that has expired, is refused in the handshake (RabbitMQ's `ssl_options.verify = "
     "verify_peer`)."),
    ("listener.tls", "fail_if_no_peer_cert", "bool", False, "--fail-if-no-peer-cert",
     "refuse a client without a certificate (mutual TLS)",
     "Refuse a client that sends no certificate: mutual TLS (needs `verify_peer`; on MicroPython "
     "`verify_peer` needs it)."),
    ("listener.tls", "login_from", "text", "common_name", None, None,
     "The user SASL EXTERNAL logs in as: `\"common_name\"` (the subject's CN), "
     "`\"distinguished_name\"` (the whole subject, RFC 4514: `CN=sensor-01,OU=gw,O=hutch`) or "
     "`\"subject_alternative_name\"` (the first). RabbitMQ's `ssl_cert_login_from`."),
    # [metrics]: server/monitoring.py
    ("metrics", "bind", "address", "127.0.0.1", None, None,
     "The address of the metrics port: `127.0.0.1` (the default) serves this machine only."),
    ("metrics", "port", "port", None, "--metrics-port",
     "serve Prometheus metrics and the status page on this port (127.0.0.1; default: off)",
     "Serve Prometheus metrics (`/metrics`, `/metrics/per-object`) and the status page (`/`) on "
     "this port (`--metrics-port`). Off when not set. With users in the config, a request logs in "
     "(HTTP basic) as a user tagged `monitoring` or `administrator` ([Monitoring](monitoring.md))."),
    # [auth]
    ("auth", "loopback_users", "users", ['guest'], None, None,
     "Users who may log in only from the loopback interface (127.0.0.1, ::1) or a serial link, as "
     "in RabbitMQ."),
    ("auth", "anonymous_login_user", "user", None, None, None,
     "Offer SASL ANONYMOUS, which logs a client in as this user (it must exist; the loopback rule "
     "holds). None: ANONYMOUS is not offered."),
    # [mqtt]: mqtt/connection.py Serving, as RabbitMQ's mqtt.* settings
    ("mqtt", "exchange", "text", "amq.topic", None, None,
     "The topic exchange MQTT publishes go to, and subscriptions bind to (RabbitMQ's "
     "`mqtt.exchange`)."),
    ("mqtt", "prefetch", "positive", 20, None, None,
     "QoS 1 deliveries a session has in flight (unacknowledged) at most (RabbitMQ's `mqtt.prefetch`; "
     "20 as in Mosquitto, whose `max_inflight_messages` it is; a version 5 client's Receive Maximum "
     "may lower it)."),
    ("mqtt", "max_session_expiry", "seconds", 86400, None, None,
     "The longest a session outlives its connection, in seconds: a version 5 client's Session "
     "Expiry Interval is held to it, and a 3.1.1 client's persistent session (clean session 0) "
     "is kept this long (RabbitMQ's `mqtt.max_session_expiry_interval_seconds`)."),
    ("mqtt", "max_keep_alive", "seconds", 0, None, None,
     "The longest a client may stay silent, in seconds: a client asking for a longer keep alive, "
     "or none (0, as `umqtt.simple` does), is held to this one, and a version 5 client is told so "
     "in its CONNACK (Server Keep Alive); a client silent for 1.5 times that is disconnected and "
     "its will published. 0: each client's own keep alive, none included."),
    ("mqtt", "sys_interval", "seconds", 10, None, None,
     "Seconds between two publications of the `$SYS/broker/...` topics (the broker's figures "
     "under Mosquitto's names, retained, for dashboards); 0: none. On CPython: a board "
     "publishes none."),
    ("mqtt", "sensor_id_field", "text", "x-sensor-id", None, None,
     "The field of a JSON payload that names the sensor, for a client that cannot set user "
     "properties (MQTT 3.1.1, `umqtt`): a publish whose JSON object has it and `sensor_seq_field` "
     "carries them as the headers `x-sensor-id` and `x-sensor-seq`, and is deduplicated by them "
     "(a version 5 client's user properties of those names come first). `\"\"`: payloads are "
     "not looked into."),
    ("mqtt", "sensor_seq_field", "text", "x-sensor-seq", None, None,
     "The field of a JSON payload that numbers the sensor's reading (a whole number that only "
     "grows, or its digits as a string): see `sensor_id_field`."),
    # [uplink]: the gateway's one link upstream, shared by its bridges (core/bridge/uplink.py)
    ("uplink", "max_byte_rate", "positive", None, None, None,
     "Body bytes per second all up bridges together send at most: a cellular link's budget, "
     "shared by priority (a bridge's or class's `priority`: while a higher one has messages "
     "waiting and its link is up, a lower one sends nothing). Each bridge's own `max_rate` and "
     "`max_byte_rate` hold too. Default: no budget."),
    ("uplink", "hours", "hours", None, None, None,
     "Bridges connect only within these windows of the day, local time, e.g. `[\"01:00-05:00\", "
     "\"22:30-23:00\"]` (a window may run past midnight); outside them what waits stays on disk. "
     "A window that closes lets what is in flight be confirmed, then ends the link. A bridge or "
     "class with `always_connected = true` connects at any time."),
    ("uplink", "every", "seconds", None, None, None,
     "Bridges connect every this many seconds (counted from midnight), for `open_for` seconds: "
     "`every = 1800` and `open_for = 300` connect from :00 to :05 and from :30 to :35. With "
     "`hours`, only the slots within them."),
    ("uplink", "open_for", "seconds", None, None, None,
     "How long each slot of `every` stays open, in seconds (less than `every`)."),
    # the command line only
    (None, "config", "file", None, "--config", "config file (TOML): users, limits, server", None),
    (None, "tls_port", "port", None, "--tls-port", "also listen for AMQP over TLS on this port (5671)", None),
)
# fmt: on
SECTION, KEY, KIND, DEFAULT, FLAG, HELP, DESCRIPTION = range(7)


class ConfigError(Exception):
    """A config file or option that is wrong: one readable line, naming where (`hutch serve`
    prints it instead of a traceback). server/config.py's, for its readers."""


def window_of(text):
    """A window of the day "HH:MM-HH:MM" as (start, end) seconds of the day; None if it is not one
    (or starts where it ends)."""
    if not isinstance(text, str) or text.count("-") != 1:
        return None
    ends = []
    for part in text.split("-"):
        pieces = part.strip().split(":")
        if len(pieces) != 2 or not all(piece.isdigit() and len(piece) == 2 for piece in pieces):
            return None
        hour, minute = int(pieces[0]), int(pieces[1])
        if hour > 24 or minute > 59 or (hour == 24 and minute):
            return None
        ends.append(hour * 3600 + minute * 60)
    if ends[0] == ends[1]:
        return None
    return ends[0] % 86400, ends[1] % 86400


def keys_of(section, rows=KEYS):
    """The keys of a section, in the schema's order (rows: this module's, or server/bridges/config.py's)."""
    return tuple(str(row[KEY]) for row in rows if row[SECTION] == section)


def row_of(section, key, rows=KEYS):
    for row in rows:
        if row[SECTION] == section and row[KEY] == key:
            return row
    raise KeyError("%s.%s" % (section, key))


def table_setting(rows, table, key, where, section, ranges=None, units=None, default=None):
    """A key of a config table that repeats ([[bridge]], [[device]] and their inner tables),
    checked by its row of rows (section, key): its KINDS kind, or "number" (at least 0, a
    fraction allowed, in its unit: units, else seconds), "signed" (any number) and "whole"
    (within its bounds: ranges, else a count from 0 to 2 ** 50). Absent: the row's default (or
    default, when the row's is None)."""
    row = row_of(section, key, rows)
    kind = row[KIND]
    value = table.get(key)
    if value is None:
        value = row[DEFAULT]
        if value is None:
            return default
    elif kind == "whole":
        low, high = (ranges or {}).get(key, (0, 1 << 50))
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise ConfigError("%s: %s must be a whole number from %d to %d, not %r" % (where, key, low, high, value))
    elif kind in ("number", "signed"):
        if not isinstance(value, (int, float)) or isinstance(value, bool) or (kind == "number" and value < 0):
            wording = (units or {}).get(key, "a number of seconds") if kind == "number" else "a number"
            raise ConfigError("%s: %s must be %s, not %r" % (where, key, wording, value))
    else:
        check(kind, value, lambda: "%s: %s" % (where, key))
    return float(value) if kind in ("number", "signed") else value


def dest(row):
    """The attribute an option sets (argparse's dest; Options has the same)."""
    return row[FLAG][2:].replace("-", "_")


def check(kind, value, where, choices=None):
    """value if it is of its kind, else a ConfigError naming where it came from ("--port",
    "hutch.toml: [server] port"; or a function that says it, called only for the error) and
    what it must be. choices: the names a "board" or
    "protocol" must be one of."""
    if kind in INTEGERS:
        ok = isinstance(value, int) and not isinstance(value, bool)
        if ok and kind == "port":
            ok = 0 <= value <= 65535
        elif ok and kind == "seconds":
            ok = value >= 0
        elif ok and kind == "bytes":
            ok = value >= 4096
        elif ok:
            ok = value > 0
    elif kind == "bool":
        ok = isinstance(value, bool)
    elif kind == "watermark":
        ok = (isinstance(value, int) and not isinstance(value, bool) and value >= 4096) or (
            isinstance(value, float) and 0 < value <= 1
        )
    elif kind == "level":
        ok = value in LEVELS
    elif kind in ("folder", "file"):
        ok = isinstance(value, str) and value != ""
    elif kind in ("devices", "users", "strings"):
        ok = isinstance(value, list) and all(isinstance(item, str) for item in value)
    elif kind in ("board", "protocol"):
        ok = isinstance(value, str) and (choices is None or value in choices)
    elif kind == "table":
        ok = isinstance(value, dict)
    elif kind == "hours":
        ok = isinstance(value, list) and all(window_of(item) is not None for item in value)
    elif kind == "name":
        ok = isinstance(value, str) and 0 < len(value) <= NAME_MOST and all(c in NAME_CHARACTERS for c in value)
    else:  # address, user, text
        ok = isinstance(value, str)
    if ok:
        return value
    if callable(where):
        where = where()
    wording = KINDS[kind]
    if choices is not None:
        wording += " (%s)" % ", ".join(choices)
    raise ConfigError("%s must be %s, not %r" % (where, wording, value))
