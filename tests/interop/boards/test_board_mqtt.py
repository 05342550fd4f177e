"""A board that serves MQTT sensors and bridges their readings upstream: the esp32 profile on
MicroPython's unix port, the firmware bundle with the MQTT front end (python -m
hutch.firmware.build --mqtt) in ROMFS as on a board, `[server] mqtt_port` and an up bridge from
amq.topic's `sensors.#` to a hutch upstream. Four sensors, micropython-lib's umqtt.simple under
the `micropython` command as a sensor runs it (keep alive 0, QoS 1), publish their readings;
upstream gets every one, each sensor's in order. The heap the front end takes is printed from
the broker's own stats lines (idle with MQTT served and the bridge, with the four sensors
connected, the peak under their load): not asserted, the figures go to docs/boards.md with the
command that reproduces them. A board whose config serves no MQTT loads none of it."""

import json
import os
import subprocess
import sys

import pika
import pytest
from board_heap import heap_figures, stop_board
from brokers import BIN, RunningBroker, free_port, wait_until
from micropython_env import micropython

from hutch.firmware import build

pytestmark = [pytest.mark.timeout(240), pytest.mark.xdist_group("board_memory")]
HEAP = "256k"  # (this port is 64-bit: the 32-bit figures are hutch bench --board wasm32's)
SENSORS = 4
READINGS = 250  # each sensor's
UMQTT = os.path.join(os.path.dirname(__file__), "..", "..", "..", "build", "umqtt")

SENSOR = """
import sys, time
sys.path.insert(0, %(umqtt)r)
from umqtt.simple import MQTTClient

c = MQTTClient(b"sensor-%(index)d", "127.0.0.1", port=%(port)d, user=b"guest", password=b"guest")
c.connect()
print("connected")
while True:  # (the test says when to go: a file appears)
    try:
        open(%(go)r).close()
        break
    except OSError:
        time.sleep(0.05)
for n in range(%(readings)d):
    c.publish(b"sensors/sensor-%(index)d/temp", b"%(index)d:%%d" %% n, qos=1)
c.disconnect()
print("published")
"""


@pytest.fixture(scope="module")
def romfs(tmp_path_factory):
    return build.build(str(tmp_path_factory.mktemp("firmware")), bundle_name="broker-mqtt")["romfs"]


def start_board(romfs, tmp_path, config):
    path = tmp_path / "hutch.json"
    path.write_text(json.dumps(config))
    command = [sys.executable, "-m", "hutch.emulator.unixboard", "--romfs", romfs, "-X", "heapsize=" + HEAP]
    command += ["-m", "hutch.server.serve", "--board", "esp32", "--stats-interval", "1", "--config", str(path)]
    return RunningBroker(command, tmp_path).start()


def test_an_esp32_board_serves_four_umqtt_sensors_and_bridges_their_readings(romfs, tmp_path):
    (tmp_path / "upstream").mkdir()
    upstream = RunningBroker([os.path.join(BIN, "hutch"), "serve"], tmp_path / "upstream").start()
    mqtt_port = free_port()
    bridge = {
        "name": "uplink",
        "direction": "up",
        "uri": "amqp://guest:guest@127.0.0.1:%d/%%2F" % upstream.port,
        "source_exchange": "amq.topic",
        "binding_key": "sensors.#",
        "exchange": "amq.topic",
        "declare": {"queue": "readings", "binding_key": "sensors.#"},
    }
    (tmp_path / "board").mkdir()
    board = start_board(romfs, tmp_path / "board", {"server": {"mqtt_port": mqtt_port}, "bridge": [bridge]})
    sensors = []
    try:
        wait_until(lambda: "listening for MQTT on 127.0.0.1:%d" % mqtt_port in board.log(), 30, what=board.log)
        wait_until(lambda: "bridge uplink: running" in board.log(), 30, what=board.log)
        idle, _ = heap_figures(board)
        go = str(tmp_path / "go")

        def connect(indexes):
            for index in indexes:
                script = tmp_path / ("sensor-%d.py" % index)
                values = {
                    "umqtt": os.path.abspath(UMQTT),
                    "index": index,
                    "port": mqtt_port,
                    "go": go,
                    "readings": READINGS,
                }
                script.write_text(SENSOR % values)
                sensors.append(subprocess.Popen([micropython(), str(script)], stdout=subprocess.PIPE, text=True))
            for sensor in sensors[indexes[0] :]:
                assert sensor.stdout.readline().strip() == "connected"
            return heap_figures(board)[0]

        # The first sensor loads the front end's connection modules (mqtt/__init__.py's
        # new_connection); the others show what a connection alone holds.
        first = connect([0])
        connected = connect(list(range(1, SENSORS)))
        open(go, "w").close()
        for sensor in sensors:
            out, _ = sensor.communicate(timeout=120)
            assert sensor.returncode == 0 and out.strip() == "published", out
        amqp = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", upstream.port))
        channel = amqp.channel()
        wait_until(
            lambda: (
                channel.queue_declare("readings", durable=True, passive=True).method.message_count == SENSORS * READINGS
            ),
            60,
            what="every reading upstream",
        )
        got = {}
        for _ in range(SENSORS * READINGS):
            method, _props, body = channel.basic_get("readings", auto_ack=True)
            sensor, n = body.decode().split(":")
            got.setdefault(method.routing_key, []).append(int(n))
        amqp.close()
        assert got == {"sensors.sensor-%d.temp" % i: list(range(READINGS)) for i in range(SENSORS)}
        _, peak = heap_figures(board)
        print(
            "\nesp32 profile serving MQTT and a bridge, %s unix heap: idle %d B live, %d B per idle MQTT "
            "connection (the front end's connection modules, loaded with the first, shared by the %d; %d B "
            "each beyond the first), peak %d B under %d umqtt sensors' QoS 1 load (%d readings forwarded)"
            % (
                HEAP,
                idle,
                (connected - idle) // SENSORS,
                SENSORS,
                (connected - first) // (SENSORS - 1),
                peak,
                SENSORS,
                SENSORS * READINGS,
            )
        )
    finally:
        for sensor in sensors:
            if sensor.poll() is None:
                sensor.kill()
                sensor.wait()
        try:
            stop_board(board)  # (which fails a test whose board logged an error)
        finally:
            upstream.stop()  # (stopped even then: it is ours)
