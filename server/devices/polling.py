"""The config's [[device]]s polled: on CPython through pymodbus (server/devices/modbus_lines.py, the
modbus extra), on a board over its UART (server/devices/rtu_master.py, Modbus RTU).

Devices whose URIs name one TCP address or one serial line share a line: one request on it at a
time (an RS-485 bus is half duplex). Each device polls in a task of its own, at its interval; a
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
import sys
import time

from ...core import counters
from ...core.broker import REFUSED, ROUTED
from ...core.content import made
from ...devices.device import Device, PollNumbers
from ...devices.line import Failed
from ...ports.clock import sleep_ms
from ...ports.files import replace_file
from ...ports.segments import make_dir

PERSISTENT = 2
JSON = b"application/json"
MICROPYTHON = sys.implementation.name == "micropython"
NO_SUCH_FILE = 2  # ENOENT


def line_class():
    """The class of a device's line on this Python: pymodbus's on CPython (StartError naming the
    extra if it is missing), a board's own RTU master on MicroPython."""
    if MICROPYTHON:
        from .rtu_master import RtuLine

        return RtuLine
    from .modbus_lines import Line, pymodbus  # pyright: ignore[reportMissingImports] (CPython only)

    pymodbus()
    return Line


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
    except OSError as e:  # (MicroPython has no FileNotFoundError: its errno says it)
        return 1 if e.args and e.args[0] == NO_SUCH_FILE else None
    except (ValueError, IndexError):
        return None


class Devices:
    """Every [[device]] of the config, polled, each in a task of its own; as a publisher
    (Broker.publish) it can be told no. apply() makes a reload's devices the running ones."""

    confirming = True
    stats = None  # its counters (core/counters.py): the "modbus" protocol's, set at start
    closed = False  # (what the journal's waiters have: the readings' publishes wait for nothing)

    def __init__(self, runtime, folder):
        self.line_class = line_class()  # (said at start, in one line, if pymodbus is missing)
        self.runtime = runtime
        self.broker = runtime.broker
        # what the devices publish is counted as theirs (protocol="modbus" on /metrics), not
        # as an AMQP 0-9-1 client's
        self.stats = counters.of(runtime.broker, "modbus")
        self.log = runtime.log
        self.folder = folder
        self.lines = {}
        self.devices = []  # (the list core/snapshot.py shows: hutch ctl devices, /metrics)
        self.tasks = {}  # device name -> its polling task
        self.commands = None  # server/devices/commands.py Commands, with a writable register
        self.troubled = set()  # the devices whose last poll the broker could not take (said once)
        make_dir("%s/devices" % folder)
        runtime.broker.devices = self.devices

    def add(self, settings, numbers=None):
        """A device polled from now on (its first poll at once); numbers: its PollNumbers, when
        it was polled until now with another table (a reload), else read from the data folder."""
        key = line_key(settings["line"])
        if key not in self.lines:
            self.lines[key] = self.line_class(settings["line"], settings["timeout"], settings["retries"])
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
                from .commands import Commands  # (loaded with the first writable register)

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
        now_ms = self.runtime.clock.now_ms
        due = now_ms()
        while device.polling:
            await sleep_ms(max(0, due - now_ms()))
            try:
                await self._poll(device, now_ms)
                self.troubled.discard(device.name)
            except asyncio.CancelledError:
                raise
            except MemoryError:  # a board's heap full: said once, until a poll fits again
                self._troubled(device, "no heap left for its poll")
            except OSError as e:  # its poll numbers' file not written (a full disk): no number given
                self._troubled(
                    device, "cannot write %s (%s): its poll not taken" % (numbers_path(self.folder, device.name), e)
                )
            except Exception as e:  # a bug: it costs this poll, never the device's polling or the broker
                self.log("error", "device %s: internal error: %r" % (device.name, e), e)
            if device.state == "down":
                due = now_ms() + int(device.delay() * 1000)
            else:  # on time: a late poll does not make the next ones late
                due = max(due + int(device.delay() * 1000), now_ms())

    def _troubled(self, device, why):
        """A poll the broker could not take: said once, until one is taken again."""
        if device.name not in self.troubled:
            self.troubled.add(device.name)
            self.log("warning", "device %s: %s: polled again at its next turn" % (device.name, why))

    async def _poll(self, device, now_ms):
        started = now_ms()
        try:
            values = await device.line.poll(device)
        except Failed as e:
            if not device.polling:
                return  # (removed while its poll waited: not a failure of the device)
            status, line = device.failed(e.args[0], e.args[1], time.time())
            if line is not None:
                self.log("warning", line)
            if status is not None:
                self.publish(device, [status])
            return
        device.gateway = self.broker.name  # (a reload may rename the gateway)
        messages, line = device.answered(values, time.time(), (now_ms() - started) / 1000)
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
        refused = 0
        for routing_key, headers, body in messages:
            key = routing_key.encode()
            props = {"content-type": JSON, "delivery-mode": PERSISTENT, "timestamp": int(time.time())}
            if headers:
                props["headers"] = headers
            message = made(exchange, key, props, body)
            result = broker.publish(target, message, self)
            if result & ROUTED and result & REFUSED:
                refused += 1
        device.refused += refused
        self._say_refusals(device, refused)

    def _say_refusals(self, device, refused):
        """Readings the broker refused (publishers blocked, or a full queue) are lost: said once a
        burst, as it begins (why) and as it ends (how many polls it cost)."""
        if refused:
            if not device.refusing:
                flow = self.broker.flow
                why = "publishers blocked: " + flow.reasons() if flow.blocked else "a queue bound for them is full"
                self.log(
                    "warning",
                    "device %s: its readings refused (%s): each poll's are lost until the broker takes them again"
                    % (device.name, why),
                )
            device.refusing += 1
        elif device.refusing:
            self.log(
                "info",
                "device %s: its readings taken again, after %d polls whose readings were refused"
                % (device.name, device.refusing),
            )
            device.refusing = 0

    def snapshot(self):
        return [device.snapshot() for device in self.devices]
