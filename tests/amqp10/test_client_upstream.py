"""The bridge's AMQP 1.0 client (amqp10/client.py) against hutch's own 1.0 front end
(amqp10/connection.py) over a core Broker, in process: messages land whole and confirmed, a
null target routes by each message's `to`, and messages in parts keep flowing through the
front end's session window. (Apart from test_client.py: under micropython these run in the
default heap only, the scripted peer's tests in a board-sized one too.)"""

from amqp10_peer import forward
from upstream_events import events

from hutch.amqp10.client import Protocol, v2_address
from hutch.core.broker import Broker
from hutch.core.limits import Limits
from hutch.core.session import MESSAGE
from hutch.core.topology import add_binding, declare_queue

# ---------------------------------------------------------------- against hutch's own 1.0 front end


class Upstream:
    """hutch's AMQP 1.0 front end over a core Broker, in-process, bytes shuttled to a client."""

    def __init__(self):
        from hutch.amqp10.connection import Connection

        self.broker = Broker(Limits())
        self.conn = Connection(self.broker, {"address": "127.0.0.1", "port": 1, "transport": "tcp"})

    def pump(self, client, rounds=20):
        """Bytes both ways until neither has more; the client's events."""
        got = []
        for _ in range(rounds):
            moved = False
            while True:
                data = client.data_to_send()
                if data is None:
                    break
                self.conn.feed(bytes(data))
                moved = True
            out = self.conn.take_output()
            while out:
                n = client.receive_data(out)
                out = out[n:]
                got += events(client)
                moved = True
            got += events(client)
            if not moved:
                break
        return got


def test_forwarding_to_hutch_s_own_front_end_lands_every_message_whole_and_confirmed():
    upstream = Upstream()
    broker = upstream.broker
    declare_queue(broker, None, b"central", durable=True)
    client = Protocol(max_frame=512)
    client.connect(0, "guest", "guest", "127.0.0.1", v2_address("", "central"))
    assert upstream.pump(client) == [] and client.channel_open and client.room() > 0
    big = b"B" * 3000  # six frames of 512
    forward(client, b"one", headers={"x-hutch-seq": 7, "site": "7"}, delivery_mode=2)
    forward(client, big, headers={"n": 2})
    forward(client, b"three")
    acks = upstream.pump(client)  # (hutch says a run of accepted deliveries in one disposition)
    assert {event[0] for event in acks} == {"accepted"} and acks[-1] == ("accepted", 3, True), acks
    queue = broker.queues[b"central"]
    entries = [queue.take() for _ in range(3)]
    assert [bytes(e[MESSAGE].body()) for e in entries] == [b"one", big, b"three"]
    headers = entries[0][MESSAGE].properties()["headers"]
    assert headers["x-hutch-seq"] == 7 and headers["site"] == b"7"
    assert entries[0][MESSAGE].persistent()


def test_hutch_s_front_end_routes_a_null_target_s_to_and_ends_the_link_to_a_missing_queue():
    upstream = Upstream()
    broker = upstream.broker
    declare_queue(broker, None, b"bound")
    add_binding(broker, broker.exchange(b"amq.direct"), broker.queues[b"bound"], b"k 1", {}, 0)
    client = Protocol()
    client.connect(0, "guest", "guest", "127.0.0.1", None)
    upstream.pump(client)
    forward(client, b"routed", exchange=b"amq.direct", routing_key=b"k 1")
    forward(client, b"nowhere", exchange=b"amq.direct", routing_key=b"nobody")
    assert upstream.pump(client) == [("accepted", 1, True), ("released", 2, False, "released")]
    assert bytes(broker.queues[b"bound"].take()[MESSAGE].body()) == b"routed"

    client.connect(0, "guest", "guest", "127.0.0.1", "/queues/missing")
    upstream = Upstream()
    ended = upstream.pump(client)
    assert len(ended) == 1 and ended[0][2] == "amqp:not-found"
    assert (
        ended[0][1]
        == "upstream detached the link to '/queues/missing': amqp:not-found: no queue 'missing' in vhost '/'"
    )

    client.connect(0, "guest", "nope", "127.0.0.1", "/queues/missing")
    upstream = Upstream()
    assert upstream.pump(client)[0][1] == "login refused: SASL outcome 1 (auth)"


def test_many_messages_in_parts_keep_flowing_through_hutch_s_session_window():
    """Each part of a message is a transfer of the session's window (400 frames at hutch):
    a client that honours the window goes on only as hutch widens it again."""
    upstream = Upstream()
    declare_queue(upstream.broker, None, b"central")
    queue = upstream.broker.queues[b"central"]
    client = Protocol(max_frame=512)
    client.connect(0, "guest", "guest", "127.0.0.1", "/queues/central")
    upstream.pump(client)
    confirmed = 0  # the highest number acked (hutch accepts a run of deliveries at once: multiple)
    arrived = []
    sent = 0
    for _ in range(200):
        while sent < 150 and client.room() and sent - confirmed < 24:  # (a board bridge's window)
            forward(client, b"%04d" % sent + b"p" * 3000)  # seven frames each
            sent += 1
        for kind, seq, _multiple in upstream.pump(client):
            assert kind == "accepted"
            confirmed = max(confirmed, seq)
        while queue.message_count():  # (taken as they come: a board's heap holds few of them)
            arrived.append(bytes(queue.take()[MESSAGE].body())[:4])
        if confirmed == 150:
            break
    assert sent == 150 and confirmed == 150, (sent, confirmed)
    assert arrived == [b"%04d" % i for i in range(150)], "1,050 frames through a window of 400"
