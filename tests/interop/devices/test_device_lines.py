"""Every line devices are polled on keeps devices/line.py's contract, whichever implements it:
pymodbus's (server/devices/modbus_lines.py, CPython) and a board's own RTU master
(server/devices/rtu_master.py, run here on CPython over pyserial), each on the gateway's end of
one RS-485 line (a socat pty pair) whose other end examples/modbus_device.py answers on.

The same scenario for each: a poll gives {register: value} and the next poll the next values; a
write is confirmed and reads back; a write the device refuses is said as its exception; a unit
that does not answer is a timeout, one whose answers come with a bad CRC an error; close() and
the next poll opens the line again.
"""

import asyncio

import pytest
from modbus_support import ModbusDevices, PtyPair

from hutch.devices.device import Device, PollNumbers
from hutch.devices.line import Failed, Line
from hutch.devices.modbus.registers import encode
from hutch.server.devices.config import devices_from

UNIT, SILENT, GARBLED = 1, 9, 3  # a unit that answers, one nobody is, one whose CRC is flipped
SETPOINT, LOCKED = 40, 63  # examples/modbus_device.py: keeps what is written; refuses writes


def line_classes():
    from hutch.server.devices.modbus_lines import Line as PymodbusLine
    from hutch.server.devices.rtu_master import RtuLine

    return {"pymodbus": PymodbusLine, "rtu_master": RtuLine}


@pytest.fixture(scope="module")
def rs485(tmp_path_factory):
    """The gateway's end of a line the scripted devices answer on (units UNIT and GARBLED)."""
    line = PtyPair(tmp_path_factory.mktemp("line"))
    devices = ModbusDevices(None, [UNIT, "garbled=%d" % GARBLED], line=line.ends[0])
    yield line.ends[1]
    devices.stop()
    line.stop()


def device(end, unit, name="probe"):
    """A Device as server/devices/polling.py makes one, from a checked [[device]] table."""
    table = {
        "name": "%s-%d" % (name, unit),
        "uri": "modbus+rtu://%s?baudrate=19200" % end,
        "unit": unit,
        "timeout": 0.3,
        "retries": 0,
        "registers": [
            {"name": "moisture", "address": 0, "kind": "holding", "type": "uint16", "scale": 0.1},
            {"name": "temp", "address": 0, "kind": "input", "type": "float32"},
            {"name": "setpoint", "address": SETPOINT, "kind": "holding", "type": "uint16", "writable": True},
            {"name": "locked", "address": LOCKED, "kind": "holding", "type": "uint16", "writable": True},
        ],
    }
    settings = devices_from({"device": [table]})[0]
    return Device(settings, PollNumbers(1, lambda number: None))


async def failure(awaitable):
    """(result, why) of the Failed a poll ended with."""
    try:
        await awaitable
    except Failed as e:
        return e.args
    raise AssertionError("the poll did not fail")


@pytest.mark.parametrize("kind", ["pymodbus", "rtu_master"])
def test_every_line_keeps_the_line_contract(rs485, kind):
    made = line_classes()[kind]
    assert issubclass(made, Line)
    probe = device(rs485, UNIT, kind)
    line = made(probe.settings["line"], probe.settings["timeout"], probe.settings["retries"])

    async def scenario():
        first = await line.poll(probe)
        second = await line.poll(probe)
        setpoint = probe.settings["registers"][2]
        written = await line.write(probe, setpoint, encode(setpoint, 417))
        refused = await line.write(probe, probe.settings["registers"][3], encode(setpoint, 1))
        after = await line.poll(probe)
        line.close()
        reopened = await line.poll(probe)
        silent = await failure(line.poll(device(rs485, SILENT)))
        garbled = await failure(line.poll(device(rs485, GARBLED)))
        return first, second, written, refused, after, reopened, silent, garbled

    try:
        first, second, written, refused, after, reopened, silent, garbled = asyncio.run(scenario())
    finally:
        line.close()
    assert set(first) == {"moisture", "temp", "setpoint", "locked"}, first
    # the device counts each read of a kind: a poll reads the holding registers in three reads
    # (0, 40 and 63 are apart), the input registers in one
    assert second["moisture"] - first["moisture"] == pytest.approx(3.0) and second["temp"] - first["temp"] == 0.5
    assert written is None and after["setpoint"] == 417, (written, after)
    assert refused.startswith("exception: exception code 2 to a write of locked at 63"), refused
    assert reopened["moisture"] > after["moisture"], (after, reopened)
    assert silent[0] == "timeout" and "no answer to a read of" in silent[1], silent
    assert garbled[0] == "error" and "that were no answer" in garbled[1], garbled
