"""QoS 2 through a broker's SIGKILL, both ways.

Taken once: a version 5 client's PUBLISH (packet id 7) answered PUBREC, the broker killed before
the PUBREL, restarted; the client connects to its session again and repeats the PUBLISH with DUP
(as one does that never saw the PUBREC): it is answered PUBREC and not taken a second time; its
PUBREL is answered PUBCOMP success (the id was held on disk); the id is free again after.

Delivered once: a QoS 2 subscriber given a PUBLISH, the broker killed before its PUBREC: after
the restart the same PUBLISH again (DUP, the same packet id); killed after its PUBREC was
answered PUBREL: after the restart the PUBREL again, never the message."""

import socket
import struct

import pika
from brokers import sigkill, wait_until
from mqtt_brokers import restart, start_hutch, stop

from hutch.mqtt import packets
from hutch.mqtt.packets import V5


class Raw:
    def __init__(self, port, client_id=b"q2"):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""
        props = {packets.SESSION_EXPIRY_INTERVAL: 3600}
        self.sock.sendall(
            packets.connect(client_id, clean=False, user=b"guest", password=b"guest", level=V5, props=props)
        )
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


def delivery(packet):
    """(payload, QoS, DUP, packet id) of a PUBLISH the broker sent."""
    first, body = packet
    assert first >> 4 == packets.PUBLISH, packet
    _topic, packet_id, _props, payload = packets.read_publish(first, body, 0, len(body), V5)
    return payload, (first >> 1) & 3, bool(first & 8), packet_id


def test_a_qos_2_delivery_goes_on_where_it_was_through_sigkills(tmp_path):
    broker = start_hutch(tmp_path)
    try:
        subscriber = Raw(broker.port, b"dash")
        assert subscriber.ask(packets.subscribe(1, [(b"alarm/#", 2)], V5))[0] >> 4 == packets.SUBACK
        publisher = Raw(broker.port, b"alarm-panel")
        assert publisher.ask(packets.publish(b"alarm/smoke", b"on", 2, packet_id=1, level=V5))[0] >> 4 == packets.PUBREC
        payload, qos, dup, packet_id = delivery(subscriber.packet())
        assert (payload, qos, dup) == (b"on", 2, False)
        sigkill(broker.running)  # before the subscriber's PUBREC
        restart(broker)
        subscriber = Raw(broker.port, b"dash")
        assert delivery(subscriber.packet()) == (b"on", 2, True, packet_id)  # the same id, DUP
        released = subscriber.ask(packets.ack(packets.PUBREC, packet_id, level=V5))
        assert released == (packets.PUBREL << 4 | 2, struct.pack(">H", packet_id))
        sigkill(broker.running)  # after the PUBREL, before the subscriber's PUBCOMP
        restart(broker)
        subscriber = Raw(broker.port, b"dash")
        assert subscriber.packet() == released  # the PUBREL again, not the message
        subscriber.sock.sendall(packets.ack(packets.PUBCOMP, packet_id, level=V5))
        assert subscriber.ask(bytes((packets.PINGREQ << 4, 0)))[0] >> 4 == packets.PINGRESP  # and nothing before it
    finally:
        stop(broker)
