"""Protocol header, connection.start/tune/open, login, heartbeats and the close handshake."""

from harness import REMOTE, Client, closed_with, method, names, opened

from hutch.amqp091.channel import WANTS_BLOCKED
from hutch.codec import spec
from hutch.core.auth import Users, hash_password
from hutch.core.broker import Broker
from hutch.core.limits import Limits


def _refused_with_header(data):
    client = Client()
    client.send(data)
    events = client.read()
    assert names(events) == ["protocol-header"], events
    assert events[0].args == b"AMQP\x00\x00\x09\x01"
    assert client.conn.closed
    return client


def test_0_9_1_header_gets_connection_start():
    client = Client()
    client.send(b"AMQP\x00\x00\x09\x01")
    events = client.read()
    assert names(events) == ["connection.start"]
    major, minor, props, mechanisms, locales = events[0].args
    assert (major, minor) == (0, 9)
    assert props["product"] == b"hutch"
    assert props["version"] and props["platform"] is not None
    caps = props["capabilities"]
    for cap in (
        "publisher_confirms",
        "basic.nack",
        "exchange_exchange_bindings",
        "consumer_cancel_notify",
        "connection.blocked",
        "authentication_failure_close",
        "per_consumer_qos",
        "consumer_priorities",
    ):
        assert caps[cap] is True, cap
    assert mechanisms.split() == [b"PLAIN", b"AMQPLAIN"]
    assert locales == b"en_US"
    assert not client.conn.closed


def test_0_9_header_is_served_as_0_9_1():
    client = Client()
    client.send(b"AMQP\x01\x01\x00\x09")
    assert names(client.read()) == ["connection.start"]


def test_other_headers_get_0_9_1_header_and_close():
    for header in (
        b"AMQP\x01\x01\x09\x01",  # 0-8 clients (and the [001] draft)
        b"AMQP\x01\x01\x00\x0a",  # 0-10
        b"AMQP\x00\x01\x00\x00",  # 1.0
        b"AMQP\x03\x01\x00\x00",  # 1.0 SASL
        b"AMQP\x00\x00\x09\x02",  # an unknown 0-9 revision
        b"GET / HTTP/1.1\r\n\r\n",
        b"\x00\x01\x02\x03\x04\x05\x06\x07",
    ):
        _refused_with_header(header)


def test_garbage_is_refused_before_8_bytes():
    _refused_with_header(b"HELO")


def test_header_split_across_reads():
    client = Client()
    for byte in b"AMQP\x00\x00\x09\x01":
        client.send(bytes((byte,)))
    assert names(client.read()) == ["connection.start"]


def test_short_header_then_eof_is_answered():
    client = Client()
    client.send(b"AMQP\x00")
    assert client.read() == []
    client.conn.eof()
    events = client.read()
    assert names(events) == ["protocol-header"] and client.conn.closed


def test_short_header_then_silence_is_answered():
    client = Client()
    client.send(b"AMQP")
    events = client.tick(Limits().handshake_timeout_ms + 1)
    assert names(events) == ["protocol-header"] and client.conn.closed


def test_plain_login_tune_and_open():
    client = Client()
    tune = client.handshake()
    limits = Limits()
    assert tune.args == [limits.channel_max, limits.frame_max, limits.heartbeat]
    events = client.call(0, spec.CONNECTION_OPEN, (b"/", b"", False))
    assert names(events) == ["connection.open-ok"]
    client.channel(1)


def test_amqplain_login():
    client = Client()
    client.handshake(mechanism=b"AMQPLAIN")
    assert names(client.call(0, spec.CONNECTION_OPEN, (b"/", b"", False))) == ["connection.open-ok"]


def test_unknown_mechanism_is_refused():
    client = Client()
    client.send(b"AMQP\x00\x00\x09\x01")
    client.read()
    client.send(method(0, spec.CONNECTION_START_OK, ({}, b"EXTERNAL", b"", b"en_US")))
    closed_with(client.read(), spec.COMMAND_INVALID, "connection.close")


def test_wrong_password_gets_403_after_a_delay():
    client = Client()
    assert client.handshake(password="nope") is None
    assert client.read() == []  # nothing yet: the answer waits
    client.tick(500)
    assert client.read() == []
    events = client.tick(1000)
    text = closed_with(events, spec.ACCESS_REFUSED, "connection.close")
    assert b"ACCESS_REFUSED" in text and b"PLAIN" in text
    client.send(method(0, spec.CONNECTION_CLOSE_OK))
    assert client.conn.closed


def test_wrong_password_without_capability_just_closes():
    client = Client()
    assert client.handshake(password="nope", capabilities={}) is None
    client.tick(1000)
    assert client.read() == [] and client.conn.closed


def test_unknown_user_is_refused():
    client = Client()
    assert client.handshake(user="nobody") is None
    closed_with(client.tick(1000), spec.ACCESS_REFUSED, "connection.close")


def test_guest_only_from_loopback():
    client = Client(peer=REMOTE)
    assert client.handshake() is None
    closed_with(client.tick(1000), spec.ACCESS_REFUSED, "connection.close")


def test_guest_logs_in_from_any_loopback_address():
    """127.0.0.0/8, ::1 and IPv4-mapped 127.* are this machine (as over 1.0:
    tests/amqp10/test_connection.py)."""
    for address in ("127.0.0.2", "::ffff:127.0.0.1", "::1"):
        assert Client(peer={"address": address, "port": 40000, "transport": "tcp"}).handshake() is not None, address


def test_configured_user_from_anywhere():
    users = Users({"sensor": hash_password("s3cret", b"salt")}, loopback_users=["guest"])
    broker = Broker(users=users)
    client = Client(broker, peer=REMOTE)
    assert client.handshake(user="sensor", password="s3cret") is not None
    guest = Client(broker)
    assert guest.handshake() is None  # guest is not in this config


def test_rabbitmq_password_hash_is_accepted():
    # A hash in RabbitMQ's rabbit_password_hashing_sha256 format (salt + sha256(salt + password)),
    # computed independently with hashlib: hutch stores the same format.
    import binascii
    import hashlib

    salt = b"\x90\x8d\xc6\x0a"
    stored = binascii.b2a_base64(salt + hashlib.sha256(salt + b"guest").digest()).strip().decode()
    broker = Broker(users=Users({"guest": stored}))
    assert Client(broker).handshake() is not None


def test_tune_ok_frame_max_too_small():
    client = Client()
    client.send(b"AMQP\x00\x00\x09\x01")
    client.read()
    client.send(method(0, spec.CONNECTION_START_OK, ({}, b"PLAIN", b"\x00guest\x00guest", b"en_US")))
    client.read()
    text = closed_with(client.call(0, spec.CONNECTION_TUNE_OK, (10, 1024, 0)), spec.NOT_ALLOWED, "connection.close")
    assert b"frame_max" in text


def test_tune_ok_above_server_values():
    for channel_max, frame_max in ((10, Limits().frame_max + 1), (0, 4096), (Limits().channel_max + 1, 4096), (10, 0)):
        client = Client()
        client.send(b"AMQP\x00\x00\x09\x01")
        client.read()
        client.send(method(0, spec.CONNECTION_START_OK, ({}, b"PLAIN", b"\x00guest\x00guest", b"en_US")))
        client.read()
        closed_with(
            client.call(0, spec.CONNECTION_TUNE_OK, (channel_max, frame_max, 0)), spec.NOT_ALLOWED, "connection.close"
        )


def test_limits_set_tune_values():
    client = Client(limits=Limits(frame_max=8192, channel_max=8, heartbeat=10))
    assert client.handshake().args == [8, 8192, 10]


def test_other_vhost_is_refused():
    client = Client()
    client.handshake()
    text = closed_with(
        client.call(0, spec.CONNECTION_OPEN, (b"/other", b"", False)), spec.NOT_ALLOWED, "connection.close"
    )
    assert b"/other" in text


def test_max_connections():
    broker = Broker(Limits(max_connections=2))
    opened(broker)
    second = opened(broker)
    third = Client(broker)
    third.handshake()
    closed_with(third.call(0, spec.CONNECTION_OPEN, (b"/", b"", False)), spec.NOT_ALLOWED, "connection.close")
    second.call(0, spec.CONNECTION_CLOSE, (200, b"bye", 0, 0))
    assert opened(broker)  # a place came free


def test_method_out_of_order_in_handshake():
    client = Client()
    client.send(b"AMQP\x00\x00\x09\x01")
    client.read()
    events = client.call(0, spec.CONNECTION_OPEN, (b"/", b"", False))
    closed_with(events, spec.COMMAND_INVALID, "connection.close")


def test_channel_before_open():
    client = Client()
    client.handshake()
    closed_with(client.call(1, spec.CHANNEL_OPEN, (b"",)), spec.CHANNEL_ERROR, "connection.close")


def test_handshake_timeout():
    client = Client()
    client.send(b"AMQP\x00\x00\x09\x01")
    client.read()
    client.tick(Limits().handshake_timeout_ms + 1)
    assert client.conn.closed


def test_client_close_gets_close_ok():
    client = opened()
    events = client.call(0, spec.CONNECTION_CLOSE, (200, b"bye", 0, 0))
    assert names(events) == ["connection.close-ok"] and client.conn.closed


def test_close_during_handshake():
    client = Client()
    client.send(b"AMQP\x00\x00\x09\x01")
    client.read()
    events = client.call(0, spec.CONNECTION_CLOSE, (200, b"bye", 0, 0))
    assert names(events) == ["connection.close-ok"] and client.conn.closed


def test_server_close_waits_for_close_ok_then_times_out():
    client = opened()
    client.conn.close()
    events = client.read()
    closed_with(events, spec.CONNECTION_FORCED, "connection.close")
    assert not client.conn.closed
    # while closing, other methods are ignored (requirements R086)
    assert client.call(1, spec.BASIC_QOS, (0, 10, False)) == []
    client.tick(Limits().close_timeout_ms + 1)
    assert client.conn.closed


def test_server_close_then_close_ok():
    client = opened()
    client.conn.close()
    client.read()
    client.send(method(0, spec.CONNECTION_CLOSE_OK))
    assert client.conn.closed


def test_heartbeats_sent_when_idle():
    client = Client()
    client.handshake(heartbeat=2)
    client.call(0, spec.CONNECTION_OPEN, (b"/", b"", False))
    client.tick(500)
    assert client.read() == []
    client.channel(1)  # output at 500 ms counts as a heartbeat
    assert client.tick(1400) == []
    assert names(client.tick(1500)) == ["heartbeat"]  # half the interval after the last output
    assert client.tick(1600) == []
    assert not client.conn.closed


def test_heartbeat_from_client_is_accepted():
    client = opened(heartbeat=2)
    client.send(b"\x08\x00\x00\x00\x00\x00\x00\xce")
    client.tick(3000)
    assert not client.conn.closed


def test_missed_heartbeats_close_the_connection():
    client = opened(heartbeat=2)
    client.tick(3000)
    assert not client.conn.closed
    client.tick(4001)
    assert client.conn.closed


def test_no_heartbeat_when_disabled():
    client = opened(heartbeat=0)
    client.tick(10**7)
    assert client.read() == [] and not client.conn.closed


def test_client_capabilities_are_kept_and_its_product_is_said_once():
    """The capabilities the broker acts on are kept (as bits); the product name goes into the
    open's log line and is not kept after it (a board's heap, per connection)."""
    client = opened(capabilities={"connection.blocked": True, "something_else": True})
    conn = client.conn
    assert conn.wants == WANTS_BLOCKED
    assert conn.product == b"?"


def test_update_secret_checked_as_the_login():
    """connection.update-secret (token refresh): the new secret must pass the login's check for
    the user who logged in; the connection goes on as before."""
    users = Users({"sensor": hash_password("s3cret", b"salt")})
    client = opened(Broker(users=users), user="sensor", password="s3cret")
    events = client.call(0, spec.CONNECTION_UPDATE_SECRET, (b"s3cret", b"token refresh"))
    assert names(events) == ["connection.update-secret-ok"]
    assert names(client.declare_queue(1)) == ["queue.declare-ok"]


def test_update_secret_refused_closes_the_connection():
    users = Users({"sensor": hash_password("s3cret", b"salt")})
    for secret in (b"wrong", b"\xff\xfe"):
        client = opened(Broker(users=users), user="sensor", password="s3cret")
        events = client.call(0, spec.CONNECTION_UPDATE_SECRET, (secret, b"token refresh"))
        text = closed_with(events, spec.NOT_ALLOWED, "connection.close")
        assert text == b"NOT_ALLOWED - New secret was refused by one of the backends"
        assert events[-1].args[2:] == [10, 70]  # connection.update-secret


def test_update_secret_before_open_is_out_of_order():
    client = Client()
    client.handshake()
    events = client.call(0, spec.CONNECTION_UPDATE_SECRET, (b"guest", b""))
    closed_with(events, spec.COMMAND_INVALID, "connection.close")
