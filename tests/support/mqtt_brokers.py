"""MQTT brokers and clients for the MQTT tests (tests/interop/mqtt): hutch (`hutch serve
--mqtt-port FREE`) or Debian's mosquitto (the oracle: `mosquitto -c CONF` on a free port,
stopped by its PID), each as an MqttBroker; Paho, an Eclipse Paho client that records what it
is delivered."""

import contextlib
import json
import os
import queue
import socket
import subprocess
import threading

import paho.mqtt.client as paho
from brokers import BIN, RunningBroker, terminate, wait_for_port, wait_until
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paths import NODE_DIR

from hutch.bench.brokers import free_port

MOSQUITTO = "/usr/sbin/mosquitto"


class MqttBroker:
    def __init__(self, kind, port, running=None, proc=None, log_path=None):
        self.kind = kind
        self.host = "127.0.0.1"
        self.port = port
        self.running = running  # hutch's RunningBroker (its AMQP port: running.port)
        self.proc = proc
        self.log_path = log_path

    def log(self):
        if self.running is not None:
            return self.running.log()
        with open(self.log_path, errors="replace") as f:
            return f.read()


def start_hutch(tmp_path, extra=()):
    port = free_port()
    running = RunningBroker([os.path.join(BIN, "hutch"), "serve", "--mqtt-port", str(port), *extra], tmp_path).start()
    # (RunningBroker waits for the AMQP listener's line; the MQTT listener's comes after it)
    wait_until(lambda: "listening for MQTT on 127.0.0.1:%d" % port in running.log(), 30, what=running.log)
    return MqttBroker("hutch", port, running=running)


def restart(broker):
    """hutch started again (after a SIGKILL) on its ports and data, once it listens for MQTT."""
    line = "listening for MQTT on 127.0.0.1:%d" % broker.port
    before = broker.running.log().count(line)
    broker.running.start()
    wait_until(lambda: broker.running.log().count(line) > before, 30, what=broker.running.log)


def start_mosquitto(tmp_path, extra=""):
    """mosquitto on a free port; extra: more lines of its config (for that listener)."""
    port = free_port()
    conf = tmp_path / "mosquitto.conf"
    log_path = str(tmp_path / "mosquitto.log")
    # (run as root, mosquitto would become the user mosquitto, who may read nothing of the test's folder)
    user = "user root\n" if os.geteuid() == 0 else ""
    conf.write_text(
        "%slistener %d 127.0.0.1\nallow_anonymous true\npersistence false\n"
        "log_dest file %s\nlog_type error\nlog_type warning\nlog_type notice\n%s" % (user, port, log_path, extra)
    )
    proc = subprocess.Popen([MOSQUITTO, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    open(log_path, "a").close()
    wait_for_port(port, proc, log_path)
    return MqttBroker("mosquitto", port, proc=proc, log_path=log_path)


def stop(broker):
    if broker.running is not None:
        code = broker.running.stop()
        assert not broker.running.errors(), "broker logged errors:\n" + broker.running.log()[-5000:]
        assert code == 0
    else:
        terminate(broker.proc, 10, "mosquitto", broker.log)


def open_connections(broker):
    """How many connections a hutch broker lists (`hutch ctl list connections`)."""
    done = subprocess.run([os.path.join(BIN, "hutch"), "ctl", "list", "connections", "--json", "--data", broker.running.data],
                          capture_output=True, text=True, timeout=30)  # fmt: skip
    return len(json.loads(done.stdout))


VERSIONS = {"3.1.1": paho.MQTTv311, "5": paho.MQTTv5}


class Paho:
    """A paho client that records what it is delivered (topic, payload, qos, retain, properties)."""

    def __init__(self, broker, client_id, version="3.1.1", clean=True, will=None, websocket=None, ca=None):
        """websocket: over WebSocket, to this path ("/mqtt"), rather than TCP; ca: over TLS, the
        broker's certificate checked against this CA file."""
        protocol = VERSIONS[version]
        kw = {"clean_session": clean} if protocol != paho.MQTTv5 else {}
        if websocket is not None:
            kw["transport"] = "websockets"
        self.client = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=protocol, **kw)
        if websocket is not None:
            self.client.ws_set_options(path=websocket)
        if ca is not None:
            self.client.tls_set(ca_certs=ca)
        self.client.username_pw_set("guest", "guest")
        if will is not None:
            self.client.will_set(*will)
        self.got = queue.Queue()
        self.connected = threading.Event()
        self.subacks = queue.Queue()
        self.flags = None
        self.reason = None
        self.client.on_message = lambda c, u, m: self.got.put((m.topic, m.payload, m.qos, m.retain, m.properties))
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = lambda c, u, mid, codes, props: self.subacks.put(codes)
        self.protocol = protocol
        self.broker = broker
        self.clean = clean

    def _on_connect(self, client, userdata, flags, reason, properties):
        self.flags = flags
        self.reason = reason
        self.connected.set()

    def connect(self, session_expiry=None):
        props = None
        if self.protocol == paho.MQTTv5:
            props = Properties(PacketTypes.CONNECT)
            props.SessionExpiryInterval = session_expiry if session_expiry is not None else (0 if self.clean else 3600)
            self.client.connect(
                self.broker.host, self.broker.port, keepalive=30, clean_start=self.clean, properties=props
            )
        else:
            self.client.connect(self.broker.host, self.broker.port, keepalive=30)
        self.client.loop_start()
        assert self.connected.wait(10), "no CONNACK"
        return self

    def subscribe(self, topic, qos, options=None, props=None):
        """options: paho's SubscribeOptions (version 5), which then says the QoS too."""
        if options is not None:
            result, mid = self.client.subscribe(topic, options=options, properties=props)
        else:
            result, mid = self.client.subscribe(topic, qos, properties=props)
        assert result == paho.MQTT_ERR_SUCCESS
        return self.subacks.get(timeout=10)  # (the SUBACK: the subscription is in place)

    def publish(self, topic, payload, qos, props=None):
        info = self.client.publish(topic, payload, qos, properties=props)
        info.wait_for_publish(10)
        return info

    def take(self, n, timeout=10):
        return [self.got.get(timeout=timeout) for _ in range(n)]

    def stop(self):
        self.client.disconnect()
        self.client.loop_stop()


def nothing_within(client, seconds):
    """True when nothing is delivered to a Paho client within seconds; else what came fails."""
    try:
        got = client.got.get(timeout=seconds)
    except queue.Empty:
        return True
    raise AssertionError("delivered: %r" % (got,))


def run_mqtt_js(broker, version, url=None, env=None, retained_filter=None):
    """tests/node/mqtt_js.js's scenario (MQTT.js, this MQTT version) against broker, or url:
    what its clients saw, as it prints it. env: more of Node's environment (NODE_EXTRA_CA_CERTS);
    retained_filter: the later subscription's (the script's default: js/status/#)."""
    url = url or "mqtt://guest:guest@%s:%d" % (broker.host, broker.port)
    done = subprocess.run(
        ["node", os.path.join(NODE_DIR, "mqtt_js.js"), url, str(version)] + ([retained_filter] if retained_filter else []),
        cwd=NODE_DIR, env=dict(os.environ, NODE_SCRIPT_TIMEOUT_MS="20000", **(env or {})),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert done.returncode == 0 and len(lines) == 1, done.stdout + done.stderr
    return json.loads(lines[0])


def websocket_scenario(ws, ca=None):
    """What Paho clients see over WebSocket (path /ws, RabbitMQ's; over TLS checked against the
    CA file ca, if given): QoS 0 and 1 in order, a retained message to a later subscription, a
    will on a cut link, a persistent session."""
    sub = Paho(ws, "wsd-sub", websocket="/ws", ca=ca).connect()
    sub.subscribe("wsd/sensors/#", 1)
    pub = Paho(ws, "wsd-pub", websocket="/ws", ca=ca).connect()
    for i in range(20):
        pub.publish("wsd/sensors/t%d" % (i % 2), b"%d" % i, i % 2)
    got = [(t, m, q) for t, m, q, _r, _p in sub.take(20)]
    pub.client.publish("wsd/status/gw", b"online", 1, retain=True).wait_for_publish(10)
    later = Paho(ws, "wsd-later", websocket="/ws", ca=ca).connect()
    later.subscribe("wsd/status/gw", 1)  # (RabbitMQ 3.10 gives a retained message to its exact topic only)
    kept = [(t, m, r) for t, m, _q, r, _p in later.take(1)]
    later.subscribe("wsd/status/doomed", 1)
    doomed = Paho(ws, "wsd-doomed", websocket="/ws", ca=ca, will=("wsd/status/doomed", b"gone", 1, False)).connect()
    doomed.client.socket()._socket.shutdown(socket.SHUT_RDWR)  # (a cut link: no DISCONNECT)
    wills = [(t, m) for t, m, *_ in later.take(1)]
    away = Paho(ws, "wsd-away", clean=False, websocket="/ws", ca=ca).connect()
    away.subscribe("wsd/cmd/#", 1)
    away.stop()
    pub.publish("wsd/cmd/gw", b"while away", 1)
    back = Paho(ws, "wsd-away", clean=False, websocket="/ws", ca=ca).connect()
    session = (bool(back.flags.session_present), [m for _t, m, *_ in back.take(1)])
    back.stop()
    Paho(ws, "wsd-away", websocket="/ws", ca=ca).connect().stop()  # (a clean session: its queues go)
    pub.client.publish("wsd/status/gw", b"", 1, retain=True).wait_for_publish(10)
    for client in (sub, pub, later):
        client.stop()
    return got, kept, wills, session


def assert_mqtt_js_sees_rabbitmq_alike(ours, theirs):
    """What MQTT.js's scenario (3.1.1, the retained message to its exact topic) saw on hutch and
    on RabbitMQ 3.10's MQTT plugins: the same, but for QoS 2, which RabbitMQ grants and delivers
    as 1 (hutch delivers it at 2: docs/mqtt.md)."""
    ours, theirs = dict(ours), dict(theirs)
    assert (ours.pop("granted"), theirs.pop("granted")) == ([2], [1])
    sent = [["js/sensors/t%d" % (i % 3), str(i), i % 3] for i in range(30)]
    assert sorted(ours.pop("got")) == sorted(sent)
    assert sorted(theirs.pop("got")) == sorted([t, m, min(1, q)] for t, m, q in sent)
    assert ours == theirs, (ours, theirs)
    assert ours["retained"] == [{"topic": "js/status/node-1", "payload": "online", "retain": True}]


def assert_mqtt_js_scenario(seen, version):
    """What MQTT.js's scenario (run_mqtt_js, this MQTT version) must have seen on hutch or
    mosquitto, over TCP or WebSocket: QoS 2 granted, every message, in order but where MQTT.js
    hands a QoS 2 delivery over only at its PUBREL, the user property (version 5), the retained
    message, the will, the persistent session."""
    assert seen["granted"] == [2]
    sent = [["js/sensors/t%d" % (i % 3), str(i), i % 3] for i in range(30)]
    assert sorted(seen["got"]) == sorted(sent)
    assert [m for m in seen["got"] if m[2] < 2] == [m for m in sent if m[2] < 2]
    assert seen["user"] == ({"unit": "celsius"} if version == 5 else None)
    assert seen["retained"] == [{"topic": "js/status/node-1", "payload": "online", "retain": True}]
    assert seen["wills"] == [{"topic": "js/will/doomed", "payload": "gone"}]
    assert seen["sessionPresent"] is True and seen["later"] == ["while away"]


def per_topic(messages):
    """{(topic, QoS): the payloads in the order they came}: what MQTT orders ([MQTT-4.6.0-6]: by
    topic and QoS; a QoS 0 message may pass a QoS 1 one of another topic, as RabbitMQ's web-mqtt
    lets it now and then)."""
    found = {}
    for topic, payload, qos in messages:
        found.setdefault((topic, qos), []).append(payload)
    return found


def assert_websocket_scenarios_alike(ours, theirs):
    """websocket_scenario's results on hutch and on RabbitMQ's web-mqtt: the same, and right
    (hutch's in the order they were published)."""
    assert (per_topic(ours[0]),) + tuple(ours[1:]) == (per_topic(theirs[0]),) + tuple(theirs[1:]), (ours, theirs)
    got, kept, wills, session = ours
    assert got == [("wsd/sensors/t%d" % (i % 2), b"%d" % i, i % 2) for i in range(20)]
    assert kept == [("wsd/status/gw", b"online", True)] and wills == [("wsd/status/doomed", b"gone")]
    assert session == (True, [b"while away"])


def wss_listener(port, certs):
    """A [[listener]] table (TOML) of MQTT over secure WebSocket on port, with certs.server's
    certificate (tests/support/tls_certs.py)."""
    listener = '[[listener]]\nprotocol = "mqtt"\nwebsocket = true\nbind = "127.0.0.1"\nport = %d\n' % port
    return listener + 'tls = {certfile = "%s", keyfile = "%s"}\n' % (certs.server.cert, certs.server.key)


@contextlib.contextmanager
def served_from_config(tmp_path, listeners):
    """`hutch serve --config` with these [[listener]] tables (TOML text) beside an AMQP one, as a
    user starts it (RunningBroker would give it --port, which opens no [[listener]]), until it
    listens for MQTT over WebSocket: its log's path."""
    config = tmp_path / "hutch.toml"
    config.write_text('[[listener]]\nprotocol = "amqp"\nbind = "127.0.0.1"\nport = %d\n%s' % (free_port(), listeners))
    log_path = tmp_path / "serve.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [os.path.join(BIN, "hutch"), "serve", "--config", str(config), "--data", str(tmp_path / "data")],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_until(lambda: "listening for MQTT over WebSocket" in log_path.read_text(), 30, what=log_path.read_text)
        yield log_path
    finally:
        proc.terminate()
        assert proc.wait(30) == 0, log_path.read_text()
