"""The clock that jumps: a gateway without a real-time clock boots in the past, then NTP sets it.

hutch runs under libfaketime (Debian's `faketime`: LD_PRELOAD, a timestamp file read at every
call, the monotonic clock left real, as NTP leaves it), a year and six hours behind, while
pika publishes (a queue with a 20-second TTL per message, a queue a bridge forwards), MQTT 5
clients keep a session and leave a delayed will, and the bridge waits for its [uplink] window
(open around the real time of day, so closed at the fake one). Then the clock jumps forward
to the real time, and back a day. What must hold, in real seconds:

- the bridge connects within a couple of seconds of the jump that opens its window (the
  schedule read again at once, not at its next poll), and forwards what waited;
- no message expires early (all are there after the jumps) or is kept forever (gone 20 s
  after its publish); the will comes at its delay, not at the jump; the session is there;
- the ages on the status page (the queue's oldest message, the bridge's backlog) and the
  uptime stay within the test's own duration;
- each jump is one warning line in the log, and nothing else goes wrong (no traceback).
"""

import json
import os
import time
import urllib.request

import paho.mqtt.client as mqtt
import pika
import pytest
from brokers import BIN, RunningBroker, free_port, wait_until
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"  # (Debian's faketime package)
TTL_MS = 20000
WILL_DELAY_S = 12

pytestmark = [pytest.mark.system, pytest.mark.timeout(180)]


def fake_clock(folder, offset_s):
    """The environment that runs a program under libfaketime, its clock offset_s from the real
    one (changed later by set_clock), its monotonic clock real."""
    stamp = folder / "faketime"
    set_clock(stamp, offset_s)
    env = dict(os.environ)
    env.update(
        LD_PRELOAD=LIBFAKETIME,
        FAKETIME_TIMESTAMP_FILE=str(stamp),
        FAKETIME_NO_CACHE="1",
        FAKETIME_DONT_FAKE_MONOTONIC="1",
        TZ="UTC",
    )
    return env, stamp


def set_clock(stamp, offset_s):
    stamp.write_text("%+ds\n" % offset_s)


def overview(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/api/overview" % port, timeout=10) as answer:
        return json.loads(answer.read())


def mqtt5(client_id, port, clean_start, session_expiry=0, will=None):
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5)
    if will is not None:
        props = Properties(PacketTypes.WILLMESSAGE)
        props.WillDelayInterval = will[1]
        client.will_set(will[0], b"gone", qos=1, properties=props)
    props = Properties(PacketTypes.CONNECT)
    props.SessionExpiryInterval = session_expiry
    present = []
    client.on_connect = lambda _c, _u, flags, _rc, _p: present.append(flags.session_present)
    client.connect("127.0.0.1", port, clean_start=clean_start, properties=props)
    client.loop_start()
    wait_until(lambda: present, what="%s connected" % client_id)
    return client, present


def window_around_now():
    """An [uplink] window from an hour before the real time of day (UTC) to two hours after."""
    now = time.gmtime()
    start = (now.tm_hour + 23) % 24
    end = (now.tm_hour + 2) % 24
    return "%02d:%02d-%02d:%02d" % (start, now.tm_min, end, now.tm_min)


@pytest.mark.long  # mostly waits: started early (tests/conftest.py)
def test_a_year_behind_then_forward_then_back_a_day(tmp_path):
    upstream_folder = tmp_path / "up"
    upstream_folder.mkdir()
    upstream = RunningBroker([os.path.join(BIN, "hutch"), "serve"], upstream_folder).start()
    declare = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", upstream.port))
    declare.channel().queue_declare("keep", durable=True)  # (where the bridge's messages go)
    declare.close()
    edge_folder = tmp_path / "edge"
    edge_folder.mkdir()
    env, stamp = fake_clock(edge_folder, -(365 * 86400 + 6 * 3600))
    metrics_port = free_port()
    mqtt_port = free_port()
    config = edge_folder / "hutch.toml"
    config.write_text(
        '[metrics]\nport = %d\n\n[uplink]\nhours = ["%s"]\n\n'
        '[[bridge]]\nname = "up"\nqueue = "keep"\nuri = "amqp://guest:guest@127.0.0.1:%d/"\n'
        "reconnect_delay = 0.5\nmax_reconnect_delay = 2\n" % (metrics_port, window_around_now(), upstream.port)
    )
    command = [os.path.join(BIN, "hutch"), "serve", "--config", str(config), "--mqtt-port", str(mqtt_port)]
    edge = RunningBroker(command, edge_folder, env=env).start()
    clients = []
    try:
        began = time.monotonic()
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", edge.port))
        channel = connection.channel()
        channel.confirm_delivery()
        for queue in ("keep", "ttl"):
            channel.queue_declare(queue, durable=True)
        for n in range(5):
            persistent = pika.BasicProperties(delivery_mode=2)
            channel.basic_publish("", "keep", b"keep:%d" % n, persistent)
            channel.basic_publish(
                "", "ttl", b"ttl:%d" % n, pika.BasicProperties(delivery_mode=2, expiration=str(TTL_MS))
            )
        published = time.monotonic()
        assert overview(metrics_port)["broker"]["bridges"][0]["state"] == "waiting", (
            "the window is closed at the fake time"
        )

        wills = []
        watcher, _ = mqtt5("will-watcher", mqtt_port, clean_start=True)
        watcher.on_message = lambda _c, _u, message: wills.append(time.monotonic())
        watcher.subscribe("clock/will", qos=1)
        clients.append(watcher)
        session, _ = mqtt5("clock-session", mqtt_port, clean_start=True, session_expiry=60)
        session.subscribe("clock/s", qos=1)
        time.sleep(0.3)  # (its SUBACK)
        session.disconnect()
        session.loop_stop()
        leaving, _ = mqtt5(
            "clock-will", mqtt_port, clean_start=True, session_expiry=30, will=("clock/will", WILL_DELAY_S)
        )
        leaving.loop_stop()
        leaving.socket().close()  # gone without a DISCONNECT: its will is due in WILL_DELAY_S
        dropped = time.monotonic()

        def sane():
            """Nothing expired early, no will yet, the ages and uptime within the test's time."""
            elapsed = time.monotonic() - began
            whole = overview(metrics_port)
            assert 0 <= whole["node"]["uptime_s"] <= elapsed + 5, whole["node"]
            seen = whole["broker"]
            queues = {q["name"]: q for q in seen["queues"]}
            assert queues["ttl"]["messages"] == 5, queues["ttl"]
            assert 0 <= queues["ttl"]["oldest_age_s"] <= elapsed + 2, queues["ttl"]
            bridge = seen["bridges"][0]
            if bridge["oldest_age_s"] is not None:
                assert 0 <= bridge["oldest_age_s"] <= elapsed + 2, bridge
            assert not wills, "the will came %.1f s after its client went" % (wills[0] - dropped)

        sane()
        set_clock(stamp, 0)  # NTP answers: a year and six hours forward, into the window
        jumped = time.monotonic()
        wait_until(lambda: upstream_count(upstream, "keep") == 5, timeout=10, what="the bridge forwarding")
        opened_after = time.monotonic() - jumped
        assert opened_after < 3, "the window was read again %.1f s after the jump" % opened_after
        sane()
        set_clock(stamp, -86400)  # and back a day (the same time of day: the window stays open)
        wait_until(lambda: edge.log().count("clock: the wall clock moved") == 2, timeout=5, what="the second jump said")
        sane()
        assert overview(metrics_port)["broker"]["bridges"][0]["state"] == "running"

        wait_until(lambda: wills, timeout=WILL_DELAY_S + 10, what="the will")
        will_after = wills[0] - dropped
        assert will_after >= WILL_DELAY_S - 0.5, "the will came early: %.1f s" % will_after
        back, present = mqtt5("clock-session", mqtt_port, clean_start=False, session_expiry=60)
        clients.append(back)
        assert present == [True], "the session ended early"
        wait_until(lambda: queue_count(edge, "ttl") == 0, timeout=TTL_MS / 1000 + 10, what="the TTL's end")
        expired_after = time.monotonic() - published
        assert expired_after >= TTL_MS / 1000 - 1, "expired early: %.1f s" % expired_after
        uptime = overview(metrics_port)["node"]["uptime_s"]
        log = edge.log()
        assert log.count("clock: the wall clock moved") == 2, log[-3000:]
        assert "Traceback" not in log, log[-3000:]
        print(
            "clock jumps (-1 y 6 h, then +1 y 6 h, then -1 d): window opened %.1f s after the jump, "
            "TTL %d s ended after %.1f s, will (delay %d s) after %.1f s, session kept, uptime %s s"
            % (opened_after, TTL_MS / 1000, expired_after, WILL_DELAY_S, will_after, uptime)
        )
        connection.close()
    finally:
        for client in clients:
            client.disconnect()
            client.loop_stop()
        edge.stop()
        upstream.stop()


def test_a_gateway_that_boots_at_1970_says_so_serves_and_follows_ntp(tmp_path):
    """A Raspberry Pi without a real-time clock (nor fake-hwclock) boots at 1970-01-01: hutch
    says so in one line and serves; when NTP sets the clock, it follows the jump and keeps what
    it holds (a message with a 60 s TTL is not 56 years old)."""
    env, stamp = fake_clock(tmp_path, -int(time.time()) + 3600)  # 1970-01-01 01:00 UTC
    edge = RunningBroker([os.path.join(BIN, "hutch"), "serve"], tmp_path, env=env).start()
    try:
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", edge.port))
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("readings", durable=True, arguments={"x-message-ttl": 60000})
        for n in range(3):
            channel.basic_publish("", "readings", b"r:%d" % n, pika.BasicProperties(delivery_mode=2))
        connection.close()
        said = [line for line in edge.log().splitlines() if "clock: the wall clock reads" in line]
        assert len(said) == 1 and "1970-01-01 01:00:" in said[0] and "not set yet" in said[0], edge.log()
        set_clock(stamp, 0)  # NTP answers
        wait_until(lambda: "clock: the wall clock moved +" in edge.log(), timeout=5, what="the jump said")
        time.sleep(1.5)  # (ticks on the new clock: a message stamped at 1970 would expire now)
        assert queue_count(edge, "readings") == 3
        assert "Traceback" not in edge.log(), edge.log()[-3000:]
    finally:
        edge.stop()


def queue_count(broker, queue):
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
    try:
        return connection.channel().queue_declare(queue, passive=True).method.message_count
    finally:
        connection.close()


def upstream_count(upstream, queue):
    try:
        return queue_count(upstream, queue)
    except pika.exceptions.ChannelClosedByBroker:
        return 0  # (not declared there yet)
