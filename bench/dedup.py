"""`hutch bench --dedup`: what deduplicating sensors' readings (core/dedup.py) costs the edge,
with it on and off in one run (two `hutch serve`, the second with `[limits] max_sensors = 0`),
and what a sensor's identity costs in memory. --repeat rounds of both (each round the other
first); the table shows each row's median.

    confirms        one publisher in confirm mode (window 1,000) of persistent readings to a
                    durable queue, each numbered (x-sensor-id of 1,000 sensors in turn,
                    x-sensor-seq growing): messages a second until the last confirm
    fan-in          1,000 MQTT sensors (fewer for a small --count) x 2 readings a second, QoS 1,
                    each reading a JSON object with x-sensor-id and x-sensor-seq (what the broker
                    maps to the headers): p99 latency to a subscriber, broker CPU per reading
    memory          bytes per sensor the dedup holds: CPython (the default sensor_window, 10,000
                    sensors), and the esp32 profile's window (128) under the `micropython`
                    command (the 64-bit unix port, 32 sensors: the profile's max_sensors);
                    `hutch bench --board wasm32` has the 32-bit figure on a board

Each sensor's state is as big with one reading as with many: the window is a fixed bitmap.
"""

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc

from ..core import dedup
from ..core.limits import Limits
from ..emulator.micropython_host import micropython, package_root
from . import loadgen, mqtt_load
from .brokers import BenchError, Hutch
from .loadgen import Connection, publish_frames

SENSORS = 1000
WINDOW = 1000
RATE = 2
MEMORY_SENSORS = 10000
ESP32_WINDOW, ESP32_SENSORS = 128, 32  # boards/esp32.py's sensor_window and max_sensors
QUEUE = "bench-numbered"


class NumberedPublisher(loadgen.ConfirmedPublisher):
    """ConfirmedPublisher whose every publish is a reading of its own: SENSORS sensors in turn,
    each numbering its readings (the frames made before the clock starts)."""

    def __init__(self, conn, queue, count, size=16):
        super().__init__(conn, queue, size, True)
        body = b"x" * size
        self.frames = [
            publish_frames(
                "", queue, body, conn.frame_max, True,
                {"headers": {"x-sensor-id": "sensor-%04d" % (n % SENSORS), "x-sensor-seq": n // SENSORS + 1}},
            )
            for n in range(count)
        ]  # fmt: skip

    def run(self, count, window, deadline, stop=None):
        frames = self.frames
        while self.settled < self.sent or self.sent < count:
            room = min(window - (self.sent - self.settled), count - self.sent)
            if room > 0:
                self.conn.send(b"".join(frames[self.sent : self.sent + room]))
                self.sent += room
            for method_id, args in self.conn.events():
                if method_id in (loadgen.spec.BASIC_ACK, loadgen.spec.BASIC_NACK):
                    if method_id == loadgen.spec.BASIC_NACK:
                        self.nacked += 1
                    self.settled = max(self.settled, args[0])
            if time.monotonic() > deadline:
                raise BenchError("%d of %d numbered readings confirmed in time" % (self.settled, count))


def confirms(host, port, count):
    conn = Connection(host, port, 120)
    conn.declare_queue(QUEUE, durable=True)
    publisher = NumberedPublisher(conn, QUEUE, count)
    start = time.perf_counter()
    publisher.run(count, WINDOW, time.monotonic() + 600)
    elapsed = time.perf_counter() - start
    if publisher.nacked:
        raise BenchError("the broker nacked %d numbered readings" % publisher.nacked)
    conn.call(loadgen.spec.QUEUE_DELETE, (0, QUEUE, False, False, False))
    conn.close()
    return count / elapsed


def cpython_bytes_per_sensor():
    """What MEMORY_SENSORS sensors' states take in the dedup, per sensor (tracemalloc)."""
    limits = Limits()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    sensors = dedup.Dedup(limits.sensor_window, MEMORY_SENSORS)
    for i in range(MEMORY_SENSORS):
        for n in range(1, 11):
            sensors.take(b"sensor-%05d" % i, n)
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return (after - before) / MEMORY_SENSORS


ESP32_SCRIPT = """
import gc
from hutch.core import dedup
sensors = dedup.Dedup(%d, %d)
gc.collect()
before = gc.mem_alloc()
for i in range(%d):
    for n in range(1, 11):
        sensors.take(b"sensor-%%02d" %% i, n)
gc.collect()
print((gc.mem_alloc() - before) // %d)
""" % (ESP32_WINDOW, ESP32_SENSORS, ESP32_SENSORS, ESP32_SENSORS)


def micropython_bytes_per_sensor(workdir):
    """The same under the `micropython` command with the esp32 profile's window."""
    script = os.path.join(workdir, "per_sensor.py")
    with open(script, "w") as f:
        f.write(ESP32_SCRIPT)
    env = dict(os.environ, MICROPYPATH=package_root(workdir, ("codec", "core")) + ":.frozen")
    done = subprocess.run([micropython(), script], cwd=workdir, capture_output=True, text=True, timeout=60, env=env)
    if done.returncode:
        raise BenchError("micropython: %s" % (done.stderr.strip() or done.stdout.strip()))
    return int(done.stdout.strip())


def measure(broker, count, sensors, seconds):
    p99, cpu, _, _split = mqtt_load.fan_in(
        broker.host, broker.mqtt_port, broker.pid, sensors, RATE, seconds, numbered=True
    )
    return {"confirms": confirms(broker.host, broker.port, count), "fan-in-p99": p99, "fan-in-cpu": cpu}


def run(args):
    workdir = tempfile.mkdtemp(prefix="hutch-bench-dedup-")
    sensors = min(SENSORS, max(50, args.count // 100))
    seconds = 10 if args.count >= 100000 else 3
    off = os.path.join(workdir, "off.toml")
    on = os.path.join(workdir, "on.toml")
    with open(off, "w") as f:
        f.write("[limits]\nmax_sensors = 0\nmax_connections = %d\n" % (sensors + 100))
    with open(on, "w") as f:
        f.write("[limits]\nmax_connections = %d\n" % (sensors + 100))
    rounds = max(1, args.repeat)
    measured = {"on": [], "off": []}
    try:
        for round_number in range(rounds):
            # each round the other goes first: what the machine does meanwhile falls on both alike
            order = (("on", on), ("off", off)) if round_number % 2 == 0 else (("off", off), ("on", on))
            for key, config in order:
                print(
                    "hutch bench: dedup %s, round %d of %d" % (key, round_number + 1, rounds),
                    file=sys.stderr,
                    flush=True,
                )
                broker = Hutch("c", workdir, config=config, mqtt=True).start()
                try:
                    measured[key].append(measure(broker, args.count, sensors, seconds))
                finally:
                    broker.stop()
        per_cpython = cpython_bytes_per_sensor()
        per_esp32 = micropython_bytes_per_sensor(workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    rows = (
        ("confirms", "confirms: %d persistent readings of %d sensors, window %d" % (args.count, SENSORS, WINDOW),
         "msg/s", "%.0f"),
        ("fan-in-p99", "MQTT fan-in: %d sensors x %d readings/s, QoS 1, numbered: p99" % (sensors, RATE), "ms", "%.1f"),
        ("fan-in-cpu", "... broker CPU per reading", "µs", "%.1f"),
    )  # fmt: skip
    results = {key: {row: statistics.median(m[row] for m in runs) for row in runs[0]} for key, runs in measured.items()}
    lines = [("row", "unit", "dedup on", "dedup off", "on/off")]
    for key, title, unit, form in rows:
        a, b = results["on"][key], results["off"][key]
        lines.append((title, unit, form % a, form % b, "%.2f" % (a / b if b else 0)))
    widths = [max(len(line[i]) for line in lines) for i in range(5)]
    for line in lines:
        print("  ".join(cell.ljust(widths[i]) if i < 2 else cell.rjust(widths[i]) for i, cell in enumerate(line)))
    print("memory per sensor: %.0f B on CPython (sensor_window %d, %d sensors)" % (
        per_cpython, Limits().sensor_window, MEMORY_SENSORS))  # fmt: skip
    print(
        "memory per sensor: %d B under micropython, the esp32 profile's window %d (%d sensors; the 64-bit unix "
        "port: hutch bench --board wasm32 has the 32-bit figure)" % (per_esp32, ESP32_WINDOW, ESP32_SENSORS)
    )
    return 0
