"""Simulated Modbus devices, to try hutch's [[device]] polling without hardware (docs/modbus.md,
"Trying it without a device") and to test it: pymodbus's server (its SimDevice: the modbus
extra), each unit's values changing with every read.

    python examples/modbus_device.py tcp PORT UNIT [UNIT ...]
    python examples/modbus_device.py rtu SERIAL-DEVICE BAUDRATE UNIT [UNIT ...] [garbled=UNIT] [noise=UNIT]

tcp serves the units on 127.0.0.1:PORT (Modbus TCP); rtu on a serial device at that baud rate,
no parity (Modbus RTU: one end of a socat pty pair is a line without hardware).

A unit's n-th read of a kind of register (its holding registers, its input registers: counted
apart) answers with what script() says of n: holding register A holds n * 10 + A (uint16), the
input registers from 0 hold float32s, 20.0 + n / 2 at 0-1, -n at 2-3, ... So a reading says which
read of its device it came from, and one poll's readings (one read of each kind) agree.
Holding registers from SETTABLE on are not scripted: they hold what was written to them (a
setpoint), but for the last one, LOCKED, which answers a write with ILLEGAL DATA ADDRESS.
Coils hold what was written. On an RTU line, garbled=UNIT makes that unit's answers arrive with
their last octet flipped (a bad CRC, as noise on the line makes it), and noise=UNIT makes them
1 to 24 random octets (garbage: no frame at all).

Prints "ready" once it serves; runs until killed.
"""

import asyncio
import functools
import os
import struct
import sys

from pymodbus.constants import ExcCodes
from pymodbus.server import ModbusSerialServer, ModbusTcpServer
from pymodbus.simulator import DataType, SimData, SimDevice

SIZE = 64  # registers (and bits) of each kind a unit has
HOLDING, INPUT = 3, 4
SETTABLE = 32  # holding registers from here on keep what is written
LOCKED = SIZE - 1  # ... but this one, which refuses writes


def script(fc, n, address):
    """What the n-th read (from 1) of function fc answers at address (a whole register)."""
    if fc == HOLDING:
        return (n * 10 + address) & 0xFFFF
    pair, half = divmod(address, 2)
    value = 20.0 + n / 2 if pair == 0 else -float(n) * pair
    return struct.unpack(">HH", struct.pack(">f", value))[half]


async def act(reads, function_code, start_address, address, count, current_registers, set_values):
    if set_values is not None:  # a write: taken as it is, but at LOCKED
        return ExcCodes.ILLEGAL_ADDRESS if function_code in (6, 16) and address <= LOCKED < address + count else None
    if function_code not in (HOLDING, INPUT):
        return None
    reads[function_code] = n = reads.get(function_code, 0) + 1
    for i in range(count):
        if function_code == INPUT or address + i < SETTABLE:
            current_registers[address - start_address + i] = script(function_code, n, address + i)
    return None


def device(unit):
    blocks = (
        [SimData(0, count=SIZE, values=False, datatype=DataType.BITS)],
        [SimData(0, count=SIZE, values=True, datatype=DataType.BITS)],
        [SimData(0, count=SIZE, values=0, datatype=DataType.REGISTERS)],
        [SimData(0, count=SIZE, values=0, datatype=DataType.REGISTERS)],
    )
    return SimDevice(id=unit, simdata=blocks, action=functools.partial(act, {}))


async def main(argv):
    if argv[0] == "tcp":
        units = [int(u) for u in argv[2:]]
        server = ModbusTcpServer([device(u) for u in units], address=("127.0.0.1", int(argv[1])))
    else:
        garbled = [int(a.split("=")[1]) for a in argv[3:] if a.startswith("garbled=")]
        noisy = [int(a.split("=")[1]) for a in argv[3:] if a.startswith("noise=")]
        units = [int(u) for u in argv[3:] if "=" not in u]

        def noise(sending, packet):
            if sending and packet and packet[0] in garbled:
                return packet[:-1] + bytes((packet[-1] ^ 0xFF,))
            if sending and packet and packet[0] in noisy:
                return os.urandom(1 + os.urandom(1)[0] % 24)
            return packet

        server = ModbusSerialServer(
            [device(u) for u in units + garbled + noisy],
            port=argv[1],
            baudrate=int(argv[2]),
            allow_multiple_devices=True,
            trace_packet=noise,
        )
    task = asyncio.create_task(server.serve_forever())
    await asyncio.sleep(0.3)
    print("ready", flush=True)
    await task


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
