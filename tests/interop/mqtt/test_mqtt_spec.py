"""Where the MQTT specification says what a server does, run against hutch and against Debian's
mosquitto alike (the `mqtt_broker` fixture): `$` topics and wildcards, retained messages under
dotted filters, topics holding dots as published, a DISCONNECT's Session Expiry Interval, what
is left of a Message Expiry Interval, the Payload Format Indicator, a delayed will's delay, and
an empty user name and password;
and what the specification leaves to the server where a Mosquitto user counts on Mosquitto's
choice: how many QoS 1 deliveries a subscriber has in flight. A version 5 subscriber's Receive
Maximum is tested against hutch alone (mosquitto 2.0.11 goes past it: see that test)."""

import socket
import time

from mqtt_brokers import Paho, nothing_within
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from hutch.mqtt import packets


def publish_props(**values):
    props = Properties(PacketTypes.PUBLISH)
    for name, value in values.items():
        setattr(props, name, value)
    return props


def test_a_filter_that_starts_with_a_wildcard_matches_no_dollar_topic(mqtt_broker):
    """[MQTT-4.7.2-1]: `+/B` and `#` do not match `$TopicA/B`; `$TopicA/#` does."""
    plus = Paho(mqtt_broker, "dollar-plus").connect()
    plus.subscribe("+/B", 1)
    hash_ = Paho(mqtt_broker, "dollar-hash").connect()
    hash_.subscribe("#", 1)
    named = Paho(mqtt_broker, "dollar-named").connect()
    named.subscribe("$TopicA/#", 1)
    publisher = Paho(mqtt_broker, "dollar-publisher").connect()
    publisher.publish("$TopicA/B", b"dollar", 1)
    publisher.publish("plain/B", b"plain", 1)
    assert [(t, m) for t, m, *_ in named.take(1)] == [("$TopicA/B", b"dollar")], mqtt_broker.kind
    assert [(t, m) for t, m, *_ in plus.take(1)] == [("plain/B", b"plain")], mqtt_broker.kind
    assert [(t, m) for t, m, *_ in hash_.take(1)] == [("plain/B", b"plain")], mqtt_broker.kind
    assert nothing_within(plus, 0.3) and nothing_within(hash_, 0.2)
    for client in (plus, hash_, named, publisher):
        client.stop()


def test_a_retained_message_reaches_a_filter_with_a_dot(mqtt_broker):
    """[MQTT-3.3.1-6]: a new subscription whose filter matches a retained message's topic gets
    it, a filter holding a `.` (a version number) as any other."""
    publisher = Paho(mqtt_broker, "dotted-publisher").connect()
    publisher.client.publish("fw/v1.2/state", b"kept", 1, retain=True).wait_for_publish(10)
    for topic_filter in ("fw/v1.2/state", "fw/v1.2/+", "fw/#"):
        client = Paho(mqtt_broker, "dotted-sub").connect()
        client.subscribe(topic_filter, 1)
        got = client.take(1)
        assert [(m, r) for _t, m, _q, r, _p in got] == [(b"kept", True)], (topic_filter, mqtt_broker.kind)
        client.stop()
    publisher.client.publish("fw/v1.2/state", b"", 1, retain=True).wait_for_publish(10)
    publisher.stop()


def test_a_topic_holding_a_dot_arrives_as_published_and_only_where_its_filter_matches(mqtt_broker):
    """[MQTT-4.7.3], [MQTT-3.3.2-3]: `linux_3.11/x` arrives as `linux_3.11/x`; `v1/2/x` gets
    nothing of `v1.2/x` nor `v1.2/x` of `v1/2/x`; a retained message of each is kept apart; a
    version 5 response topic holding a dot arrives whole."""
    exact = Paho(mqtt_broker, "dots-exact").connect()
    exact.subscribe("v1.2/x", 1)
    split = Paho(mqtt_broker, "dots-split").connect()
    split.subscribe("v1/2/x", 1)
    wild = Paho(mqtt_broker, "dots-wild", "5").connect()
    wild.subscribe("linux_3.11/#", 1)
    publisher = Paho(mqtt_broker, "dots-publisher", "5").connect()
    publisher.publish("v1.2/x", b"dotted", 1)
    publisher.publish("v1/2/x", b"split", 1)
    response = Properties(PacketTypes.PUBLISH)
    response.ResponseTopic = "replies/1795738437.7/gw"
    publisher.client.publish("linux_3.11/x", b"kernel", 1, properties=response).wait_for_publish(10)
    assert [(t, m) for t, m, *_ in exact.take(1)] == [("v1.2/x", b"dotted")], mqtt_broker.kind
    assert [(t, m) for t, m, *_ in split.take(1)] == [("v1/2/x", b"split")], mqtt_broker.kind
    ((topic, payload, _qos, _retain, props),) = wild.take(1)
    assert (topic, payload, props.ResponseTopic) == ("linux_3.11/x", b"kernel", "replies/1795738437.7/gw")
    assert nothing_within(exact, 0.3) and nothing_within(split, 0.2)
    publisher.client.publish("v1.2/x", b"kept dotted", 1, retain=True).wait_for_publish(10)
    publisher.client.publish("v1/2/x", b"kept split", 1, retain=True).wait_for_publish(10)
    for topic_filter, kept in (("v1.2/x", [b"kept dotted"]), ("v1/2/x", [b"kept split"]), ("v1/#", [b"kept split"])):
        client = Paho(mqtt_broker, "dots-later").connect()
        client.subscribe(topic_filter, 1)
        assert [m for _t, m, *_ in client.take(len(kept))] == kept, (topic_filter, mqtt_broker.kind)
        assert nothing_within(client, 0.2), (topic_filter, mqtt_broker.kind)
        client.stop()
    for topic in ("v1.2/x", "v1/2/x"):
        publisher.client.publish(topic, b"", 1, retain=True).wait_for_publish(10)
    for client in (exact, split, wild, publisher):
        client.stop()


def _session(mqtt_broker, connect_expiry, disconnect_expiry):
    """A version 5 session with a subscription, its DISCONNECT saying disconnect_expiry."""
    client = Paho(mqtt_broker, "expiring", "5", clean=False)
    client.connect(session_expiry=connect_expiry)
    client.subscribe("expiring/#", 1)
    props = Properties(PacketTypes.DISCONNECT)
    props.SessionExpiryInterval = disconnect_expiry
    client.client.disconnect(properties=props)
    client.client.loop_stop()


def _present(mqtt_broker):
    back = Paho(mqtt_broker, "expiring", "5", clean=False).connect(session_expiry=0)
    present = back.flags.session_present
    back.stop()
    return present


def test_the_session_expiry_of_a_disconnect_replaces_the_connect_s(mqtt_broker):
    """3.14.2.2.2: 1 s at CONNECT and 5 at DISCONNECT keeps the session past 3 s; 5 and then 0
    ends it with the connection."""
    _session(mqtt_broker, 1, 5)
    time.sleep(3)
    assert _present(mqtt_broker) is True, mqtt_broker.kind
    _session(mqtt_broker, 5, 0)
    time.sleep(0.5)
    assert _present(mqtt_broker) is False, mqtt_broker.kind


def test_a_message_expiry_interval_says_what_is_left_of_it(mqtt_broker):
    """[MQTT-3.3.2-6]: a message that waited 3 s of its 6 is delivered with 3 left (2 where
    the seconds turn over), queued for a session or retained."""
    sub = Paho(mqtt_broker, "expiry-sub", "5", clean=False).connect(session_expiry=60)
    sub.subscribe("expiry/#", 1)
    sub.client.disconnect()
    sub.client.loop_stop()
    publisher = Paho(mqtt_broker, "expiry-publisher", "5").connect()
    publisher.publish("expiry/queued", b"q", 1, publish_props(MessageExpiryInterval=6))
    publisher.client.publish(
        "expiry/kept", b"r", 1, retain=True, properties=publish_props(MessageExpiryInterval=6)
    ).wait_for_publish(10)
    time.sleep(3)
    back = Paho(mqtt_broker, "expiry-sub", "5", clean=False).connect(session_expiry=0)
    queued = back.take(2)  # (the queued message, and the retained one as published live)
    late = Paho(mqtt_broker, "expiry-late", "5").connect()
    late.subscribe("expiry/kept", 1)
    retained = late.take(1)
    for topic, _m, _q, _r, props in queued + retained:
        assert props.MessageExpiryInterval in (2, 3), (topic, props.MessageExpiryInterval, mqtt_broker.kind)
    for client in (back, late, publisher):
        client.stop()


def test_the_payload_format_indicator_reaches_the_subscriber(mqtt_broker):
    """[MQTT-3.3.2-4]: the Payload Format Indicator goes to the subscriber unaltered."""
    sub = Paho(mqtt_broker, "format-sub", "5").connect()
    sub.subscribe("format/#", 1)
    publisher = Paho(mqtt_broker, "format-publisher", "5").connect()
    publisher.publish("format/text", "grüße".encode(), 1, publish_props(PayloadFormatIndicator=1))
    publisher.publish("format/bytes", b"\xff", 1)
    got = {t: getattr(p, "PayloadFormatIndicator", None) for t, _m, _q, _r, p in sub.take(2)}
    assert got == {"format/text": 1, "format/bytes": None}, mqtt_broker.kind
    sub.stop()
    publisher.stop()


def test_a_delayed_will_never_goes_out_before_its_delay(mqtt_broker):
    """[MQTT-3.1.3-9]: a will with a Will Delay Interval of 1 s goes out no sooner than 1 s after
    the connection ends, each of four times."""
    watcher = Paho(mqtt_broker, "delay-watcher", "5").connect()
    watcher.subscribe("delay/#", 1)
    waited = []
    for n in range(4):
        node = Paho(mqtt_broker, "delay-node-%d" % n, "5", clean=False)
        props = Properties(PacketTypes.WILLMESSAGE)
        props.WillDelayInterval = 1
        node.client.will_set("delay/node", b"offline", 1, False, props)
        node.connect(session_expiry=60)
        time.sleep(0.05 + 0.05 * n)  # (the cut falls at another moment of the broker's clock each time)
        node.client.loop_stop()
        cut = time.monotonic()
        node.client.socket().shutdown(socket.SHUT_RDWR)
        assert watcher.take(1)[0][:2] == ("delay/node", b"offline")
        waited.append(time.monotonic() - cut)
    assert min(waited) >= 1.0, (waited, mqtt_broker.kind)
    watcher.stop()


def test_an_empty_user_name_and_password_log_in_as_none_would(mqtt_broker):
    """A client that sends an empty user name and password (an IDE's MQTT panel, a sensor's
    firmware with the fields left blank) is taken as one that sends none: anonymous in
    mosquitto (allow_anonymous), guest from the gateway itself in hutch; it then publishes and
    subscribes as any client."""
    sock = socket.create_connection((mqtt_broker.host, mqtt_broker.port), timeout=10)
    try:
        sock.sendall(packets.connect(b"blank-login", user=b"", password=b""))
        sock.sendall(packets.subscribe(1, [(b"blank/#", 1)]))
        sock.sendall(packets.publish(b"blank/x", b"hello", 1, packet_id=2))
        data = bytearray()
        kinds = []
        deadline = time.monotonic() + 10
        while len(kinds) < 4 and time.monotonic() < deadline:
            data.extend(sock.recv(65536))
            while (found := packets.split(data, 0, 1 << 20)) is not None:
                first, start, end = found
                kinds.append((first >> 4, bytes(data[start:end]) if first >> 4 == packets.CONNACK else None))
                del data[:end]
    finally:
        sock.close()
    assert kinds[0] == (packets.CONNACK, b"\x00\x00"), (mqtt_broker.kind, kinds)
    # the SUBACK, then the PUBACK and the delivery (in either order)
    assert sorted(kind for kind, _ in kinds[1:]) == [packets.PUBLISH, packets.PUBACK, packets.SUBACK], kinds


def raw_subscriber(broker, client_id, topic_filter, level=packets.V311, props=None):
    """A client on a plain socket (version 3.1.1, or level; props: its CONNECT's version 5
    properties), subscribed at QoS 1 to topic_filter, that acknowledges nothing unless told to:
    (socket, what it has read so far)."""
    sock = socket.create_connection((broker.host, broker.port), timeout=10)
    sock.sendall(packets.connect(client_id, user=b"guest", password=b"guest", level=level, props=props))
    sock.sendall(packets.subscribe(1, [(topic_filter, 1)], level=level))
    return sock, bytearray()


def qos1_ids(sock, data, expected):
    """The packet ids of the QoS 1 PUBLISHes that arrive on sock (the CONNACK and the SUBACK are
    passed over): read until `expected` have come (10 s at most, for a loaded machine), then
    for half a second more, so that one too many is seen."""
    ids = []
    sock.settimeout(0.1)
    end = time.monotonic() + 10
    settled = None
    while time.monotonic() < (settled or end):
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            chunk = None
        if chunk == b"":
            break
        if chunk:
            data.extend(chunk)
        while True:
            found = packets.split(data, 0, 1 << 20)
            if found is None:
                break
            first, start, end_ = found
            if first & 0xF0 == 0x30:
                topic_length = (data[start] << 8) | data[start + 1]
                ids.append((data[start + 2 + topic_length] << 8) | data[start + 3 + topic_length])
            del data[:end_]
        if settled is None and len(ids) >= expected:
            settled = time.monotonic() + 0.5
    return ids


def in_flight(broker, name, first, then, level=packets.V311, props=None):
    """(how many of 30 QoS 1 messages a subscriber is sent while it acknowledges nothing, how many
    more once it has acknowledged those): a raw_subscriber to `name`/#, which waits for `first`
    deliveries and then for `then` more (qos1_ids)."""
    sock, data = raw_subscriber(broker, b"%s-sub" % name.encode(), b"%s/#" % name.encode(), level, props)
    try:
        time.sleep(0.3)  # (the SUBACK: the subscription is in place)
        publisher = Paho(broker, name + "-pub").connect()
        for i in range(30):
            publisher.client.publish(name + "/x", b"%d" % i, 1)
        held = qos1_ids(sock, data, first)
        sock.sendall(b"".join(packets.ack(packets.PUBACK, packet_id, level=level) for packet_id in held))
        more = qos1_ids(sock, data, then)
        publisher.stop()
        return len(held), len(more)
    finally:
        sock.close()


def test_a_qos_1_subscriber_has_20_deliveries_in_flight_as_with_mosquitto(mqtt_broker):
    """A subscriber that acknowledges nothing is sent 20 of 30 QoS 1 messages (Mosquitto's
    max_inflight_messages and hutch's [mqtt] prefetch, 20 by default); once it acknowledges
    them, the other 10."""
    assert in_flight(mqtt_broker, "inflight", 20, 10) == (20, 10), mqtt_broker.kind


def test_a_version_5_subscriber_s_receive_maximum_bounds_what_it_has_in_flight(hutch_mqtt):
    """[MQTT-3.3.4-9]: a version 5 subscriber whose CONNECT says Receive Maximum 5 is sent 5 of
    30 QoS 1 messages while it acknowledges none, then 5 more for the 5 PUBACKs it sends. Against
    hutch only: Debian's mosquitto 2.0.11 sends the first 5, then all 25 others at once."""
    limited = {packets.RECEIVE_MAXIMUM: 5}
    assert in_flight(hutch_mqtt, "receive-max", 5, 5, packets.V5, limited) == (5, 5)
