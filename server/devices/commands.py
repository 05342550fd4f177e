"""Commands to the devices' writable registers (server/devices/polling.py; loaded with the first device
that has one).

A client sets a register by publishing to the device's exchange with the routing key
cmd.DEVICE.REGISTER and the value as JSON: a bare value (`42.5`, `true`) or `{"value": 42.5}`.
Its permissions apply as to any publish (write on the exchange, its topic permissions for the
key): what it may not publish never reaches here. The broker's queue hutch.devices.commands
(not durable: a command is not carried out after a restart, when it may be stale) is bound
with each writable register's key and consumed here, one command at a time per line, in the
order they came.

The answer goes to the command's reply_to (its correlation_id copied), as JSON:

    {"device": "boiler", "register": "setpoint", "value": 42.5, "result": "ok"}
    {"device": "boiler", "register": "setpoint", "value": 70000, "error": "setpoint is uint16: ..."}

A value its register's type cannot hold is refused without a write; a write the device refuses
or does not answer says so (the error as a failed poll says it). A command without reply_to is
carried out and its failure logged.
"""

import asyncio
import json
import time

from ...core.content import made
from ...core.queue import Consumer
from ...core.session import MESSAGE
from ...core.topology import bind, declare_queue, unbind
from ...devices.modbus.registers import encode

QUEUE = b"hutch.devices.commands"


def command_key(device, register):
    return ("cmd.%s.%s" % (device.name, register["name"])).encode()


NO_REQUEST = 0  # what a refusal of the broker names as the request: none of a protocol's (core/session.py)


class Commands:
    # a consumer session (core/session.py): one consumer, nothing to acknowledge
    prefetch_global = 0
    consumer_unacked = 0
    stats = None  # its counters: the broker's own

    def __init__(self, devices):
        self.devices = devices
        self.broker = devices.broker
        self.log = devices.log
        self.tasks = {}  # a command's number -> the task carrying it out
        self.commands = 0
        queue = declare_queue(self.broker, None, QUEUE)
        self.consumer = Consumer(self, b"hutch.devices", queue, True, False, 0)
        self.broker.consume(None, queue, self.consumer, NO_REQUEST)
        queue.dispatch()

    def bind(self, device):
        for register in _writable(device):
            exchange = device.settings["exchange"].encode()
            bind(self.broker, None, exchange, QUEUE, command_key(device, register), {}, NO_REQUEST, to_queue=True)

    def unbind(self, device):
        for register in _writable(device):
            exchange = device.settings["exchange"].encode()
            unbind(self.broker, None, exchange, QUEUE, command_key(device, register), {}, NO_REQUEST, to_queue=True)

    # ------------------------------------------------------------ the queue's side

    def can_deliver(self):
        return True

    def deliver(self, consumer, queue, entry):
        self.broker.delivered(queue, entry, True)  # (no ack: the answer says what became of it)
        self.commands += 1
        # held until it ends (a task nobody holds may be collected): it forgets itself, as
        # MicroPython's tasks take no done callback
        self.tasks[self.commands] = asyncio.create_task(self._held(self.commands, entry[MESSAGE]))

    def server_cancel(self, consumer):
        """(its queue deleted by an operator: commands no longer reach the devices)"""
        self.log("warning", "devices: the queue %s was deleted: commands no longer reach the devices" % QUEUE.decode())

    # ------------------------------------------------------------ a command

    async def _held(self, number, message):
        try:
            await self._carry_out(message)
        finally:
            self.tasks.pop(number, None)

    async def _carry_out(self, message):
        props = message.properties()
        parts = message.routing_key.decode(errors="replace").split(".")
        found = self._register(parts[1] if len(parts) == 3 else None, parts[-1])
        answer = {"device": parts[1] if len(parts) > 1 else None, "register": parts[-1]}
        try:
            if found is None:
                raise ValueError("no writable register %s" % message.routing_key.decode(errors="replace"))
            device, register = found
            value = _value(message.body())
            answer["value"] = value
            result = encode(register, value)
            why = await device.line.write(device, register, result)
            if why is None:
                answer["result"] = "ok"
                self.log("info", "device %s: %s set to %r" % (device.name, register["name"], value))
            else:
                answer["error"] = why
        except ValueError as e:
            answer["error"] = str(e)
        if "error" in answer and not props.get("reply-to"):
            self.log(
                "warning",
                "device command %s refused: %s" % (message.routing_key.decode(errors="replace"), answer["error"]),
            )
        if props.get("reply-to"):
            self._reply(props, answer)

    def _register(self, device_name, register_name):
        for device in self.devices.devices:
            if device.name == device_name:
                for register in _writable(device):
                    if register["name"] == register_name:
                        return device, register
        return None

    def _reply(self, props, answer):
        """The answer to the command's reply_to, through the default exchange."""
        key = props["reply-to"]
        key = key if isinstance(key, bytes) else key.encode()
        reply = {"content-type": b"application/json", "timestamp": int(time.time())}
        if props.get("correlation-id") is not None:
            reply["correlation-id"] = props["correlation-id"]
        broker = self.broker
        message = made(b"", key, reply, json.dumps(answer).encode())
        broker.publish(broker.default_exchange, message, self.devices)


def _writable(device):
    return [register for register in device.settings["registers"] if register.get("writable")]


def _value(body):
    """A command's value: its body as JSON, a bare value or {"value": ...}; ValueError else."""
    try:
        value = json.loads(bytes(body))
    except (ValueError, RecursionError):  # (RecursionError: nested past the recursion limit)
        raise ValueError("the command's body is not JSON: %r" % bytes(body)[:80])
    if isinstance(value, dict):
        if "value" not in value:
            raise ValueError('the command\'s JSON has no "value"')
        value = value["value"]
    return value
