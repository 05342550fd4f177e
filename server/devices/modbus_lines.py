"""A device's line on CPython, through pymodbus (the modbus extra): one TCP address or one serial
line, one request on it at a time (an RS-485 bus is half duplex; pymodbus's RTU framer keeps the
silent intervals between frames). server/devices/polling.py makes one Line per line its devices name.

A board has no pymodbus: its RTU line is server/devices/rtu_master.py's. Both keep devices/line.py's
contract (poll, write, close).
"""

import logging
import termios

from ...devices import line as base
from ...devices.line import Failed, garbled
from ...devices.modbus.registers import BITS, FUNCTIONS, decode, described, reads_of
from ..runtime import StartError

# a register kind -> the pymodbus client's method that reads it
READS = {
    "holding": "read_holding_registers",
    "input": "read_input_registers",
    "coil": "read_coils",
    "discrete": "read_discrete_inputs",
}


def pymodbus():
    """pymodbus's client module, or StartError naming the extra that installs it."""
    try:
        from pymodbus import client, exceptions
    except ImportError:
        raise StartError(
            "[[device]] needs pymodbus: install the modbus extra (pip install '.[modbus]' in hutch's checkout)", 2
        )
    # pymodbus logs each failed connect and retry itself ("Failed to connect", "Repeating...."):
    # a device's troubles are said by hutch, once per change of state (devices/device.py)
    logging.getLogger("pymodbus").setLevel(logging.CRITICAL + 1)
    return client, exceptions


class Line(base.Line):
    """One TCP address or serial line, its pymodbus client made at the first poll and made again
    after the connection is lost; one request at a time."""

    def __init__(self, line, timeout, retries):
        super().__init__(line, timeout, retries)
        self.client = None
        self.heard = 0  # octets received since the request under way was sent (_asked)

    def _make(self):
        client_module, _ = pymodbus()
        line = self.line
        # reconnect_delay 0: pymodbus does not reconnect by itself; a poll connects when it
        # finds the line down, and the device's backoff spaces those tries.
        common = {"timeout": self.timeout, "retries": self.retries, "reconnect_delay": 0, "trace_packet": self._heard}
        if line["transport"] == "tcp":
            return client_module.AsyncModbusTcpClient(line["host"], port=line["port"], **common)
        return client_module.AsyncModbusSerialClient(
            line["port"],
            baudrate=line["baudrate"],
            parity=line["parity"],
            stopbits=line["stopbits"],
            bytesize=line["bytesize"],
            **common,
        )

    async def _connected(self, device):
        """The line's client, connected (made at the first use, connected again after a loss);
        or Failed("gone")."""
        if self.client is None:
            self.client = self._make()
        client = self.client
        if not client.connected:
            try:
                connected = await client.connect()
            except OSError as e:
                raise Failed("gone", "cannot connect: %s" % e)
            except termios.error as e:  # a serial device that refuses the line's settings
                line = self.line
                raise Failed(
                    "gone",
                    "cannot set %s to baudrate=%s, parity=%s, stopbits=%s, bytesize=%s: %s (a pty takes no parity)"
                    % (line["port"], line["baudrate"], line["parity"], line["stopbits"], line["bytesize"], e.args[-1]),
                )
            if not connected:
                raise Failed("gone", "cannot connect to %s" % device.settings["uri"])
        return client

    def _heard(self, sending, data):
        """(pymodbus's trace_packet) Counts what the line brought: octets heard during a request
        that got no answer were no answer of Modbus's (a bad CRC, noise, a frame cut short)."""
        if not sending:
            self.heard += len(data)
        return data

    async def _asked(self, request, what):
        """The device's answer to one request (a coroutine of the client's), or Failed."""
        _, exceptions = pymodbus()
        self.heard = 0
        try:
            answer = await request
        except exceptions.ConnectionException as e:
            self.close()
            raise Failed("gone", "connection lost: %s" % e)
        except exceptions.ModbusIOException as e:
            if self.heard:
                raise garbled(self.heard, what)
            raise Failed("timeout", "no answer to %s (%s)" % (what, e))
        except exceptions.ModbusException as e:
            raise Failed("error", "%s: %s" % (what, e))
        if answer.isError():
            raise Failed("exception", "exception code %s to %s" % (getattr(answer, "exception_code", None), what))
        return answer

    async def written(self, device, register, value):
        """value (encode()'s: words, or a coil's bool) written to the register, or Failed."""
        address = register["address"]
        unit = device.settings["unit"]
        client = await self._connected(device)
        if register["kind"] == "coil":
            request = client.write_coil(address, value, device_id=unit)
        elif len(value) == 1:
            request = client.write_register(address, value[0], device_id=unit)
        else:
            request = client.write_registers(address, value, device_id=unit)
        await self._asked(request, "a write of %s at %d" % (register["name"], address))

    async def values(self, device):
        """Each of the device's reads, decoded: {register name: value}; or Failed."""
        client = await self._connected(device)
        values = {}
        unit = device.settings["unit"]
        for read in reads_of(device):
            kind, start, count, _members = read
            what = described(read)
            answer = await self._asked(getattr(client, READS[kind])(start, count=count, device_id=unit), what)
            # pymodbus hands on a sound answer whatever function and count it holds: over RTU
            # (no transaction id) a late answer to the read before, another function's, came
            # as this read's answer and its registers became a wrong reading
            if answer.function_code != FUNCTIONS[kind]:
                raise Failed("error", "an answer of function %d to %s" % (answer.function_code, what))
            bits = kind in BITS
            got = answer.bits if bits else answer.registers
            if len(got) < count or (not bits and len(got) > count):  # (bits come padded to whole octets)
                unit_name = "bits" if bits else "registers"
                raise Failed("error", "an answer of %d %s to %s" % (len(got), unit_name, what))
            values.update(decode(read, got[:count]))
        return values

    def close(self):
        if self.client is not None:
            self.client.close()
            self.client = None
