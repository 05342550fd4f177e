"""A line devices are polled on, whatever its field protocol: the contract every line keeps.

    values = await line.poll(device)        # {register name: value}, or Failed
    why = await line.write(device, register, value)   # None once the device confirmed it
    line.close()                            # opened again by the next request

A poll or a write that fails ends in Failed, whatever its protocol (the protocol's codec
raises it too, for an answer that says no or is none). One request on a line at a
time (`turn`: an RS-485 bus is half duplex, and a TCP gateway in front of one serialises too). A protocol's line (devices/modbus/: server/devices/modbus_lines.py
through pymodbus, server/devices/rtu_master.py a board's RTU master) gives values() and
written(); tests/interop/devices/test_device_lines.py holds every line to this.
"""

import asyncio

RESULTS = ("ok", "timeout", "exception", "error", "gone")


class Failed(Exception):
    """A poll or write that failed: Failed(result, why), result one of RESULTS but "ok":
    "timeout" (no answer after the retries), "exception" (the device said no: a protocol's
    exception answer), "error" (an answer that was none: a bad CRC, noise) or "gone" (no
    connection to it)."""


def garbled(heard, what):
    """The failure of a request whose answer was octets that were no answer."""
    return Failed("error", "%d octets to %s that were no answer (a bad CRC, or noise on the line)" % (heard, what))


class Line:
    def __init__(self, line, timeout, retries):
        self.line = line  # its settings (server/devices/config.py: transport, host, port, ...)
        self.timeout = timeout  # seconds a request waits for its answer
        self.retries = retries  # a request that got no answer is sent again this many times
        self.turn = asyncio.Lock()

    async def poll(self, device):
        """Every register of the device read: {name: value}; or Failed."""
        async with self.turn:
            return await self.values(device)

    async def write(self, device, register, value):
        """value (the protocol's encoding of a command's) written to the register: None once
        the device confirmed it, else why not."""
        async with self.turn:
            try:
                await self.written(device, register, value)
            except Failed as e:
                return "%s: %s" % e.args
        return None

    async def values(self, device):  # (the protocol's: its reads, under the turn)
        raise NotImplementedError

    async def written(self, device, register, value):  # (the protocol's: its write, under the turn)
        raise NotImplementedError

    def close(self):
        raise NotImplementedError
