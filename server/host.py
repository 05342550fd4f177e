"""What a broker on CPython runs beside its listeners: `max_connections` as its file descriptors
allow where nothing set it (ports/descriptors.py), DATA/status.json every two seconds
(ports/status_file.py), the control socket (ports/control_socket.py, answered by
server/control.py), the users an earlier `hutch ctl import` kept (DATA/users.json), and what
systemd is told (ports/systemd.py: READY=1 once every listener accepts, the watchdog). A board
runs none of it (server/startup.py host_services), and its bundle leaves this module out.

    services = await HostServices(folder, runtime).start()   # before the listeners open
    services.stop()                                           # the runtime's last step
"""

import asyncio
import time

from ..ports.control_socket import ControlSocket
from ..ports.descriptors import fit_connections
from ..ports.reserve import Reserve
from ..ports.status_file import StatusWriter
from ..ports.systemd import Notifier
from .control import Control, load_users

# A wall clock before this has not been set: a Raspberry Pi without a real-time clock boots at
# 1970-01-01 (or its last shutdown), until NTP answers. (2024-01-01 UTC: older than any hutch.)
CLOCK_SET_AFTER = 1704067200


class HostServices:
    def __init__(self, folder, runtime, user_origins):
        self.folder = folder
        self.runtime = runtime
        self.user_origins = user_origins  # the operator's users: hutch ctl import leaves them alone
        self.status = StatusWriter(folder, runtime.broker, runtime.log)
        self.control = None
        self.controller = Control(runtime, folder, user_origins)  # what answers it (server/control.py)
        self.notify = None
        self.ready_task = None

    async def start(self):
        fit_connections(self.runtime.broker.limits)  # (before the listeners open)
        say_an_unset_clock(self.runtime.log)
        add_imported_users(self.folder, self.runtime.broker.users, self.runtime.log)
        # the journal's way out of a disk another program fills (ports/reserve.py), set here, in
        # host code only: its writer (ports/storage.py JournalWriter) is the owner of the
        # journal's wake, and a board's modules name nothing of it (each new name they hold
        # takes a board's heap)
        broker = self.runtime.broker
        Reserve(self.folder, broker.flow, self.runtime.log).guard(broker.journal.wake.__self__)
        self.status.start()
        control = ControlSocket(self.folder, self.controller.handle, self.runtime.log)
        try:
            await control.start()
            self.control = control
        except OSError as e:  # said once; the broker serves its clients without it
            self.runtime.log(
                "warning", "no control socket in %s (hutch ctl cannot reach this broker): %s" % (self.folder, e)
            )
        self.notify = Notifier.from_environment()
        self.notify.send("STATUS=journal recovered; opening the listeners")
        self.ready_task = asyncio.get_running_loop().create_task(self._ready())
        return self

    async def _ready(self):
        """READY=1 once the runtime ticks: start-up is over and every listener accepts. Then the
        watchdog's pings, while it ticks."""
        runtime = self.runtime
        while not runtime.ticking:
            if runtime.stop_event.is_set():
                return
            await asyncio.sleep(0.01)  # the polling interval: start-up ends within the same turn or so
        listeners = ", ".join("%s:%d" % (listener.host, listener.port) for listener in runtime.listeners)
        self.notify.send("READY=1", "STATUS=serving on %s" % listeners)
        await self.notify.keep_alive(lambda: runtime.ticking)

    def stop(self):
        if self.ready_task is not None:
            self.ready_task.cancel()
        if self.control is not None:
            self.control.stop()
        self.status.stop()  # what the broker left: `hutch ctl status` shows it as such


def add_imported_users(folder, users, log):
    """The users an earlier `hutch ctl import` kept in the data folder, added to the config's. A
    name the config now defines too is the config's, said in the log."""
    imported = load_users(folder, users.loopback_users)
    if imported is None:
        return
    for name in sorted(imported.hashes):
        if name in users.hashes:
            log("warning", "user '%s' is in the config and was imported by hutch ctl: the config's is used" % name)
            for table in (imported.hashes, imported.tags, imported.permissions or {}):
                table.pop(name, None)
    users.merge(imported)


def say_an_unset_clock(log, now=None):
    """One line at the start when the wall clock has not been set yet: hutch serves all the
    same (durations run on the monotonic clock) and follows the jump when the clock is set."""
    now = time.time() if now is None else now
    if now < CLOCK_SET_AFTER:
        log(
            "warning",
            "clock: the wall clock reads %s UTC, before 2024: it is not set yet (no real-time clock, "
            "NTP not answered); arrivals are stamped on it until it is, and its jump then is followed; "
            "TLS upstreams refuse certificates not yet valid until then"
            % time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(now)),
        )
