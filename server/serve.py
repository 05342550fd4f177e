"""`hutch serve`: run the broker on TCP (and on serial links: --serial DEVICE).

Runs on CPython (through the `hutch` command) and on MicroPython:

    micropython -m hutch.server.serve --port 5672

run(opts) takes the settings that server/options.py makes of the command line and the
config file. Stops cleanly on SIGINT/SIGTERM (CPython) or Ctrl-C (MicroPython): every
client gets connection.close 320 CONNECTION_FORCED first.
"""

import asyncio
import os
import sys

from ..core.broker import VERSION, Broker
from ..ports.heap import HeapMonitor
from ..ports.log import make_log
from ..ports.tcp import TcpServer


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


def status_writer(folder, broker, log):
    """On CPython, DATA/status.json every two seconds for `hutch ctl status` (ports/status_file.py);
    a board writes none (no one reads it there, and its flash has no writes to spare)."""
    if sys.implementation.name == "micropython":
        return None
    from ..ports.status_file import StatusWriter  # pyright: ignore[reportMissingImports] (host only)

    writer = StatusWriter(folder, broker, log)  # (the bridges' status is in the broker's snapshot)
    writer.start()
    return writer


def recover_journal(opts, broker, log):
    """Durable definitions and persistent messages come back before any client connects.
    The code that reads them back is only needed now: a board forgets it afterwards, so
    its heap does not keep it."""
    from ..ports.recovery import recover

    # CPython checks sealed segments' data once it serves (ports/verify.py); a board, before
    check_later = sys.implementation.name != "micropython"
    writer = recover(opts["data"], broker, opts["segment_bytes"], opts["journal_max_bytes"], log, check_later)
    del recover
    forget(
        "hutch.ports.recovery", "hutch.ports.repair", "hutch.core.replay", "hutch.core.store.paging"
    )  # paging: until a queue pages
    return writer


def forget(*names):
    """On a board, drop modules that were only needed to start (their code and state held heap
    for nothing); the caller holds no reference to them any more. CPython keeps them."""
    if sys.implementation.name != "micropython":
        return
    for name in names:
        sys.modules.pop(name, None)
        package, _, attribute = name.rpartition(".")
        if hasattr(sys.modules.get(package), attribute):
            delattr(sys.modules[package], attribute)
    import gc

    gc.collect()


class FolderError(Exception):
    """The data folder cannot be used (another broker holds it, it is a file, it is not
    writable): `hutch serve` says so in one line naming the folder and exits with 1."""


def claim_data_folder(path):
    """Make the data folder if it is missing and take its lock (CPython: ports/folder_lock.py)
    before anything in it is read or written; the lock, or None on a board, where one process
    owns the filesystem and MicroPython has no flock."""
    try:
        _make_dirs(path)
    except OSError as e:
        raise FolderError("cannot use data folder %s: %s" % (path, getattr(e, "strerror", None) or e))
    if sys.implementation.name == "micropython":
        return None
    from ..ports.folder_lock import FolderInUse, lock_folder  # pyright: ignore[reportMissingImports] (host only)

    try:
        return lock_folder(path)
    except FolderInUse as e:
        raise FolderError(str(e))
    except OSError as e:
        raise FolderError("cannot use data folder %s: %s" % (path, e.strerror or e))


async def serve(opts, log, stop_event=None, on_ready=None):
    lock = claim_data_folder(opts["data"])
    try:
        await _serve(opts, log, stop_event, on_ready)
    finally:
        if lock is not None:
            lock.release()


async def _serve(opts, log, stop_event, on_ready):
    line, frame_reader = choose_frame_reader()
    if line is not None:
        log("info", line)
    entropy = os.urandom(6) if hasattr(os, "urandom") else b"hutch"
    broker = Broker(opts["limits"], opts["users"], log, platform_name(), entropy, frame_reader)
    finder = None
    if frame_reader is not None:  # CPython, c_accel built: its maker of stream deliveries and
        from ..amqp091 import output
        from ..c_accel import loader  # pyright: ignore[reportMissingImports] (host only)

        output.use_accelerator(loader.stream_deliveries())
        finder = loader.message_finder()  # the page-ins' message finder too
    journal = recover_journal(opts, broker, log)
    if finder is not None:
        journal.journal.find_messages = finder
    monitor = HeapMonitor(broker, log, opts["stats_interval"] * 1000)
    if stop_event is None:
        stop_event = asyncio.Event()
    bridges = make_bridges(opts["bridges"], broker, log, opts["data"], stop_event.set)  # before clients come
    server_class = tcp_server_class()
    server = server_class(broker, opts["bind"], opts["port"], log, opts["read_size"], monitor, stop_event.set)
    try:
        await server.start()
    except OSError as e:  # most often: the port is taken
        raise ListenError(
            "cannot listen on %s:%d: %s" % (opts["bind"], opts["port"], getattr(e, "strerror", None) or e)
        )
    journal.start()
    serials = []
    if opts["serial"]:
        from ..ports.serial import SerialServer  # only a broker with serial links loads it

        for device in opts["serial"]:
            serials.append(SerialServer(broker, device, opts["baud"], log, server.clock, stop_event.set))
            await serials[-1].start()
    for bridge in bridges:
        bridge.start()
    status = status_writer(opts["data"], broker, log)
    monitor.fit(broker.limits)
    board = " (board profile %s)" % opts["board"] if opts["board"] else ""
    log("info", "hutch %s on %s%s, data folder %s" % (VERSION, platform_name(), board, opts["data"]))
    if on_ready is not None:
        on_ready(server)
    try:
        await stop_event.wait()
    finally:
        log("info", "shutting down")
        for bridge in bridges:  # first: what they had in flight goes back to its queue
            await bridge.stop()
        for serial in serials:  # first, while the broker still ticks: their peers get 320 and a moment
            await serial.stop()
        await server.stop()
        await journal.stop()  # after the clients: what they were confirmed is on disk
        if status is not None:
            status.stop()  # what the broker left: `hutch ctl status` shows it as such


class ListenError(Exception):
    """A listener could not open its port (taken, not allowed): one line, exit 1."""


class StartError(Exception):
    """Settings that passed the config's checks but do not fit what the broker holds (a bridge's
    source exchange missing): `hutch serve` says it in one line and exits with 2."""


def make_bridges(settings, broker, log, data_folder, on_interrupt):
    """The config's [[bridge]]s, their queues set up (server/bridge.py; not imported without one)."""
    if not settings:
        return []
    from .bridge import Bridge, BridgeError, node_id

    node = node_id(data_folder)
    try:
        return [Bridge(broker, one, log, None, node, on_interrupt, data_folder) for one in settings]
    except BridgeError as e:
        raise StartError(str(e))


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
    except StartError as e:
        print("hutch: %s" % e, file=sys.stderr)
        return 2
    except (FolderError, ListenError) as e:
        print("hutch: %s" % e, file=sys.stderr)
        return 1
    return 0


def main(argv=None):
    """`micropython -m hutch.server.serve [options]`: the exit code."""
    from .options import parse

    opts = parse(argv if argv is not None else sys.argv[1:])
    del parse
    if opts is None:
        return 2
    forget_settings()
    return run(opts)


def forget_settings():
    """Once the settings are made, a board drops what made them: the config reader, the option
    checks and the board profiles (their figures are in the settings and the Limits now)."""
    profiles = [name for name in sys.modules if name.startswith("hutch.boards.")]
    forget("hutch.server.options", "hutch.server.config", *profiles)
    forget("hutch.boards")


if __name__ == "__main__":
    sys.exit(main())
