"""Helpers of the tests that poll Modbus devices (tests/interop/devices/test_modbus.py, a board's
tests/interop/boards/test_board_modbus.py): the scripted devices (examples/modbus_device.py) run and
stopped, a socat pty pair as an RS-485 line, and what the readings in a queue say."""

import collections
import datetime
import json
import os
import subprocess
import sys

import pika
from brokers import wait_until
from paths import ROOT

DEVICE_SCRIPT = os.path.join(ROOT, "examples", "modbus_device.py")  # (the docs' device without hardware)


class ModbusDevices:
    """examples/modbus_device.py serving units on a TCP port (or, line: on that serial
    device at 19,200 baud), stopped by its PID."""

    def __init__(self, port, units, line=None):
        self.port = port
        where = ["tcp", str(port)] if line is None else ["rtu", line, "19200"]  # (units: ints, or "garbled=N")
        self.proc = subprocess.Popen(
            [sys.executable, DEVICE_SCRIPT] + where + [str(u) for u in units],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        line = self.proc.stdout.readline()
        assert line.strip() == "ready", line + self.proc.stdout.read()

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()


def bound_queue(broker, name="readings"):
    """A durable queue taking every reading and status message (declared before the polls
    matter: what no queue takes goes nowhere)."""
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
    channel = conn.channel()
    channel.queue_declare(name, durable=True)
    channel.queue_bind(name, "amq.topic", "sensors.#")
    channel.queue_bind(name, "amq.topic", "status.#")
    conn.close()


def drain(broker, name="readings"):
    """[(routing key, headers, body as JSON)] of everything in the queue, taken."""
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
    channel = conn.channel()
    out = []
    while True:
        method, props, body = channel.basic_get(name, auto_ack=True)
        if method is None:
            break
        out.append((method.routing_key, props.headers, json.loads(body)))
    conn.close()
    return out


def polls_by_device(messages):
    """{device: {poll number: {register: reading}}} of the readings, and the status messages."""
    polls = collections.defaultdict(dict)
    statuses = []
    for key, headers, body in messages:
        if key.startswith("status."):
            statuses.append(body)
            continue
        assert body["gateway"] and headers == {
            "x-sensor-id": body["sensor"],
            "x-sensor-seq": body["poll"],
            "x-hutch-gateway": body["gateway"],
        }, (headers, body)
        assert key == "sensors.%s" % body["device"] and body["sensor"] == "%s.%s" % (body["device"], body["register"])
        registers = polls[body["device"]].setdefault(body["poll"], {})
        assert body["register"] not in registers, "poll %s of %s twice: %s" % (body["poll"], body["device"], body)
        registers[body["register"]] = body
    return polls, statuses


def check_polls(polls):
    """Each poll's values its device's reads (moisture = n on the n-th read of the holding
    registers, temp = 20 + n / 2 on the n-th of the input registers), the reads in the order of
    the polls' numbers, none twice. A poll reads the holding registers first: one cut short
    after that read (a SIGKILL, a timeout) leaves the next polls one holding read further ahead,
    never behind."""
    for device, numbered in polls.items():
        holding, inputs = [], []
        for number in sorted(numbered):
            poll = numbered[number]
            assert set(poll) == {"moisture", "temp"}, (device, number, poll)
            n = round(poll["moisture"]["value"], 6)
            m = (poll["temp"]["value"] - 20) * 2
            assert n == int(n) and m == int(m) and n >= m, (device, number, poll)
            assert poll["moisture"]["unit"] == "%" and poll["temp"]["unit"] == "°C"
            holding.append(n)
            inputs.append(m)
        for reads in (holding, inputs):
            assert reads == sorted(reads) and len(set(reads)) == len(reads), (device, reads)
        ahead = [n - m for n, m in zip(holding, inputs)]
        assert ahead == sorted(ahead), (device, ahead)


class PtyPair:
    """Two ptys joined by socat, as the two ends of an RS-485 line; stopped by its PID."""

    def __init__(self, folder):
        self.ends = str(folder / "device"), str(folder / "gateway")
        self.proc = subprocess.Popen(
            ["socat", "pty,raw,echo=0,link=%s" % self.ends[0], "pty,raw,echo=0,link=%s" % self.ends[1]],
            stderr=subprocess.DEVNULL,
        )
        wait_until(lambda: all(os.path.exists(end) for end in self.ends), 10, what="socat's ptys")

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def device_table(name, uri, unit, interval, timeout=0.3):
    """A [[device]]: holding register 0 (n * 10 on the n-th read: scaled to n) and the float32 at
    input registers 0-1 (20 + n / 2), polled every interval seconds, each read given timeout
    seconds."""
    return """
[[device]]
name = "%s"
uri = "%s"
unit = %d
interval = %s
timeout = %s
retries = 0
registers = [
  { name = "moisture", address = 0, kind = "holding", type = "uint16", scale = 0.1, unit = "%%" },
  { name = "temp", address = 0, kind = "input", type = "float32", unit = "°C" },
]
""" % (name, uri, unit, interval, timeout)


def epoch(ts):
    """Epoch seconds of a reading's ts ("2026-11-27T18:00:00.123Z")."""
    return datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc).timestamp()
