"""A board's Modbus RTU master: one serial line (a UART, or a tty on the unix port), one request
on it at a time, in devices/rtu.py's frames. On MicroPython, where pymodbus is not,
server/devices.py makes one RtuLine per line its devices name; it answers poll(), write() and
close() as server/modbus_lines.py's Line does on CPython.

A request goes out once the line has been quiet for 3.5 characters, after what arrived
between requests (a late answer, noise) is dropped. Its answer is read until it is whole (the
request fixes its length; an exception's is 5 octets) or until the device's timeout; a request
that got no answer is sent again, `retries` times.
"""

import asyncio

from ..devices import rtu
from ..devices.device import Failed, garbled
from ..ports.clock import Clock, sleep_ms
from ..ports.uart import byte_stream, open_serial, uart_id

PARITY = {"N": None, "E": 0, "O": 1}  # machine.UART's parity argument


class RtuLine:
    def __init__(self, line, timeout, retries):
        self.line = line
        self.timeout_ms = int(timeout * 1000)
        self.retries = retries
        self.port = None
        self.stream = None
        self.turn = asyncio.Lock()
        self.clock = Clock()
        self.quiet_ms = max(2, int(rtu.silence(line["baudrate"]) * 1000 + 0.999))

    def _serial(self):
        """What open_serial takes for the line: a tty's path, or a UART's settings."""
        line = self.line
        uart = uart_id(line["port"])
        if uart is None:
            return line["port"]
        serial = {"uart": uart, "baudrate": line["baudrate"], "bits": line["bytesize"]}
        serial["parity"] = PARITY[line["parity"]]
        serial["stop"] = line["stopbits"]
        for pin in ("tx", "rx"):
            if line.get(pin) is not None:
                serial[pin] = line[pin]
        return serial

    def _opened(self):
        """The line's stream, opened at the first request and again after a failure; or Failed."""
        if self.stream is None:
            try:
                self.port = open_serial(self._serial(), self.line["baudrate"])
            except (OSError, ValueError) as e:
                raise Failed("gone", "cannot open %s: %s" % (self.line["port"], e))
            self.stream = byte_stream(self.port)
        return self.stream

    def _flush(self):
        """Drops what arrived since the last answer (the port reads without waiting)."""
        while self.port.read(64):
            pass

    async def _answer(self, stream, request):
        """The octets of a whole answer, or (None, octets heard) at the timeout."""
        got = b""
        deadline = self.clock.now_ms() + self.timeout_ms
        while not rtu.complete(request, got):
            left = deadline - self.clock.now_ms()
            if left <= 0:
                return None, len(got)
            try:
                got += await asyncio.wait_for(stream.read(), left / 1000)
            except asyncio.TimeoutError:
                return None, len(got)
        return got, len(got)

    async def _asked(self, request, what):
        """What the device answered to one request (devices/rtu.py answer()), or Failed."""
        heard = 0
        for _ in range(self.retries + 1):
            stream = self._opened()
            try:
                self._flush()
                await sleep_ms(self.quiet_ms)  # (the silence that marks a new frame)
                await stream.write(request)
                got, heard = await self._answer(stream, request)
            except OSError as e:
                self.close()
                raise Failed("gone", "%s failed: %s" % (self.line["port"], e))
            if got is not None:
                return rtu.answer(request, got, what)
        if heard:
            raise garbled(heard, what)
        raise Failed("timeout", "no answer to %s" % what)

    async def poll(self, device):
        """Each of the device's reads: their words or bits, in plan order; or Failed."""
        async with self.turn:
            unit = device.settings["unit"]
            answers = []
            for kind, start, count, _members in device.reads:
                request = rtu.read_request(unit, kind, start, count)
                answers.append(await self._asked(request, "a read of %d %s at %d" % (count, kind, start)))
            return answers

    async def write(self, device, register, value):
        """value (registers.py encode()'s: words, or a coil's bool) written to the register: None
        once the device confirmed it, else why not."""
        request = rtu.write_request(device.settings["unit"], register["kind"], register["address"], value)
        async with self.turn:
            try:
                await self._asked(request, "a write of %s at %d" % (register["name"], register["address"]))
            except Failed as e:
                return "%s: %s" % e.args
        return None

    def close(self):
        if self.stream is not None:
            self.stream.close()
            self.stream = self.port = None
