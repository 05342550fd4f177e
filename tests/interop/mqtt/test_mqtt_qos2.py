"""QoS 2 is taken once through a broker's SIGKILL: a version 5 client's PUBLISH (packet id 7)
answered PUBREC, the broker killed before the PUBREL, restarted; the client connects to its
session again and repeats the PUBLISH with DUP (as one does that never saw the PUBREC): it is
answered PUBREC and not taken a second time; its PUBREL is answered PUBCOMP success (the id was
held on disk); the id is free again after."""

import socket

import pika
from brokers import sigkill, wait_until
from mqtt_brokers import restart, start_hutch, stop

from hutch.mqtt import packets
from hutch.mqtt.packets import V5


class Raw:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""
        props = {packets.SESSION_EXPIRY_INTERVAL: 3600}
        self.sock.sendall(packets.connect(b"q2", clean=False, user=b"guest", password=b"guest", level=V5, props=props))
        assert self.packet()[0] >> 4 == packets.CONNACK

    def packet(self):
        while True:
            found = packets.split(self.buf, 0, 1 << 20)
            if found is not None:
                first, start, end = found
                body, self.buf = self.buf[start:end], self.buf[end:]
                return first, body
            data = self.sock.recv(4096)
            assert data, "the broker closed the connection"
            self.buf += data

    def ask(self, data):
        self.sock.sendall(data)
        return self.packet()


def count(port):
    amqp = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    found = amqp.channel().queue_declare("q2-readings", durable=True, passive=True).method.message_count
    amqp.close()
    return found


def test_qos_2_is_taken_once_through_sigkill(tmp_path):
    broker = start_hutch(tmp_path)
    try:
        amqp = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.running.port))
        amqp.channel().queue_declare("q2-readings", durable=True)
        amqp.channel().queue_bind("q2-readings", "amq.topic", "q2.#")
        amqp.close()
        client = Raw(broker.port)
        publish = packets.publish(b"q2/reading", b"21.5", 2, packet_id=7, level=V5)
        assert client.ask(publish) == (packets.PUBREC << 4, b"\x00\x07")
        sigkill(broker.running)
        restart(broker)  # (once it listens for MQTT again: after its AMQP listener)
        client = Raw(broker.port)
        again = packets.publish(b"q2/reading", b"21.5", 2, dup=True, packet_id=7, level=V5)
        assert client.ask(again) == (packets.PUBREC << 4, b"\x00\x07")  # taken already
        assert count(broker.running.port) == 1
        assert client.ask(packets.ack(packets.PUBREL, 7, level=V5)) == (packets.PUBCOMP << 4, b"\x00\x07")
        client.ask(packets.publish(b"q2/reading", b"22.0", 2, packet_id=7, level=V5))  # a new message now
        wait_until(lambda: count(broker.running.port) == 2, 10, what="the second message")
        assert client.ask(packets.ack(packets.PUBREL, 8, level=V5)) == (packets.PUBCOMP << 4, b"\x00\x08\x92")
    finally:
        stop(broker)
