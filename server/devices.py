"""The config's [[device]]s polled on CPython, through pymodbus (the modbus extra).

Devices whose URIs name one TCP address or one serial line share a Line: one pymodbus client,
one request on it at a time (an RS-485 bus is half duplex; pymodbus's RTU framer keeps the
silent intervals between frames). Each device polls in a task of its own, at its interval; a
poll takes the line for its reads and lets go, so a device that does not answer costs the
others only its timeouts, and while it is down it is polled after a backoff
(devices/device.py).

What a poll publishes (devices/device.py) goes into the broker through Broker.publish, as a
client's publish does, persistent: the sensor dedup and the journal treat it as any sensor's
reading. A poll's number is kept from one run to the next in DATA/devices/NAME.poll
(devices/device.py PollNumbers).
"""

import asyncio
import binascii
import logging
import os
import time

from ..codec.wire import shortstr
from ..core.broker import REFUSED, ROUTED
from ..core.content import tails
from ..core.message import Message
from ..devices.device import Device, PollNumbers
from ..devices.registers import BITS
from ..ports.streams import replace_file
from .runtime import StartError

PERSISTENT = 2
# a register kind -> the pymodbus client's method that reads it
READS = {
    "holding": "read_holding_registers",
    "input": "read_input_registers",
    "coil": "read_coils",
    "discrete": "read_discrete_inputs",
}
JSON = b"application/json"


def _pymodbus():
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


class Failed(Exception):
    """A poll that failed: Failed(result, why), result one of devices/device.py RESULTS."""


class Line:
    """One TCP address or serial line, its pymodbus client made at the first poll and made again
    after the connection is lost; one request at a time."""

    def __init__(self, line, timeout, retries):
        self.line = line
        self.timeout = timeout
        self.retries = retries
        self.client = None
        self.turn = asyncio.Lock()
        self.heard = 0  # octets received since the request under way was sent (_asked)

    def _make(self):
        client_module, _ = _pymodbus()
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
        _, exceptions = _pymodbus()
        self.heard = 0
        try:
            answer = await request
        except exceptions.ConnectionException as e:
            self.close()
            raise Failed("gone", "connection lost: %s" % e)
        except exceptions.ModbusIOException as e:
            if self.heard:
                raise Failed(
                    "error",
                    "%d octets to %s that were no answer (a bad CRC, or noise on the line)" % (self.heard, what),
                )
            raise Failed("timeout", "no answer to %s (%s)" % (what, e))
        except exceptions.ModbusException as e:
            raise Failed("error", "%s: %s" % (what, e))
        if answer.isError():
            raise Failed("exception", "exception code %s to %s" % (getattr(answer, "exception_code", None), what))
        return answer

    async def write(self, device, register, value):
        """value (encode()'s: words, or a coil's bool) written to the register: None once the
        device confirmed it, else why not."""
        address = register["address"]
        unit = device.settings["unit"]
        what = "a write of %s at %d" % (register["name"], address)
        async with self.turn:
            try:
                client = await self._connected(device)
                if register["kind"] == "coil":
                    request = client.write_coil(address, value, device_id=unit)
                elif len(value) == 1:
                    request = client.write_register(address, value[0], device_id=unit)
                else:
                    request = client.write_registers(address, value, device_id=unit)
                await self._asked(request, what)
            except Failed as e:
                return "%s: %s" % e.args
        return None

    async def poll(self, device):
        """Each of the device's reads: their words or bits, in plan order; or Failed."""
        async with self.turn:
            client = await self._connected(device)
            answers = []
            unit = device.settings["unit"]
            for kind, start, count, _members in device.reads:
                read = getattr(client, READS[kind])
                what = "a read of %d %s at %d" % (count, kind, start)
                answer = await self._asked(read(start, count=count, device_id=unit), what)
                answers.append(answer.bits[:count] if kind in BITS else answer.registers)
            return answers

    def close(self):
        if self.client is not None:
            self.client.close()
            self.client = None


def line_key(line):
    """What makes two devices' lines one: the TCP address, or the serial device."""
    return ("tcp", line["host"], line["port"]) if line["transport"] == "tcp" else ("rtu", line["port"])


def numbers_path(folder, name):
    """DATA/devices/NAME.poll (the name as hex: any name makes a file name)."""
    return "%s/devices/%s.poll" % (folder, binascii.hexlify(name.encode()).decode())


def read_number(path):
    """The first poll number a run may give (1 for a device never polled; None if the file
    cannot be read: the caller then starts past any number an earlier run gave)."""
    try:
        with open(path, "rb") as f:
            return int(f.read().split()[0])
    except FileNotFoundError:
        return 1
    except (OSError, ValueError, IndexError):
        return None


class Devices:
    """Every [[device]] of the config, polled, each in a task of its own; as a publisher
    (Broker.publish) it can be told no. apply() makes a reload's devices the running ones."""

    confirming = True
    stats = None  # its counters: the broker's own
    closed = False  # (what the journal's waiters have: the readings' publishes wait for nothing)

    def __init__(self, runtime, folder):
        _pymodbus()  # (said at start, in one line, if pymodbus is missing)
        self.runtime = runtime
        self.broker = runtime.broker
        self.log = runtime.log
        self.folder = folder
        self.lines = {}
        self.devices = []  # (the list core/snapshot.py shows: hutch ctl devices, /metrics)
        self.tasks = {}  # device name -> its polling task
        self.commands = None  # server/device_commands.py Commands, with a writable register
        os.makedirs("%s/devices" % folder, exist_ok=True)
        runtime.broker.devices = self.devices

    def add(self, settings, numbers=None):
        """A device polled from now on (its first poll at once); numbers: its PollNumbers, when
        it was polled until now with another table (a reload), else read from the data folder."""
        key = line_key(settings["line"])
        if key not in self.lines:
            self.lines[key] = Line(settings["line"], settings["timeout"], settings["retries"])
        if numbers is None:
            path = numbers_path(self.folder, settings["name"])
            first = read_number(path)
            if first is None:
                first = int(time.time() * 1000)  # past every number given so far, at polls far below 1,000 a second
                self.log(
                    "warning",
                    "device %s: %s cannot be read: its polls are numbered from %d" % (settings["name"], path, first),
                )
            numbers = PollNumbers(first, lambda number: replace_file(path, b"%d\n" % number))
        device = Device(settings, numbers)
        device.line = self.lines[key]
        device.polling = True  # (False once removed: see remove)
        self.devices.append(device)
        if any(register["writable"] for register in settings["registers"]):
            if self.commands is None:
                from .device_commands import Commands  # (loaded with the first writable register)

                self.commands = Commands(self)
            self.commands.bind(device)
        self.tasks[device.name] = asyncio.create_task(self._run(device))

    async def remove(self, name):
        """The device no longer polled (a poll under way is cancelled; its line closed if no
        other device uses it): returned."""
        task = self.tasks.pop(name)
        device = [one for one in self.devices if one.name == name][0]
        # pymodbus turns a cancelled request into its own error (ModbusIOException, "Request
        # cancelled outside library"): the task also looks at polling, and ends at its next turn
        device.polling = False
        if self.commands is not None:
            self.commands.unbind(device)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        self.devices.remove(device)
        if not any(one.line is device.line for one in self.devices):
            device.line.close()
            self.lines = {key: line for key, line in self.lines.items() if line is not device.line}
        return device

    async def apply(self, wanted):
        """A reload's [[device]]s made the running ones, by name: one the file no longer has is
        no longer polled, a new one is, one whose table changed starts again with the new
        table (its poll numbers go on). [what changed, one line each]."""
        running = {device.name: device.settings for device in self.devices}
        by_name = {settings["name"]: settings for settings in wanted}
        said = []
        numbers = {}  # a changed device's poll numbers, which go on
        for name, settings in running.items():
            if by_name.get(name) != settings:
                numbers[name] = (await self.remove(name)).numbers
                if name not in by_name:
                    said.append("device %s removed" % name)
        for settings in wanted:
            was = running.get(settings["name"])
            if was == settings:
                continue
            self.add(settings, numbers.get(settings["name"]))
            if was is None:
                said.append("device %s added" % settings["name"])
            else:
                keys = sorted(
                    key for key in set(was) | set(settings) if key != "line" and was.get(key) != settings.get(key)
                )
                said.append("device %s restarted with its new table (%s changed)" % (settings["name"], ", ".join(keys)))
        return said

    async def stop(self):
        for name in list(self.tasks):
            await self.remove(name)

    def flush_confirms(self):
        """(Broker.journal_synced) Nothing waits: a reading is not answered to anyone."""

    def hold_for(self, queue):
        """(Broker.publish: never called, this publisher confirms)"""

    async def _run(self, device):
        loop = asyncio.get_running_loop()
        due = loop.time()
        while device.polling:
            await asyncio.sleep(max(0.0, due - loop.time()))
            try:
                await self._poll(device, loop)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a bug: it costs this poll, never the device's polling or the broker
                self.log("error", "device %s: internal error: %r" % (device.name, e), e)
            if device.state == "down":
                due = loop.time() + device.delay()
            else:  # on time: a late poll does not make the next ones late
                due = max(due + device.delay(), loop.time())

    async def _poll(self, device, loop):
        started = loop.time()
        try:
            answers = await device.line.poll(device)
        except Failed as e:
            if not device.polling:
                return  # (removed while its poll waited: not a failure of the device)
            status, line = device.failed(e.args[0], e.args[1], time.time())
            if line is not None:
                self.log("warning", line)
            if status is not None:
                self.publish(device, [status])
            return
        messages, line = device.answered(answers, time.time(), loop.time() - started)
        if line is not None:
            self.log("info", line)
        self.publish(device, messages)

    def publish(self, device, messages):
        """Each (routing key, headers, body) into the broker, persistent, from the device's exchange."""
        broker = self.broker
        exchange = device.settings["exchange"].encode()
        target = broker.exchange(exchange)
        if target is None:
            self.log(
                "warning", "device %s: no exchange '%s': its readings go nowhere" % (device.name, exchange.decode())
            )
            return
        for routing_key, headers, body in messages:
            key = routing_key.encode()
            props = {"content-type": JSON, "delivery-mode": PERSISTENT, "timestamp": int(time.time())}
            if headers:
                props["headers"] = headers
            message = Message(exchange, key, shortstr(exchange) + shortstr(key), *tails(props, body))
            result = broker.publish(target, message, self)
            if result & ROUTED and result & REFUSED:
                device.refused += 1

    def snapshot(self):
        return [device.snapshot() for device in self.devices]
