"""Sensors that speak MQTT, read on the AMQP side: what a gateway's sensors send to hutch.

    python examples/mqtt_sensors.py [--mqtt-url mqtt://guest:guest@127.0.0.1:1883]
        [--url amqp://guest:guest@127.0.0.1:5672/] [--queue readings] [--stream]
        [--duration 600] [--interval 10]

First, over AMQP, the queue QUEUE is declared durable (or with --stream a stream queue, as
`hutch pipeline` reads it) and bound to amq.topic with `sensors.#`: every MQTT publish under
`sensors/` lands in it, by RabbitMQ's mapping of topics to routing keys. Then the three
sensors of sensor_simulator.py, each an MQTT client of its own (Eclipse Paho, client id = the
sensor's name, a persistent session), publish their readings at QoS 1 to
`sensors/<name>/temp`, JSON as that script's ({"sensor": "greenhouse-1", "ts": "...",
"value": 14.2}, backdated from 2024-05-01T06:00:00Z), each waiting for its PUBACK: hutch sends
it once the reading is on disk. hutch must serve MQTT (`hutch serve --mqtt-port 1883`).
"""

import argparse
import calendar
import json
import os
import random
import sys
import threading
import time
from urllib.parse import unquote, urlsplit

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from sensor_simulator import SENSORS, connect, iso, value


def sensor_client(name, url):
    """An MQTT client for one sensor, connected (its CONNACK seen)."""
    parts = urlsplit(url)
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=name, clean_session=False)
    client.username_pw_set(unquote(parts.username or "guest"), unquote(parts.password or "guest"))
    connected = threading.Event()
    client.on_connect = lambda *args: connected.set()
    client.connect(parts.hostname or "127.0.0.1", parts.port or 1883, keepalive=30)
    client.loop_start()
    if not connected.wait(10):
        raise SystemExit("mqtt-sensors: no CONNACK from %s" % url)
    return client


def main(argv=None):
    parser = argparse.ArgumentParser(description="publish simulated sensor readings over MQTT into a queue")
    parser.add_argument("--mqtt-url", default=os.environ.get("MQTT_URL", "mqtt://guest:guest@127.0.0.1:1883"))
    parser.add_argument("--url", default=os.environ.get("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"))
    parser.add_argument("--queue", default="readings", help="the queue the sensors' readings land in")
    parser.add_argument("--stream", action="store_true", help="declare the queue as a stream queue")
    parser.add_argument("--duration", type=int, default=600, help="seconds of readings")
    parser.add_argument("--interval", type=int, default=10, help="seconds between a sensor's readings")
    args = parser.parse_args(argv)

    amqp = connect(args.url)
    amqp.declare_queue(args.queue, durable=True, arguments={"x-queue-type": "stream"} if args.stream else None)
    amqp.bind(args.queue, "amq.topic", "sensors.#")
    amqp.close()

    rng = random.Random(1)
    start = calendar.timegm(time.strptime("2024-05-01T06:00:00Z", "%Y-%m-%dT%H:%M:%SZ"))
    sensors = {name: sensor_client(name, args.mqtt_url) for name in SENSORS}
    published = 0
    for n in range(args.duration // args.interval):
        stamp = start + n * args.interval
        for name, client in sensors.items():
            reading = {"sensor": name, "ts": iso(stamp), "value": value(name, n * args.interval / 60, rng)}
            sent = client.publish("sensors/%s/temp" % name, json.dumps(reading), qos=1)
            sent.wait_for_publish(30)  # (its PUBACK: the reading is on the gateway's disk)
            if not sent.is_published():
                print("mqtt-sensors: no PUBACK for %s's reading %d" % (name, n), file=sys.stderr)
                return 1
            published += 1
    for client in sensors.values():
        client.disconnect()
        client.loop_stop()
    print(
        "published %d readings of %d sensors over MQTT to sensors/<name>/temp, every one PUBACKed; "
        "they are in %s (bound to amq.topic with sensors.#)" % (published, len(sensors), args.queue)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
