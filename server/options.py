"""The broker's settings at start: the command line's options over the config file's
sections (server/config.py) over the board profile's values (boards/).

    opts = options.settings(args)   # args: argparse's, or an Options (firmware/main.py)

Only needed to start: server/serve.py runs the broker from the dict this makes, and a
board forgets this module (and config.py) before it does.
"""

import sys

from .. import boards
from . import config


def add_options(parser):
    parser.add_argument("--bind", default=None, help="address to listen on (default 0.0.0.0)")
    parser.add_argument("--port", type=int, default=None, help="TCP port (default 5672)")
    parser.add_argument("--config", default=None, help="config file (TOML): users, limits, server")
    parser.add_argument("--data", default=None, help="data folder (default ./hutch-data, or the board's)")
    parser.add_argument("--log-level", default=None, help="debug, info, warning or error (default info)")
    parser.add_argument(
        "--log-file", default=None, metavar="FILE", help="append the log to FILE (default: standard error)"
    )
    parser.add_argument(
        "--board", default=None, help="board profile: %s (default: limits from the config)" % ", ".join(boards.NAMES)
    )
    parser.add_argument(
        "--stats-interval",
        type=int,
        default=None,
        help="log heap and queue figures every N seconds (default 60 on MicroPython, 0 = off)",
    )
    # Serial links (ports/serial.py). MicroPython's argparse has no "append": there one
    # --serial takes a comma-separated list.
    repeat = {} if sys.implementation.name == "micropython" else {"action": "append"}
    parser.add_argument(
        "--serial",
        default=None,
        metavar="DEVICE",
        help="also serve AMQP over this serial port, e.g. /dev/ttyUSB0 (repeat for more)",
        **repeat,
    )
    parser.add_argument("--baud", type=int, default=None, help="serial baud rate (default 115200)")
    parser.add_argument(
        "--definitions",
        default=None,
        metavar="FILE",
        help="users, permissions, exchanges, queues and bindings to load at start (RabbitMQ's JSON)",
    )
    # One TLS listener (amqps) beside the others, on --bind's address: the short form of a
    # [[listener]] with a tls table. The names are RabbitMQ's ssl_options.
    parser.add_argument("--tls-port", type=int, default=None, help="also listen for AMQP over TLS on this port (5671)")
    parser.add_argument("--certfile", default=None, metavar="FILE", help="the TLS listener's certificate (PEM)")
    parser.add_argument("--keyfile", default=None, metavar="FILE", help="its private key (PEM)")
    parser.add_argument(
        "--cacertfile", default=None, metavar="FILE", help="the CA certificates client certificates are checked against"
    )
    parser.add_argument(
        "--verify-peer", action="store_true", help="check a client certificate when one is sent (needs --cacertfile)"
    )
    parser.add_argument(
        "--fail-if-no-peer-cert", action="store_true", help="refuse a client without a certificate (mutual TLS)"
    )


class Options:
    """What the command line can set; firmware/main.py builds one without argparse."""

    def __init__(
        self,
        config=None,
        bind=None,
        port=None,
        data=None,
        log_level=None,
        board=None,
        stats_interval=None,
        serial=None,
        baud=None,
        definitions=None,
        log_file=None,
        tls_port=None,
        certfile=None,
        keyfile=None,
        cacertfile=None,
        verify_peer=False,
        fail_if_no_peer_cert=False,
    ):
        self.config = config
        self.bind = bind
        self.port = port
        self.data = data
        self.log_level = log_level
        self.board = board
        self.stats_interval = stats_interval
        self.serial = serial
        self.baud = baud
        self.definitions = definitions
        self.log_file = log_file
        self.tls_port = tls_port
        self.certfile = certfile
        self.keyfile = keyfile
        self.cacertfile = cacertfile
        self.verify_peer = verify_peer
        self.fail_if_no_peer_cert = fail_if_no_peer_cert


def _server(args, server, key, default=None):
    """A [server] key's value: the command line's option over the file's over the default."""
    given = getattr(args, key, None)
    return given if given is not None and given is not False else server.get(key, default)


def _named(args, path, key):
    """How an error names where a [server] value came from: "--log-level", or "hutch.toml:
    [server] log_level". (Made only for an error: a board's start makes no strings it drops.)"""
    given = getattr(args, key, None)
    if given is not None and given is not False:
        return "--" + key.replace("_", "-")
    return "%s: [server] %s" % (path, key)


def settings(args):
    """Merge options (argparse's or an Options), config file and defaults; raises config.ConfigError."""
    data = config.read(args.config)
    server = data.get("server", {})
    path = args.config or "config"
    listeners = _listeners(args, server, data, path)
    level = _server(args, server, "log_level", "info")
    if level not in ("debug", "info", "warning", "error"):
        where = _named(args, path, "log_level")
        raise config.ConfigError("%s must be debug, info, warning or error, not %r" % (where, level))
    board = _server(args, server, "board")
    if board is not None and not isinstance(board, str):
        raise config.ConfigError(
            "%s must be a board profile's name (%s), not %r"
            % (_named(args, path, "board"), ", ".join(boards.NAMES), board)
        )
    if board is not None:
        try:
            profile = boards.load(board)
        except ValueError as e:
            raise config.ConfigError("%s: %s" % (_named(args, path, "board"), e))
        limits = config.limits_from(data, path, profile.LIMITS)  # [limits] refines the profile
    else:
        profile = boards.load("unix")
        limits = config.limits_from(data, path)
    explicit_baud = _server(args, server, "baud")
    baud = _baud(explicit_baud, args, path)
    stats = _server(args, server, "stats_interval")
    if stats is None:
        stats = 60 if sys.implementation.name == "micropython" else 0
    if not isinstance(stats, int) or isinstance(stats, bool) or stats < 0:
        where = _named(args, path, "stats_interval")
        raise config.ConfigError("%s must be a whole number of seconds, not %r" % (where, stats))
    definitions_path = _server(args, server, "definitions")
    if definitions_path is not None and not isinstance(definitions_path, str):
        where = _named(args, path, "definitions")
        raise config.ConfigError("%s must be a file name, not %r" % (where, definitions_path))
    users, definitions = _users(data, path, definitions_path)
    folder = _server(args, server, "data")
    if folder is not None and (not isinstance(folder, str) or not folder):
        raise config.ConfigError("%s must be a folder's name, not %r" % (_named(args, path, "data"), folder))
    anonymous = _anonymous(data, path, users)
    if anonymous is not None:  # (else the attribute is not there: core/auth.py Users)
        users.anonymous = anonymous
    storage = profile.STORAGE
    journal_max_bytes = _size(server, path, "journal_max_bytes", storage["max_bytes"])
    segment_bytes = _size(server, path, "segment_bytes", _segment_bytes(storage, journal_max_bytes))
    return {
        "listeners": listeners,
        "data": folder or storage["path"],
        "journal_max_bytes": journal_max_bytes,
        "segment_bytes": segment_bytes,
        "log_level": level,
        "log_file": _log_file(_server(args, server, "log_file"), args, path),
        "board": board,
        "read_size": profile.READ_SIZE,
        "stats_interval": stats,
        "limits": limits,
        "users": users,
        # (hutch ctl's, on CPython: a board has no control socket, nor heap for it)
        "user_origins": user_origins(data, path, definitions, definitions_path)
        if sys.implementation.name != "micropython"
        else None,
        "definitions": definitions,
        # a board's UART by name ("uart2") comes up on the pins its profile wires
        "serial": [
            boards.serial_link(profile, device, explicit_baud)
            for device in _serial_devices(_server(args, server, "serial"), args, path)
        ],
        "baud": baud,
        "bridges": _bridges(data, path),
        # the [metrics] table, checked when the port opens (server/monitoring.py): a board
        # without one loads none of it (and `hutch serve --metrics-port` sets its port)
        "metrics": _metrics(data, path, getattr(args, "metrics_port", None)),
        "amqp10": _amqp10(server, profile, path),
    }


def _metrics(data, path, option_port):
    """(bind, port) of the metrics port (server/monitoring.py opens it): [metrics] bind and port,
    --metrics-port (CPython's) over the file's port; None when no port is set."""
    table = data.get("metrics") or {}
    port = option_port if option_port is not None else table.get("port")
    if port is None:
        return None
    if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
        where = "--metrics-port" if option_port is not None else "%s: [metrics] port" % path
        raise config.ConfigError("%s must be a number from 0 to 65535, not %r" % (where, port))
    bind = table.get("bind", "127.0.0.1")
    if not isinstance(bind, str):
        raise config.ConfigError("%s: [metrics] bind must be an address, not %r" % (path, bind))
    return bind, port


def _amqp10(server, profile, path):
    """Whether AMQP 1.0 clients are served on the AMQP listeners: the config's [server] amqp10;
    else on CPython the board profile's AMQP10 (a small board keeps the heap it would take), or
    yes; on MicroPython no (a board serves 1.0 when its config asks)."""
    value = server.get("amqp10")
    if value is None:
        value = getattr(profile, "AMQP10", True) and sys.implementation.name != "micropython"
    if not isinstance(value, bool):
        raise config.ConfigError("%s: [server] amqp10 must be true or false, not %r" % (path, value))
    return value


def needs_tls(opts):
    """Whether these settings speak TLS anywhere: a TLS listener, an amqps:// bridge uplink.
    (Without TLS the CPython broker runs without OpenSSL: tools/cli.py.)"""
    return any("tls" in listener for listener in opts["listeners"]) or any(
        uri["tls"] for bridge in opts["bridges"] for uri in bridge["uris"]
    )


def _log_file(path, args, config_path):
    """Where the log goes: None for standard error (what journald and a terminal read)."""
    if path is None:
        return None
    if not isinstance(path, str) or not path:
        raise config.ConfigError("%s must be a file name, not %r" % (_named(args, config_path, "log_file"), path))
    if sys.implementation.name == "micropython":
        where = _named(args, config_path, "log_file")
        raise config.ConfigError("%s: a board logs to its console (its flash has no writes to spare)" % where)
    return path


def user_origins(data, path, definitions, definitions_path):
    """Where each user of the settings comes from, as `hutch ctl` names it when asked to change
    one: {name: ("config", path) | ("definitions", path) | ("built-in", None)}."""
    origins = {}
    if definitions is not None:
        origins.update((name, ("definitions", definitions_path)) for name in definitions.hashes)
    if "users" in data:
        origins.update((name, ("config", path)) for name in data["users"])
    elif definitions is None:
        origins["guest"] = ("built-in", None)
    return origins


def _users(data, path, definitions_path):
    """(the users, the definitions to declare at start or None): the config's [users], and a
    definitions file's users too (a name in both is an error); without either, guest."""
    if definitions_path is None:
        return config.users_from(data, path), None
    if not isinstance(definitions_path, str):
        raise config.ConfigError("definitions must be a file name, not %r" % (definitions_path,))
    from .definitions import read_file  # only a broker with definitions loads their code

    definitions = read_file(definitions_path)
    loopback = data.get("auth", {}).get("loopback_users", ["guest"])
    users = definitions.users(loopback)
    if "users" in data:
        configured = config.users_from(data, path)
        both = [name for name in configured.hashes if name in users.hashes]
        if both:
            raise config.ConfigError("user '%s' is both in %s and in %s" % (both[0], path, definitions_path))
        users.merge(configured)
    return users, definitions


def _anonymous(data, path, users):
    """[auth] anonymous_login_user: the user ANONYMOUS logs in as, or None (not offered)."""
    name = data.get("auth", {}).get("anonymous_login_user")
    if name is None:
        return None
    if not isinstance(name, str) or name not in users.hashes:
        raise config.ConfigError("%s: [auth] anonymous_login_user must name a user, not %r" % (path, name))
    return name


def _listeners(args, server, data, path):
    """Where the broker listens: [{"protocol": "amqp", "bind": ADDRESS, "port": N}, ...], and
    "tls": its settings (tls_settings) in a TLS listener's.

    --bind/--port and [server] bind/port are the short form of one AMQP listener; [[listener]]
    tables name any number; --tls-port adds one TLS listener to either. The command line wins over the config file, as every option does:
    given --bind or --port, the broker listens there alone, and the config's [[listener]]s
    are not opened (so a script or a test starts a broker on a port of its choosing, whatever
    its config holds); they are still checked. A config file that has both forms is refused:
    which one it means cannot be told."""
    tables = data.get("listener")
    listeners = None
    if tables is not None:
        if "bind" in server or "port" in server:
            raise config.ConfigError(
                "%s: [server] bind/port and [[listener]] both say where to listen: keep one" % path
            )
        from .frontends import PROTOCOLS  # (here, not at the top: a board starts with less in its heap)

        for table in tables:
            protocol = table.get("protocol", "amqp")
            if not isinstance(protocol, str) or protocol not in PROTOCOLS:
                raise config.ConfigError(
                    "%s: unknown protocol %r in [[listener]] (known: %s)"
                    % (path, table["protocol"], ", ".join(PROTOCOLS))
                )
        listeners = _checked_listeners(tables, path)
    if listeners is None or args.bind is not None or args.port is not None:
        port = _server(args, server, "port", 5672)
        bind = _server(args, server, "bind", "0.0.0.0")
        listeners = _checked_listeners([{"port": port, "bind": bind}], path, named=lambda key: _named(args, path, key))
    tls_listener = _tls_options(args, server)
    if tls_listener is not None:  # --tls-port: one more, beside whichever the others are
        listeners = _checked_listeners([tls_listener], path, listeners)
    return listeners


def _tls_options(args, server):
    """The TLS listener of --tls-port (on --bind's address), as a [[listener]] table, or None."""
    port = getattr(args, "tls_port", None)
    files = [name for name in ("certfile", "keyfile", "cacertfile") if getattr(args, name, None)]
    flags = [name for name in ("verify_peer", "fail_if_no_peer_cert") if getattr(args, name, False)]
    if port is None:
        if files or flags:
            raise config.ConfigError("--%s is an option of --tls-port" % (files + flags)[0].replace("_", "-"))
        return None
    if not args.certfile or not args.keyfile:
        raise config.ConfigError("--tls-port needs --certfile and --keyfile")
    if args.verify_peer and not args.cacertfile:
        raise config.ConfigError("--verify-peer needs --cacertfile: the CA client certificates are checked against")
    if args.fail_if_no_peer_cert and not args.verify_peer:
        raise config.ConfigError("--fail-if-no-peer-cert needs --verify-peer")
    tls = {name: getattr(args, name) for name in files + flags}
    # "where": how its errors name it (a config's tables cannot have the key: config.read)
    return {
        "bind": args.bind or server.get("bind", "0.0.0.0"),
        "port": port,
        "tls": tls,
        "where": "--tls-port:",
    }


def _checked_listeners(tables, path, checked=(), named=None):
    """The listeners of these tables after those already checked (two on one port: refused).
    named(key): how an error names a table's port or bind ("--port", "hutch.toml: [server]
    bind"); by default the file's [[listener]] number N, or --tls-port's."""
    listeners = list(checked)
    for n, table in enumerate(tables, 1):
        bind = table.get("bind", "0.0.0.0")
        if not isinstance(bind, str):
            where = _listener_key(named, table, path, n, "bind")
            raise config.ConfigError("%s must be an address, not %r" % (where, bind))
        tls = table.get("tls")
        port = table.get("port", 5672 if tls is None else 5671)  # (RabbitMQ's amqps port)
        if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
            where = _listener_key(named, table, path, n, "port")
            raise config.ConfigError("%s must be a number from 0 to 65535, not %r" % (where, port))
        for other in listeners:
            if port and other["port"] == port and other["bind"] == bind:  # (port 0: each its own)
                raise config.ConfigError("%s: two [[listener]]s on %s:%d" % (path, bind, port))
        listener = {"protocol": table.get("protocol", "amqp"), "bind": bind, "port": port}
        if tls is not None:  # (a plain listener's entry has no "tls")
            listener["tls"] = tls_settings(tls, table.get("where") or "%s: [[listener]] on port %d:" % (path, port))
        listeners.append(listener)
    return listeners


def _listener_key(named, table, path, n, key):
    """How an error names a listener's port or bind (see _checked_listeners)."""
    if named is not None:
        return named(key)
    if "where" in table:  # --tls-port's
        return "--tls-port" if key == "port" else "--bind"
    return "%s: [[listener]] #%d %s" % (path, n, key)


def tls_settings(given, where):
    """A listener's tls table, checked: every key known, of its kind; the defaults are RabbitMQ's
    (no peer verification). The files are read when the broker starts (server/startup.py
    server_tls): a config names the files of the machine it runs on."""
    if not isinstance(given, dict):
        raise config.ConfigError("%s tls must be a table: {certfile = ..., keyfile = ...}" % where)
    for key in given:
        if key not in config.TLS_KEYS:
            raise config.ConfigError(
                "%s unknown key '%s' in tls (known: %s)" % (where, key, ", ".join(config.TLS_KEYS))
            )
    tls = {}
    for key in ("certfile", "keyfile", "cacertfile"):
        path = given.get(key)
        if path is None and key != "cacertfile":
            raise config.ConfigError("%s tls needs %s" % (where, key))
        if path is not None and not isinstance(path, str):
            raise config.ConfigError("%s tls %s must be a file name, not %r" % (where, key, path))
        tls[key] = path
    for key in ("verify_peer", "fail_if_no_peer_cert"):
        value = given.get(key, False)
        if not isinstance(value, bool):
            raise config.ConfigError("%s tls %s must be true or false, not %r" % (where, key, value))
        tls[key] = value
    if tls["verify_peer"] and tls["cacertfile"] is None:
        raise config.ConfigError(
            "%s tls verify_peer needs cacertfile: the CA client certificates are checked against" % where
        )
    if tls["fail_if_no_peer_cert"] and not tls["verify_peer"]:
        raise config.ConfigError("%s tls fail_if_no_peer_cert needs verify_peer = true" % where)
    if tls["verify_peer"] and not tls["fail_if_no_peer_cert"] and sys.implementation.name == "micropython":
        # Mbed TLS's optional verification lets a client through whose certificate failed it
        raise config.ConfigError(
            "%s tls verify_peer needs fail_if_no_peer_cert = true on MicroPython: "
            "its TLS cannot check a certificate a client may leave out" % where
        )
    from ..ports.tls import LOGIN_FROM  # (here: only a config with a TLS listener loads it)

    login_from = given.get("login_from", "common_name")
    if login_from not in LOGIN_FROM:
        raise config.ConfigError(
            "%s tls login_from must be one of %s, not %r" % (where, ", ".join(LOGIN_FROM), login_from)
        )
    tls["login_from"] = login_from
    return tls


def _bridges(data, path):
    if "bridge" not in data:
        return []
    from .bridge_config import bridges_from  # only a config with bridges loads their checks

    return bridges_from(data, path)


MAX_SCALED_SEGMENT = 8 * 1024 * 1024  # (Linux's own segment size)


def _segment_bytes(storage, journal_max_bytes):
    """The segment size when the config names none: the profile's, grown in proportion when the
    disk budget is raised above the profile's, up to the profile's max_segment_bytes (8 MiB if
    it names none). The journal keeps a few numbers and each queue a run per segment in memory:
    a board given megabytes of flash for a backlog must not fill its heap with the bookkeeping
    of thousands of 16 KiB segments. Nor with one huge segment: while a backlog drains, the
    segment being written keeps a copy of each of its acks and deliveries in memory for its
    summary (core/store/journal.py), so a board's profile caps the growth."""
    default = storage["segment_bytes"]
    if journal_max_bytes <= storage["max_bytes"]:
        return default
    scaled = default * (journal_max_bytes // storage["max_bytes"])
    return max(default, min(scaled, storage.get("max_segment_bytes", MAX_SCALED_SEGMENT)))


def _size(server, path, key, default):
    value = server.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 4096:
        raise config.ConfigError(
            "%s: [server] %s must be a number of bytes, at least 4096, not %r" % (path, key, value)
        )
    return value


def _serial_devices(devices, args, path):
    """Serial devices from --serial (repeated, or comma-separated) or [server] serial = [...]."""
    if devices is None:
        devices = []
    if isinstance(devices, str):
        devices = [devices]
    if not isinstance(devices, list) or not all(isinstance(d, str) for d in devices):
        raise config.ConfigError("%s must be a list of device names, not %r" % (_named(args, path, "serial"), devices))
    return [d for entry in devices for d in entry.split(",") if d]


def _baud(baud, args, path):
    """The baud rate of serial links whose profile entry does not set one (default 115200)."""
    if baud is None:
        return 115200
    if not isinstance(baud, int) or isinstance(baud, bool) or baud <= 0:
        raise config.ConfigError("%s must be a positive number, not %r" % (_named(args, path, "baud"), baud))
    return baud


def parse(argv):
    """The settings from a command line, or None after printing why they are wrong."""
    import argparse

    parser = argparse.ArgumentParser(description="run the hutch broker (AMQP 0-9-1 and 1.0)")
    add_options(parser)
    try:
        return settings(parser.parse_args(argv))
    except config.ConfigError as e:
        print("hutch: %s" % e, file=sys.stderr)
        return None
