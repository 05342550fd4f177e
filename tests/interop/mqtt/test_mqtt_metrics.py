"""The metrics port with a client of each protocol: RabbitMQ's global counters by protocol
(protocol="mqtt" for what MQTT's clients did, "amqp10" for AMQP 1.0's, "amqp091" for 0-9-1's),
each counted once, the three adding up to the broker's totals; clean for `promtool check
metrics`; and the status page's MQTT part, as headless Chromium shows it."""

import json
import os
import subprocess

import pika
from brokers import BIN, free_port, wait_until
from mqtt_brokers import Paho, start_hutch, stop
from proton import Message
from proton.utils import BlockingConnection
from scrapes import dom_figures, get, promtool, series

QOS1, QOS0 = 30, 12
AMQP10 = 7


def test_mqtt_counters_carry_their_protocol_and_the_status_page_shows_the_sessions(tmp_path):
    metrics_port = free_port()
    broker = start_hutch(tmp_path, ["--metrics-port", str(metrics_port)])
    base = "http://127.0.0.1:%d" % metrics_port
    try:
        wait_until(lambda: "serving metrics" in broker.log(), what="the metrics port")
        sub = Paho(broker, "dashboard").connect()
        sub.subscribe("sensors/#", 1)
        away = Paho(broker, "away", clean=False).connect()
        away.subscribe("sensors/#", 1)
        away.stop()  # (its session stays: a queue of messages for when it is back)
        pub = Paho(broker, "greenhouse-3").connect()
        for n in range(QOS1):
            pub.publish("sensors/greenhouse-3/temp", b"%d" % n, 1)
        for n in range(QOS0):
            pub.publish("sensors/greenhouse-3/rh", b"%d" % n, 0)
        pub.publish("nobody/listens", b"lost", 1)
        assert len(sub.take(QOS1 + QOS0)) == QOS1 + QOS0
        amqp = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.running.port))
        amqp.channel().basic_publish("amq.topic", "sensors.from-amqp", b"0-9-1")
        assert sub.take(1)[0][:2] == ("sensors/from-amqp", b"0-9-1")
        amqp.close()
        one = BlockingConnection("amqp://guest:guest@127.0.0.1:%d" % broker.running.port, timeout=10)
        sender = one.create_sender("/exchanges/amq.topic/sensors.from-amqp10")
        for n in range(AMQP10):
            sender.send(Message(body=b"1.0 %d" % n))
        one.close()
        assert len(sub.take(AMQP10)) == AMQP10

        def scraped():
            return series(get(base + "/metrics")[2])

        mqtt, amqp091 = '{protocol="mqtt"}', '{protocol="amqp091"}'
        wait_until(lambda: scraped()[("rabbitmq_global_messages_acknowledged_total",
                                      '{protocol="mqtt",queue_type="classic"}')] == QOS1 + 1 + AMQP10,
                   what="the subscriber's PUBACKs")  # fmt: skip
        text = get(base + "/metrics")[2]
        assert promtool(text) == (0, "")
        seen = series(text)
        published = QOS1 + QOS0 + 1
        assert seen[("rabbitmq_global_messages_received_total", mqtt)] == published
        assert seen[("rabbitmq_global_messages_received_confirm_total", mqtt)] == QOS1 + 1
        assert seen[("rabbitmq_global_messages_confirmed_total", mqtt)] == QOS1 + 1
        assert seen[("rabbitmq_global_messages_routed_total", mqtt)] == QOS1 + QOS0
        assert seen[("rabbitmq_global_messages_unroutable_dropped_total", mqtt)] == 1
        # to the dashboard's QoS 1 queue: every message (the AMQP ones too), and the QoS 0 ones
        # to nobody else; the away session's queue holds its copies undelivered
        assert seen[("rabbitmq_global_messages_delivered_consume_manual_ack_total", mqtt)] == QOS1 + QOS0 + 1 + AMQP10
        assert seen[("rabbitmq_global_messages_received_total", amqp091)] == 1
        assert seen[("rabbitmq_global_messages_delivered_total", amqp091)] == 0
        assert seen[("rabbitmq_global_messages_received_total", '{protocol="amqp10"}')] == AMQP10
        assert seen[("rabbitmq_global_messages_confirmed_total", '{protocol="amqp10"}')] == AMQP10
        # each counted once, by the protocol it came from or went to: together, the broker's totals
        totals = json.loads(
            subprocess.run(
                [os.path.join(BIN, "hutch"), "ctl", "status", "--json", "--data", broker.running.data],
                capture_output=True, text=True, timeout=60,
            ).stdout
        )["broker"]["counters"]  # fmt: skip
        expected = {"received": published + 1 + AMQP10, "routed": QOS1 + QOS0 + 1 + AMQP10,
                    "confirmed": QOS1 + 1 + AMQP10}  # fmt: skip
        for counter, count in expected.items():
            labelled = sum(seen[("rabbitmq_global_messages_%s_total" % counter, '{protocol="%s"}' % p)]
                           for p in ("amqp091", "amqp10", "mqtt"))  # fmt: skip
            assert labelled == totals[counter] == count, counter
        assert seen[("rabbitmq_auth_attempts_total", mqtt)] == 3
        assert seen[("hutch_connections", mqtt)] == 2  # (the dashboard and the sensor)

        figures = dom_figures(base + "/", str(tmp_path / "chromium"))
        assert figures["mqtt.connections"] == "2" and figures["mqtt.sessions"] == "3", figures
        assert figures["mqtt.received"] == str(published)
        assert figures["mqtt-sessions.away.connected"] == "no"
        assert figures["mqtt-sessions.away.queued"] == str(
            QOS1 + QOS0 + 1 + AMQP10
        )  # (QoS 0 ones too: queued as it was away)
        assert figures["mqtt-sessions.dashboard.connected"] == "yes"
        assert figures["mqtt-sessions.greenhouse-3.queued"] == "0"
        listed = subprocess.run(
            [os.path.join(BIN, "hutch"), "ctl", "list", "connections", "protocol", "client_id", "--json",
             "--data", broker.running.data],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        rows = json.loads(listed.stdout)
        assert sorted(row["client_id"] for row in rows if row["protocol"] == "MQTT") == ["dashboard", "greenhouse-3"]
        sub.stop()
        pub.stop()
    finally:
        stop(broker)
