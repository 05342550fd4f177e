"""Bridges to MQTT brokers (mqtt:// and mqtts:// URIs), against Debian's mosquitto (the oracle
the MQTT tests start: tests/support/mqtt_brokers.py): an up bridge publishes a local queue's
messages at QoS 1 and lets each go at the edge only on its PUBACK; a down bridge subscribes
(a persistent session) and publishes what comes to a local exchange."""

import random
import threading
import time

import pika
import pytest
from bridging import edge_with_bridge
from brokers import free_port, wait_until
from mqtt_brokers import Paho, start_mosquitto, stop
from tcp_proxy import TcpProxy
from windowed import PERSISTENT, publish_windowed

pytestmark = [pytest.mark.timeout(300)]

TOPICS = 4


def publish_readings(edge, bodies, first=0, rate=None):
    """bodies published at the edge to amq.topic, confirmed (windowed.py; rate: at most that
    many a second), round the keys sensors.t0..t3."""
    keys = ["sensors.t%d" % ((first + i) % TOPICS) for i in range(len(bodies))]
    publish_windowed(edge.url, [(key, body, PERSISTENT) for key, body in zip(keys, bodies)], "amq.topic", rate=rate)


def collect(subscriber, wanted, timeout=120):
    """What the subscriber got, [(topic, payload)], until every one of wanted came and a second
    passed with nothing more, or timeout seconds."""
    import queue

    wanted = set(wanted)
    got = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            topic, payload, _qos, _retain, _props = subscriber.got.get(timeout=1)
        except queue.Empty:
            if not wanted:
                break
            continue
        got.append((topic, payload))
        wanted.discard(payload)
    return got


def what_differs(firsts, sent):
    """Where first copies by topic differ from what was sent, in a few lines (the dicts whole are
    8,000 payloads: a failure's diff hid what went wrong)."""
    lines = []
    for topic, wanted in sorted(sent.items()):
        came = firsts.get(topic, [])
        came_set, wanted_set = set(came), set(wanted)
        missing = [payload for payload in wanted if payload not in came_set]
        if missing:
            lines.append("%s: %d never came, the first %s" % (topic, len(missing), missing[:5]))
        kept = [payload for payload in came if payload in wanted_set]
        order = [payload for payload in wanted if payload in came_set]
        for i, (one, other) in enumerate(zip(kept, order)):
            if one != other:
                lines.append("%s: out of order at %d: came %s, sent %s" % (topic, i, kept[i : i + 5], order[i : i + 5]))
                break
    return "\n".join(lines) or "the same"


def first_copies_by_topic(got):
    out = {}
    seen = set()
    for topic, payload in got:
        if payload not in seen:
            seen.add(payload)
            out.setdefault(topic, []).append(payload)
    return out


def test_an_mqtt_uplink_loses_nothing_through_link_faults_and_10_edge_sigkills(tmp_path):
    """mosquitto behind a TCP proxy that cuts, resets and black-holes the link while the edge is
    SIGKILLed ten times: every message the edge confirmed reaches the cloud's subscriber, each
    topic's first copies in the order published."""
    cloud = start_mosquitto(tmp_path, "max_queued_messages 0\nmax_inflight_messages 0\n")
    subscriber = Paho(cloud, "cloud-app", clean=False).connect()
    subscriber.subscribe("dt/gw-1/#", 1)
    proxy = TcpProxy(cloud.port).start()
    edge = edge_with_bridge(
        tmp_path,
        {
            "name": "cloud",
            "uri": "mqtt://127.0.0.1:%d/?heartbeat=1&connection_timeout=2000" % proxy.port,
            "source_exchange": "amq.topic",
            "binding_key": "sensors.#",
            "topic": "dt/gw-1/{routing_key}",
            "client_id": "gw-1",
            "prefetch": 200,
            "reconnect_delay": 0.1,
            "max_reconnect_delay": 0.5,
        },
    )
    seed = random.randrange(1 << 30)
    chooser = random.Random(seed)
    faults = {"cut": 0, "reset": 0, "black-hole": 0, "sigkill": 0}

    def inject():
        kinds = ["cut", "reset", "black-hole"] * 3
        chooser.shuffle(kinds)
        for kind in kinds:
            time.sleep(chooser.uniform(0.3, 0.8))
            proxy.fault(kind, chooser)
            faults[kind] += 1

    injector = threading.Thread(target=inject, daemon=True)
    bodies = [b"r%06d" % i for i in range(8000)]
    try:
        injector.start()
        for batch in range(20):
            # 1,000 a second: the messages flow while the faults go on
            publish_readings(edge, bodies[batch * 400 : (batch + 1) * 400], batch * 400, rate=1000)
            if batch % 2 == 1:
                time.sleep(chooser.uniform(0.0, 0.1))  # the bridge is mid-flight
                edge.proc.kill()
                edge.proc.wait()
                faults["sigkill"] += 1
                edge.start()
        injector.join(60)
        got = collect(subscriber, bodies)
        assert not edge.errors(), edge.log()[-3000:]
        bridge_lines = "\n".join(line for line in edge.log().splitlines() if "bridge" in line)[-4000:]
    finally:
        edge.stop()
        proxy.stop()
        subscriber.stop()
        stop(cloud)
    firsts = first_copies_by_topic(got)
    sent = {"dt/gw-1/sensors/t%d" % t: bodies[t::TOPICS] for t in range(TOPICS)}
    print(
        "seed %d: faults %s, links %d, %d sent, %d received, %d duplicates"
        % (seed, faults, proxy.accepted, len(bodies), len(got), len(got) - sum(map(len, firsts.values())))
    )
    assert faults["sigkill"] == 10 and sum(faults.values()) == 19, faults
    assert what_differs(firsts, sent) == "the same", "seed %d; the edge's bridge said:\n%s" % (seed, bridge_lines)


def test_a_down_bridge_from_mqtt_brings_what_came_while_the_edge_was_down(tmp_path):
    """A down bridge's persistent session: what is published to its filter while the edge is
    SIGKILLed waits at mosquitto, and comes once it is back; version 5 user properties arrive
    as headers."""
    cloud = start_mosquitto(tmp_path, "max_queued_messages 0\n")
    bridge = {
        "name": "commands",
        "direction": "down",
        "uri": "mqtt://127.0.0.1:%d/?heartbeat=5" % cloud.port,
        "topic": "cmd/gw-1/#",
        "client_id": "gw-1-commands",
        "mqtt_version": "5",
    }
    edge = edge_with_bridge(tmp_path, bridge)
    app = Paho(cloud, "cloud-app", version="5").connect()
    try:
        connection = pika.BlockingConnection(pika.URLParameters(edge.url))
        channel = connection.channel()
        channel.queue_declare("commands", durable=True)
        channel.queue_bind("commands", "amq.topic", "cmd.gw-1.#")
        connection.close()
        wait_until(lambda: "running (upstream" in edge.log(), 30, what=edge.log)
        from paho.mqtt.packettypes import PacketTypes
        from paho.mqtt.properties import Properties

        def send(n):
            props = Properties(PacketTypes.PUBLISH)
            props.UserProperty = [("x-sensor-id", "cloud"), ("n", str(n))]
            app.publish("cmd/gw-1/valve", b"c%03d" % n, 1, props)

        for n in range(50):
            send(n)
        edge.proc.kill()
        edge.proc.wait()
        for n in range(50, 100):  # while the edge is down: kept in its session at mosquitto
            send(n)
        edge.start()
        connection = pika.BlockingConnection(pika.URLParameters(edge.url))
        channel = connection.channel()
        got = []
        for method, properties, body in channel.consume("commands", inactivity_timeout=10):
            if method is None:
                break
            got.append((method.routing_key, body, properties.headers))
            channel.basic_ack(method.delivery_tag)
            if len({body for _key, body, _headers in got}) == 100:
                break
        connection.close()
        assert not edge.errors(), edge.log()[-3000:]
    finally:
        edge.stop()
        app.stop()
        stop(cloud)
    firsts = []
    for _key, body, _headers in got:
        if body not in firsts:
            firsts.append(body)
    assert firsts == [b"c%03d" % n for n in range(100)], firsts
    key, _body, headers = got[0]
    assert key == "cmd.gw-1.valve"
    assert headers["x-sensor-id"] == "cloud" and headers["n"] == "0", headers


def test_an_mqtts_uplink_with_a_client_certificate_as_aws_iot_core_wants_it(tmp_path):
    """AWS IoT Core's shape: mutual TLS (the device's certificate, the CA that signs the
    broker's), the client id the thing's name, topics under the thing's prefix. mosquitto
    requires a client certificate on its TLS listener and takes its name as the user; a bridge
    without one is refused (its last error says TLS) while the one with it forwards."""
    from tls_certs import Certificates

    certs = Certificates(tmp_path / "certs")
    device = certs.client("gw-1")
    tls_port = free_port()
    cloud = start_mosquitto(
        tmp_path,
        "listener %d 127.0.0.1\ncafile %s\ncertfile %s\nkeyfile %s\nrequire_certificate true\n"
        "use_identity_as_username true\n" % (tls_port, certs.ca, certs.server.cert, certs.server.key),
    )
    subscriber = Paho(cloud, "cloud-app").connect()  # (on the plain listener)
    subscriber.subscribe("dt/gw-1/#", 1)
    uri = "mqtts://127.0.0.1:%d/?connection_timeout=3000" % tls_port
    common = {"source_exchange": "amq.topic", "binding_key": "sensors.#", "topic": "dt/{client_id}/{routing_key}",
              "client_id": "gw-1", "ca_file": certs.ca, "server_name": "localhost", "reconnect_delay": 0.2}  # fmt: skip
    edge = edge_with_bridge(tmp_path, dict(common, name="aws", uri=uri, cert_file=device.cert, key_file=device.key))
    bare = edge_with_bridge(tmp_path, dict(common, name="no-cert", uri=uri), name="bare")
    try:
        bodies = [b"m%03d" % i for i in range(200)]
        publish_readings(edge, bodies)
        got = collect(subscriber, bodies, timeout=30)
        publish_readings(bare, [b"never"])
        wait_until(lambda: "TLS" in bare.log(), 30, what=bare.log)
    finally:
        edge.stop()
        bare.stop()
        subscriber.stop()
        stop(cloud)
    sent = {"dt/gw-1/sensors/t%d" % t: bodies[t::TOPICS] for t in range(TOPICS)}
    assert what_differs(first_copies_by_topic(got), sent) == "the same"
