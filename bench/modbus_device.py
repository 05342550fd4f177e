"""The simulated Modbus RTU device of `hutch bench --modbus` (bench/modbus.py): pymodbus's server
(the modbus extra) on a serial device, answering as a wire at the baud rate would let it.

    python -m hutch.bench.modbus_device SERIAL-DEVICE BAUDRATE

Unit 1 has 64 holding registers. A pty carries octets as fast as they are written, so the
device waits what the wire would take: as a request arrives, its characters' time (11 bits
each: start, 8 data, parity or a second stop bit, stop); before its answer goes out, the 3.5
characters of silence that end the request and the answer's own characters' time. The master
keeps its own silence before its next request. A poll then takes what devices/modbus/rtu.py
line_limit() counts, plus the master's own time.

Prints "ready" once it serves; runs until killed.
"""

import asyncio
import sys
import time

from pymodbus.server import ModbusSerialServer
from pymodbus.simulator import DataType, SimData, SimDevice

from ..devices.modbus.rtu import silence

SIZE = 64


def paced(baudrate):
    character = 11.0 / baudrate

    def wire(sending, packet):
        # (blocking on purpose: the device answers one request at a time, as a device does)
        time.sleep(len(packet) * character + (silence(baudrate) if sending else 0.0))
        return packet

    return wire


async def main(port, baudrate):
    blocks = (
        [SimData(0, count=SIZE, values=False, datatype=DataType.BITS)],
        [SimData(0, count=SIZE, values=True, datatype=DataType.BITS)],
        [SimData(0, count=SIZE, values=1234, datatype=DataType.REGISTERS)],
        [SimData(0, count=SIZE, values=0, datatype=DataType.REGISTERS)],
    )
    server = ModbusSerialServer(
        [SimDevice(id=1, simdata=blocks)], port=port, baudrate=baudrate, trace_packet=paced(baudrate)
    )
    task = asyncio.create_task(server.serve_forever())
    await asyncio.sleep(0.3)
    print("ready", flush=True)
    await task


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
