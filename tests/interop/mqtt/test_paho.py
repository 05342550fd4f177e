"""MQTT with real clients, against hutch and against Debian's mosquitto (the oracle), compared as
the clients see them: Eclipse Paho (3.1.1 and 5) publishing and subscribing at QoS 0, 1 and 2,
a persistent session across a reconnect, a will, mosquitto's own command-line clients; and
the AMQP side of hutch (a pika consumer of amq.topic) seeing RabbitMQ's mapping."""

import socket
import subprocess

import pika
import pytest
from brokers import sigkill, wait_until
from mqtt_brokers import Paho, restart
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties


@pytest.mark.parametrize("version", ["3.1.1", "5"])
def test_qos_0_1_and_2_round_trip_in_order(mqtt_broker, version):
    sub = Paho(mqtt_broker, "sub-" + version, version).connect()
    sub.subscribe("sensors/#", 1)
    wait_until(lambda: sub.client.is_connected())
    pub = Paho(mqtt_broker, "pub-" + version, version).connect()
    sent = []
    for i in range(30):
        qos = i % 3
        topic = "sensors/greenhouse-%d/temp" % (i % 3)
        pub.publish(topic, b"%d" % i, qos)
        sent.append((topic, b"%d" % i, min(qos, 1)))
    got = [(t, m, q) for t, m, q, _r, _p in sub.take(len(sent))]
    assert got == sent, mqtt_broker.kind
    pub.stop()
    sub.stop()


def test_a_persistent_session_gets_what_was_published_while_it_was_away(mqtt_broker):
    sub = Paho(mqtt_broker, "away", clean=False).connect()
    sub.subscribe("cmd/away", 1)
    sub.publish("cmd/away", b"first", 1)
    assert sub.take(1)[0][:2] == ("cmd/away", b"first")
    sub.stop()
    pub = Paho(mqtt_broker, "pub").connect()
    for i in range(5):
        pub.publish("cmd/away", b"while away %d" % i, 1)
    pub.stop()
    again = Paho(mqtt_broker, "away", clean=False)
    again.connect()
    assert again.flags.session_present, mqtt_broker.kind
    assert [m for _t, m, _q, _r, _p in again.take(5)] == [b"while away %d" % i for i in range(5)]
    again.stop()


def test_a_will_on_a_cut_connection_not_on_disconnect(mqtt_broker):
    watcher = Paho(mqtt_broker, "watcher").connect()
    watcher.subscribe("status/#", 1)
    polite = Paho(mqtt_broker, "polite", will=("status/polite", b"offline", 1, False)).connect()
    polite.stop()
    cut = Paho(mqtt_broker, "cut", will=("status/cut", b"offline", 1, False)).connect()
    cut.client.loop_stop()
    cut.client.socket().shutdown(socket.SHUT_RDWR)  # the link goes: no DISCONNECT
    assert watcher.take(1)[0][:2] == ("status/cut", b"offline")
    assert watcher.got.empty()
    watcher.stop()


def test_version_5_properties_reach_a_version_5_subscriber(mqtt_broker):
    sub = Paho(mqtt_broker, "v5-sub", "5").connect()
    sub.subscribe("rpc/#", 1)
    pub = Paho(mqtt_broker, "v5-pub", "5").connect()
    props = Properties(PacketTypes.PUBLISH)
    props.UserProperty = [("unit", "celsius")]
    props.ContentType = "text/plain"
    props.ResponseTopic = "rpc/replies"
    props.CorrelationData = b"\x01\x02"
    pub.publish("rpc/ask", b"?", 1, props)
    _t, payload, _q, _r, got = sub.take(1)[0]
    assert payload == b"?"
    assert (got.UserProperty, got.ContentType, got.ResponseTopic, got.CorrelationData) == (
        [("unit", "celsius")], "text/plain", "rpc/replies", b"\x01\x02")  # fmt: skip
    pub.stop()
    sub.stop()


def test_mosquitto_s_command_line_clients(mqtt_broker):
    port = str(mqtt_broker.port)
    sub = subprocess.Popen(
        ["stdbuf", "-oL", "mosquitto_sub", "-h", "127.0.0.1", "-p", port, "-u", "guest", "-P", "guest", "-t", "cli/#", "-C", "3", "-v",
         "-q", "1", "-W", "20", "-d"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines = []
    for line in sub.stdout:  # (-d: its debug lines say when the SUBACK came; stdbuf: as they are written)
        lines.append(line)
        if line.startswith("Subscribed"):
            break
    for i in range(3):
        subprocess.run(
            ["mosquitto_pub", "-h", "127.0.0.1", "-p", port, "-u", "guest", "-P", "guest", "-t", "cli/%d" % i, "-m",
             "m%d" % i, "-q", "1"],
            check=True, timeout=20,
        )  # fmt: skip
    out, _ = sub.communicate(timeout=20)
    assert [line for line in out.splitlines() if line.startswith("cli/")] == ["cli/0 m0", "cli/1 m1", "cli/2 m2"]
    assert sub.returncode == 0


def test_the_amqp_side_sees_rabbitmq_s_mapping(hutch_mqtt):
    amqp = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", hutch_mqtt.running.port))
    channel = amqp.channel()
    channel.queue_declare("readings")
    channel.queue_bind("readings", "amq.topic", "sensors.*.temp")
    pub = Paho(hutch_mqtt, "sensor-7").connect()
    pub.publish("sensors/greenhouse-3/temp", b"21.5", 1)
    method, properties, body = wait_until(lambda: _got(channel, "readings"))
    assert (method.exchange, method.routing_key, body) == ("amq.topic", "sensors.greenhouse-3.temp", b"21.5")
    assert properties.headers == {"x-mqtt-publish-qos": 1, "x-mqtt-dup": False}
    assert properties.delivery_mode == 2
    sub = Paho(hutch_mqtt, "sub").connect()
    sub.subscribe("alerts/#", 1)
    channel.basic_publish("amq.topic", "alerts.boiler.pressure", b"high")
    assert sub.take(1)[0][:3] == ("alerts/boiler/pressure", b"high", 1)
    pub.stop()
    sub.stop()
    amqp.close()


def _got(channel, name):
    found = channel.basic_get(name, auto_ack=True)
    return found if found[0] is not None else None


def test_hutch_ctl_and_metrics_show_mqtt_clients(tmp_path):
    import json
    import os
    import urllib.request

    from brokers import BIN
    from mqtt_brokers import start_hutch, stop

    from hutch.bench.brokers import free_port

    metrics_port = free_port()
    broker = start_hutch(tmp_path, ["--metrics-port", str(metrics_port)])
    try:
        sub = Paho(broker, "dashboard").connect()
        sub.subscribe("sensors/#", 1)

        def listed(kind, *columns):
            done = subprocess.run(
                [os.path.join(BIN, "hutch"), "ctl", "list", kind, *columns, "--json", "--data", broker.running.data],
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            return json.loads(done.stdout)

        connections = [
            c for c in listed("connections", "user", "channels", "state", "protocol") if c["protocol"] == "MQTT"
        ]
        assert [(c["user"], c["channels"], c["state"]) for c in connections] == [("guest", 1, "running")]
        consumers = listed("consumers", "queue_name", "ack_required", "prefetch_count")
        assert [(c["queue_name"], c["ack_required"], c["prefetch_count"]) for c in consumers] == [
            ("mqtt-subscription-dashboardqos1", True, 20)
        ]
        channels = listed("channels", "consumer_count")
        assert [c["consumer_count"] for c in channels] == [1]
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % metrics_port, timeout=10) as answer:
            text = answer.read().decode()
        assert 'hutch_connections{protocol="mqtt"} 1' in text
        sub.stop()
    finally:
        stop(broker)


def test_retained_messages_for_later_subscribers(mqtt_broker):
    pub = Paho(mqtt_broker, "status-pub").connect()
    for topic, payload, qos in (
        ("status/node-1", b"online", 1),
        ("status/node-2", b"offline", 0),
        ("status/node-3", b"gone soon", 1),
        ("status/node-3", b"", 1),  # an empty retained message clears the topic's
    ):
        pub.client.publish(topic, payload, qos, retain=True).wait_for_publish(10)
    late = Paho(mqtt_broker, "late").connect()
    late.subscribe("status/#", 1)
    got = sorted((t, m, q, r) for t, m, q, r, _p in late.take(2))
    assert got == [("status/node-1", b"online", 1, True), ("status/node-2", b"offline", 0, True)], mqtt_broker.kind
    pub.client.publish("status/node-1", b"rebooting", 1, retain=True).wait_for_publish(10)
    assert late.take(1)[0][:4] == (
        "status/node-1",
        b"rebooting",
        1,
        False,
    )  # (to a subscriber already there: not retained)
    late.stop()
    pub.stop()


def test_a_retained_message_survives_sigkill(hutch_mqtt):

    pub = Paho(hutch_mqtt, "config-pub").connect()
    pub.client.publish("homeassistant/sensor/greenhouse/config", b'{"unit": "C"}', 1, retain=True).wait_for_publish(10)
    pub.client.loop_stop()
    sigkill(hutch_mqtt.running)
    restart(hutch_mqtt)  # (once it listens for MQTT again: its MQTT listener opens after its AMQP one)
    late = Paho(hutch_mqtt, "home-assistant").connect()
    late.subscribe("homeassistant/#", 0)
    assert late.take(1)[0][:4] == ("homeassistant/sensor/greenhouse/config", b'{"unit": "C"}', 0, True)
    late.stop()
