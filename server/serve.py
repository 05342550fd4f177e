"""`hutch serve`: run the broker on its listeners (and on serial links: --serial DEVICE).

Runs on CPython (through the `hutch` command) and on MicroPython:

    micropython -m hutch.server.serve --port 5672

run(opts) takes the settings that server/options.py makes of the command line and the
config file: server/startup.py starts the broker from them, and its runtime
(server/runtime.py) ticks it until it is stopped. Stops cleanly on SIGINT/SIGTERM (CPython)
or Ctrl-C (MicroPython): every client gets connection.close 320 CONNECTION_FORCED first.
"""

import sys

from ..ports.log import make_log
from .runtime import StartError, forget, run_loop


async def serve(opts, log, stop_event):
    try:
        from . import startup  # needed only to start: a board forgets it once the broker runs
    except MemoryError:  # (its imports are the front ends' and the core's: the heap may end there)
        raise heap_too_small()
    lock, made = startup.claim_data_folder(opts["data"])
    try:
        try:
            runtime = await startup.start(opts, log, stop_event)
        except MemoryError:  # a board whose heap cannot hold what its config asks for
            raise heap_too_small()
    except BaseException:
        if lock is not None:
            lock.release()
        startup.forget_folder(made)
        raise
    startup = None
    forget("hutch.server.startup", "hutch.server.bridges.setup", "hutch.server.listeners")
    try:
        await runtime.run()
    finally:
        if lock is not None:
            lock.release()


def heap_too_small():
    """The StartError of a start that ran out of heap: what the board has, in one line."""
    import gc

    gc.collect()
    free = getattr(gc, "mem_free", lambda: 0)()
    total = free + getattr(gc, "mem_alloc", lambda: 0)()
    return StartError(
        "the heap ran out while starting: this board's %d bytes (%d free now) do not hold what the config "
        "asks for (its listeners, bridges and devices): ask for less, or use a board with more memory" % (total, free),
        1,
    )


def run(opts, on_start=None):
    """Run the broker until it is stopped (Ctrl-C); an exit code. on_start(stop_event) runs
    inside the event loop first: the CPython `hutch` command uses it to stop on SIGINT/SIGTERM."""
    log = make_log(opts["log_level"])
    return run_loop(lambda stop: serve(opts, log, stop), on_start)


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
    checks (the bridges' and the devices' too: server/*config.py) and the board profiles (their
    figures are in the settings and the Limits now)."""
    made = [name for name in sys.modules if name.startswith("hutch.boards.") or name.endswith("config")]
    forget("hutch.server.options", "hutch.server.schema", "hutch.server.bridges.upstreams", *made)
    forget("hutch.boards")


if __name__ == "__main__":
    sys.exit(main())
