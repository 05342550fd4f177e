"""The broker's runtime: one clock, the ticks, the heap monitor, the stop and the shutdown order.

    code = run_loop(main, on_start)  # the event loop until main(stop_event) returns: an exit code
    runtime = Runtime(broker, log, stats_interval_ms, stop_event)
    runtime.listeners.append(listener)   # and .serials, .bridges, .journal, .status: see shutdown()
    await runtime.run()     # ticks the broker until the stop event; then shuts down, in order

Listeners, serial links and bridges are handed the runtime: they read its clock (broker.now must
come from one clock, and on MicroPython each Clock counts from its own creation), feed its heap
monitor, and ask for the stop on Ctrl-C (interrupt); none of them ticks the broker.
"""

import asyncio
import sys

from ..ports.clock import Clock, sleep_ms
from ..ports.heap import HeapMonitor
from ..ports.interrupt import interrupted

TYPE_CHECKING = False
if TYPE_CHECKING:  # read by type checkers only: MicroPython has no typing module
    from typing import Any

TICK_MS = 200  # heartbeats, handshake deadlines, TTLs: none needs a finer tick
GRACE_MS = 2000  # how long a shutdown waits for clients to answer 320 CONNECTION_FORCED
GRACE_TICK_MS = 50


class Runtime:
    reloader = None  # (CPython) server/reload.py's, once started from a config file
    amqp10 = False  # AMQP 1.0 served on the AMQP listeners too (server/frontends.py): set from the settings
    # The journal's writer (ports/storage.py) and the status file's (CPython), set once they
    # run (an annotation alone costs nothing at run time).
    journal: "Any"
    status: "Any"
    devices: "Any"  # (CPython, with [[device]]s) server/devices/polling.py's Devices
    fleet: "Any"  # (CPython, with [fleet]) server/fleet/agent.py's Agent
    disk_free: "Any"  # (with a disk_free_limit) ports/disk_free.py's DiskWatch
    memory_watch: "Any"  # (a host, with a memory_high_watermark) ports/memory_watch.py's MemoryWatch

    def __init__(self, broker, log, stats_interval_ms=0, stop_event=None):
        self.broker = broker
        self.log = log
        self.clock = Clock()
        self.monitor = HeapMonitor(broker, log, stats_interval_ms)  # sampled every tick (ports/heap.py)
        self.stop_event = stop_event if stop_event is not None else asyncio.Event()
        # Ctrl-C on MicroPython, caught in a task, becomes this request to stop (ports/interrupt.py)
        self.interrupt = self.stop_event.set
        # What shutdown() stops, in its order: they are added as they start.
        self.bridges = []
        self.serials = []
        self.listeners = []
        self.journal = None
        self.status = None
        self.ticking = False

    async def run(self):
        """Tick the broker until the stop event is set; then shut down."""
        self.ticking = True
        asyncio.create_task(self._tick_loop())
        try:
            await self.stop_event.wait()
        finally:
            await self.shutdown()

    async def _tick_loop(self):
        broker = self.broker
        clock = self.clock
        monitor = self.monitor
        while self.ticking:
            try:
                now = clock.now_ms()
                broker.tick(now, clock.wall_seconds())
                monitor.sample(now)
                await sleep_ms(TICK_MS)
            except KeyboardInterrupt:
                interrupted(self.interrupt)
            except MemoryError:  # the heap out for a moment (a stats line, a timer): the next tick tries again
                await sleep_ms(TICK_MS)
            except Exception as e:  # (a bug: said, and the ticks go on)
                self.log("error", "tick failed: %r" % (e,), e)
                await sleep_ms(TICK_MS)

    async def shutdown(self):
        self.log("info", "shutting down")
        fleet = getattr(self, "fleet", None)  # (CPython, [fleet]: server/fleet/agent.py's)
        if fleet is not None:  # (a document being tried stays pending: tried again at the next start)
            await fleet.stop()
        devices = getattr(self, "devices", None)  # (set by server/startup.py with [[device]]s: a board has none)
        if devices is not None:  # no more readings: what they published is in the journal's next commit
            await devices.stop()
        for bridge in self.bridges:  # first: what they had in flight goes back to its queue
            await bridge.stop()
        for serial in self.serials:  # while the broker still ticks: their peers get 320 and a moment
            await serial.stop()
        # Every listener stops accepting; every client gets connection.close 320
        # CONNECTION_FORCED and a moment to answer (the broker ticked meanwhile), then is hung up on.
        self.ticking = False
        listeners = self.listeners
        for listener in listeners:
            listener.close()
        broker = self.broker
        broker.shutdown()
        clock = self.clock
        waited = 0
        while waited < GRACE_MS and any(listener.clients for listener in listeners):
            await sleep_ms(GRACE_TICK_MS)
            waited += GRACE_TICK_MS
            broker.tick(clock.now_ms(), clock.wall_seconds())
        for listener in listeners:
            await listener.abort()
        self.log("info", "stopped")
        if self.journal is not None:
            await self.journal.stop()  # after the clients: what they were confirmed is on disk
        if self.status is not None:
            self.status.stop()  # what the broker left: `hutch ctl status` shows it as such


class StartError(Exception):
    """StartError(text, exit_code): the broker cannot start. A listener's port or the data
    folder cannot be had (1), or settings that passed the config's checks do not fit what the
    broker holds (2: a bridge's source exchange missing). `hutch serve` says it in one line."""


def run_loop(main, on_start=None):
    """Run main(stop_event), a coroutine function, in the event loop until it returns; the exit
    code (a StartError's, said on stderr, or 0). on_start(stop_event) runs inside the loop
    first: the CPython `hutch` command uses it to set the stop event on SIGINT/SIGTERM."""
    stop = asyncio.Event()
    running = []

    async def main_task():
        running.append(asyncio.current_task())
        if on_start is not None:
            on_start(stop)
        await main(stop)

    async def finish():
        stop.set()
        await running[0]

    try:
        asyncio.run(main_task())
    except StartError as e:
        print("hutch: %s" % e.args[0], file=sys.stderr)
        return e.args[1]
    except KeyboardInterrupt:
        # Ctrl-C on MicroPython, which has no signal module: the interrupt leaves its event loop
        # with every task still pending, so run it again to close each connection with 320
        # CONNECTION_FORCED. (`hutch serve` on CPython turns SIGINT/SIGTERM into `stop` instead.)
        if sys.implementation.name == "micropython" and running:
            try:
                asyncio.run(finish())
            except KeyboardInterrupt:
                pass
    return 0


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
