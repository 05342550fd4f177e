"""`$SYS/broker/...` as Mosquitto publishes it, against hutch and Debian's mosquitto alike, both
publishing every second (`[mqtt] sys_interval = 1`, mosquitto's `sys_interval 1`): a dashboard's
subscription to `$SYS/broker/#` gets the same topics from both, numbers where mosquitto has
numbers, and the publishes it made counted. At hutch, a user whose topic permissions do not let
it read `$SYS` keys is refused the subscription, as any other."""

import queue
import re
import time

import pika
import pytest
from mqtt_brokers import Paho, start_hutch, start_mosquitto, stop

from hutch.core.auth import hash_password

LOADS = ["load/%s/%s" % (name, span) for name in ("messages/received", "messages/sent", "publish/dropped", "connections")
         for span in ("1min", "5min", "15min")]  # fmt: skip
NUMBERS = [
    "clients/connected",
    "clients/disconnected",
    "clients/total",
    "clients/maximum",
    "messages/received",
    "messages/sent",
    "publish/messages/received",
    "publish/messages/sent",
    "publish/messages/dropped",
    "subscriptions/count",
    "retained messages/count",
] + LOADS


def start(kind, tmp_path):
    if kind == "mosquitto":
        return start_mosquitto(tmp_path, "sys_interval 1\n")
    config = tmp_path / "hutch.toml"
    config.write_text("[mqtt]\nsys_interval = 1\n")
    return start_hutch(tmp_path, ("--config", str(config)))


@pytest.mark.parametrize("kind", ["hutch", "mosquitto"])
def test_a_dashboard_reads_the_sys_topics_as_mosquitto_publishes_them(kind, tmp_path):
    broker = start(kind, tmp_path)
    try:
        if kind == "hutch":  # an AMQP queue bound with # gets the clients' messages, not the broker's figures
            amqp = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.running.port))
            channel = amqp.channel()
            channel.queue_declare("everything", exclusive=True)
            channel.queue_bind("everything", "amq.topic", "#")
        sensor = Paho(broker, "sys-sensor").connect()
        for i in range(5):
            sensor.publish("sys/readings", b"%d" % i, 1)
        dashboard = Paho(broker, "sys-dashboard").connect()
        dashboard.subscribe("$SYS/broker/#", 0)
        latest = {}
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if int(latest.get("publish/messages/received", 0)) >= 5 and int(latest.get("clients/connected", 0)) >= 2:
                break
            try:
                topic, payload, *_ = dashboard.got.get(timeout=0.5)
            except queue.Empty:
                continue
            latest[topic[len("$SYS/broker/") :]] = payload.decode()
        missing = sorted(set(NUMBERS + ["version", "uptime"]) - set(latest))
        assert not missing, (kind, missing)
        assert re.fullmatch(r"\d+ seconds", latest["uptime"]), latest["uptime"]
        assert latest["version"].startswith(kind + " version "), latest["version"]
        for name in NUMBERS:
            assert re.fullmatch(r"\d+(\.\d\d)?", latest[name]), (kind, name, latest[name])
        assert int(latest["publish/messages/received"]) >= 5 and int(latest["clients/connected"]) >= 2, latest
        everything = Paho(broker, "sys-everything").connect()  # (a filter starting with # gets none)
        everything.subscribe("#", 0)
        sensor.publish("sys/readings", b"last", 1)
        assert [(t, m) for t, m, *_ in everything.take(1)] == [("sys/readings", b"last")]
        time.sleep(1.5)  # (a publication of $SYS goes by meanwhile)
        assert everything.got.empty(), everything.got.get()
        if kind == "hutch":
            assert channel.queue_declare("everything", passive=True).method.message_count == 6
            amqp.close()
        for client in (sensor, dashboard, everything):
            client.stop()
    finally:
        stop(broker)


def test_a_user_whose_topic_permissions_leave_sys_out_is_refused_it(tmp_path):
    config = tmp_path / "hutch.toml"
    config.write_text(
        "[mqtt]\nsys_interval = 1\n"
        '[users.guest]\npassword_hash = "%s"\n'
        '[users.dash]\npassword_hash = "%s"\n'
        "topic_permissions = {\"amq.topic\" = {read = '^sensors\\.'}}\n"
        % (hash_password("guest", b"salt"), hash_password("dash", b"salt"))
    )
    broker = start_hutch(tmp_path, ("--config", str(config)))
    try:
        dash = Paho(broker, "sys-dash")
        dash.client.username_pw_set("dash", "dash")
        dash.connect()
        assert [code.value for code in dash.subscribe("$SYS/broker/#", 0)] == [0x80]
        assert [code.value for code in dash.subscribe("sensors/#", 0)] == [0]
        ops = Paho(broker, "sys-ops").connect()  # (guest: no topic permissions, every key)
        assert [code.value for code in ops.subscribe("$SYS/broker/#", 0)] == [0]
        assert ops.take(1)[0][0].startswith("$SYS/broker/")
        time.sleep(1.5)
        assert dash.got.empty(), dash.got.get()
        dash.stop()
        ops.stop()
    finally:
        stop(broker)
