"""A board's Modbus RTU master: one serial line (a UART, or a tty on the unix port), one request
on it at a time, in devices/modbus/rtu.py's frames. On MicroPython, where pymodbus is not,
server/devices/polling.py makes one RtuLine per line its devices name; it keeps devices/line.py's
contract (poll, write, close) as server/devices/modbus_lines.py's Line does on CPython.

A request goes out once the line has been quiet for 3.5 characters, after what arrived
between requests (a late answer, noise) is dropped. Its answer is read until it is whole (the
request fixes its length; an exception's is 5 octets) or until the device's timeout; a request
that got no answer is sent again, `retries` times. The port is read without waiting (a UART
opened with timeout=0, a tty in raw mode with min 0), from the moment a whole answer could be
back (the characters of the request and the answer at the line's speed) every millisecond for
ten, then every five until the timeout: an answer is seen within a millisecond or so of its last
octet, and an idle line costs nothing.
"""

from ...devices import line as base
from ...devices.line import Failed, garbled
from ...devices.modbus import rtu
from ...devices.modbus.registers import decode, described, reads_of
from ...ports.clock import Clock, sleep_ms
from ...ports.uart import open_serial, uart_id

PARITY = {"N": None, "E": 0, "O": 1}  # machine.UART's parity argument


class RtuLine(base.Line):
    def __init__(self, line, timeout, retries):
        super().__init__(line, timeout, retries)
        self.timeout_ms = int(timeout * 1000)
        self.port = None
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
        """The line's port, opened at the first request and again after a failure; or Failed."""
        if self.port is None:
            try:
                self.port = open_serial(self._serial(), self.line["baudrate"])
            except (OSError, ValueError) as e:
                raise Failed("gone", "cannot open %s: %s" % (self.line["port"], e))
        return self.port

    async def _answer(self, port, request):
        """(the octets of a whole answer, or None at the timeout; the octets heard)."""
        got = b""
        now = self.clock.now_ms()
        deadline = now + self.timeout_ms
        # the soonest a whole answer can be back: the request's and the answer's characters
        due = now + (len(request) + rtu.answer_size(request)) * 11000 // self.line["baudrate"]
        while not rtu.complete(request, got):
            now = self.clock.now_ms()
            if now >= deadline:
                return None, len(got)
            # nothing to look at before it is due; then every millisecond for the first ten,
            # every five after that (a device slow to answer, or none)
            await sleep_ms(max(1, due - now) if now < due else 1 if now < due + 10 else 5)
            more = port.read(256)  # (None or b"": nothing yet)
            if more:
                got += more
        return got, len(got)

    async def _asked(self, request, what):
        """What the device answered to one request (devices/modbus/rtu.py answer()), or Failed."""
        heard = 0
        for _ in range(self.retries + 1):
            port = self._opened()
            try:
                while port.read(256):  # (what arrived since the last answer: dropped)
                    pass
                await sleep_ms(self.quiet_ms)  # (the silence that marks a new frame)
                port.write(request)
                got, heard = await self._answer(port, request)
            except OSError as e:
                self.close()
                raise Failed("gone", "%s failed: %s" % (self.line["port"], e))
            if got is not None:
                return rtu.answer(request, got, what)
        if heard:
            raise garbled(heard, what)
        raise Failed("timeout", "no answer to %s" % what)

    async def values(self, device):
        """Each of the device's reads, decoded: {register name: value}; or Failed."""
        unit = device.settings["unit"]
        values = {}
        for read in reads_of(device):
            request = rtu.read_request(unit, read[0], read[1], read[2])
            values.update(decode(read, await self._asked(request, described(read))))
        return values

    async def written(self, device, register, value):
        """value (registers.py encode()'s: words, or a coil's bool) written to the register, or
        Failed."""
        request = rtu.write_request(device.settings["unit"], register["kind"], register["address"], value)
        await self._asked(request, "a write of %s at %d" % (register["name"], register["address"]))

    def close(self):
        port, self.port = self.port, None
        if port is not None:
            # (a tty's file closes; a machine.UART deinit()s on the ports that have no close())
            shut = getattr(port, "close", None) or getattr(port, "deinit", None)
            try:
                if shut is not None:
                    shut()
            except OSError:
                pass
