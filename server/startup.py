"""The broker's start: what `hutch serve` composes from its settings, in order.

    lock, made = claim_data_folder(opts["data"])  # before anything in it is read or written
    runtime = await start(opts, log, stop_event)    # if it fails: forget_folder(made)

start() builds the broker, reads its journal back, makes the runtime (server/runtime.py) and
starts the bridges, the listeners of the config (opts["listeners"]: a port of ports/ each, handed
the runtime and the FrontEnds of its protocol, server/frontends.py) and the serial links; then
the runtime runs them (server/serve.py). Needed only until the broker runs: a board forgets
this module then, and its heap keeps none of it.
"""

import os
import sys

from ..core.broker import VERSION, Broker
from ..ports.segments import make_dir
from .frontends import FrontEnds
from .runtime import Runtime, StartError, forget


def platform_name():
    impl = sys.implementation
    version = ".".join(str(v) for v in impl.version[:3])
    return "%s %s" % ("MicroPython" if impl.name == "micropython" else "CPython", version)


def _steps(path):
    """The folders down to path: "a", "a/b", "a/b/c" ("/a" and "/a/b" for "/a/b")."""
    parts = path.split("/")
    return [step for step in ("/".join(parts[:i]) for i in range(1, len(parts) + 1)) if step]


def _make_dirs(path):
    for step in _steps(path):
        make_dir(step)  # (each synced into its parent: a power cut keeps the data folder)


def _exists(path):
    try:
        os.stat(path)
        return True
    except OSError:
        return False


def choose_frame_reader():
    """On CPython, the C frame scanner's reader if it was built (c_accel/loader.py): (a line for
    the log, the reader factory or None). On MicroPython, which has no accelerator, (None, None):
    there c_accel is never imported and connections read frame by frame."""
    if sys.implementation.name == "micropython":
        return None, None
    from ..c_accel import loader  # pyright: ignore[reportMissingImports] (host only: not in a board bundle)

    return loader.frame_reader()


async def host_services(folder, runtime, user_origins):
    """On CPython, what serves `hutch ctl` (server/host.py): DATA/status.json every two seconds,
    the control socket, and the users an earlier `hutch ctl import` kept. A board has none (no
    one runs hutch ctl there, and its flash has no writes to spare)."""
    if sys.implementation.name == "micropython":
        return None
    from .host import HostServices  # pyright: ignore[reportMissingImports] (host only)

    return await HostServices(folder, runtime, user_origins).start()


def recover_journal(opts, broker, log):
    """Durable definitions and persistent messages come back before any client connects.
    The code that reads them back is only needed now: a board forgets it afterwards, so
    its heap does not keep it."""
    if sys.implementation.name == "micropython":
        # What the start made so far is garbage by now, and the recovery's code is the start's
        # largest import: collected first, its blocks come from a heap in one piece (left to the
        # collection a failed allocation runs, the esp32 profile's 152k heap failed to find 1.3
        # KiB in one block with more free in all)
        import gc

        gc.collect()
    from ..ports.recovery import recover

    # CPython checks sealed segments' data once it serves (ports/verify.py); a board, before
    check_later = sys.implementation.name != "micropython"
    writer = recover(opts["data"], broker, opts["segment_bytes"], opts["journal_max_bytes"], log, check_later)
    del recover
    forget(
        "hutch.ports.recovery", "hutch.ports.repair", "hutch.core.replay", "hutch.core.store.paging"
    )  # paging: until a queue pages
    return writer


def claim_data_folder(path):
    """Make the data folder if it is missing and take its lock (CPython: ports/folder_lock.py)
    before anything in it is read or written: (the lock, or None on a board, where one process
    owns the filesystem and MicroPython has no flock; the folder made, or None if it was
    there). StartError (exit 1) naming the folder if it cannot be used (another broker holds
    it, it is a file, it is not writable)."""
    made = None
    for step in _steps(path):
        if not _exists(step):
            made = step  # the first folder this start makes: a failed start removes it
            break
    try:
        _make_dirs(path)
    except OSError as e:
        raise StartError("cannot use data folder %s: %s" % (path, getattr(e, "strerror", None) or e), 1)
    if sys.implementation.name == "micropython":
        return None, made
    from ..ports.folder_lock import FolderInUse, lock_folder  # pyright: ignore[reportMissingImports] (host only)

    try:
        return lock_folder(path), made
    except FolderInUse as e:
        raise StartError(str(e), 1)
    except OSError as e:
        raise StartError("cannot use data folder %s: %s" % (path, e.strerror or e), 1)


def forget_folder(made):
    """A start that failed (a port taken, a certificate that does not load) leaves behind no
    data folder it made: the next start, with the mistake mended, finds what was there before.
    (CPython; a board keeps it, its flash has no use for the walk.)"""
    if made is None or sys.implementation.name == "micropython":
        return
    import shutil

    shutil.rmtree(made, ignore_errors=True)


async def start(opts, log, stop_event):
    """The broker and everything it serves, started: its runtime, to run."""
    # First: certificate files that do not make a context stop the broker before it does anything
    tls = [server_tls(entry, log) for entry in opts["listeners"]]
    if opts["bridges"]:  # (a broker without bridges loads none of their set-up)
        from .bridges.setup import bridge_tls_files

        for bridge in opts["bridges"]:
            bridge_tls_files(bridge)
    line, frame_reader = choose_frame_reader()
    if line is not None:
        log("info", line)
    entropy = os.urandom(6) if hasattr(os, "urandom") else b"hutch"
    broker = Broker(opts["limits"], opts["users"], log, platform_name(), entropy)
    broker.name = opts["name"]
    if sys.implementation.name != "micropython":  # (before its first exchange: amq.* are made when named)
        from ..core.route_cache import routers  # pyright: ignore[reportMissingImports] (host only)

        broker.routers = routers()
    finder = None
    if frame_reader is not None:  # CPython, c_accel built: its maker of stream deliveries and
        from ..amqp091.batch import install  # pyright: ignore[reportMissingImports] (host only)
        from ..c_accel import loader  # pyright: ignore[reportMissingImports] (host only)

        install(broker, frame_reader, loader.stream_deliveries())
        finder = loader.message_finder()  # the page-ins' message finder too
    journal = recover_journal(opts, broker, log)
    if finder is not None:
        journal.journal.find_messages = finder
    definitions = opts["definitions"]
    if definitions is not None:  # after the journal: what the file declares again is a redeclare
        for line in definitions.unsupported:
            log("warning", "definitions: left out, hutch has no counterpart: %s" % line)
        definitions.apply(broker, log)
    runtime = Runtime(broker, log, opts["stats_interval"] * 1000, stop_event)
    if opts["bridges"] or any(name.startswith(b"hutch.bridge.") for name in broker.queues):  # before clients come
        from .bridges.setup import make_bridges, set_uplink, take_in_left_behind

        set_uplink(runtime, opts["uplink"])
        runtime.bridges = make_bridges(opts["bridges"], runtime, opts["data"])
        take_in_left_behind(runtime, opts["bridges"])  # (queues a config's change left behind)
    if opts.get("devices"):  # (a broker without [[device]]s loads none of their code)
        from .devices.polling import Devices  # pyright: ignore[reportMissingImports] (host only)

        runtime.devices = Devices(runtime, opts["data"])  # (pymodbus missing: said before listening)
    runtime.status = await host_services(
        opts["data"], runtime, opts["user_origins"]
    )  # (after the bridges: it shows them)
    runtime.amqp10 = opts["amqp10"]
    serve_front_ends(broker, opts["front_ends"])  # ([mqtt]'s, where a listener serves MQTT)
    await start_listeners(runtime, opts["listeners"], opts["read_size"], tls)
    if opts["metrics"] is not None:
        from .monitoring import start  # (only with a metrics port)

        await start(runtime, *opts["metrics"])
    if sys.implementation.name != "micropython":
        if opts.get("args") is not None:  # (`hutch serve`: what it read, to read again)
            from .reload import Reloader  # pyright: ignore[reportMissingImports] (host only)

            runtime.reloader = Reloader(runtime, opts["args"], opts)
        reload_on_hangup(runtime)
        if opts.get("fleet") is not None and runtime.reloader is not None:  # ([fleet]: a member)
            from .fleet.agent import Agent  # pyright: ignore[reportMissingImports] (host only)

            runtime.fleet = Agent(runtime, opts["fleet"], opts["data"])
    journal.start()
    runtime.journal = journal
    if opts.get("memory_high_watermark"):  # (a host: its resident memory is watched)
        from ..ports.memory_watch import start_watch as watch_memory  # pyright: ignore[reportMissingImports] (host only)

        runtime.memory_watch = watch_memory(opts["memory_high_watermark"], broker.flow, stop_event, log)
    if opts["disk_free_limit"]:  # (a host's profile: its data folder's disk is watched)
        from ..ports.disk_free import start_watch

        runtime.disk_free = start_watch(opts["data"], opts["disk_free_limit"], broker.flow, stop_event, log)
    if opts["serial"]:
        from ..ports.serial import SerialServer  # only a broker with serial links loads it

        front = FrontEnds(runtime)  # AMQP, its header after whatever a closed connection left
        for device in opts["serial"]:
            runtime.serials.append(SerialServer(runtime, front, device, opts["baud"]))
            await runtime.serials[-1].start()
    for bridge in runtime.bridges:
        bridge.start()
    fleet = getattr(runtime, "fleet", None)  # (a member of a fleet: server/fleet/agent.py's)
    if fleet is not None:
        await fleet.start()
    for device in opts.get("devices") or ():
        runtime.devices.add(device)
    runtime.monitor.fit(broker.limits)
    board = " (board profile %s)" % opts["board"] if opts["board"] else ""
    log(
        "info",
        "hutch %s on %s%s, gateway %s, data folder %s" % (VERSION, platform_name(), board, opts["name"], opts["data"]),
    )
    return runtime


def serve_front_ends(broker, front_ends):
    """Each front end a listener serves that has settings of its own (options: {section:
    settings}) set up from them before any client comes (its package's serving.serve: mqtt/),
    or a StartError where the firmware holds none of it."""
    from .listeners import FEATURE, LISTENERS, PACKAGE, ROOT, SECTION, TITLE, front_end

    for row in LISTENERS.values():
        settings = front_ends.get(row[SECTION]) if row[SECTION] is not None else None
        if settings is None:
            continue
        try:
            serve = front_end(row[PACKAGE] + ".serving", "serve")
        except ImportError:
            raise StartError(
                "%s is not in this board's firmware: build it with python -m hutch.firmware.build --%s "
                "(hutch flash does, for a config that serves it)" % (row[TITLE], row[FEATURE]),
                2,
            )
        serve(broker, settings)
        forget(ROOT + row[PACKAGE] + ".serving")  # (a board needs it no more)


async def start_listeners(runtime, listeners, read_size, tls=None):
    """Open the config's listeners (protocol, bind, port) into runtime.listeners, each with its
    TLS context (tls: server_tls()'s, one per listener; None for plain TCP); StartError (exit 1)
    for the first that cannot, the others closed again. On CPython, the port built on asyncio's
    protocol callbacks (faster); on MicroPython, whose asyncio has only streams, the stream port."""
    if sys.implementation.name == "micropython":
        from ..ports.tcp import TcpListener as Listener
    else:
        from ..ports.tcp_cpython import ProtocolListener as Listener  # pyright: ignore[reportMissingImports] (host only)
    read_buffer = None
    for i, entry in enumerate(listeners):
        protocol, bind, port = entry["protocol"], entry["bind"], entry["port"]
        context = tls[i] if tls else None
        front = FrontEnds(runtime, protocol, entry.get("websocket"))
        listener = Listener(runtime, front, bind, port, read_size, read_buffer, context)
        read_buffer = listener.read_buffer  # one for every listener's clients
        try:
            await listener.start()
        except OSError as e:  # most often: the port is taken
            for opened in runtime.listeners:  # closed again (a client that came meanwhile: hung up on)
                opened.close()
                await opened.abort()
            raise StartError("cannot listen on %s:%d: %s" % (bind, port, getattr(e, "strerror", None) or e), 1)
        runtime.listeners.append(listener)
        over = " over TLS" if context is not None else ""
        runtime.log("info", "listening for %s%s on %s:%d" % (front.title, over, bind, port))


def reload_on_hangup(runtime):
    """SIGHUP (`systemctl reload hutch`): the config read again and applied (server/reload.py:
    bridges, users, the TLS listeners' files); a broker started without a config file to read
    (its settings given whole) reads its TLS listeners' certificate, key and CA files again
    (ports/tls.py ServerTLS.reload): new handshakes use them, connections already made go on
    with theirs. CPython only (MicroPython has no signals). Wired here at start, beside the
    runtime's other handlers (SIGINT, SIGTERM: tools/cli.py), so that a board's runtime carries
    nothing for it."""
    import asyncio
    import signal  # pyright: ignore[reportMissingImports] (host only)

    def reload():
        if runtime.reloader is not None:
            asyncio.ensure_future(runtime.reloader.reload())  # (it logs what it did, or why not)
            return
        for listener in runtime.listeners:
            if listener.tls is not None:
                listener.tls.reload()

    loop = asyncio.get_running_loop()  # pyright: ignore[reportAttributeAccessIssue] (CPython only)
    loop.add_signal_handler(signal.SIGHUP, reload)  # pyright: ignore[reportAttributeAccessIssue] (CPython only)


def server_tls(listener, log):
    """A listener's TLS context (ports/tls.py: ssl is loaded only then), or None for plain TCP.
    StartError (exit 2) in one line naming the file that cannot be read, or the files if they do
    not make a context (not PEM, a key that does not fit the certificate)."""
    settings = listener.get("tls")
    if settings is None:
        return None
    from .readable import check_readable

    where = "TLS listener %s:%d" % (listener["bind"], listener["port"])
    check_readable(where, settings, ("certfile", "keyfile", "cacertfile"))
    from ..ports.tls import ServerTLS

    try:
        return ServerTLS(settings, log)
    except (OSError, ValueError) as e:  # ssl.SSLError is an OSError; MicroPython's ssl raises ValueError
        files = ", ".join(settings[key] for key in ("certfile", "keyfile", "cacertfile") if settings[key])
        raise StartError("%s: cannot use the certificate files %s: %s" % (where, files, e), 2)
