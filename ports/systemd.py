"""Telling systemd how the broker is doing (sd_notify), for a `Type=notify` unit. CPython only.

systemd hands a notify service the path of a datagram socket in NOTIFY_SOCKET ("@" first for an
abstract one) and, with WatchdogSec=, the interval in WATCHDOG_USEC. A message is lines of
KEY=VALUE: READY=1 once the service serves, STATUS=... for `systemctl status`, WATCHDOG=1 at
least once per interval, STOPPING=1 when it begins to stop. A few lines of the protocol, so no
dependency: without NOTIFY_SOCKET every call does nothing.

    notify = Notifier.from_environment()
    notify.send("STATUS=recovering the journal")
"""

import os
import socket


class Notifier:
    def __init__(self, address, watchdog_usec):
        self.address = address
        self.watchdog_s = watchdog_usec / 1e6 if watchdog_usec else None  # None: no watchdog asked for

    @classmethod
    def from_environment(cls, environ=os.environ):
        path = environ.get("NOTIFY_SOCKET")
        if not path:
            return cls(None, None)
        address = "\0" + path[1:] if path.startswith("@") else path
        usec = environ.get("WATCHDOG_USEC")
        pid = environ.get("WATCHDOG_PID")  # the watchdog is this process's only if it names us
        watchdog = int(usec) if usec and usec.isdigit() and (not pid or pid == str(os.getpid())) else None
        return cls(address, watchdog)

    def send(self, *lines):
        if self.address is None:
            return
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            try:
                sock.sendto("\n".join(lines).encode(), self.address)
            except OSError:
                pass  # systemd gone, or a socket we may not write: the broker serves on

    async def keep_alive(self, running):
        """WATCHDOG=1 twice per interval while running() says the broker runs (a task of the
        broker's event loop: a loop that hangs stops the pings, and systemd restarts it)."""
        import asyncio

        if self.watchdog_s is None:
            return
        while running():
            self.send("WATCHDOG=1")
            await asyncio.sleep(self.watchdog_s / 2)
