"""The MQTT front end (mqtt/) driven with bytes, in process: CONNECT and its refusals, QoS 0, 1
and 2, sessions that outlive their connection, wills, keep alive, RabbitMQ's mapping to the
AMQP side, version 5's properties and reason codes, and malformed packets."""

import struct

from harness_mqtt import Client, published

from hutch.codec.wire import shortstr
from hutch.core import topology
from hutch.core.auth import Users, hash_password
from hutch.core.broker import Broker
from hutch.core.content import tails
from hutch.core.limits import Limits
from hutch.core.message import Message
from hutch.mqtt import packets
from hutch.mqtt.packets import V5


def names(out):
    return [p.name for p in out]


# ---------------------------------------------------------------- CONNECT


def test_connect_subscribe_publish_and_puback():
    c = Client()
    assert [(p.name, p.body) for p in c.connect()] == [("CONNACK", b"\x00\x00")]
    assert [(p.name, p.body) for p in c.subscribe(1, b"sensors/+/temp", qos=1)] == [("SUBACK", b"\x00\x01\x01")]
    out = c.publish(b"sensors/g3/temp", b"21.5", qos=1, packet_id=7)
    assert names(out) == ["PUBLISH", "PUBACK"]
    topic, payload, qos, dup, packet_id, _ = published(out[0])
    assert (topic, payload, qos, dup) == (b"sensors/g3/temp", b"21.5", 1, False)
    assert out[1].body == b"\x00\x07"
    queue = c.broker.queues[b"mqtt-subscription-sensor-1qos1"]
    assert queue.message_count() == 0 and c.conn.unsettled() == [(queue, c.conn.session.inflight[packet_id][1])]
    c.send(packets.ack(packets.PUBACK, packet_id))
    assert c.conn.unsettled() == []


def test_a_wrong_password_and_no_user_are_refused_in_connack():
    said = []
    c = Client(Broker(Limits(), log=lambda level, text, exc=None: said.append(text)))
    out = c.connect(password=b"nope")
    assert [(p.name, p.body) for p in out] == [("CONNACK", b"\x00\x04")] and c.conn.closed
    assert len([line for line in said if "refused" in line]) == 1, said  # (once: not again as the CONNACK goes)
    afar = {"address": "10.1.2.3", "port": 40000, "transport": "tcp"}
    c = Client(peer=afar)
    out = c.send(packets.connect(b"s"))
    assert [(p.name, p.body) for p in out] == [("CONNACK", b"\x00\x05")] and c.conn.closed
    c = Client(Broker(Limits(), users=Users({"sensor": hash_password("x", b"salt")}, loopback_users=())))
    out = c.send(packets.connect(b"s"))
    assert [(p.name, p.body) for p in out] == [("CONNACK", b"\x00\x05")] and c.conn.closed, "no guest: no anonymous"


def test_no_user_name_from_the_gateway_itself_logs_in_as_guest_as_rabbitmq_4_does():
    """RabbitMQ 4's anonymous_login_user is guest, which logs in from loopback only (Mosquitto's
    local-only mode takes such a client too); an empty user name and password is the same."""
    for connect in (packets.connect(b"s"), packets.connect(b"s", user=b"", password=b"")):
        c = Client()
        assert [(p.name, p.body) for p in c.send(connect)] == [("CONNACK", b"\x00\x00")]
        assert c.conn.client.user == b"guest"


def test_anonymous_only_when_the_config_names_its_user():
    users = Users({"sensor": hash_password("x", b"salt")}, loopback_users=())
    users.anonymous = "sensor"
    c = Client(Broker(Limits(), users=users))
    assert [(p.name, p.body) for p in c.send(packets.connect(b"s"))] == [("CONNACK", b"\x00\x00")]
    assert c.conn.client.user == b"sensor"


def test_an_empty_client_id_gets_one_with_a_clean_session_only():
    c = Client()
    assert [p.body for p in c.connect(b"")] == [b"\x00\x00"]
    assert c.conn.client_id.startswith(b"hutch-mqtt-")
    c = Client()
    assert [p.body for p in c.connect(b"", clean=False)] == [b"\x00\x02"]  # identifier rejected
    v5 = Client(level=V5)
    out = v5.connect(b"")
    props, _ = packets.read_properties(out[0].body, 2, len(out[0].body))
    assert props[packets.ASSIGNED_CLIENT_IDENTIFIER] == v5.conn.client_id
    assert packets.RETAIN_AVAILABLE not in props and packets.MAXIMUM_QOS not in props  # (both served)


def test_umqtt_s_keepalive_0_is_never_timed_out():
    c = Client()
    c.connect(keep_alive=0)
    c.broker.tick(10_000_000)
    assert not c.conn.closed


def test_a_second_connect_with_the_same_client_id_takes_the_session_over():
    broker = Broker(Limits())
    first = Client(broker)
    first.connect(b"dev")
    second = Client(broker)
    second.connect(b"dev")
    assert first.conn.closed and not second.conn.closed


# ---------------------------------------------------------------- the AMQP side


def test_rabbitmq_s_mapping_to_amq_topic_and_headers():
    c = Client()
    c.connect()
    broker = c.broker
    topology.declare_queue(broker, None, b"amqp-side")
    topology.bind(broker, None, b"amq.topic", b"amqp-side", b"sensors.*.temp", {}, 0, to_queue=True)
    c.publish(b"sensors/g3/temp", b"1", qos=1, packet_id=1)
    c.publish(b"sensors/g3/temp", b"0", qos=0)
    queue = broker.queues[b"amqp-side"]
    assert queue.message_count() == 2
    first, second = [queue.messages.pop() for _ in range(2)]
    assert first[0].routing_key == b"sensors.g3.temp" and first[0].exchange == b"amq.topic"
    assert first[0].properties()["headers"] == {"x-mqtt-publish-qos": 1, "x-mqtt-dup": False}
    assert first[0].persistent() and not second[0].persistent()


def test_one_publish_reaches_subscribers_of_every_level_and_qos_each_as_its_own():
    """The QoS 0 PUBLISH a 3.1.1 subscriber gets is made once per message and shared by the
    others below version 5 (mqtt/session.py deliver): a 3.1 one gets the same, a QoS 1 one its own
    packet id, a version 5 one its own properties; and the next message is not the last again."""
    broker = Broker(Limits())
    subscribers = []
    for client_id, level, qos in ((b"a", packets.V311, 0), (b"b", packets.V311, 0), (b"c", packets.V31, 0),
                                  (b"d", packets.V311, 1), (b"e", V5, 0)):  # fmt: skip
        c = Client(broker, level=level)
        c.connect(client_id)
        c.subscribe(1, b"greenhouse/#", qos=qos)
        subscribers.append((c, level, qos))
    sensor = Client(broker)
    sensor.connect(b"sensor")
    for i, payload in enumerate((b"21.5", b"21.7")):
        sensor.publish(b"greenhouse/3/temp", payload, qos=1, packet_id=i + 1)
        for c, level, qos in subscribers:
            out = c.read()
            assert names(out) == ["PUBLISH"], (c.conn.client_id, out)
            topic, got, got_qos, dup, packet_id, _props = published(out[0], level)
            assert (topic, got, got_qos, dup) == (b"greenhouse/3/temp", payload, qos, False), c.conn.client_id
            assert bool(packet_id) == bool(qos)
            if qos:
                c.send(packets.ack(packets.PUBACK, packet_id))
    v5 = Client(broker, level=V5)
    v5.connect(b"f")
    v5.subscribe(1, b"expiring/#", qos=0)
    publisher = Client(broker, level=V5)
    publisher.connect(b"g")
    publisher.publish(b"expiring/x", b"1", props={packets.MESSAGE_EXPIRY_INTERVAL: 60})
    assert published(v5.read()[0], V5)[5] == {packets.MESSAGE_EXPIRY_INTERVAL: 60}


def test_an_amqp_publish_reaches_an_mqtt_subscriber_at_qos_1_and_qos_0_stays_0():
    c = Client()
    c.connect()
    c.subscribe(1, b"sensors/#", qos=1)
    broker = c.broker
    header_tail, body_tail, size = tails({"delivery-mode": 1}, b"from amqp")
    message = Message(
        b"amq.topic", b"sensors.a.b", shortstr(b"amq.topic") + shortstr(b"sensors.a.b"), header_tail, body_tail, size
    )
    broker.publish(broker.exchange(b"amq.topic"), message)
    out = c.read()
    assert [published(p)[:3] for p in out] == [(b"sensors/a/b", b"from amqp", 1)]
    out = c.publish(b"sensors/x", b"q0", qos=0)
    assert [published(p)[:3] for p in out] == [(b"sensors/x", b"q0", 0)]


# ---------------------------------------------------------------- sessions


def test_a_persistent_session_keeps_its_subscriptions_and_messages():
    broker = Broker(Limits())
    c = Client(broker)
    assert c.connect(b"dev", clean=False)[0].body == b"\x00\x00"
    c.subscribe(1, b"cmd/dev", qos=1)
    delivered = [p for p in c.send(packets.publish(b"cmd/dev", b"one", 1, packet_id=1)) if p.name == "PUBLISH"]
    assert len(delivered) == 1  # in flight, never acknowledged: the connection drops
    c.conn.lost()
    publisher = Client(broker)
    publisher.connect(b"pub")
    publisher.publish(b"cmd/dev", b"two", qos=1, packet_id=1)
    again = Client(broker)
    out = again.connect(b"dev", clean=False)
    assert out[0].body == b"\x01\x00"  # session present, accepted
    got = [published(p) for p in out[1:]]
    assert [(t, m, q, dup) for t, m, q, dup, _, _ in got] == [
        (b"cmd/dev", b"one", 1, True),
        (b"cmd/dev", b"two", 1, False),
    ]


def test_a_clean_session_starts_empty_and_ends_with_its_connection():
    broker = Broker(Limits())
    c = Client(broker)
    c.connect(b"dev", clean=False)
    c.subscribe(1, b"a", qos=1)
    c.conn.lost()
    assert b"mqtt-subscription-devqos1" in broker.queues
    c = Client(broker)
    assert c.connect(b"dev", clean=True)[0].body == b"\x00\x00"
    assert b"mqtt-subscription-devqos1" not in broker.queues
    c.subscribe(1, b"a", qos=0)
    c.send(packets.connect(b"x") and bytes((0xE0, 0)))  # DISCONNECT
    assert c.conn.closed and b"mqtt-subscription-devqos0" not in broker.queues


# ---------------------------------------------------------------- wills and keep alive


def test_a_will_goes_out_on_a_lost_connection_and_not_after_disconnect():
    broker = Broker(Limits())
    watcher = Client(broker)
    watcher.connect(b"watcher")
    watcher.subscribe(1, b"status/#", qos=1)
    lost = Client(broker)
    lost.connect(b"node-1", will=(b"status/node-1", b"offline", 1, False), keep_alive=10)
    gone = Client(broker)
    gone.connect(b"node-2", will=(b"status/node-2", b"offline", 1, False))
    gone.send(bytes((0xE0, 0)))
    lost.conn.eof()
    assert [published(p)[:2] for p in watcher.read()] == [(b"status/node-1", b"offline")]


def test_keep_alive_expiry_closes_after_one_and_a_half_times_and_publishes_the_will():
    broker = Broker(Limits())
    watcher = Client(broker)
    watcher.connect(b"watcher")
    watcher.subscribe(1, b"status/#", qos=0)
    c = Client(broker)
    broker.now = 1000
    c.connect(b"node", will=(b"status/node", b"gone", 0, False), keep_alive=10)
    broker.tick(1000 + 14_000)
    assert not c.conn.closed
    broker.tick(1000 + 15_001)
    assert c.conn.closed
    assert [published(p)[:2] for p in watcher.read()] == [(b"status/node", b"gone")]


# ---------------------------------------------------------------- QoS 2


def test_qos_2_is_taken_once_when_the_publish_is_repeated_before_pubrel():
    c = Client()
    c.connect()
    topology.declare_queue(c.broker, None, b"q")
    topology.bind(c.broker, None, b"amq.topic", b"q", b"m", {}, 0, to_queue=True)
    first = c.send(packets.publish(b"m", b"x", 2, packet_id=5))
    again = c.send(packets.publish(b"m", b"x", 2, dup=True, packet_id=5))
    assert [(p.name, p.body) for p in first + again] == [("PUBREC", b"\x00\x05")] * 2
    assert c.broker.queues[b"q"].message_count() == 1
    assert [(p.name, p.body) for p in c.send(packets.ack(packets.PUBREL, 5))] == [("PUBCOMP", b"\x00\x05")]
    c.send(packets.publish(b"m", b"y", 2, packet_id=5))  # the id is free again: a new message
    assert c.broker.queues[b"q"].message_count() == 2


def test_a_qos_2_subscription_is_delivered_qos_2_and_its_steps_go_on_after_a_reconnect():
    broker = Broker(Limits())
    sub = Client(broker)
    sub.connect(b"dash", clean=False)
    assert [p.body for p in sub.subscribe(1, b"alarm/#", qos=2)] == [b"\x00\x01\x02"]  # granted 2
    pub = Client(broker)
    pub.connect(b"pub")
    pub.publish(b"alarm/a", b"one", qos=2, packet_id=1)
    pub.publish(b"alarm/b", b"two", qos=1, packet_id=2)  # (its own QoS, 1: delivered at 1)
    got = [published(p) for p in sub.read()]
    assert [(t, m, q, dup) for t, m, q, dup, _, _ in got] == [
        (b"alarm/a", b"one", 2, False),
        (b"alarm/b", b"two", 1, False),
    ]
    one, two = got[0][4], got[1][4]
    assert broker.queues[b"mqtt-subscription-dashqos2"].message_count() == 0  # (moved to the session's own queue)
    sub.send(packets.ack(packets.PUBACK, two))
    sub.conn.lost()  # before its PUBREC: the next connection is sent it again, same id, DUP
    sub = Client(broker)
    out = sub.connect(b"dash", clean=False)
    assert [published(p)[1:5] for p in out[1:]] == [(b"one", 2, True, one)]
    assert [(p.name, p.body) for p in sub.send(packets.ack(packets.PUBREC, one))] == [
        ("PUBREL", struct.pack(">H", one))
    ]
    sub.conn.lost()  # after its PUBREC: never the message again, its PUBREL
    sub = Client(broker)
    out = sub.connect(b"dash", clean=False)
    assert [(p.name, p.body) for p in out[1:]] == [("PUBREL", struct.pack(">H", one))]
    assert sub.send(packets.ack(packets.PUBCOMP, one)) == []
    sub.conn.lost()
    sub = Client(broker)
    assert [p.name for p in sub.connect(b"dash", clean=False)] == ["CONNACK"]  # nothing left under way
    assert broker.queues[b"mqtt-outbound-qos2-dash"].message_count() == 0


def test_a_pubrec_for_no_delivery_is_answered_and_a_refused_one_ends_the_delivery():
    broker = Broker(Limits())
    sub = Client(broker, level=V5)
    sub.connect(b"dash")
    sub.subscribe(1, b"alarm/#", qos=2)
    assert [(p.name, p.body) for p in sub.send(packets.ack(packets.PUBREC, 9, level=V5))] == [
        ("PUBREL", b"\x00\x09\x92")
    ]
    pub = Client(broker)
    pub.connect(b"pub")
    pub.publish(b"alarm/a", b"one", qos=2, packet_id=1)
    (delivery,) = [published(p, V5) for p in sub.read()]
    assert sub.send(packets.ack(packets.PUBREC, delivery[4], 0x80, level=V5)) == []  # (no PUBREL: it said no)
    assert broker.queues[b"mqtt-outbound-qos2-dash"].message_count() == 0
    pub.publish(b"alarm/a", b"two", qos=2, packet_id=2)
    assert [published(p, V5)[1] for p in sub.read()] == [b"two"]  # (its window is free again)


# ---------------------------------------------------------------- version 5


def test_version_5_properties_both_ways():
    c = Client(level=V5)
    c.connect()
    c.subscribe(1, b"rpc/#", qos=1)
    props = {
        packets.USER_PROPERTY: [(b"unit", b"celsius")],
        packets.CONTENT_TYPE: b"text/plain",
        packets.RESPONSE_TOPIC: b"rpc/replies",
        packets.CORRELATION_DATA: b"\x01\x02",
        packets.MESSAGE_EXPIRY_INTERVAL: 60,
    }
    out = c.send(packets.publish(b"rpc/ask", b"?", 1, packet_id=3, props=props, level=V5))
    got = published(out[0], V5)[5]
    assert got[packets.USER_PROPERTY] == [(b"unit", b"celsius")]
    assert (got[packets.CONTENT_TYPE], got[packets.RESPONSE_TOPIC], got[packets.CORRELATION_DATA]) == (
        b"text/plain", b"rpc/replies", b"\x01\x02")  # fmt: skip
    assert got[packets.MESSAGE_EXPIRY_INTERVAL] == 60
    entry = c.conn.session.inflight[published(out[0], V5)[4]][1]
    amqp = entry[0].properties()
    assert (amqp["reply-to"], amqp["correlation-id"], amqp["expiration"]) == (b"rpc.replies", b"\x01\x02", b"60000")
    assert amqp["headers"]["unit"] == b"celsius"


def test_version_5_reason_codes_for_no_subscriber_and_a_topic_alias():
    c = Client(level=V5)
    c.connect()
    out = c.send(packets.publish(b"nobody/listens", b"x", 1, packet_id=9, level=V5))
    assert [(p.name, p.body) for p in out] == [("PUBACK", b"\x00\x09\x10")]
    c.subscribe(1, b"long/topic/name", qos=0)
    c.send(packets.publish(b"long/topic/name", b"1", 0, props={packets.TOPIC_ALIAS: 1}, level=V5))
    out = c.send(packets.publish(b"", b"2", 0, props={packets.TOPIC_ALIAS: 1}, level=V5))
    assert [published(p, V5)[:2] for p in out] == [(b"long/topic/name", b"2")]


def test_a_subscription_the_user_may_not_make_is_refused_in_suback():
    from hutch.core.access import Permissions

    users = Users(permissions={"guest": Permissions("^nothing$", "^nothing$", "^nothing$")})
    for level, code in ((packets.V311, 0x80), (V5, 0x87)):
        c = Client(Broker(Limits(), users=users), level=level)
        c.connect()
        out = c.subscribe(1, b"a/b", qos=1)
        assert out[0].body[-1] == code


# ---------------------------------------------------------------- bad input


def test_malformed_packets_end_the_connection_with_a_reason_in_version_5():
    c = Client(level=V5)
    c.connect()
    out = c.send(bytes((0x32, 3, 0, 9, 0x41)))  # a topic length past the packet
    assert names(out) == ["DISCONNECT"] and out[0].body[0] == packets.MALFORMED_PACKET and c.conn.closed
    c = Client()
    c.connect()
    assert c.send(bytes((0x82, 2, 0, 1))) == [] and c.conn.closed  # a SUBSCRIBE with no filter
    c = Client()
    assert c.send(bytes((0xC0, 0))) == [] and c.conn.closed  # PINGREQ before CONNECT


def test_a_wildcard_in_a_publish_s_topic_is_named_as_why():
    c = Client(level=V5)
    c.connect()
    out = c.publish(b"sensors/+/temp", b"21.5", qos=1, packet_id=1)
    assert names(out) == ["DISCONNECT"] and out[0].body[0] == packets.TOPIC_NAME_INVALID
    props, _ = packets.read_properties(out[0].body, 1, len(out[0].body))
    assert props[packets.REASON_STRING] == (
        b"topic name 'sensors/+/temp' holds a wildcard (+ or #): a PUBLISH names one topic"
    ), props


def test_nothing_large_before_connect():
    c = Client()
    c.send(bytes((0x10,)) + packets.remaining_length(1 << 20))
    assert c.conn.closed


def test_packet_split_and_lengths():
    packet = packets.publish(b"t", b"x" * 300, 1, packet_id=2)
    assert packets.split(packet, 0, 1000)[2] == len(packet)
    assert packets.split(packet[:-1], 0, 1000) is None
    assert packets.wanted(packet[:10]) == len(packet) - 10
    assert struct.unpack(">H", packet[3:5])[0] == 1  # (after a remaining length of two octets) the topic's length


def test_mqtt_3_1_s_connect_is_taken_as_rabbitmq_takes_it():
    c = Client(level=packets.V31)
    assert [(p.name, p.body) for p in c.connect()] == [("CONNACK", b"\x00\x00")]
    assert c.conn.level == packets.V31


# ---------------------------------------------------------------- retained messages


def test_retained_messages_reach_later_wildcard_subscriptions_and_an_empty_one_clears():
    broker = Broker(Limits())
    sensor = Client(broker)
    sensor.connect(b"sensor")
    sensor.publish(b"home/kitchen/temp", b"20", qos=1, packet_id=1, retain=True)
    sensor.publish(b"home/kitchen/temp", b"21", qos=1, packet_id=2, retain=True)  # replaces it
    sensor.publish(b"home/hall/temp", b"18", qos=0, retain=True)
    sensor.publish(b"home/hall/light", b"on", qos=0, retain=True)
    later = Client(broker)
    later.connect(b"later")
    out = later.subscribe(1, b"home/+/temp", qos=1)
    assert out[0].name == "SUBACK"
    got = sorted((published(p)[0], published(p)[1], published(p)[2], p.flags & 1) for p in out[1:])
    assert got == [(b"home/hall/temp", b"18", 0, 1), (b"home/kitchen/temp", b"21", 1, 1)]
    sensor.publish(b"home/kitchen/temp", b"", qos=0, retain=True)  # cleared
    again = Client(broker)
    again.connect(b"again")
    out = again.subscribe(1, b"home/#", qos=0)
    assert sorted(published(p)[0] for p in out[1:]) == [b"home/hall/light", b"home/hall/temp"]


def test_topic_filters_match_as_mqtt_says():
    from hutch.mqtt.topics import matches

    assert matches(b"a/+/c", b"a/b/c") and not matches(b"a/+/c", b"a/b/d")
    assert matches(b"a/#", b"a") and matches(b"a/#", b"a/b/c") and matches(b"#", b"x/y")
    assert not matches(b"#", b"$SYS/x") and not matches(b"+/x", b"$SYS/x") and matches(b"$SYS/#", b"$SYS/x")
    assert not matches(b"a/b", b"a/b/c") and not matches(b"a/b/c", b"a/b")


def test_umqtt_s_packet_id_0_is_taken_from_a_3_1_1_client_and_refused_from_a_5_one():
    c = Client()
    c.connect()
    assert [(p.name, p.body) for p in c.publish(b"t", b"x", qos=1, packet_id=0)] == [("PUBACK", b"\x00\x00")]
    v5 = Client(level=V5)
    v5.connect()
    out = v5.send(packets.publish(b"t", b"x", 1, packet_id=0, level=V5))
    assert [p.name for p in out] == ["DISCONNECT"] and out[0].body[0] == packets.PROTOCOL_ERROR


def test_nothing_larger_than_a_version_5_client_s_maximum_packet_size_is_sent_to_it():
    c = Client(level=V5)
    c.send(packets.connect(b"small", user=b"guest", password=b"guest", level=V5,
                           props={packets.MAXIMUM_PACKET_SIZE: 100}))  # fmt: skip
    c.subscribe(1, b"t", qos=1)
    big = c.send(packets.publish(b"t", b"x" * 200, 1, packet_id=1, level=V5))
    small = c.send(packets.publish(b"t", b"y", 1, packet_id=2, level=V5))
    assert [p.name for p in big] == ["PUBACK"]  # the delivery was dropped, not sent
    assert [published(p, V5)[1] for p in small if p.name == "PUBLISH"] == [b"y"]
    assert len(c.conn.unsettled()) == 1  # the small one, awaiting its PUBACK; the big one settled
