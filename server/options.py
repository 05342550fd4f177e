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


def settings(args):
    """Merge options (argparse's or an Options), config file and defaults; raises config.ConfigError."""
    data = config.read(args.config)
    server = data.get("server", {})
    path = args.config or "config"
    listeners = _listeners(args, server, data, path)
    level = args.log_level or server.get("log_level", "info")
    if level not in ("debug", "info", "warning", "error"):
        raise config.ConfigError("log level must be debug, info, warning or error, not %r" % (level,))
    board = args.board or server.get("board")
    if board is not None:
        try:
            profile = boards.load(board)
        except ValueError as e:
            raise config.ConfigError(str(e))
        limits = config.limits_from(data, path, profile.LIMITS)  # [limits] refines the profile
    else:
        profile = boards.load("unix")
        limits = config.limits_from(data, path)
    explicit_baud = args.baud if args.baud is not None else server.get("baud")
    baud = _baud(explicit_baud)
    stats = args.stats_interval if args.stats_interval is not None else server.get("stats_interval")
    if stats is None:
        stats = 60 if sys.implementation.name == "micropython" else 0
    if not isinstance(stats, int) or stats < 0:
        raise config.ConfigError("stats interval must be a whole number of seconds, not %r" % (stats,))
    users, definitions = _users(data, path, getattr(args, "definitions", None) or server.get("definitions"))
    storage = profile.STORAGE
    journal_max_bytes = _size(server, "journal_max_bytes", storage["max_bytes"])
    segment_bytes = _size(server, "segment_bytes", _segment_bytes(storage, journal_max_bytes))
    return {
        "listeners": listeners,
        "data": args.data or server.get("data", storage["path"]),
        "journal_max_bytes": journal_max_bytes,
        "segment_bytes": segment_bytes,
        "log_level": level,
        "log_file": _log_file(getattr(args, "log_file", None) or server.get("log_file")),
        "board": board,
        "read_size": profile.READ_SIZE,
        "stats_interval": stats,
        "limits": limits,
        "users": users,
        "definitions": definitions,
        # a board's UART by name ("uart2") comes up on the pins its profile wires
        "serial": [
            boards.serial_link(profile, device, explicit_baud) for device in _serial_devices(args.serial, server)
        ],
        "baud": baud,
        "bridges": _bridges(data, path),
    }


def needs_tls(opts):
    """Whether these settings speak TLS anywhere: an amqps:// bridge uplink. (Without TLS the
    CPython broker runs without OpenSSL: tools/cli.py.)"""
    return any(uri["tls"] for bridge in opts["bridges"] for uri in bridge["uris"])


def _log_file(path):
    """Where the log goes: None for standard error (what journald and a terminal read)."""
    if path is None:
        return None
    if not isinstance(path, str) or not path:
        raise config.ConfigError("log_file must be a file name, not %r" % (path,))
    if sys.implementation.name == "micropython":
        raise config.ConfigError("log_file: a board logs to its console (its flash has no writes to spare)")
    return path


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


def _listeners(args, server, data, path):
    """Where the broker listens: [{"protocol": "amqp", "bind": ADDRESS, "port": N}, ...].

    --bind/--port and [server] bind/port are the short form of one AMQP listener; [[listener]]
    tables name any number. The command line wins over the config file, as every option does:
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
        short = {"port": args.port if args.port is not None else server.get("port", 5672)}
        short["bind"] = args.bind or server.get("bind", "0.0.0.0")
        listeners = _checked_listeners([short], path)
    return listeners


def _checked_listeners(tables, path):
    listeners = []
    for table in tables:
        bind = table.get("bind", "0.0.0.0")
        if not isinstance(bind, str):
            raise config.ConfigError("bind must be an address, not %r" % (bind,))
        port = table.get("port", 5672)
        if not isinstance(port, int) or not 0 <= port <= 65535:
            raise config.ConfigError("port must be a number from 0 to 65535, not %r" % (port,))
        for other in listeners:
            if port and other["port"] == port and other["bind"] == bind:  # (port 0: each its own)
                raise config.ConfigError("%s: two [[listener]]s on %s:%d" % (path, bind, port))
        listeners.append({"protocol": table.get("protocol", "amqp"), "bind": bind, "port": port})
    return listeners


def _bridges(data, path):
    if "bridge" not in data:
        return []
    from .bridge_config import bridges_from  # only a config with bridges loads their checks

    return bridges_from(data, path)


MAX_SCALED_SEGMENT = 8 * 1024 * 1024  # (Linux's own segment size)


def _segment_bytes(storage, journal_max_bytes):
    """The segment size when the config names none: the profile's, grown in proportion when the
    disk budget is raised above the profile's (at most 8 MiB). The journal keeps a few numbers
    and each queue a run per segment in memory: a board given megabytes of flash for a backlog
    must not fill its heap with the bookkeeping of thousands of 16 KiB segments."""
    default = storage["segment_bytes"]
    if journal_max_bytes <= storage["max_bytes"]:
        return default
    scaled = default * (journal_max_bytes // storage["max_bytes"])
    return max(default, min(scaled, MAX_SCALED_SEGMENT))


def _size(server, key, default):
    value = server.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 4096:
        raise config.ConfigError("%s must be a number of bytes, at least 4096, not %r" % (key, value))
    return value


def _serial_devices(option, server):
    """Serial devices from --serial (repeated, or comma-separated) or [server] serial = [...]."""
    devices = option if option is not None else server.get("serial", [])
    if isinstance(devices, str):
        devices = [devices]
    if not isinstance(devices, list) or not all(isinstance(d, str) for d in devices):
        raise config.ConfigError("serial must be a list of device names, not %r" % (devices,))
    return [d for entry in devices for d in entry.split(",") if d]


def _baud(baud):
    """The baud rate of serial links whose profile entry does not set one (default 115200)."""
    if baud is None:
        return 115200
    if not isinstance(baud, int) or isinstance(baud, bool) or baud <= 0:
        raise config.ConfigError("baud must be a positive number, not %r" % (baud,))
    return baud


def parse(argv):
    """The settings from a command line, or None after printing why they are wrong."""
    import argparse

    parser = argparse.ArgumentParser(description="run the hutch AMQP 0-9-1 broker")
    add_options(parser)
    try:
        return settings(parser.parse_args(argv))
    except config.ConfigError as e:
        print("hutch: %s" % e, file=sys.stderr)
        return None
