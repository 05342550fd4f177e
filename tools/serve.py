"""`hutch serve`: run the broker on TCP.

Runs on CPython (through the `hutch` command) and on MicroPython:

    micropython -m hutch.tools.serve --port 5672

Options override the config file, which overrides the defaults. Stops cleanly
on SIGINT/SIGTERM (CPython) or Ctrl-C (MicroPython): every client gets
connection.close 320 CONNECTION_FORCED first.
"""
import asyncio
import os
import sys

from ..core.broker import VERSION, Broker
from ..ports.log import make_log
from ..ports.tcp import TcpServer
from . import config

DEFAULT_DATA = "hutch-data"


def add_options(parser):
    parser.add_argument("--bind", default=None, help="address to listen on (default 0.0.0.0)")
    parser.add_argument("--port", type=int, default=None, help="TCP port (default 5672)")
    parser.add_argument("--config", default=None, help="config file (TOML): users, limits, server")
    parser.add_argument("--data", default=None, help="data folder (default ./%s)" % DEFAULT_DATA)
    parser.add_argument("--log-level", default=None, help="debug, info, warning or error (default info)")


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

    def __init__(self, config=None, bind=None, port=None, data=None, log_level=None):
        self.config = config
        self.bind = bind
        self.port = port
        self.data = data
        self.log_level = log_level


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
    limits = config.limits_from(data, path)
    _fit_heap(limits, data.get("limits", {}))
    return {
        "bind": args.bind or server.get("bind", "0.0.0.0"),
        "port": port,
        "data": args.data or server.get("data", DEFAULT_DATA),
        "log_level": level,
        "limits": limits,
        "users": config.users_from(data, path),
    }


def micropython_heap():
    """The MicroPython heap size in bytes; None on CPython, whose memory is the machine's."""
    import gc
    if not hasattr(gc, "mem_free"):
        return None
    return gc.mem_free() + gc.mem_alloc()


def _fit_heap(limits, configured):
    """MicroPython: size the memory budgets to the heap there is, unless the config set them.

    The defaults suit a Linux gateway (512 MiB of queued messages); on a MicroPython heap
    of a few MiB they would let publishers run the heap out before connection.blocked.
    Queued messages get 60% of the heap (the unix port's 2 MiB heap ran out at ~90% full with
    no budget), each client's unsent output 1/32 of it.
    Board profiles (boards/) will set these per board.
    """
    heap = micropython_heap()
    if heap is None:
        return
    if "total_max_bytes" not in configured:
        limits.total_max_bytes = heap * 60 // 100
    if "output_high_water" not in configured:
        limits.output_high_water = max(4096, heap // 32)


def _tune_gc():
    """MicroPython: collect garbage every 1/16 of the heap instead of only when it is full.

    Left to itself, MicroPython's GC first runs when the heap is exhausted, so the messages
    still queued end up scattered over the whole heap with garbage between them; after the
    collection no hole is big enough for a growing queue list and a 2 MB heap fails with
    MemoryError while holding under 1 MB. Frequent collections keep live objects packed.
    """
    heap = micropython_heap()
    if heap is not None:
        import gc
        gc.threshold(max(16384, heap // 16))


async def serve(opts, log, stop_event=None, on_ready=None):
    _tune_gc()
    _make_dirs(opts["data"])
    entropy = os.urandom(6) if hasattr(os, "urandom") else b"hutch"
    broker = Broker(opts["limits"], opts["users"], log, platform_name(), entropy)
    server = TcpServer(broker, opts["bind"], opts["port"], log)
    await server.start()
    log("info", "hutch %s on %s, data folder %s" % (VERSION, platform_name(), opts["data"]))
    if on_ready is not None:
        on_ready(server)
    if stop_event is None:
        stop_event = asyncio.Event()
    try:
        await stop_event.wait()
    finally:
        log("info", "shutting down")
        await server.stop()


def run(opts):
    """Run the broker until Ctrl-C (or SIGINT/SIGTERM through `hutch serve`); an exit code."""
    log = make_log(opts["log_level"])
    stop = asyncio.Event()
    running = []

    async def main_task():
        running.append(asyncio.current_task())
        await serve(opts, log, stop)

    async def finish():
        stop.set()
        await running[0]

    try:
        asyncio.run(main_task())
    except KeyboardInterrupt:
        # Ctrl-C (SIGINT). MicroPython has no signal module: the interrupt leaves its event loop
        # with every task still pending, so run it again to close each connection with 320
        # CONNECTION_FORCED. CPython's asyncio.run has already cancelled them (`hutch serve`
        # handles SIGINT/SIGTERM itself instead).
        if sys.implementation.name == "micropython" and running:
            try:
                asyncio.run(finish())
            except KeyboardInterrupt:
                pass
    except OSError as e:  # most often: the port is taken
        print("hutch: cannot listen on %s:%d: %s" % (opts["bind"], opts["port"], e))
        return 1
    return 0


def main(argv=None):
    import argparse
    parser = argparse.ArgumentParser(description="run the hutch AMQP 0-9-1 broker")
    add_options(parser)
    args = parser.parse_args(argv if argv is not None else sys.argv[1:])
    try:
        opts = settings(args)
    except config.ConfigError as e:
        print("hutch: %s" % e)
        return 2
    return run(opts)


if __name__ == "__main__":
    sys.exit(main())
