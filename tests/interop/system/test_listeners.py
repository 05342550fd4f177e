"""Listeners from the config ([[listener]]), and the protocol header that chooses a client's
front end on each of them (server/frontends.py).

Brokers run as a user runs them (`hutch serve`, and `micropython -m hutch.server.serve` for
the stream port), on 127.0.0.1, served to pika and to the sensor client's protocol over raw
sockets. The sniffer's table is exercised with real front ends on the serial port, sans-IO.
"""

import json
import os
import socket
import subprocess
import time

import pytest
from brokers import (
    BIN,
    RunningBroker,
    interrupt,
    pika_connection,
    pump_until,
    says_listening,
    wait_for_port,
    wait_until,
)
from micropython_env import micropython, serve_env

from hutch.bench.brokers import free_port
from hutch.client.protocol import Protocol
from hutch.codec.wire import PROTOCOL_HEADER

HUTCH = os.path.join(BIN, "hutch")
LISTENERS = (
    '[[listener]]\nbind = "127.0.0.1"\nport = %d\n\n[[listener]]\nprotocol = "amqp"\nbind = "127.0.0.1"\nport = %d\n'
)


class TwoListeners(RunningBroker):
    """A broker whose config has two [[listener]]s on 127.0.0.1 (port and other_port), started
    without --port, which would replace them. A port taken before the broker binds it: both
    are chosen again (RunningBroker.start)."""

    def __init__(self, command, tmp_path, env=None, config_text=LISTENERS, suffix=".toml"):
        self.config_path = str(tmp_path / ("hutch" + suffix))
        self.config_text = config_text
        super().__init__(command, tmp_path, env)

    def _take_port(self, port):
        self.port = port
        self.other_port = port
        while self.other_port == port:
            self.other_port = free_port()
        with open(self.config_path, "w") as f:
            f.write(
                self.config_text(port, self.other_port)
                if callable(self.config_text)
                else self.config_text % (port, self.other_port)
            )
        self.command = self.base_command + ["--config", self.config_path, "--data", self.data]

    def _wait_listening(self, offset):
        for port in (self.port, self.other_port):
            wait_for_port(port, self.proc, self.log_path)
            wait_until(
                lambda port=port: self.proc.poll() is not None or says_listening(self.log_since(offset), port),
                30,
                what="listening on port %d in the broker's log" % port,
            )
            if self.proc.poll() is not None:
                raise AssertionError("broker exited with %s:\n%s" % (self.proc.returncode, self.log()))


class OnPort:
    """What pika_connection needs of a broker: host and port."""

    host = "127.0.0.1"

    def __init__(self, port):
        self.port = port


def publish_on_one_consume_on_the_other(broker, count=20):
    consumer = pika_connection(OnPort(broker.other_port))
    sub = consumer.channel()
    sub.queue_declare("across")
    got = []
    sub.basic_consume("across", lambda ch, method, props, body: got.append(body), auto_ack=True)
    publisher = pika_connection(OnPort(broker.port))
    pub = publisher.channel()
    pub.confirm_delivery()
    for i in range(count):
        pub.basic_publish("", "across", b"%d" % i)
    pump_until(consumer, lambda: len(got) == count, what="every message on the other listener")
    assert got == [b"%d" % i for i in range(count)]
    publisher.close()
    consumer.close()


def test_two_listeners_serve_at_once(tmp_path):
    broker = TwoListeners([HUTCH, "serve"], tmp_path).start()
    try:
        publish_on_one_consume_on_the_other(broker)
    finally:
        assert broker.stop() == 0
    assert not broker.errors(), broker.log()[-3000:]
    assert broker.log().count("listening for AMQP 0-9-1 and 1.0 on 127.0.0.1:") == 2


def test_two_listeners_on_micropython(tmp_path):
    """The stream port (ports/tcp.py), as a board runs it: two listeners from a JSON config
    (MicroPython has no TOML parser), one read buffer for the clients of both."""

    def config(port, other):
        return json.dumps({"listener": [{"bind": "127.0.0.1", "port": port}, {"bind": "127.0.0.1", "port": other}]})

    broker = TwoListeners([micropython(), "-m", "hutch.server.serve"], tmp_path, serve_env(tmp_path), config, ".json")
    broker.start()
    try:
        publish_on_one_consume_on_the_other(broker)
        assert interrupt(broker) == 0, broker.log()[-3000:]
    finally:
        if broker.proc.poll() is None:
            broker.proc.kill()
        broker.stop()
    assert not broker.errors(), broker.log()[-3000:]
    assert "stopped" in broker.log()


def _serve_config(tmp_path, text, *args):
    path = tmp_path / "hutch.toml"
    path.write_text(text)
    command = [HUTCH, "serve", "--config", str(path), "--data", str(tmp_path / "data")] + list(args)
    return subprocess.run(command, capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize(
    "text, message",
    [
        (LISTENERS % (5999, 5999), "two [[listener]]s on 127.0.0.1:5999"),
        ('[[listener]]\n[[listener]]\nbind = "0.0.0.0"\n', "two [[listener]]s on 0.0.0.0:5672"),
        (
            "[[listener]]\nport = 5999\nprot = 6000\n",
            "unknown key 'prot' in [[listener]] (did you mean 'port'?) (known: protocol, bind, port, websocket, path, allowed_origins, tls)",
        ),
        ("[[listener]]\nport = 5999\ntls = true\n", "tls must be a table"),
        ('[[listener]]\nprotocol = "stomp"\n', "unknown protocol 'stomp' in [[listener]] (known: amqp, mqtt)"),
        ('[[listener]]\nprotocol = ["amqp"]\n', "unknown protocol ['amqp'] in [[listener]]"),
        ("[[listener]]\nport = 70000\n", "[[listener]] #1 port must be a number from 0 to 65535, not 70000"),
        ("[server]\nport = 5999\n\n[[listener]]\nport = 6000\n", "[server] bind/port and [[listener]] both say"),
        ("listener = 5\n", "listener must be one or more [[listener]] tables"),
        ("[[listener]]\nwebsocket = true\n", 'websocket: MQTT is served over WebSocket (protocol = "mqtt")'),
        ('[[listener]]\nprotocol = "mqtt"\npath = "/mqtt"\n', "path: a key of a listener with websocket = true"),
        ('[[listener]]\nprotocol = "mqtt"\nwebsocket = true\npath = "mqtt"\n', 'path: a path that starts with "/"'),
        (
            '[[listener]]\nprotocol = "mqtt"\nwebsocket = true\nallowed_origins = "https://a"\n',
            "allowed_origins: a list of origins",
        ),
        ('[[listener]]\nprotocol = "mqtt"\nwebsocket = "yes"\n', "[[listener]] #1 websocket must be true or false"),
    ],
)
def test_listener_config_errors_are_one_line(tmp_path, text, message):
    result = _serve_config(tmp_path, text)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not os.path.exists(tmp_path / "data")  # refused before anything else


def test_listener_config_errors_stand_with_the_port_option(tmp_path):
    """--port replaces the [[listener]]s, but a config file that is wrong is still refused."""
    result = _serve_config(tmp_path, LISTENERS % (5999, 5999), "--port", "0")
    assert result.returncode == 2 and "two [[listener]]s on 127.0.0.1:5999" in result.stderr, result.stderr


def test_port_option_replaces_the_listeners(tmp_path):
    """--bind/--port is one listener, and the command line wins over the config: the
    [[listener]]s' ports are held here (bound, not listening), so the broker would fail to
    start had it tried them."""
    held = [socket.socket(), socket.socket()]
    try:
        for s in held:
            s.bind(("127.0.0.1", 0))
        ports = [s.getsockname()[1] for s in held]
        config = tmp_path / "hutch.toml"
        config.write_text(LISTENERS % tuple(ports))
        broker = RunningBroker([HUTCH, "serve", "--config", str(config)], tmp_path).start()
        try:
            conn = pika_connection(broker)
            conn.channel().queue_declare("on-the-port-option")
            conn.close()
        finally:
            assert broker.stop() == 0
    finally:
        for s in held:
            s.close()
    log = broker.log()
    assert log.count("listening for AMQP 0-9-1 and 1.0 on") == 1
    assert "listening for AMQP 0-9-1 and 1.0 on 127.0.0.1:%d" % broker.port in log
    assert not broker.errors(), log[-3000:]


def test_a_port_that_cannot_be_had_stops_the_start(tmp_path):
    """The second listener's port is taken: one line naming it, exit 1, and the first listener
    is closed again (the process is gone)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _serve_config(tmp_path, LISTENERS % (0, port))  # the first: any free port
    assert result.returncode == 1, result.stderr
    last = result.stderr.strip().splitlines()[-1]  # (the log before it goes to stderr too)
    assert last.startswith("hutch: cannot listen on 127.0.0.1:%d: " % port), result.stderr
    assert "Traceback" not in result.stderr and "listening for" in result.stderr  # (the first)


# ---------------------------------------------------------------- the protocol header


def _read_until_closed(sock):
    received = b""
    while True:
        data = sock.recv(4096)  # socket.timeout if the broker never closes
        if not data:
            return received
        received += data


def _send(sock, protocol):
    data = protocol.data_to_send()
    while data is not None:
        sock.sendall(bytes(data))
        data = protocol.data_to_send()


def test_header_dribbled_byte_by_byte_gets_through(broker):
    """The sensor client's protocol over a raw socket: its header sent one octet at a time,
    each in a segment of its own, then the handshake goes on to an open channel."""
    protocol = Protocol()
    protocol.connect(0, "guest", "guest", "/", heartbeat=0)
    header = bytes(protocol.data_to_send())
    assert header == PROTOCOL_HEADER
    with socket.create_connection((broker.host, broker.port), timeout=10) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for octet in header:
            sock.sendall(bytes((octet,)))
            time.sleep(0.05)  # the client's pace: each octet reaches the broker in a read of its own
        deadline = time.monotonic() + 10
        while protocol.awaiting and time.monotonic() < deadline:
            data = sock.recv(4096)
            assert data, "the broker closed the connection"
            protocol.receive_data(data)
            while protocol.next_event() is not None:
                pass
            _send(sock, protocol)
        assert protocol.awaiting == 0 and protocol.channel_open
    wait_until(lambda: "connection open (user 'guest', client hutch.client)" in broker.log(), what="the open")


@pytest.fixture
def quick_handshake(tmp_path):
    """A broker that gives a client 1.5 s to get through its handshake."""
    config = tmp_path / "hutch.toml"
    config.write_text("[limits]\nhandshake_timeout_ms = 1500\n")
    running = RunningBroker([HUTCH, "serve", "--config", str(config)], tmp_path).start()
    yield running
    assert running.stop() == 0
    assert not running.errors(), running.log()[-3000:]


def test_header_that_stops_midway_is_closed_at_the_deadline(quick_handshake):
    """Three octets of the header, one every 0.5 s, then nothing: answered with the 0-9-1
    header and closed at the deadline that ran from the accept (1.5 s), not from the last
    octet (2.5 s). (The octets could still have become AMQP 1.0's header: they are kept for
    it, and the 0-9-1 connection made at the accept times out.)"""
    with socket.create_connection((quick_handshake.host, quick_handshake.port), timeout=10) as sock:
        accepted = time.monotonic()
        for i, octet in enumerate(b"AMQ"):
            if i:
                time.sleep(0.5)  # the client's pace
            sock.sendall(bytes((octet,)))
        assert _read_until_closed(sock) == PROTOCOL_HEADER
        elapsed = time.monotonic() - accepted
    assert 1.4 <= elapsed < 2.4, elapsed  # the deadline, plus a tick (0.2 s) and some load
    wait_until(
        lambda: "handshake timed out while awaiting protocol header" in quick_handshake.log(), what="the refusal"
    )


@pytest.mark.parametrize(
    "header",
    [
        b"AMQP\x01\x01\x00\x0a",  # AMQP 0-10
        b"GET / HTTP/1.1\r\n\r\n",
    ],
)
def test_a_header_not_spoken_is_answered_with_0_9_1s(broker, header):
    with socket.create_connection((broker.host, broker.port), timeout=5) as sock:
        sock.sendall(header)
        assert _read_until_closed(sock) == PROTOCOL_HEADER
    wait_until(lambda: "unsupported protocol header" in broker.log(), what="the refusal in the log")


def test_amqp_1_0_headers_go_to_the_1_0_front_end(broker):
    """SASL's header is answered with SASL's and its mechanisms; the plain 1.0 header with SASL's
    (SASL first, as RabbitMQ 4 asks), then the socket is closed."""
    sasl = b"AMQP\x03\x01\x00\x00"
    with socket.create_connection((broker.host, broker.port), timeout=5) as sock:
        sock.sendall(sasl)
        answer = b""
        while b"PLAIN" not in answer:  # the header, then sasl-mechanisms (PLAIN)
            received = sock.recv(256)
            assert received, answer
            answer += received
        assert answer.startswith(sasl)
    with socket.create_connection((broker.host, broker.port), timeout=5) as sock:
        sock.sendall(b"AMQP\x00\x01\x00\x00")
        assert _read_until_closed(sock) == sasl


# ---------------------------------------------------------------- the sniffer's table, sans-IO


def _serial_with_claims(claims):
    """A serial port (never opened: fed here as its link would feed it) whose FrontEnds has
    `claims` in its table: the 0-9-1 Connection stands in for a front end that claims a
    header, the only real one there is so far."""
    import asyncio

    from hutch.core.broker import Broker
    from hutch.ports.serial import SerialServer
    from hutch.server.frontends import FrontEnds
    from hutch.server.runtime import Runtime

    broker = Broker()
    runtime = Runtime(broker, broker.log)
    front = FrontEnds(runtime)
    front.claims = claims
    server = SerialServer(runtime, front, "/dev/ttyTEST")
    server._event = asyncio.Event()
    return broker, server


def test_a_claimed_header_gets_its_front_ends_connection():
    from hutch.amqp091.connection import Connection

    one_oh = b"AMQP\x00\x01\x00\x00"
    broker, server = _serial_with_claims({one_oh: Connection})
    server._feed(b"AMQP")  # the start of 0-9-1's header and of the claimed one: kept
    opened = server.conn
    assert server.greeting is not None and opened.take_output() == b"" and not opened.closed
    server._feed(b"\x00\x01\x00\x00")
    assert server.greeting is None
    assert opened.closed and opened not in broker.connections  # given up, without a word
    chosen = server.conn
    assert chosen is not opened
    # it was fed the whole header: the stand-in answers it as 0-9-1 does, and hangs up
    assert chosen.take_output() == PROTOCOL_HEADER and chosen.closed


def test_with_claims_0_9_1_and_other_headers_still_go_to_the_default():
    from hutch.amqp091.connection import Connection

    claims = {b"AMQP\x00\x01\x00\x00": Connection, b"AMQP\x03\x01\x00\x00": Connection}
    broker, server = _serial_with_claims(claims)
    server._feed(b"AMQP\x00")
    opened = server.conn
    assert server.greeting is not None  # 0-9-1's header or 1.0's
    server._feed(b"\x00\x09\x01")
    assert server.greeting is None and server.conn is opened
    start = opened.take_output()
    assert start[:1] == b"\x01" and start[7:11] == b"\x00\x0a\x00\x0a"  # connection.start

    broker, server = _serial_with_claims(claims)
    server._feed(b"AMQP\x00\x02")  # can no longer become a claimed header: to the default at once,
    opened = server.conn
    assert server.greeting is None and opened.take_output() == b"" and not opened.closed
    server._feed(b"\x00\x00")  # which waits for the whole of it, as always, and refuses it
    assert server.conn is opened and opened.closed and opened.take_output() == PROTOCOL_HEADER


def test_the_short_form_and_json_listeners_become_the_same_settings(tmp_path):
    from hutch.server import options

    path = tmp_path / "hutch.json"
    path.write_text(json.dumps({"listener": [{"port": 5673}, {"bind": "127.0.0.1", "port": 5674}]}))
    opts = options.settings(options.Options(config=str(path)))
    assert opts["listeners"] == [
        {"protocol": "amqp", "bind": "0.0.0.0", "port": 5673},
        {"protocol": "amqp", "bind": "127.0.0.1", "port": 5674},
    ]
    assert options.settings(options.Options(config=str(path), port=5999))["listeners"] == [
        {"protocol": "amqp", "bind": "0.0.0.0", "port": 5999}
    ]
    assert options.settings(options.Options())["listeners"] == [{"protocol": "amqp", "bind": "0.0.0.0", "port": 5672}]
    path.write_text(json.dumps({"server": {"bind": "127.0.0.1", "port": 5999}}))
    assert options.settings(options.Options(config=str(path), bind="::1"))["listeners"] == [
        {"protocol": "amqp", "bind": "::1", "port": 5999}
    ]
