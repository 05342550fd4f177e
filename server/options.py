"""The broker's settings at start: the command line's options over the config file's
sections (server/config.py) over the board profile's values (boards/).

    opts = options.settings(args)   # args: argparse's, or an Options (firmware/main.py)

Only needed to start: server/serve.py runs the broker from the dict this makes, and a
board forgets this module (and config.py) before it does.
"""

import sys

from .. import boards
from . import config, schema


def add_options(parser):
    """`hutch serve`'s options: every key of server/schema.py with a flag."""
    # MicroPython's argparse has no "append": there one --serial takes a comma-separated list.
    repeat = {} if sys.implementation.name == "micropython" else {"action": "append"}
    for row in schema.KEYS:
        flag = row[schema.FLAG]
        if flag is None:
            continue
        kind = row[schema.KIND]
        text = str(row[schema.HELP])
        if kind == "bool":
            parser.add_argument(flag, action="store_true", help=text)
        elif kind == "devices":
            parser.add_argument(flag, default=None, metavar="DEVICE", help=text, **repeat)
        elif kind in schema.INTEGERS:
            parser.add_argument(flag, type=int, default=None, help=text)
        elif kind == "file":
            parser.add_argument(flag, default=None, metavar="FILE", help=text)
        elif kind == "board":
            parser.add_argument(flag, default=None, help=text % ", ".join(boards.NAMES))
        else:
            parser.add_argument(flag, default=None, help=text)


class Options:
    """What the command line can set (server/schema.py's flags), without argparse: firmware/main.py
    and the tests build one, Options(config="hutch.json", port=5999). A name that is not an
    option is a TypeError, as for any function."""

    def __init__(self, **given):
        for row in schema.KEYS:
            if row[schema.FLAG] is not None:
                name = schema.dest(row)
                setattr(self, name, given.pop(name, False if row[schema.KIND] == "bool" else None))
        if given:
            raise TypeError("Options() has no option %r" % sorted(given)[0])


def _given(args, row):
    """What the command line gave for a key of server/schema.py (None: nothing, or no flag)."""
    if row[schema.FLAG] is None:
        return None
    value = getattr(args, schema.dest(row), None)
    return None if value is False else value


def _server(args, table, key, default=None, section="server"):
    """A key's value: the command line's option over the file's table's over the default."""
    given = _given(args, schema.row_of(section, key))
    return given if given is not None else table.get(key, default)


def _named(args, path, key, section="server"):
    """How an error names where a value came from: "--log-level", or "hutch.toml: [server]
    log_level". (Made only for an error: a board's start makes no strings it drops.)"""
    row = schema.row_of(section, key)
    if _given(args, row) is not None:
        return row[schema.FLAG]
    return "%s: [%s] %s" % (path, section, key)


def _checked(args, table, path, key, default=None, section="server", choices=None):
    """A key's value (the command line's over the file's table's over default), checked against
    its kind in server/schema.py; None stays None."""
    value = _server(args, table, key, default, section)
    if value is None:
        return None
    kind = schema.row_of(section, key)[schema.KIND]
    return schema.check(kind, value, lambda: _named(args, path, key, section), choices)


def settings(args, fleet_documents=None):
    """Merge options (argparse's or an Options), config file and defaults; raises config.ConfigError.
    A fleet member's config is the file with the documents it runs over it (server/fleet/state.py;
    fleet_documents: those instead, to check a document's whole config before it is applied)."""
    data = config.read(args.config)
    server = data.get("server", {})
    path = args.config or "config"
    listeners = _listeners(args, server, data, path)
    level = _checked(args, server, path, "log_level", "info")
    board = _checked(args, server, path, "board")
    if board is not None and not isinstance(board, str):  # (a profile's name; load() says which exist)
        schema.check("board", board, lambda: _named(args, path, "board"), boards.NAMES)
    if board is not None:
        try:
            profile = boards.load(board)
        except ValueError as e:
            raise config.ConfigError("%s: %s" % (_named(args, path, "board"), e))
        limits = config.limits_from(data, path, profile.LIMITS)  # [limits] refines the profile
    else:
        profile = boards.load("unix")
        limits = config.limits_from(data, path)
    explicit_baud = _checked(args, server, path, "baud")
    baud = explicit_baud or 115200  # (serial links whose profile entry sets none)
    stats = _checked(args, server, path, "stats_interval", 60 if sys.implementation.name == "micropython" else 0)
    folder = _checked(args, server, path, "data")
    storage = profile.STORAGE
    fleet = None
    if "fleet" in data:  # (only a fleet member loads server/fleet/)
        data, fleet = _fleet(
            data, path, folder or storage["path"], _checked(args, server, path, "name"), fleet_documents
        )
        server = data.get("server", {})
    definitions_path = _checked(args, server, path, "definitions")
    users, definitions = _users(data, path, definitions_path)
    anonymous = _anonymous(data, path, users)
    if anonymous is not None:  # (else the attribute is not there: core/auth.py Users)
        users.anonymous = anonymous
    journal_max_bytes = _checked(args, server, path, "journal_max_bytes", storage["max_bytes"])
    segment_bytes = _checked(args, server, path, "segment_bytes", _segment_bytes(storage, journal_max_bytes))
    disk_free_limit = _checked(args, server, path, "disk_free_limit", storage.get("disk_free_limit"))
    # A host's memory only: a board's heap is watched by ports/heap.py, and one more key checked
    # here costs a board about 12 KiB of passing garbage (tests/boards/test_wasm32.py's peak).
    watermark = None
    if sys.implementation.name != "micropython":
        watermark = _checked(args, server, path, "memory_high_watermark", 0.4)
    elif "memory_high_watermark" in server:
        raise config.ConfigError("%s: [server] memory_high_watermark: a board's heap is watched by its profile" % path)  # fmt: skip
    return {
        "name": _checked(args, server, path, "name") or host_name(),
        "listeners": listeners,
        "data": folder or storage["path"],
        "journal_max_bytes": journal_max_bytes,
        "segment_bytes": segment_bytes,
        "disk_free_limit": disk_free_limit,
        "memory_high_watermark": watermark,
        "log_level": level,
        "log_file": _log_file(_checked(args, server, path, "log_file"), args, path),
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
        "fleet": fleet,
        "devices": _devices(data, path),
        "uplink": _uplink(data, path),
        # the [metrics] table, checked when the port opens (server/monitoring.py): a board
        # without one loads none of it (and `hutch serve --metrics-port` sets its port)
        "metrics": _metrics(args, data, path),
        "amqp10": _amqp10(server, profile, path),
        "front_ends": _front_end_settings(args, data, path, listeners),
    }


def host_name():
    """The default gateway name: the host's name, its first label, with any character a name
    may not hold as "-" (schema.NAME_CHARACTERS); a board's network host name, else its platform."""
    if sys.implementation.name == "micropython":
        try:
            import network  # pyright: ignore[reportMissingImports] (a board's)

            found = network.hostname()
        except (ImportError, AttributeError, OSError):
            found = sys.platform
    else:
        import socket

        found = socket.gethostname()  # pyright: ignore[reportAttributeAccessIssue] (CPython's socket)
    found = found.split(".")[0][: schema.NAME_MOST]
    return "".join(c if c in schema.NAME_CHARACTERS else "-" for c in found) or "hutch"


def _metrics(args, data, path):
    """(bind, port) of the metrics port (server/monitoring.py opens it): [metrics] bind and port,
    --metrics-port over the file's port; None when no port is set."""
    table = data.get("metrics") or {}
    port = _checked(args, table, path, "port", section="metrics")
    if port is None:
        return None
    return _checked(args, table, path, "bind", "127.0.0.1", "metrics"), port


def _amqp10(server, profile, path):
    """Whether AMQP 1.0 clients are served on the AMQP listeners: the config's [server] amqp10;
    else on CPython the board profile's AMQP10 (a small board keeps the heap it would take), or
    yes; on MicroPython no (a board serves 1.0 when its config asks)."""
    value = _checked(None, server, path, "amqp10")
    if value is None:
        value = getattr(profile, "AMQP10", True) and sys.implementation.name != "micropython"
    return value


def needs_tls(opts):
    """Whether these settings load Python's ssl module: a TLS listener, an amqps:// bridge
    uplink, or [[device]]s (pymodbus imports it, for its own TLS client, on CPython). (Without it the
    CPython broker runs without OpenSSL: tools/cli.py.)"""
    return (
        any("tls" in listener for listener in opts["listeners"])
        or any(uri["tls"] for bridge in opts["bridges"] for uri in bridge["uris"])
        or bool(opts.get("devices"))
    )


def _log_file(path, args, config_path):
    """Where the log goes: None for standard error (what journald and a terminal read)."""
    if path is None:
        return None
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
        from .listeners import LISTENERS  # (here, not at the top: a board starts with less in its heap)

        for table in tables:
            protocol = table.get("protocol", "amqp")
            if not isinstance(protocol, str) or protocol not in LISTENERS:
                raise config.ConfigError(
                    "%s: unknown protocol %r in [[listener]] (known: %s)"
                    % (path, table["protocol"], ", ".join(LISTENERS))
                )
        listeners = _checked_listeners(tables, path)
    if listeners is None or args.bind is not None or args.port is not None:
        port = _server(args, server, "port", 5672)
        bind = _server(args, server, "bind", "0.0.0.0")
        listeners = _checked_listeners([{"port": port, "bind": bind}], path, named=lambda key: _named(args, path, key))
    tls_listener = _tls_options(args, server)
    if tls_listener is not None:  # --tls-port: one more, beside whichever the others are
        listeners = _checked_listeners([tls_listener], path, listeners)
    from .listeners import LISTENERS, PACKAGE, PORTS, WEBSOCKET

    for protocol, row in LISTENERS.items():  # [server] NAME = true, NAME_port, NAME_ws_port: beside AMQP
        if row[PACKAGE] is None:
            continue  # (AMQP's: the short form above)
        bind = _server(args, server, "bind", "0.0.0.0")
        key = protocol + "_port"
        port = _checked(args, server, path, key)
        if port is not None or _checked(args, server, path, protocol, False):
            one = {"protocol": protocol, "bind": bind, "port": port or row[PORTS][0]}
            listeners = _checked_listeners([one], path, listeners, named=lambda _, key=key: _named(args, path, key))
        key = protocol + "_ws_port"
        port = _checked(args, server, path, key) if row[WEBSOCKET] is not None else None
        if port is not None:
            one = {"protocol": protocol, "websocket": True, "bind": bind, "port": port}
            listeners = _checked_listeners([one], path, listeners, named=lambda _, key=key: _named(args, path, key))
    return listeners


def _front_end_settings(args, data, path, listeners):
    """{section: its settings, checked} of each front end a listener serves that has a section
    of its own (server/listeners.py LISTENERS: [mqtt], mqtt/connection.py Serving's); none for
    the others (a board then holds nothing of them)."""
    from .listeners import LISTENERS, SECTION

    out = {}
    for listener in listeners:
        section = LISTENERS[listener["protocol"]][SECTION]
        if section is not None and section not in out:
            table = data.get(section) or {}
            found = out[section] = {}
            for key in schema.keys_of(section):
                default = schema.row_of(section, key)[schema.DEFAULT]
                found[key] = _checked(args, table, path, key, default, section)
    return out


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
    from .listeners import LISTENERS, PORTS, WEBSOCKET

    listeners = list(checked)
    for n, table in enumerate(tables, 1):
        bind = schema.check("address", table.get("bind", "0.0.0.0"), _listener_where(named, table, path, n, "bind"))
        tls = table.get("tls")
        protocol = table.get("protocol", "amqp")
        websocket = _websocket(table, protocol, path, n)
        row = LISTENERS[protocol]  # (its default ports, plain and with TLS, as RabbitMQ's are)
        ports = row[WEBSOCKET] if websocket is not None else row[PORTS]
        port = table.get("port", ports[0 if tls is None else 1])
        schema.check("port", port, _listener_where(named, table, path, n, "port"))
        for other in listeners:
            if port and other["port"] == port and other["bind"] == bind:  # (port 0: each its own)
                raise config.ConfigError("%s: two [[listener]]s on %s:%d" % (path, bind, port))
        listener = {"protocol": protocol, "bind": bind, "port": port}
        if websocket is not None:
            listener["websocket"] = websocket
        if tls is not None:  # (a plain listener's entry has no "tls")
            listener["tls"] = tls_settings(tls, table.get("where") or "%s: [[listener]] on port %d:" % (path, port))
        listeners.append(listener)
    return listeners


def _websocket(table, protocol, path, n):
    """A listener's WebSocket settings ({"path", "origins"}), checked, or None: it serves its
    front end over WebSocket where `websocket = true` (ports/websocket.py), if its row in
    server/listeners.py LISTENERS has WebSocket ports (MQTT's)."""
    where = "%s: [[listener]] #%d" % (path, n)
    if not schema.check("bool", table.get("websocket", False), lambda: where + " websocket"):
        for key in ("path", "allowed_origins"):
            if key in table:
                raise config.ConfigError("%s %s: a key of a listener with websocket = true" % (where, key))
        return None
    from .listeners import LISTENERS, TITLE, WEBSOCKET

    if LISTENERS[protocol][WEBSOCKET] is None:
        served = ["%s is served over WebSocket (protocol = \"%s\")" % (row[TITLE], name)
                  for name, row in LISTENERS.items() if row[WEBSOCKET]]  # fmt: skip
        raise config.ConfigError("%s websocket: %s" % (where, "; ".join(served)))
    if sys.implementation.name == "micropython":
        raise config.ConfigError("%s websocket: WebSocket is not in this board's firmware" % where)
    served = table.get("path")
    if served is not None and (not isinstance(served, str) or not served.startswith("/")):
        raise config.ConfigError('%s path: a path that starts with "/" ("/mqtt"), got %r' % (where, served))
    origins = table.get("allowed_origins")
    if origins is not None and (not isinstance(origins, list) or not all(isinstance(o, str) for o in origins)):
        raise config.ConfigError('%s allowed_origins: a list of origins (["https://dash.example"])' % where)
    return {"path": served, "origins": origins}


def _listener_where(named, table, path, n, key):
    """How an error names a key of the listener of table, as a function (called for an error only)."""
    return lambda: _listener_key(named, table, path, n, key)


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
        if path is not None:
            schema.check("file", path, "%s tls %s" % (where, key))
        tls[key] = path
    for key in ("verify_peer", "fail_if_no_peer_cert"):
        tls[key] = schema.check("bool", given.get(key, False), "%s tls %s" % (where, key))
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


def _uplink(data, path):
    """The [uplink] table, checked (core/bridge/uplink.py takes it), or None without one."""
    table = data.get("uplink")
    if not table:
        return None
    found = {}
    for key in schema.keys_of("uplink"):
        found[key] = _checked(None, table, path, key, None, "uplink")
    if found["hours"] is not None:
        found["hours"] = tuple(schema.window_of(text) for text in found["hours"])
    every, open_for = found["every"], found["open_for"]
    if (every is None) != (open_for is None):
        raise config.ConfigError("%s: [uplink] every and open_for go together (every N seconds, for M)" % path)
    if every is not None and not 0 < open_for < every:
        raise config.ConfigError(
            "%s: [uplink] open_for must be more than 0 and less than every (%d), not %r" % (path, every, open_for)
        )
    return found


def _fleet(data, path, folder, name, documents):
    """(the config's sections with the fleet's documents over them, [fleet]'s settings)."""
    from .fleet.config import fleet_from  # pyright: ignore[reportMissingImports] (host only)
    from .fleet.state import State, overlay  # pyright: ignore[reportMissingImports] (host only)

    fleet = fleet_from(data, path, name or host_name())
    state = State(folder)
    if documents is None:
        documents = state.read()["applied"]
    return overlay(data, documents, state), fleet


def _bridges(data, path):
    if "bridge" not in data:
        return []
    from .bridges.config import bridges_from  # only a config with bridges loads their checks

    return bridges_from(data, path)


def _devices(data, path):
    if "device" not in data:
        return []
    try:
        from .devices.config import devices_from  # only a config with devices loads their checks
    except ImportError:  # a board's firmware built without them
        raise config.ConfigError(
            "%s: [[device]]: this board's firmware polls no Modbus devices (build it with --modbus; "
            "hutch flash does for a config with a [[device]])" % path
        )
    return devices_from(data, path)


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


def _serial_devices(devices, args, path):
    """Serial devices from --serial (repeated, or comma-separated) or [server] serial = [...]."""
    if devices is None:
        devices = []
    if isinstance(devices, str):
        devices = [devices]
    schema.check("devices", devices, lambda: _named(args, path, "serial"))
    return [d for entry in devices for d in entry.split(",") if d]


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
