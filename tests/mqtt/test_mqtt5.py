"""Version 5's subscription options, subscription identifiers, shared subscriptions, will delay
and server keep alive, and QoS 2 with a journal, driven with bytes in process (the MQTT front
end, mqtt/). Plain functions and asserts: tests/micropython runs them under MicroPython too."""

from harness_mqtt import Client, published
from scratch import remove_tree, scratch_folder

from hutch.core.broker import Broker
from hutch.core.limits import Limits
from hutch.mqtt import packets
from hutch.mqtt.connection import Serving
from hutch.mqtt.packets import V5

QOS1, NO_LOCAL, RETAIN_AS_PUBLISHED, ONLY_IF_NEW = 1, 4, 8, 1 << 4


def v5(broker, client_id, **kw):
    c = Client(broker, level=V5)
    out = c.connect(client_id, **kw)
    assert out[0].name == "CONNACK" and out[0].body[1] == 0, out
    return c


def subscribe(c, packet_id, topic_filter, opts, sub_id=None):
    props = {packets.SUBSCRIPTION_IDENTIFIER: sub_id} if sub_id is not None else None
    out = c.send(packets.subscribe(packet_id, [(topic_filter, opts)], V5, props))
    assert out[0].name == "SUBACK" and out[0].body[-1] < 0x80, out
    return out[1:]


def delivered(out):
    """(topic, payload, RETAIN, subscription identifiers) of each PUBLISH in out."""
    found = []
    for p in out:
        if p.name == "PUBLISH":
            topic, payload, _qos, _dup, _pid, props = published(p, V5)
            found.append((topic, payload, bool(p.flags & 1), props.get(packets.SUBSCRIPTION_IDENTIFIER)))
    return found


def connack_properties(out):
    return packets.read_properties(out[0].body, 2, len(out[0].body))[0]


def test_no_local_keeps_a_client_s_own_publishes_from_it():
    broker = Broker(Limits())
    me = v5(broker, b"me")
    subscribe(me, 1, b"chat/#", QOS1 | NO_LOCAL)
    other = v5(broker, b"other")  # (a client connecting after it changes nothing of it)
    out = me.send(packets.publish(b"chat/room", b"mine", 1, packet_id=2, level=V5))
    assert [p.name for p in out] == ["PUBACK"]  # (taken: the session's queue settles it undelivered)
    assert broker.queues[b"mqtt-subscription-meqos1"].message_count() == 0
    other.send(packets.publish(b"chat/room", b"theirs", 0, level=V5))
    assert delivered(me.read()) == [(b"chat/room", b"theirs", False, None)]
    subscribe(me, 3, b"chat/room", QOS1)  # a plain subscription that also matches: delivered after all
    out = me.send(packets.publish(b"chat/room", b"mine again", 1, packet_id=4, level=V5))
    assert delivered(out) == [(b"chat/room", b"mine again", False, None)]


def test_retain_as_published_and_retain_handling():
    broker = Broker(Limits())
    publisher = v5(broker, b"publisher")
    publisher.send(packets.publish(b"config/led", b"on", 1, retain=True, packet_id=1, level=V5))
    keeps = v5(broker, b"keeps")
    plain = v5(broker, b"plain")
    # retained at subscribe: RETAIN set, whatever the options; retain handling 1 only the first time
    assert delivered(subscribe(keeps, 1, b"config/#", ONLY_IF_NEW | RETAIN_AS_PUBLISHED)) == [
        (b"config/led", b"on", True, None)
    ]
    assert delivered(subscribe(keeps, 2, b"config/#", ONLY_IF_NEW | RETAIN_AS_PUBLISHED)) == []
    assert delivered(subscribe(plain, 1, b"config/#", 2 << 4)) == []  # retain handling 2: none
    publisher.send(packets.publish(b"config/led", b"off", 0, retain=True, level=V5))
    assert delivered(keeps.read()) == [(b"config/led", b"off", True, None)]
    assert delivered(plain.read()) == [(b"config/led", b"off", False, None)]
    assert delivered(subscribe(plain, 2, b"config/#", 0)) == [(b"config/led", b"off", True, None)]


def test_subscription_identifiers_come_back_with_each_delivery_and_stay_with_the_session():
    broker = Broker(Limits())
    out = Client(broker, level=V5).connect(b"probe")
    assert packets.SUBSCRIPTION_IDENTIFIER_AVAILABLE not in connack_properties(out)  # (absent: available)
    props = {packets.SESSION_EXPIRY_INTERVAL: 600}
    c = v5(broker, b"ids", clean=False, props=props)
    subscribe(c, 1, b"site/#", QOS1, sub_id=7)
    subscribe(c, 2, b"site/+/temp", QOS1, sub_id=300)
    subscribe(c, 3, b"site/plain", QOS1)
    out = c.send(packets.publish(b"site/a/temp", b"21", 0, level=V5))
    out += c.send(packets.publish(b"site/a/rh", b"40", 0, level=V5))
    out += c.send(packets.publish(b"site/plain", b"p", 0, level=V5))
    assert delivered(out) == [
        (b"site/a/temp", b"21", False, [7, 300]),
        (b"site/a/rh", b"40", False, [7]),
        (b"site/plain", b"p", False, [7]),
    ]
    queue = broker.queues[b"mqtt-subscription-idsqos1"]
    tables = sorted(str(b.arguments) for b in queue.inbound if b.key == b"site.#")
    assert tables == ["{'x-mqtt-subscription-opts': {'id': 7}}"]
    c.conn.eof()
    c = Client(broker, level=V5)
    assert c.connect(b"ids", clean=False, props=props)[0].body[0] == 1  # session present
    sender = v5(broker, b"sender")
    sender.send(packets.publish(b"site/b/temp", b"19", 0, level=V5))
    assert delivered(c.read()) == [(b"site/b/temp", b"19", False, [7, 300])]


def test_a_session_expiry_at_disconnect_for_a_session_that_had_none_is_a_protocol_error():
    """[MQTT-3.14.2-2]: CONNECT said 0 (the session ends with the connection): a DISCONNECT that
    asks to keep it is answered with a DISCONNECT 0x82, and its will goes out."""
    broker = Broker(Limits())
    watcher = v5(broker, b"watcher")
    watcher.subscribe(1, b"wills/#")
    c = Client(broker, level=V5)
    c.connect(b"no-expiry", will=(b"wills/no-expiry", b"gone", 0, False, {}))
    out = c.send(packets.disconnect(0, props={packets.SESSION_EXPIRY_INTERVAL: 5}))
    assert [(p.name, p.body[0]) for p in out] == [("DISCONNECT", packets.PROTOCOL_ERROR)] and c.conn.closed
    assert [(p.name, published(p, V5)[:2]) for p in watcher.read()] == [("PUBLISH", (b"wills/no-expiry", b"gone"))]


def test_subscription_identifier_0_and_one_from_a_publisher_are_protocol_errors():
    broker = Broker(Limits())
    c = v5(broker, b"zero")
    out = c.send(packets.subscribe(1, [(b"a", 1)], V5, {packets.SUBSCRIPTION_IDENTIFIER: 0}))
    assert [(p.name, p.body[0]) for p in out] == [("DISCONNECT", packets.PROTOCOL_ERROR)] and c.conn.closed
    c = v5(broker, b"publisher")
    out = c.send(packets.publish(b"a", b"x", 0, props={packets.SUBSCRIPTION_IDENTIFIER: 4}, level=V5))
    assert [(p.name, p.body[0]) for p in out] == [("DISCONNECT", packets.PROTOCOL_ERROR)] and c.conn.closed


def test_a_delayed_will_waits_and_is_not_sent_when_the_client_is_back():
    broker = Broker(Limits())
    watcher = v5(broker, b"watcher")
    subscribe(watcher, 1, b"status/#", QOS1)
    will = (b"status/node", b"offline", 1, False, {packets.WILL_DELAY_INTERVAL: 5})
    expiry = {packets.SESSION_EXPIRY_INTERVAL: 600}
    broker.now = 1000
    node = v5(broker, b"node", will=will, clean=False, props=expiry)
    node.conn.eof()
    broker.tick(1000 + 4_000)
    assert delivered(watcher.read()) == []
    broker.tick(1000 + 5_001)
    assert delivered(watcher.read()) == [(b"status/node", b"offline", False, None)]
    # back within the delay: never sent
    node = v5(broker, b"node", will=will, clean=False, props=expiry)
    node.conn.eof()
    v5(broker, b"node", clean=False, props=expiry)
    broker.tick(1000 + 20_000)
    assert delivered(watcher.read()) == []


def test_a_delayed_will_goes_when_its_session_ends_first():
    broker = Broker(Limits())
    watcher = v5(broker, b"watcher")
    subscribe(watcher, 1, b"status/#", QOS1)
    will = (b"status/node", b"offline", 1, False, {packets.WILL_DELAY_INTERVAL: 3600})
    broker.now = 1000
    node = v5(broker, b"node", will=will, clean=False, props={packets.SESSION_EXPIRY_INTERVAL: 2})
    node.conn.eof()
    broker.tick(1000 + 2_001)  # the session's expiry, before the will's delay
    assert delivered(watcher.read()) == [(b"status/node", b"offline", False, None)]
    node = v5(broker, b"node", will=will, clean=False, props={packets.SESSION_EXPIRY_INTERVAL: 600})
    node.conn.eof()
    v5(broker, b"node", clean=True)  # a clean start ends the session: the will goes now
    assert delivered(watcher.read()) == [(b"status/node", b"offline", False, None)]


def test_max_keep_alive_holds_a_silent_client_to_it_and_tells_a_version_5_one():
    broker = Broker(Limits())
    broker.front_ends["mqtt"] = Serving(max_keep_alive=30)
    broker.now = 1000
    c = Client(broker, level=V5)
    out = c.connect(b"quiet", keep_alive=0)
    assert connack_properties(out)[packets.SERVER_KEEP_ALIVE] == 30
    old = Client(broker)
    old.connect(b"umqtt", keep_alive=0)
    short = Client(broker, level=V5)
    assert packets.SERVER_KEEP_ALIVE not in connack_properties(short.connect(b"short", keep_alive=10))
    broker.tick(1000 + 44_000)
    assert not c.conn.closed and not old.conn.closed and short.conn.closed
    broker.tick(1000 + 45_001)
    assert c.conn.closed and old.conn.closed
    assert [(p.name, p.body[0]) for p in c.read()] == [("DISCONNECT", packets.KEEP_ALIVE_TIMEOUT)]


# ---------------------------------------------------------------- shared subscriptions


def payloads(out):
    return [payload for _topic, payload, _retain, _ids in delivered(out)]


def test_a_shared_subscription_hands_each_message_to_one_member():
    broker = Broker(Limits())
    publisher = v5(broker, b"publisher")
    publisher.send(packets.publish(b"jobs/old", b"retained", 0, retain=True, level=V5))
    one, two = v5(broker, b"worker-1"), v5(broker, b"worker-2")
    assert subscribe(one, 1, b"$share/workers/jobs/#", QOS1) == []  # (no retained message to a shared one)
    subscribe(two, 1, b"$share/workers/jobs/#", QOS1)
    everyone = v5(broker, b"everyone")
    assert payloads(subscribe(everyone, 1, b"jobs/#", QOS1)) == [b"retained"]
    sent = [b"job-%d" % n for n in range(10)]
    for body in sent:
        publisher.send(packets.publish(b"jobs/new", body, 1, packet_id=1, level=V5))
    got_one, got_two = payloads(one.read()), payloads(two.read())
    assert got_one and got_two and sorted(got_one + got_two) == sorted(sent)
    assert payloads(everyone.read()) == sent
    queue = broker.queues[b"mqtt-shared/workers/jobs/#"]
    assert sorted(bytes(b.arguments["x-mqtt-shared-member"]) for b in queue.inbound) == [b"worker-1", b"worker-2"]


def test_a_member_s_unacknowledged_messages_go_to_the_others_and_the_queue_goes_with_the_last():
    broker = Broker(Limits())
    publisher = v5(broker, b"publisher")
    one, two = v5(broker, b"worker-1"), v5(broker, b"worker-2")
    subscribe(one, 1, b"$share/g/t", QOS1)
    publisher.send(packets.publish(b"t", b"held by one", 1, packet_id=1, level=V5))
    assert payloads(one.read()) == [b"held by one"]  # (not acknowledged)
    subscribe(two, 1, b"$share/g/t", QOS1)
    one.conn.eof()
    assert payloads(two.read()) == [b"held by one"]
    out = two.send(packets.unsubscribe(2, [b"$share/g/t"], V5))
    assert out[0].name == "UNSUBACK" and out[0].body[-1] == packets.SUCCESS
    assert b"mqtt-shared/g/t" not in broker.queues
    out = two.send(packets.unsubscribe(3, [b"$share/g/t"], V5))
    assert out[0].body[-1] == packets.NO_SUBSCRIPTION_EXISTED


def test_a_member_whose_session_outlives_it_is_a_member_again_when_it_is_back():
    broker = Broker(Limits())
    expiry = {packets.SESSION_EXPIRY_INTERVAL: 600}
    member = v5(broker, b"member", clean=False, props=expiry)
    subscribe(member, 1, b"$share/g/readings/+", QOS1, sub_id=12)
    member.conn.eof()
    publisher = v5(broker, b"publisher")
    publisher.send(packets.publish(b"readings/a", b"while away", 1, packet_id=1, level=V5))
    assert broker.queues[b"mqtt-shared/g/readings/+"].durable
    back = Client(broker, level=V5)
    out = back.connect(b"member", clean=False, props=expiry)
    assert out[0].body[0] == 1  # session present
    assert delivered(out[1:] + back.read()) == [(b"readings/a", b"while away", False, [12])]


def test_no_local_on_a_shared_subscription_is_a_protocol_error_and_a_bad_share_is_refused():
    broker = Broker(Limits())
    c = v5(broker, b"c")
    out = c.send(packets.subscribe(1, [(b"$share//t", 1), (b"$share/g", 1)], V5))
    assert out[0].body[-2:] == bytes((packets.TOPIC_FILTER_INVALID,)) * 2
    out = c.send(packets.subscribe(2, [(b"$share/g/t", QOS1 | NO_LOCAL)], V5))
    assert [(p.name, p.body[0]) for p in out] == [("DISCONNECT", packets.PROTOCOL_ERROR)]


# ---------------------------------------------------------------- QoS 2 with a journal


def _with_a_journal(scenario):
    """scenario(folder, recover) on a scratch data folder, removed after."""
    from hutch.ports.recovery import recover

    folder = scratch_folder("mqtt")
    try:
        scenario(folder, recover)
    finally:
        remove_tree(folder)


def test_pubrec_waits_for_the_message_on_disk_and_pubcomp_for_the_id_s_release():
    _with_a_journal(_qos_2_with_a_journal)


def _qos_2_with_a_journal(folder, recover):
    broker = Broker(Limits())
    writer = recover(folder, broker, 1 << 20, 1 << 30, broker.log)
    c = v5(broker, b"q2", clean=False, props={packets.SESSION_EXPIRY_INTERVAL: 60})
    # a durable queue for the message (the session outlives its connection): its SUBACK waits
    # until the journal holds the subscription, as a PUBREC waits for its message
    assert c.send(packets.subscribe(1, [(b"m", 0)], V5)) == []
    writer.commit()
    assert [p.name for p in c.read()] == ["SUBACK"]
    out = c.send(packets.publish(b"m", b"x", 2, packet_id=5, level=V5))
    assert [p.name for p in out] == ["PUBLISH"]  # delivered; the PUBREC waits for the disk
    writer.commit()
    assert [(p.name, p.body[:2]) for p in c.read()] == [("PUBREC", b"\x00\x05")]
    assert c.send(packets.ack(packets.PUBREL, 5, level=V5)) == []  # after it, the id may be used again:
    writer.commit()  # the PUBCOMP waits until its release is on disk
    assert [(p.name, p.body[:2]) for p in c.read()] == [("PUBCOMP", b"\x00\x05")]
    writer.files.close()


def test_qos_2_messages_come_back_after_a_restart_from_their_segments_summaries():
    _with_a_journal(_qos_2_through_summaries)


def _qos_2_through_summaries(folder, recover):
    """Segments of 4 KiB roll over while a QoS 2 publisher sends to a session that is away: each
    sealed segment's summary names the messages it holds (a QoS 2 message's record is flagged
    PAIRED with its packet id's: a persistent message still), so a restart finds them all."""
    broker = Broker(Limits())
    writer = recover(folder, broker, 4096, 1 << 30, broker.log)
    away = v5(broker, b"away", clean=False, props={packets.SESSION_EXPIRY_INTERVAL: 600})
    assert away.send(packets.subscribe(1, [(b"m", QOS1)], V5)) == []  # (its SUBACK waits for the disk)
    writer.commit()
    away.read()
    away.conn.eof()
    c = v5(broker, b"q2", clean=False, props={packets.SESSION_EXPIRY_INTERVAL: 60})
    for i in range(60):
        c.send(packets.publish(b"m", b"reading %02d" % i + b"." * 100, 2, packet_id=i + 1, level=V5))
        writer.commit()
        c.read()
        c.send(packets.ack(packets.PUBREL, i + 1, level=V5))
        writer.commit()
        c.read()
    assert len(writer.files.numbers()) > 2, "the segments rolled over"
    writer.files.close()
    again = Broker(Limits())
    recover(folder, again, 4096, 1 << 30, again.log).files.close()
    assert again.queues[b"mqtt-subscription-awayqos1"].message_count() == 60


def test_hutch_ctl_lists_every_consumer_of_a_session_on_its_connection():
    from hutch.server.listing import KINDS

    broker = Broker(Limits())
    c = v5(broker, b"listed", clean=False, props={packets.SESSION_EXPIRY_INTERVAL: 60})
    subscribe(c, 1, b"a/#", QOS1)
    subscribe(c, 2, b"$share/g/b", QOS1)
    c.send(packets.publish(b"q2", b"x", 2, packet_id=9, level=V5))  # (its QoS 2 ids' queue and consumer)
    rows = {row["queue_name"]: row["channel_pid"] for row in KINDS["consumers"](broker)}
    assert rows == dict.fromkeys(
        ("mqtt-subscription-listedqos1", "mqtt-shared/g/b", "mqtt-qos2-listed"), "%s (0)" % c.conn.name
    ), rows


def test_a_clean_start_ends_the_shared_subscriptions_of_the_session_before():
    broker = Broker(Limits())
    expiry = {packets.SESSION_EXPIRY_INTERVAL: 600}
    member = v5(broker, b"member", clean=False, props=expiry)
    subscribe(member, 1, b"$share/g/t", QOS1)
    member.conn.eof()
    again = v5(broker, b"member", clean=True)
    assert b"mqtt-shared/g/t" not in broker.queues  # (its last member gone)
    out = again.send(packets.unsubscribe(2, [b"$share/g/t"], V5))
    assert out[0].body[-1] == packets.NO_SUBSCRIPTION_EXISTED
