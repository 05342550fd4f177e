"""MQTT over WebSocket (ports/websocket.py), with Paho's websockets transport and raw frames:
the same sessions as over TCP (QoS 0, 1 and 2 in order, retained messages, a will on a cut
link, a persistent session, TCP and WebSocket clients mixed), the upgrade's refusals (not an
upgrade: 400; another path: 404; an origin not allowed: 403), and frames the protocol does not
allow each closing that connection only, with the close code that says why, while a client
beside them goes on."""

import base64
import os
import random
import socket
import struct
import time

from brokers import free_port, wait_until
from mqtt_brokers import (
    MqttBroker,
    Paho,
    assert_mqtt_js_scenario,
    assert_mqtt_js_sees_rabbitmq_alike,
    assert_websocket_scenarios_alike,
    nothing_within,
    run_mqtt_js,
    served_from_config,
    start_hutch,
    stop,
    websocket_scenario,
    wss_listener,
)
from tls_certs import Certificates


def start_with_websocket(tmp_path):
    """hutch with MQTT on TCP (the broker's port) and over WebSocket (--mqtt-ws-port: any path)."""
    ws_port = free_port()
    broker = start_hutch(tmp_path, ("--mqtt-ws-port", str(ws_port)))
    wait_until(lambda: "listening for MQTT over WebSocket on 127.0.0.1:%d" % ws_port in broker.running.log(), 30)
    return broker, MqttBroker("hutch", ws_port, running=broker.running)


def upgrade(port, path=b"/mqtt", origin=None, extra=b""):
    """A raw socket that asked for the upgrade: (socket, the answer's first line)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=15)
    key = base64.b64encode(os.urandom(16))
    request = b"GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" % path
    request += b"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: mqtt\r\n" % key
    if origin is not None:
        request += b"Origin: %s\r\n" % origin
    sock.sendall(request + extra + b"\r\n")
    answer = b""
    while b"\r\n\r\n" not in answer:
        data = sock.recv(4096)
        if not data:
            break
        answer += data
    return sock, answer.split(b"\r\n", 1)[0]


def close_code(sock):
    """The close frame's code the broker sends, once the socket closes."""
    data = b""
    while True:
        got = sock.recv(4096)
        if not got:
            break
        data += got
    assert data[:1] == b"\x88", data
    return struct.unpack(">H", data[2:4])[0]


def test_mqtt_over_websocket_is_mqtt_over_tcp(tmp_path):
    tcp, ws = start_with_websocket(tmp_path)
    try:
        sub = Paho(ws, "ws-sub", websocket="/mqtt").connect()
        sub.subscribe("sensors/#", 2)
        pub = Paho(ws, "ws-pub", websocket="/ws").connect()  # (any path is served by default)
        for i in range(30):
            pub.publish("sensors/t%d" % (i % 3), b"%d" % i, i % 3)
        got = sub.take(30)
        assert sorted((t, m, q) for t, m, q, _r, _p in got) == sorted(
            ("sensors/t%d" % (i % 3), b"%d" % i, i % 3) for i in range(30)
        )
        assert [m for _t, m, q, _r, _p in got if q < 2] == [b"%d" % i for i in range(30) if i % 3 < 2]
        over_tcp = Paho(tcp, "tcp-pub").connect()  # TCP and WebSocket clients on one broker
        over_tcp.client.publish("status/gw", b"online", 1, retain=True).wait_for_publish(10)
        later = Paho(ws, "ws-later", websocket="/mqtt").connect()
        later.subscribe("status/#", 1)
        assert [(t, m, r) for t, m, _q, r, _p in later.take(1)] == [("status/gw", b"online", True)]
        doomed = Paho(ws, "ws-doomed", websocket="/mqtt", will=("status/doomed", b"gone", 1, False)).connect()
        doomed.client.socket()._socket.shutdown(socket.SHUT_RDWR)  # (a cut link: no DISCONNECT)
        assert [(t, m) for t, m, *_ in later.take(1)] == [("status/doomed", b"gone")]
        away = Paho(ws, "ws-away", clean=False, websocket="/mqtt").connect()
        away.subscribe("cmd/#", 1)
        away.stop()
        over_tcp.publish("cmd/gw", b"while away", 1)
        back = Paho(ws, "ws-away", clean=False, websocket="/mqtt").connect()
        assert back.flags.session_present and [m for _t, m, *_ in back.take(1)] == [b"while away"]
        for client in (sub, pub, over_tcp, later, back):
            client.stop()
    finally:
        stop(tcp)


def test_the_upgrade_s_refusals_and_bad_frames_close_that_connection_only(tmp_path):
    ws_port, tcp_port = free_port(), free_port()
    listeners = (
        '[[listener]]\nprotocol = "mqtt"\nbind = "127.0.0.1"\nport = %d\n'
        '[[listener]]\nprotocol = "mqtt"\nwebsocket = true\nbind = "127.0.0.1"\nport = %d\npath = "/mqtt"\n'
        'allowed_origins = ["https://dash.example"]\n' % (tcp_port, ws_port)
    )
    with served_from_config(tmp_path, listeners) as log_path:
        tcp, ws = MqttBroker("hutch", tcp_port), MqttBroker("hutch", ws_port)
        watcher = Paho(ws, "ws-watcher", websocket="/mqtt")
        watcher.client.ws_set_options(path="/mqtt", headers={"Origin": "https://dash.example"})
        watcher.connect()
        watcher.subscribe("alive/#", 1)
        plain = socket.create_connection(("127.0.0.1", ws_port), timeout=15)
        plain.sendall(b"GET /mqtt HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert plain.recv(100).startswith(b"HTTP/1.1 400")
        assert upgrade(ws_port, b"/ws", b"https://dash.example")[1].startswith(b"HTTP/1.1 404")
        assert upgrade(ws_port, b"/mqtt", b"https://evil.example")[1].startswith(b"HTTP/1.1 403")
        bad_frames = [
            (bytes((0x82, 4)) + b"\x10\x02\x00\x00", 1002),  # a client frame without a mask
            (bytes((0x83, 0x80)) + b"mask", 1002),  # opcode 3 (reserved)
            (bytes((0x00, 0x80)) + b"mask", 1002),  # a continuation with nothing to continue
            (bytes((0x81, 0x82)) + b"\x00\x00\x00\x00hi", 1003),  # a text frame: MQTT is binary
            (bytes((0x82, 0xFF)) + b"\xff" * 8 + b"mask", 1002),  # a length past 2**63
            (bytes((0x02, 0x80)) + b"mask" + bytes((0x82, 0x80)) + b"mask", 1002),  # a message before the last ended
            (bytes((0x89, 0xFE, 0, 200)) + b"mask" + b"x" * 200, 1002),  # a ping over 125 octets
        ]
        for n, (frame, code) in enumerate(bad_frames):
            sock, line = upgrade(ws_port, b"/mqtt", b"https://dash.example")
            assert line == b"HTTP/1.1 101 Switching Protocols"
            sock.sendall(frame)
            assert close_code(sock) == code, frame
            pub = Paho(tcp, "tcp-alive-%d" % n).connect()  # the broker serves throughout
            pub.publish("alive/%d" % n, b"yes", 1)
            assert [t for t, *_ in watcher.take(1)] == ["alive/%d" % n]
            pub.stop()
        # random octets after the upgrade, and random frames: each ends its own connection at most
        rng = random.Random(55)
        for n in range(40):
            sock, line = upgrade(ws_port, b"/mqtt", b"https://dash.example")
            assert line == b"HTTP/1.1 101 Switching Protocols"
            junk = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
            if n % 2:  # a frame's head that looks right, with a random opcode and length
                junk = bytes((0x80 | rng.choice((0, 1, 2, 3, 8, 9, 10, 15)), 0x80 | rng.randrange(128))) + junk
            sock.sendall(junk)
            sock.close()
        pub = Paho(tcp, "tcp-alive-fuzz").connect()
        pub.publish("alive/fuzz", b"yes", 1)
        assert [t for t, *_ in watcher.take(1)] == ["alive/fuzz"]
        pub.stop()
        assert nothing_within(watcher, 0.2)
        watcher.stop()
        log = log_path.read_text()
        assert "Traceback" not in log and "internal error" not in log, log


def test_mqtt_over_secure_websocket(tmp_path):
    """wss://: a listener with websocket and tls (certificates the test makes), Paho and MQTT.js
    verifying the broker's certificate."""
    certs = Certificates(tmp_path / "certs")
    wss_port = free_port()
    with served_from_config(tmp_path, wss_listener(wss_port, certs)):
        wss = MqttBroker("hutch", wss_port)
        sub, pub = (Paho(wss, name, websocket="/mqtt", ca=str(certs.ca)).connect() for name in ("wss-sub", "wss-pub"))
        sub.subscribe("secure/#", 2)
        pub.publish("secure/reading", b"21.5", 2)
        assert [(t, m, q) for t, m, q, _r, _p in sub.take(1)] == [("secure/reading", b"21.5", 2)]
        for client in (sub, pub):
            client.stop()
        # MQTT.js's scenario over wss:// (test_mqtt_js.py's), Node trusting the test's CA
        seen = run_mqtt_js(
            wss, 5, "wss://guest:guest@127.0.0.1:%d/mqtt" % wss_port, {"NODE_EXTRA_CA_CERTS": str(certs.ca)}
        )
    assert_mqtt_js_scenario(seen, 5)


def test_mqtt_over_websocket_as_rabbitmq_s_web_mqtt_answers_it(tmp_path, rabbitmq):
    tcp, ws = start_with_websocket(tmp_path)
    try:
        ours = websocket_scenario(ws)
    finally:
        stop(tcp)
    assert_websocket_scenarios_alike(ours, websocket_scenario(MqttBroker("rabbitmq", rabbitmq.web_mqtt_port)))


def test_mqtt_js_over_websocket_as_rabbitmq_s_web_mqtt_answers_it(tmp_path, rabbitmq):
    """MQTT.js's scenario over ws:// against hutch and RabbitMQ's web-mqtt: alike
    (mqtt_brokers.assert_mqtt_js_sees_rabbitmq_alike)."""
    tcp, ws = start_with_websocket(tmp_path)
    try:
        ours = run_mqtt_js(ws, 4, "ws://guest:guest@127.0.0.1:%d/mqtt" % ws.port, retained_filter="js/status/node-1")
    finally:
        stop(tcp)
    url = "ws://guest:guest@127.0.0.1:%d/ws" % rabbitmq.web_mqtt_port
    theirs = run_mqtt_js(None, 4, url, retained_filter="js/status/node-1")
    assert_mqtt_js_sees_rabbitmq_alike(ours, theirs)


def test_an_upgrade_that_never_ends_is_closed_at_the_handshake_deadline(tmp_path):
    """The handshake deadline runs from the TCP accept, as for MQTT over TCP: an upgrade request
    sent a line every 0.5 s and never finished is closed at `handshake_timeout_ms` (1.5 s here),
    and so is a finished upgrade that sends no CONNECT."""
    ws_port = free_port()
    config = tmp_path / "hutch.toml"
    config.write_text("[limits]\nhandshake_timeout_ms = 1500\n")
    broker = start_hutch(tmp_path, ("--mqtt-ws-port", str(ws_port), "--config", str(config)))
    try:
        wait_until(lambda: "MQTT over WebSocket on 127.0.0.1:%d" % ws_port in broker.running.log(), 30)
        with socket.create_connection(("127.0.0.1", ws_port), timeout=10) as sock:
            accepted = time.monotonic()
            for line in (b"GET /mqtt HTTP/1.1\r\n", b"Host: 127.0.0.1\r\n", b"Upgrade: websocket\r\n"):
                sock.sendall(line)
                time.sleep(0.5)
            while sock.recv(4096):
                pass
            slow = time.monotonic() - accepted
        sock, line = upgrade(ws_port)
        with sock:
            assert line == b"HTTP/1.1 101 Switching Protocols"
            accepted = time.monotonic()
            while sock.recv(4096):
                pass
            silent = time.monotonic() - accepted
    finally:
        stop(broker)
    assert 1.4 <= slow < 2.6 and silent < 2.6, (slow, silent)  # the deadline, a tick (0.2 s) and some load
