"""A full queue (`[limits] queue_max_messages`, a board's budget) under clients that connect,
publish and go, as sensors that wake, send a reading and sleep do. A publisher that cannot be
told no (MQTT, 0-9-1 without confirms) is held back before its message is taken: its
connection is not read until the queue has room, and one that goes meanwhile is ended at its
hang-up, what it sent unread (said in the log: a 0-9-1 publish held on its channel too). The queue stays at its budget however many
such clients come; taken, one message each over the budget grew it without end. A real
client of each protocol is served throughout, and the queue's messages are all there."""

import re
import socket

import pika
from mqtt_brokers import Paho, open_connections, start_hutch, stop
from raw_amqp import login, method, publish

from hutch.codec import spec
from hutch.mqtt import packets
from hutch.mqtt.packets import V311

BUDGET = 40
CLIENTS = 120  # of each protocol: three times the budget
HELD_LINE = re.compile(r"went while held back, \d+ octets it sent unread")


def gone(sock):
    """The client's side is done: it waits for the broker to end the connection (after a
    DISCONNECT or a close-ok, or at the hang-up of a connection held back)."""
    sock.shutdown(socket.SHUT_WR)
    while sock.recv(4096):
        pass


def mqtt_publish_and_go(port, n):
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(packets.connect(b"sensor-%d" % n, user=b"guest", password=b"guest", level=V311))
        assert s.recv(4)[:1] == b"\x20"  # CONNACK
        qos = n % 2  # QoS 0 and QoS 1 alike
        s.sendall(packets.publish(b"churn/%d" % n, b"%d" % n, qos, packet_id=qos) + b"\xe0\x00")  # and DISCONNECT
        gone(s)


def amqp_publish_and_go(port, n):
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        close = method(0, spec.CONNECTION_CLOSE, "hshh", [200, b"bye", 0, 0])
        s.sendall(login() + publish(b"%d" % n, b"churn-091") + close)
        gone(s)


def test_clients_that_publish_to_a_full_queue_and_go_leave_it_at_its_budget(tmp_path):
    config = tmp_path / "hutch.toml"
    config.write_text("[limits]\nqueue_max_messages = %d\n" % BUDGET)
    broker = start_hutch(tmp_path, ("--config", str(config)))
    amqp = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.running.port))
    try:
        channel = amqp.channel()
        channel.queue_declare("churn-091")
        keeper = Paho(broker, "keeper", clean=False).connect()  # a persistent session, then offline
        keeper.subscribe("churn/#", 1)
        keeper.stop()
        for n in range(CLIENTS):
            mqtt_publish_and_go(broker.port, n)
            amqp_publish_and_go(broker.running.port, n)
        assert open_connections(broker) == 1  # (pika's): each held back client ended at its hang-up
        kept = channel.queue_declare("mqtt-subscription-keeperqos1", passive=True).method.message_count
        assert kept == BUDGET, kept
        assert channel.queue_declare("churn-091", passive=True).method.message_count == BUDGET
        log = broker.log()
        held = len(HELD_LINE.findall(log))
        assert held == 2 * (CLIENTS - BUDGET), held  # each one that went unread said so
        assert log.count("channel 1 went while held back, its publish not taken") == CLIENTS - BUDGET
        # the first ones' messages, all of them, in order
        bodies = [channel.basic_get("churn-091", auto_ack=True)[2] for _ in range(BUDGET)]
        assert bodies == [b"%d" % n for n in range(BUDGET)]
        keeper = Paho(broker, "keeper", clean=False).connect()
        got = keeper.take(BUDGET)
        assert [payload for _topic, payload, *_ in got] == [b"%d" % n for n in range(BUDGET)]
        # room again: a publisher is read as before
        keeper.publish("churn/after", b"after", 1)
        assert keeper.take(1)[0][1] == b"after"
        keeper.stop()
    finally:
        amqp.close()
        stop(broker)  # (fails on any ERROR line or traceback in the broker's log)
