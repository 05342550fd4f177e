"""A sensor streaming QoS 0 readings, as fast as its socket takes them, against hutch and
Debian's mosquitto alike: each burst of PUBLISHes to one topic reaches the broker in a few reads
(hutch takes what one read holds as one run: mqtt/runs.py), and every kind of subscriber gets
every reading, in order, as it was published: Paho 3.1.1 and 5, a persistent session, a
subscriber of another topic the bursts do not reach, and (hutch) an AMQP consumer of amq.topic."""

import socket

import pika
from brokers import wait_until
from mqtt_brokers import Paho

from hutch.mqtt import packets

BURSTS = 3
PER_BURST = 300  # (below mosquitto's max_queued_messages, 1,000: it drops none for a subscriber that lags)


def burst(n):
    """PER_BURST QoS 0 PUBLISHes to sensors/stream, sent in one write."""
    return b"".join(
        packets.publish(b"sensors/stream", b'{"n": %d, "pad": "%s"}' % (n * PER_BURST + i, b"x" * (i % 40)))
        for i in range(PER_BURST)
    )


def test_a_streaming_qos_0_sensor_reaches_every_subscriber_in_order(mqtt_broker):
    subscribers = []
    for client_id, version, clean, topic in (
        ("plain", "3.1.1", True, "sensors/#"),
        ("five", "5", True, "sensors/stream"),
        ("kept", "3.1.1", False, "sensors/+"),
        ("elsewhere", "3.1.1", True, "sensors/other"),
    ):
        sub = Paho(mqtt_broker, client_id, version, clean=clean).connect()
        sub.subscribe(topic, 0)
        subscribers.append(sub)
    amqp = None
    if mqtt_broker.kind == "hutch":
        amqp = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", mqtt_broker.running.port))
        channel = amqp.channel()
        channel.queue_declare("readings", durable=True)
        channel.queue_bind("readings", "amq.topic", "sensors.#")
    sensor = socket.create_connection((mqtt_broker.host, mqtt_broker.port), timeout=10)
    try:
        sensor.sendall(packets.connect(b"stream-sensor", user=b"guest", password=b"guest"))
        assert sensor.recv(4) == b"\x20\x02\x00\x00"
        sent = []
        for n in range(BURSTS):
            data = burst(n)
            sensor.sendall(data)
            topic_size = len(packets.binary(b"sensors/stream"))  # (a QoS 0 PUBLISH's body: topic, payload)
            sent += [data[start + topic_size : end] for _first, start, end in split_all(data)]
        expected = [("sensors/stream", payload) for payload in sent]
        for sub in subscribers[:3]:
            got = [(topic, payload) for topic, payload, _q, _r, _p in sub.take(len(sent))]
            assert got == expected, (mqtt_broker.kind, sub.client._client_id)
        assert subscribers[3].got.empty()
        if amqp is not None:
            bodies = []
            wait_until(lambda: channel.queue_declare("readings", passive=True).method.message_count == len(sent))
            for _ in range(len(sent)):
                method, _props, body = channel.basic_get("readings", auto_ack=True)
                assert method.routing_key == "sensors.stream"
                bodies.append(body)
            assert bodies == sent
    finally:
        sensor.close()
        for sub in subscribers:
            sub.stop()
        if amqp is not None:
            amqp.close()


def split_all(data):
    """(first, body start, end) of every packet of data."""
    pos = 0
    while pos < len(data):
        found = packets.split(data, pos, 1 << 30)
        yield found
        pos = found[2]
