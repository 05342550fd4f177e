"""A sensor's reading named from MQTT (mqtt/identity.py): version 5 user properties, or a 3.1.1
client's JSON fields, become x-sensor-id and x-sensor-seq, and a reading sent again under a
new packet id is acknowledged and taken once (core/dedup.py). In process; tests/micropython
runs them under MicroPython too."""

from harness_mqtt import Client, published

from hutch.core.broker import Broker
from hutch.core.content import body_tail, header_tail
from hutch.core.dedup import for_sensors
from hutch.core.limits import Limits
from hutch.core.message import Message
from hutch.mqtt import packets
from hutch.mqtt.connection import Serving
from hutch.mqtt.identity import from_json, with_identity
from hutch.mqtt.packets import V5, V311
from hutch.mqtt.publishing import plain_properties


def _clients(serving=None, level=V311):
    broker = Broker(Limits())
    if serving is not None:
        broker.front_ends["mqtt"] = serving
    sink = Client(broker, level=V5)
    assert sink.connect(b"sink")[0].body[1] == 0
    out = sink.subscribe(1, b"sensors/#")
    assert out[0].name == "SUBACK"
    sensor = Client(broker, level=level)
    assert sensor.connect(b"sensor-1")[0].body[1] == 0
    return broker, sensor, sink


def _received(sink):
    """(payload, the user properties) of each reading the sink was given (acked)."""
    found = []
    out = sink.read()
    while out:  # (acked as they come: the session's window holds the rest back)
        more = []
        for p in out:
            if p.name == "PUBLISH":
                _topic, payload, qos, _dup, packet_id, props = published(p, V5)
                found.append((payload, dict(props.get(packets.USER_PROPERTY, ()))))
                if qos:
                    more += sink.send(packets.ack(packets.PUBACK, packet_id, 0, V5))
        out = more
    return found


def test_a_json_reading_sent_again_under_a_new_packet_id_is_taken_once():
    broker, sensor, sink = _clients()
    readings = [
        b'{"x-sensor-id": "t1", "x-sensor-seq": 1, "value": 20.5}',
        b'{"x-sensor-id": "t1", "x-sensor-seq": 2, "value": 20.6}',
        b'{"x-sensor-id": "t1", "x-sensor-seq": 2, "value": 20.6}',  # umqtt.robust sending it again
        b'{"x-sensor-id": "t1", "x-sensor-seq": "3", "value": 20.7}',
        b'{"x-sensor-id": "t1", "x-sensor-seq": "3", "value": 20.7}',
    ]
    for packet_id, body in enumerate(readings, 1):
        out = sensor.publish(b"sensors/t1", body, 1, packet_id)
        assert [p.name for p in out] == ["PUBACK"], out
    got = _received(sink)
    assert [payload for payload, _ in got] == [readings[0], readings[1], readings[3]]
    assert got[2][1][b"x-sensor-id"] == b"t1" and got[2][1][b"x-sensor-seq"] == b"3"
    assert broker.sensors.dropped == 2


def test_the_dedup_takes_a_json_reading_by_the_key_its_headers_say():
    """Broker.publish hands the dedup a JSON reading's id and number as mqtt/identity.py read them
    (not read again from the headers they became): the key is the one the headers give, for an
    id that is a number, one that is not ASCII, a number written as digits, and an id too long
    to count by (no key: the reading is routed as it is)."""
    fields = Serving().sensor_fields
    payloads = [
        b'{"x-sensor-id": "t1", "x-sensor-seq": 5}',
        b'{"x-sensor-id": 7, "x-sensor-seq": 3}',
        b'{"x-sensor-id": "capteur-\\u00e9t\\u00e9", "x-sensor-seq": "12"}',
        b'{"x-sensor-id": "' + b"a" * 256 + b'", "x-sensor-seq": 1}',
    ]
    keys = []
    for payload in payloads:
        identity = from_json(payload, fields)
        encoded = with_identity(plain_properties(1, False, None), identity)
        message = Message(
            b"amq.topic", b"sensors.t", b"", header_tail(encoded, len(payload)), body_tail(payload), len(payload)
        )
        from_headers = for_sensors(None).numbered(message)
        keys.append(from_headers)
        assert for_sensors(None).numbered(message, identity) == from_headers
    assert keys == [(b"t1", 5), (b"7", 3), ("capteur-\u00e9t\u00e9".encode(), 12), None]


def test_user_properties_name_a_version_5_reading_and_come_first():
    broker, sensor, sink = _clients(level=V5)
    props = {packets.USER_PROPERTY: [(b"x-sensor-id", b"h1"), (b"x-sensor-seq", b"41")]}
    body = b'{"x-sensor-id": "other", "x-sensor-seq": 1}'
    for packet_id in (1, 2):
        sensor.send(packets.publish(b"sensors/h1", body, 1, packet_id=packet_id, props=props, level=V5))
    got = _received(sink)
    assert len(got) == 1 and got[0][1][b"x-sensor-id"] == b"h1"
    key = broker.sensors.order
    assert key == [b"h1"], key
    sink_queue = broker.queues[b"mqtt-subscription-sinkqos1"]
    assert sink_queue.message_count() == 0


def test_the_stored_sequence_is_an_integer_header():
    """As an AMQP consumer (and the pipeline) reads it, whichever way the sensor wrote it."""
    broker, sensor, _sink = _clients(level=V5)
    seen = []  # the headers of each message the front end hands the broker
    original = broker.publish

    def publish(exchange, message, *rest):
        seen.append(message.properties()["headers"])
        return original(exchange, message, *rest)

    broker.publish = publish
    props = {packets.USER_PROPERTY: [(b"x-sensor-id", b"h1"), (b"x-sensor-seq", b"0041")]}
    sensor.send(packets.publish(b"sensors/h1", b"1", 1, packet_id=1, props=props, level=V5))
    sensor.send(packets.publish(b"sensors/h1", b'{"x-sensor-id": 7, "x-sensor-seq": "12"}', 0, level=V5))
    props = {packets.USER_PROPERTY: [(b"x-sensor-id", b"h1"), (b"x-sensor-seq", b"soon")]}
    sensor.send(packets.publish(b"sensors/h1", b"2", 0, props=props, level=V5))
    assert seen[0]["x-sensor-id"] == b"h1" and seen[0]["x-sensor-seq"] == 41
    assert seen[1]["x-sensor-id"] == b"7" and seen[1]["x-sensor-seq"] == 12
    assert seen[2]["x-sensor-seq"] == b"soon", "not a number: kept as it came, not deduplicated"


def test_the_fields_are_configurable_and_can_be_turned_off():
    broker, sensor, sink = _clients(Serving(sensor_fields=("id", "n")))
    for packet_id, body in enumerate((b'{"id": "a", "n": 1}', b'{"id": "a", "n": 1}'), 1):
        sensor.publish(b"sensors/a", body, 1, packet_id)
    assert len(_received(sink)) == 1

    broker, sensor, sink = _clients(Serving(sensor_fields=("", "")))
    body = b'{"x-sensor-id": "a", "x-sensor-seq": 1}'
    for packet_id in (1, 2):
        sensor.publish(b"sensors/a", body, 1, packet_id)
    assert len(_received(sink)) == 2, "payloads not looked into"
    assert broker.sensors is None


def test_a_payload_that_only_looks_like_a_reading_is_taken_as_it_is():
    broker, sensor, sink = _clients()
    bodies = [
        b'not json "x-sensor-seq"',
        b'["x-sensor-seq", 1]',
        b'{"x-sensor-seq": 1}',  # no id
        b'{"x-sensor-id": "a", "x-sensor-seq": -4}',
        b'{"x-sensor-id": "", "x-sensor-seq": 4}',
        b'{"x-sensor-id": "a", "x-sensor-seq": 4.5}',
        b'\xff{"x-sensor-seq"',
    ]
    for packet_id, body in enumerate(bodies + bodies, 1):
        out = sensor.publish(b"sensors/a", body, 1, packet_id)
        assert [p.name for p in out] == ["PUBACK"]
    assert len(_received(sink)) == 2 * len(bodies)
