"""The MQTT client side a bridge speaks (mqtt/client.py), in process against hutch's own MQTT
front end (mqtt/connection.py): bytes from one fed to the other, no sockets. The interop tests
(tests/interop/bridge/test_bridge_mqtt.py) run it against mosquitto through faults.
tests/micropython runs these under MicroPython too."""

from harness_mqtt import Client, published
from upstream_events import events

from hutch.core.broker import Broker
from hutch.core.content import tails
from hutch.core.limits import Limits
from hutch.mqtt import packets
from hutch.mqtt.client import Protocol
from hutch.mqtt.connection import Connection
from hutch.mqtt.packets import V5, V311

LOCAL = {"address": "127.0.0.1", "port": 40001, "transport": "tcp"}


def _pump(client, conn):
    """What each side has to send, to the other, until neither has anything."""
    while True:
        moved = False
        data = client.data_to_send()
        while data is not None:
            conn.feed(bytes(data))
            moved = True
            data = client.data_to_send()
        out = conn.take_output()
        if out:
            client.receive_data(out)
            moved = True
        if not moved:
            return


def _linked(level, password=b"guest", filters=None, topic="dt/{client_id}/{routing_key}"):
    broker = Broker(Limits())
    sink = Client(broker, level=V5)
    assert sink.connect(b"cloud-app")[0].body[1] == 0
    assert sink.subscribe(1, b"dt/#", qos=0)[0].name == "SUBACK"  # (QoS 0: no window to ack)
    client = Protocol(4096, level)
    client.connect(0, "gw-1", "guest", password, 30, 3600, topic, filters)
    conn = Connection(broker, LOCAL)
    _pump(client, conn)
    said = events(client)  # (the CONNACK: the SUBSCRIBE of a downlink follows it)
    _pump(client, conn)
    client.said = said + events(client)
    return broker, sink, client, conn


def _message(key, body, headers=None):
    return tails({"headers": headers or {}, "delivery-mode": 2}, body)


def test_an_uplink_publishes_at_qos_1_and_each_puback_accepts_its_message():
    for level in (V311, V5):
        _broker, sink, client, conn = _linked(level)
        assert client.channel_open and client.room() > 0
        for seq in (7, 8, 9):
            header_tail, body_tail, _size = _message(b"sensors.t1", b"21.5", {"x-sensor-id": "s1", "x-sensor-seq": seq})
            client.forward(b"amq.topic", b"sensors.t1", header_tail, body_tail, True)
        assert client.in_flight == [1, 2, 3]
        _pump(client, conn)
        assert events(client) == [("accepted", n, False) for n in (1, 2, 3)]
        assert client.in_flight == []
        got = [published(p, V5) for p in sink.read() if p.name == "PUBLISH"]
        assert [(topic, payload, qos) for topic, payload, qos, *_ in got] == [(b"dt/gw-1/sensors/t1", b"21.5", 0)] * 3
        user = dict(got[0][5].get(packets.USER_PROPERTY, ()))
        if level == V5:  # the headers as user properties (a 3.1.1 PUBLISH has none to carry them)
            assert (user[b"x-sensor-id"], user[b"x-sensor-seq"]) == (b"s1", b"7"), user
        else:
            assert b"x-sensor-id" not in user, user


def test_a_refused_login_ends_the_link_with_the_brokers_reason():
    for level in (V311, V5):
        _broker, _sink, client, _conn = _linked(level, password=b"wrong")
        said = client.said
        assert len(said) == 1 and said[0][0] == "ended", said
        assert said[0][1].startswith("login refused: CONNACK"), said[0]
        assert not client.channel_open


def test_a_downlink_subscribes_and_pubacks_what_the_bridge_acked():
    broker, _sink, client, conn = _linked(V5, filters=["cmd/gw-1/#"])
    assert client.channel_open and client.room() == 0  # (a downlink sends nothing)
    app = Client(broker, level=V5)
    app.connect(b"app")
    for n in range(3):
        app.publish(
            b"cmd/gw-1/valve", b"open %d" % n, 1, packet_id=n + 1, props={packets.USER_PROPERTY: [(b"n", b"%d" % n)]}
        )
    _pump(client, conn)
    deliveries = events(client)
    assert [d[:4] for d in deliveries] == [("delivered", n + 1, b"amq.topic", b"cmd.gw-1.valve") for n in range(3)]
    _kind, tag, _exchange, _key, header_tail, body_tail, size = deliveries[1]
    assert body_tail[4:-1] == b"open 1" and size == 6
    assert b"\x01n" in header_tail  # (the user property, a header of the stored form)
    client.ack(2, True)  # the first two held here: PUBACKed, in order
    out = client.data_to_send()
    assert packets.split(out, 0, 100) is not None and out[0] >> 4 == packets.PUBACK
    assert sorted(client._ids) == [3]


def test_keep_alive_pings_at_half_and_gives_up_after_one_and_a_half():
    _broker, _sink, client, conn = _linked(V311)
    client.tick(0)
    assert client.data_to_send() is None
    assert client.tick(15000) >= 0
    assert client.data_to_send() == bytes((packets.PINGREQ << 4, 0))
    assert client.tick(30000) >= 0
    assert client.tick(45001) == -1  # nothing heard since 0
