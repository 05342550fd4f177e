"""`hutch bench --modbus`: a gateway polling a Modbus RTU device, against the line's own limit.

    hutch bench --modbus [--modbus-seconds 10] [--micropython]

An energy meter's poll: one read of 8 holding registers (four float32s: voltage, current,
power, energy), published as four readings to a durable queue. The device is pymodbus's
server (bench/modbus_device.py) on one end of a serial line this process makes of two ptys;
it answers as a wire at the baud rate would let it. hutch polls it on the other end back to
back (an interval far below a poll's time), at 9,600 and 115,200 baud.

Each row gives the polls a second the line itself allows (devices/modbus/rtu.py line_limit(): the
request's and the answer's characters at 11 bits each, 3.5 characters of silence after each),
the polls a second hutch made (its readings in the queue over --modbus-seconds, after a
second of warm-up), their ratio, and hutch's CPU per poll (the broker process's user and
system time over the same seconds). With --micropython the board's own RTU master
(server/devices/rtu_master.py) gets the same rows, on MicroPython's unix port.

Needs pymodbus (the modbus extra). Every process it starts is stopped by its PID at the end.
"""

import json
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
import tty

import pika

from ..devices.modbus.rtu import line_limit
from .brokers import BenchError, Hutch, cpu_seconds, stop_process

BAUDS = (9600, 115200)
READS = [("holding", 8)]  # one poll: 8 holding registers in one read
REGISTERS = [
    {"name": name, "address": 2 * i, "kind": "holding", "type": "float32"}
    for i, name in enumerate(("voltage", "current", "power", "energy"))
]
QUEUE = "bench-readings"


class Wire:
    """Two ptys joined by a thread that copies what either side writes to the other at once:
    a serial line's two ends, `a` and `b`, each a path a serial port opens."""

    def __init__(self):
        self.fds = []
        self.masters = []
        for _ in range(2):
            master, slave = os.openpty()
            tty.setraw(slave)
            self.masters.append(master)
            self.fds += [master, slave]
        self.a, self.b = (os.ttyname(fd) for fd in self.fds[1::2])
        self.stopped = False
        self.thread = threading.Thread(target=self._carry, daemon=True)
        self.thread.start()

    def _carry(self):
        other = {self.masters[0]: self.masters[1], self.masters[1]: self.masters[0]}
        while not self.stopped:
            ready, _, _ = select.select(self.masters, [], [], 0.2)
            for fd in ready:
                try:
                    data = os.read(fd, 4096)
                except OSError:  # (nobody has that end open yet)
                    continue
                os.write(other[fd], data)

    def stop(self):
        self.stopped = True
        self.thread.join(2)
        for fd in self.fds:
            os.close(fd)


def config_file(workdir, line, baud):
    path = os.path.join(workdir, "modbus-%d.json" % baud)
    device = {
        "name": "meter",
        "uri": "modbus+rtu://%s?baudrate=%d" % (line, baud),
        "interval": 0.001,
        "timeout": 1.0,
        "retries": 0,
        "registers": REGISTERS,
    }
    with open(path, "w") as f:
        json.dump({"device": [device]}, f)
    return path


def readings(broker):
    connection = pika.BlockingConnection(pika.ConnectionParameters(broker.host, broker.port))
    try:
        channel = connection.channel()
        channel.queue_declare(QUEUE, durable=True)
        channel.queue_bind(QUEUE, "amq.topic", "sensors.#")
        return channel.queue_declare(QUEUE, durable=True, passive=True).method.message_count
    finally:
        connection.close()


def measure(kind, workdir, baud, seconds, say):
    """(polls a second, CPU seconds per poll) of a hutch of this kind polling the device at baud."""
    wire = Wire()
    device = broker = None
    said = open(os.path.join(workdir, "modbus-device-%d.log" % baud), "w+")  # (pymodbus's own lines)
    try:
        device = subprocess.Popen(
            [sys.executable, "-m", "hutch.bench.modbus_device", wire.a, str(baud)],
            stdout=subprocess.PIPE,
            stderr=said,
            text=True,
        )
        if device.stdout.readline().strip() != "ready":
            said.seek(0)
            raise BenchError("the simulated Modbus device did not start: %s" % said.read()[-2000:])
        broker = Hutch(kind, workdir, config=config_file(workdir, wire.b, baud)).start()
        readings(broker)  # (the queue, bound)
        time.sleep(1.0)  # (warm-up: the first poll opens the line)
        count, cpu, started = readings(broker), cpu_seconds(broker.pid), time.monotonic()
        time.sleep(seconds)
        count, cpu, took = readings(broker) - count, cpu_seconds(broker.pid) - cpu, time.monotonic() - started
        polls = count / len(REGISTERS)
        if not polls:
            raise BenchError("hutch (%s) polled nothing at %d baud: see %s" % (kind, baud, broker.folder))
        say("  %s at %d baud: %d polls in %.1f s" % (kind, baud, polls, took))
        return polls / took, cpu / polls
    finally:
        for proc in (broker.proc if broker else None, device):
            if proc is not None:
                stop_process(proc)
        if broker is not None:
            broker.log.close()
        if device is not None:
            device.stdout.close()
        said.close()
        wire.stop()


def run(args):
    try:
        import pymodbus  # noqa: F401 (the device, and hutch's own polling: the modbus extra)
    except ImportError:
        print("hutch bench: --modbus needs pymodbus: pip install '.[modbus]' in hutch's checkout", file=sys.stderr)
        return 1
    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    kinds = ["c"] + (["micropython"] if args.micropython else [])
    rows = []
    with tempfile.TemporaryDirectory(prefix="hutch-bench-modbus-") as workdir:
        try:
            for baud in BAUDS:
                for kind in kinds:
                    rows.append((baud, kind) + measure(kind, workdir, baud, args.modbus_seconds, say))
        except BenchError as e:
            print("hutch bench: %s" % e, file=sys.stderr)
            return 1
    print(
        "Modbus RTU: one device, a poll = one read of 8 holding registers (4 readings), for %.0f s"
        % args.modbus_seconds
    )
    print("%-8s %-12s %14s %13s %7s %14s" % ("baud", "hutch", "line's limit", "hutch polls", "ratio", "CPU per poll"))
    for baud, kind, rate, cpu in rows:
        limit = line_limit(baud, READS)
        name = "CPython" if kind == "c" else "MicroPython"
        print("%-8d %-12s %12.1f/s %11.1f/s %7.2f %11.2f ms" % (baud, name, limit, rate, rate / limit, cpu * 1000))
    return 0
