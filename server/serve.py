"""`hutch serve`: run the broker on TCP (and on serial links: --serial DEVICE).

Runs on CPython (through the `hutch` command) and on MicroPython:

    micropython -m hutch.server.serve --port 5672

Options override the config file, which overrides the defaults. Stops cleanly
on SIGINT/SIGTERM (CPython) or Ctrl-C (MicroPython): every client gets
connection.close 320 CONNECTION_FORCED first.
"""

import asyncio
import os
import sys

from .. import boards
from ..core.broker import VERSION, Broker
from ..ports.heap import HeapMonitor
from ..ports.log import make_log
from ..ports.tcp import TcpServer
from . import config


def add_options(parser):
    parser.add_argument("--bind", default=None, help="address to listen on (default 0.0.0.0)")
    parser.add_argument("--port", type=int, default=None, help="TCP port (default 5672)")
    parser.add_argument("--config", default=None, help="config file (TOML): users, limits, server")
    parser.add_argument("--data", default=None, help="data folder (default ./hutch-data, or the board's)")
    parser.add_argument("--log-level", default=None, help="debug, info, warning or error (default info)")
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


def platform_name():
    impl = sys.implementation
    version = ".".join(str(v) for v in impl.version[:3])
    return "%s %s" % ("MicroPython" if impl.name == "micropython" else "CPython", version)


def _make_dirs(path):
    parts = path.split("/")
    for i in range(1, len(parts) + 1):
        step = "/".join(parts[:i])
        if step and not _exists(step):
            os.mkdir(step)


def _exists(path):
    try:
        os.stat(path)
        return True
    except OSError:
        return False


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


def settings(args):
    """Merge options (argparse's or an Options), config file and defaults; raises config.ConfigError."""
    data = config.read(args.config)
    server = data.get("server", {})
    path = args.config or "config"
    port = args.port if args.port is not None else server.get("port", 5672)
    if not isinstance(port, int) or not 0 <= port <= 65535:
        raise config.ConfigError("port must be a number from 0 to 65535, not %r" % (port,))
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
    storage = profile.STORAGE
    journal_max_bytes = _size(server, "journal_max_bytes", storage["max_bytes"])
    segment_bytes = _size(server, "segment_bytes", storage["segment_bytes"])
    return {
        "bind": args.bind or server.get("bind", "0.0.0.0"),
        "port": port,
        "data": args.data or server.get("data", storage["path"]),
        "journal_max_bytes": journal_max_bytes,
        "segment_bytes": segment_bytes,
        "log_level": level,
        "board": board,
        "read_size": profile.READ_SIZE,
        "stats_interval": stats,
        "limits": limits,
        "users": config.users_from(data, path),
        # a board's UART by name ("uart2") comes up on the pins its profile wires
        "serial": [
            boards.serial_link(profile, device, explicit_baud) for device in _serial_devices(args.serial, server)
        ],
        "baud": baud,
    }


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


def tcp_server_class():
    """On CPython, the port built on asyncio's protocol callbacks (faster); on MicroPython,
    whose asyncio has only streams, the stream port."""
    if sys.implementation.name == "micropython":
        return TcpServer
    from ..ports.tcp_cpython import ProtocolServer  # pyright: ignore[reportMissingImports] (host only)

    return ProtocolServer


def choose_frame_reader():
    """On CPython, the C frame scanner's reader if it was built (c_accel/loader.py): (a line for
    the log, the reader factory or None). On MicroPython, which has no accelerator, (None, None):
    there c_accel is never imported and connections read frame by frame."""
    if sys.implementation.name == "micropython":
        return None, None
    from ..c_accel import loader  # pyright: ignore[reportMissingImports] (host only: not in a board bundle)

    return loader.frame_reader()


def recover_journal(opts, broker, log):
    """Durable definitions and persistent messages come back before any client connects.
    The code that reads them back is only needed now: a board forgets it afterwards, so
    its heap does not keep it."""
    from ..ports.recovery import recover

    writer = recover(opts["data"], broker, opts["segment_bytes"], opts["journal_max_bytes"], log)
    if sys.implementation.name == "micropython":
        for name in ("hutch.ports.recovery", "hutch.core.replay"):
            sys.modules.pop(name, None)
            package, _, attribute = name.rpartition(".")
            if hasattr(sys.modules.get(package), attribute):
                delattr(sys.modules[package], attribute)
        del recover
        import gc

        gc.collect()
    return writer


async def serve(opts, log, stop_event=None, on_ready=None):
    _make_dirs(opts["data"])
    line, frame_reader = choose_frame_reader()
    if line is not None:
        log("info", line)
    entropy = os.urandom(6) if hasattr(os, "urandom") else b"hutch"
    broker = Broker(opts["limits"], opts["users"], log, platform_name(), entropy, frame_reader)
    journal = recover_journal(opts, broker, log)
    monitor = HeapMonitor(broker, log, opts["stats_interval"] * 1000)
    server = tcp_server_class()(broker, opts["bind"], opts["port"], log, opts["read_size"], monitor)
    await server.start()
    journal.start()
    serials = []
    if opts["serial"]:
        from ..ports.serial import SerialServer  # only a broker with serial links loads it

        for device in opts["serial"]:
            serials.append(SerialServer(broker, device, opts["baud"], log, server.clock))
            await serials[-1].start()
    monitor.fit(broker.limits)
    board = " (board profile %s)" % opts["board"] if opts["board"] else ""
    log("info", "hutch %s on %s%s, data folder %s" % (VERSION, platform_name(), board, opts["data"]))
    if on_ready is not None:
        on_ready(server)
    if stop_event is None:
        stop_event = asyncio.Event()
    try:
        await stop_event.wait()
    finally:
        log("info", "shutting down")
        for serial in serials:  # first, while the broker still ticks: their peers get 320 and a moment
            await serial.stop()
        await server.stop()
        await journal.stop()  # after the clients: what they were confirmed is on disk


def run(opts, on_start=None):
    """Run the broker until Ctrl-C; an exit code. on_start(stop_event) runs inside the event
    loop first: the CPython `hutch` command uses it to stop on SIGINT/SIGTERM."""
    log = make_log(opts["log_level"])
    stop = asyncio.Event()
    running = []

    async def main_task():
        running.append(asyncio.current_task())
        if on_start is not None:
            on_start(stop)
        await serve(opts, log, stop)

    async def finish():
        stop.set()
        await running[0]

    try:
        asyncio.run(main_task())
    except KeyboardInterrupt:
        # Ctrl-C on MicroPython, which has no signal module: the interrupt leaves its event loop
        # with every task still pending, so run it again to close each connection with 320
        # CONNECTION_FORCED. (`hutch serve` on CPython turns SIGINT/SIGTERM into `stop` instead.)
        if sys.implementation.name == "micropython" and running:
            try:
                asyncio.run(finish())
            except KeyboardInterrupt:
                pass
    except OSError as e:  # most often: the port is taken
        print(
            "hutch: cannot listen on %s:%d: %s" % (opts["bind"], opts["port"], getattr(e, "strerror", None) or e),
            file=sys.stderr,
        )
        return 1
    return 0


def _parse(argv):
    import argparse

    parser = argparse.ArgumentParser(description="run the hutch AMQP 0-9-1 broker")
    add_options(parser)
    return settings(parser.parse_args(argv))


def main(argv=None):
    try:
        # parsed in a function of its own, so the parser is garbage before the broker runs
        opts = _parse(argv if argv is not None else sys.argv[1:])
    except config.ConfigError as e:
        print("hutch: %s" % e, file=sys.stderr)
        return 2
    return run(opts)


if __name__ == "__main__":
    sys.exit(main())
