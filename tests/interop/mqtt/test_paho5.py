"""MQTT 5's subscription options, subscription identifiers, shared subscriptions and delayed
wills with Eclipse Paho, against hutch and against Debian's mosquitto (the oracle), compared as
the clients see them."""

import json
import os
import queue
import socket
import subprocess
import time

from brokers import BIN
from mqtt_brokers import Paho, nothing_within
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions


def subscription_id(n):
    props = Properties(PacketTypes.SUBSCRIBE)
    props.SubscriptionIdentifier = n
    return props


def test_no_local_retain_as_published_and_subscription_identifiers(mqtt_broker):
    me = Paho(mqtt_broker, "options-me", "5").connect()
    me.subscribe("opts/#", 1, SubscribeOptions(qos=1, noLocal=True, retainAsPublished=True), subscription_id(42))
    other = Paho(mqtt_broker, "options-other", "5").connect()
    other.subscribe("opts/#", 1, SubscribeOptions(qos=1), subscription_id(7))
    me.publish("opts/mine", b"mine", 1)
    assert [(t, m) for t, m, _q, _r, _p in other.take(1)] == [("opts/mine", b"mine")]
    other.publish("opts/kept", b"retained", 1)  # (plain: no RETAIN)
    other.client.publish("opts/kept", b"retained", 1, retain=True).wait_for_publish(10)
    got = me.take(2)
    assert [(t, m, r, p.SubscriptionIdentifier) for t, m, _q, r, p in got] == [
        ("opts/kept", b"retained", False, [42]),
        ("opts/kept", b"retained", True, [42]),
    ], mqtt_broker.kind
    # its own publishes, without no local, and without retain as published: RETAIN 0
    assert [(t, r) for t, _m, _q, r, _p in other.take(2)] == [("opts/kept", False), ("opts/kept", False)]
    assert nothing_within(me, 0.5)
    other.client.publish("opts/kept", b"", 1, retain=True).wait_for_publish(10)  # (cleared for the next run)
    me.stop()
    other.stop()


def test_a_shared_subscription_shares_and_a_plain_one_gets_all(mqtt_broker):
    members = [Paho(mqtt_broker, "member-%d" % n, "5").connect() for n in range(2)]
    for member in members:
        member.subscribe("$share/workers/work/#", 1)
    watcher = Paho(mqtt_broker, "watcher", "5").connect()
    watcher.subscribe("work/#", 1)
    pub = Paho(mqtt_broker, "dispatcher", "5").connect()
    sent = [b"%d" % n for n in range(20)]
    for body in sent:
        pub.publish("work/item", body, 1)
    assert [m for _t, m, _q, _r, _p in watcher.take(20)] == sent
    deadline = time.monotonic() + 10
    shares = [[], []]
    while sum(map(len, shares)) < 20 and time.monotonic() < deadline:
        for n, member in enumerate(members):
            try:
                shares[n].append(member.got.get(timeout=0.05)[1])
            except queue.Empty:
                pass
    assert sorted(shares[0] + shares[1]) == sorted(sent), mqtt_broker.kind
    assert shares[0] and shares[1], mqtt_broker.kind
    for client in members + [watcher, pub]:
        client.stop()


def test_a_delayed_will_waits_and_a_client_back_in_time_has_none(mqtt_broker):
    watcher = Paho(mqtt_broker, "will-watcher", "5").connect()
    watcher.subscribe("status/#", 1)

    def node(delay):
        client = Paho(mqtt_broker, "will-node", "5", clean=False)
        props = Properties(PacketTypes.WILLMESSAGE)
        props.WillDelayInterval = delay
        client.client.will_set("status/node", b"offline", 1, False, props)
        return client.connect(session_expiry=60)

    def cut(client):
        client.client.loop_stop()
        client.client.socket().shutdown(socket.SHUT_RDWR)

    cut(node(2))
    started = time.monotonic()
    assert watcher.take(1)[0][:2] == ("status/node", b"offline")
    assert time.monotonic() - started > 1.0, mqtt_broker.kind
    cut(node(30))
    time.sleep(0.3)
    back = Paho(mqtt_broker, "will-node", "5", clean=False).connect(session_expiry=0)
    assert nothing_within(watcher, 2.5), mqtt_broker.kind
    back.stop()
    watcher.stop()


def test_an_operator_s_close_and_a_deleted_user_disconnect_with_administrative_action(hutch_mqtt):
    """`hutch ctl close-connection` and `hutch ctl delete-user` end an MQTT 5 client's connection
    with a DISCONNECT of reason 0x98 Administrative action and the operator's words (as Mosquitto
    kicks a client); the broker's own shutdown says 0x8B Server shutting down."""

    def ctl(*args):
        done = subprocess.run(
            [os.path.join(BIN, "hutch"), "ctl", *args, "--data", hutch_mqtt.running.data],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout.strip()

    def client(client_id, user, password):
        paho_client = Paho(hutch_mqtt, client_id, "5")
        paho_client.client.username_pw_set(user, password)
        ended = queue.Queue()
        paho_client.client.on_disconnect = lambda c, u, flags, code, props: ended.put(
            (code.value, getattr(props, "ReasonString", None))
        )
        return paho_client.connect(), ended

    ctl("add-user", "meter", "meter-pw")
    ctl("set-permissions", "meter", ".*", ".*", ".*")
    meter, meter_ended = client("meter-1", "meter", "meter-pw")
    guest, guest_ended = client("guest-1", "guest", "guest")
    acked = queue.Queue()
    meter.client.on_publish = lambda c, u, mid, code, props: acked.put(code.value)
    meter.publish("meters/1", b"1", 1)
    ctl("set-permissions", "meter", ".*", "^$", ".*")  # applies to the client already connected
    meter.publish("meters/1", b"2", 1)
    assert [acked.get(timeout=10), acked.get(timeout=10)] == [0x10, 0x87]  # No matching subscribers; Not authorized
    assert ctl("delete-user", "meter") == "deleted user 'meter'; closed its 1 connection"
    assert meter_ended.get(timeout=10) == (0x98, "user 'meter' is deleted")
    rows = json.loads(ctl("list", "connections", "name", "user", "--json"))
    (name,) = [row["name"] for row in rows if row["user"] == "guest"]
    assert ctl("close-connection", name, "firmware update") == "closed connection %s" % name
    assert guest_ended.get(timeout=10) == (0x98, "firmware update")
    last, last_ended = client("last-1", "guest", "guest")
    hutch_mqtt.running.stop()  # SIGTERM: the broker's shutdown
    assert last_ended.get(timeout=10) == (0x8B, "broker shutdown")
    for paho_client in (meter, guest, last):
        paho_client.client.loop_stop()
