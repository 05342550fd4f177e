"""SASL EXTERNAL (the user named by a client's TLS certificate) and ANONYMOUS, sans-IO.

A TLS listener's port tells the connection what it knows of the client's TLS as conn.tls
(server/frontends.py): on CPython {"login": the name the certificate gives, or None without a
verified one, ...}; on a board, whose TLS socket shows no certificate, a dict without "login".
"""

from harness import REMOTE, Client, closed_with, method, names

from hutch.codec import spec
from hutch.codec.wire import PROTOCOL_HEADER
from hutch.core.auth import Users, hash_password
from hutch.core.broker import Broker

CAPS = {"capabilities": {"authentication_failure_close": True}}


def _users(**extra):
    hashes = {"guest": hash_password("guest", b"salt"), "sensor-01": hash_password("not used", b"salt")}
    hashes.update(extra)
    return Users(hashes, loopback_users=["guest"])


def _tls_client(login, users=None, peer=None, tls=None):
    """A client of a TLS listener whose certificate gives `login` (None: no verified certificate);
    the log lines the broker wrote."""
    lines = []
    broker = Broker(users=users or _users(), log=lambda level, text, *e: lines.append(text))
    client = Client(broker, peer=peer) if peer is not None else Client(broker)
    client.conn.tls = tls if tls is not None else {"protocol": "TLSv1.3", "subject": None, "login": login}
    return client, lines


def _start(client):
    client.send(PROTOCOL_HEADER)
    events = client.read()
    assert names(events) == ["connection.start"], events
    return events[0].args[3].split()


def _start_ok(client, mechanism, response=b""):
    client.send(method(0, spec.CONNECTION_START_OK, (CAPS, mechanism, response, b"en_US")))
    return client.read()


def test_external_is_offered_first_on_tls_only():
    client, _ = _tls_client("sensor-01")
    assert _start(client) == [b"EXTERNAL", b"PLAIN", b"AMQPLAIN"]
    assert _start(Client()) == [b"PLAIN", b"AMQPLAIN"]  # plain TCP: never


def test_external_is_offered_without_a_certificate_too():
    """As RabbitMQ does: asked for, it is then refused with a reason (below)."""
    client, _ = _tls_client(None)
    assert b"EXTERNAL" in _start(client)


def test_external_is_not_offered_where_the_certificate_cannot_be_read():
    """A board's TLS socket has no getpeercert(): mutual TLS gates the connection there, and a
    password logs in; EXTERNAL asked for anyway is an unknown mechanism."""
    client, _ = _tls_client(None, tls={})
    assert _start(client) == [b"PLAIN", b"AMQPLAIN"]
    closed_with(_start_ok(client, b"EXTERNAL"), spec.COMMAND_INVALID, "connection.close")


def test_external_logs_in_as_the_certificate_user():
    client, lines = _tls_client("sensor-01")
    _start(client)
    events = _start_ok(client, b"EXTERNAL", b"")  # (the response, an authorization identity, is not used)
    assert names(events) == ["connection.tune"], events
    assert client.conn.client.user == b"sensor-01"
    client.send(method(0, spec.CONNECTION_TUNE_OK, (2047, 131072, 0)))
    assert names(client.call(0, spec.CONNECTION_OPEN, (b"/", b"", False))) == ["connection.open-ok"]
    assert any("connection open (user 'sensor-01'" in line for line in lines), lines


def test_external_without_a_certificate_is_refused_in_rabbitmqs_words():
    client, lines = _tls_client(None)
    _start(client)
    assert _start_ok(client, b"EXTERNAL") == []  # the answer waits (auth_failure_delay_ms)
    text = closed_with(client.tick(1000), spec.ACCESS_REFUSED, "connection.close")
    assert text == (
        b"ACCESS_REFUSED - Login was refused using authentication mechanism EXTERNAL. "
        b"For details see the broker logfile."
    )
    assert any(
        line.endswith("EXTERNAL login refused: connection peer presented no TLS (x.509) certificate") for line in lines
    ), lines


def test_external_for_a_user_that_does_not_exist_is_refused():
    client, lines = _tls_client("stranger")
    _start(client)
    _start_ok(client, b"EXTERNAL")
    closed_with(client.tick(1000), spec.ACCESS_REFUSED, "connection.close")
    assert any(
        line.endswith("EXTERNAL login refused: user 'stranger' - invalid credentials: no such user") for line in lines
    ), lines


def test_external_keeps_the_loopback_rule():
    client, lines = _tls_client("guest", peer=REMOTE)
    _start(client)
    _start_ok(client, b"EXTERNAL")
    closed_with(client.tick(1000), spec.ACCESS_REFUSED, "connection.close")
    assert any(
        line.endswith("user 'guest' can only connect via localhost ([auth] loopback_users)") for line in lines
    ), lines


def test_a_password_still_logs_in_over_tls():
    client, _ = _tls_client(None)
    assert client.handshake() is not None


def test_anonymous_is_off_unless_configured():
    assert b"ANONYMOUS" not in _start(Client())
    client = Client()
    _start(client)
    closed_with(_start_ok(client, b"ANONYMOUS"), spec.COMMAND_INVALID, "connection.close")


def test_anonymous_logs_in_as_the_configured_user():
    users = _users()
    users.anonymous = "sensor-01"
    client = Client(Broker(users=users), peer=REMOTE)
    assert _start(client) == [b"PLAIN", b"AMQPLAIN", b"ANONYMOUS"]
    assert names(_start_ok(client, b"ANONYMOUS")) == ["connection.tune"]
    assert client.conn.client.user == b"sensor-01"
