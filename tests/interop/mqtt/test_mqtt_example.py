"""examples/mqtt_sensors.py as the docs say to run it, against a hutch serving MQTT: the
readings its MQTT sensors publish land in the queue it bound, as AMQP messages with RabbitMQ's
mapping, in the JSON `hutch pipeline` reads."""

import json
import os
import subprocess
import sys

import pika
from mqtt_brokers import start_hutch, stop
from paths import ROOT


def test_the_mqtt_sensors_example_fills_the_readings_stream(tmp_path):
    broker = start_hutch(tmp_path)
    try:
        amqp_url = "amqp://guest:guest@127.0.0.1:%d/" % broker.running.port
        mqtt_url = "mqtt://guest:guest@127.0.0.1:%d" % broker.port
        command = [sys.executable, os.path.join("examples", "mqtt_sensors.py"), "--mqtt-url", mqtt_url,
                   "--url", amqp_url, "--stream", "--duration", "100"]  # fmt: skip
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "published 30 readings of 3 sensors over MQTT" in done.stdout
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.running.port))
        channel = connection.channel()
        channel.basic_qos(prefetch_count=100)
        records = []
        for method, properties, body in channel.consume("readings", arguments={"x-stream-offset": "first"}):
            records.append((method.routing_key, properties, json.loads(body)))
            channel.basic_ack(method.delivery_tag)
            if len(records) == 30:
                break
        connection.close()
        key, properties, first = records[0]
        assert key == "sensors.greenhouse-1.temp" and properties.delivery_mode == 2
        assert (properties.headers["x-mqtt-publish-qos"], properties.headers["x-mqtt-dup"]) == (1, False)
        assert first["sensor"] == "greenhouse-1" and first["ts"] == "2024-05-01T06:00:00Z"
        assert {r["sensor"] for _k, _p, r in records} == {"greenhouse-1", "greenhouse-2", "cold-store"}
    finally:
        stop(broker)
