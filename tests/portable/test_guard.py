"""What a client may cost before its login (core/connections.py, amqp091/connection.py)."""

from harness import REMOTE, Client, closed_with, method, names

from hutch.codec import spec
from hutch.codec.wire import PROTOCOL_HEADER
from hutch.core.auth import Users, hash_password
from hutch.core.broker import Broker
from hutch.core.limits import Limits

SENSOR = Users({"sensor": hash_password("s3cret", b"salt")})


def test_a_frame_before_the_login_is_at_most_the_smallest_frame_max():
    """A client that has not logged in cannot make the broker buffer a large frame: past 4096
    octets in all it is a frame error at once, whatever frame_max the broker offers later."""
    client = Client(peer=REMOTE)
    client.send(PROTOCOL_HEADER)
    assert names(client.read()) == ["connection.start"]
    big = method(0, spec.CONNECTION_START_OK, ({"pad": b"x" * 5000}, b"PLAIN", b"\x00guest\x00guest", b"en_US"))
    client.send(big[:7])  # its header says the size: refused before the payload is there
    text = closed_with(client.read(), spec.FRAME_ERROR, "connection.close")
    assert b"exceeds frame_max 4096" in text


def test_a_source_holds_a_bounded_number_of_handshakes():
    broker = Broker(Limits(handshakes_per_source=3), SENSOR)
    clients = [Client(broker, peer=REMOTE) for _ in range(5)]
    assert [c.conn.closed for c in clients] == [True, True, False, False, False]  # the oldest went
    other = Client(broker, peer=dict(REMOTE, address="192.0.2.8"))  # another source: its own budget
    assert not other.conn.closed
    clients[2].open(user="sensor", password="s3cret")  # logged in: no longer counted
    more = Client(broker, peer=REMOTE)
    assert [c.conn.closed for c in clients[2:] + [more]] == [False, False, False, False]


def test_failed_logins_past_a_source_budget_are_dropped_at_once():
    broker = Broker(Limits(failed_logins_per_source=2), SENSOR)
    outcomes = []
    for _ in range(4):
        client = Client(broker, peer=REMOTE)
        client.handshake(password="wrong")
        outcomes.append(client.conn.closed)  # dropped at once, or held for the delayed 403
    assert outcomes == [False, False, True, True]
    good = Client(broker, peer=REMOTE)  # a good login from that source still gets in
    good.handshake(user="sensor", password="s3cret")
    assert not good.conn.closed


def test_what_is_said_of_a_source_is_said_once_in_a_while():
    """Each refused login within the source's budget is logged, as RabbitMQ logs each; past the
    budget, the drops are said once per window with how many lines were left out."""
    lines = []
    broker = Broker(Limits(failed_logins_per_source=3), log=lambda level, line, exc=None: lines.append(line))
    for _ in range(8):
        Client(broker, peer=REMOTE).handshake(password="wrong")
    refused = [line for line in lines if "login refused" in line and "dropped" not in line]
    dropped = [line for line in lines if "dropped" in line]
    assert len(refused) == 3 and len(dropped) == 1, lines
    broker.now += 10000  # the next window: a new budget, and the drops said again with the count
    for _ in range(4):
        Client(broker, peer=REMOTE).handshake(password="wrong")
    dropped = [line for line in lines if "dropped" in line]
    assert len(dropped) == 2 and dropped[1].endswith("(4 more such lines from 192.0.2.7 left out)"), dropped
