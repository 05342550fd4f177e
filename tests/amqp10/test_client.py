"""amqp10/client.py, the AMQP 1.0 client a bridge forwards with, driven in-process: against
hutch's own 1.0 front end (amqp10/connection.py over a core Broker, bytes shuttled between
the two), and against a peer written here frame by frame for what that front end never
says (refusals, outcomes, partial credit, small frames and windows, silence, $cbs).

Plain functions and asserts: tests/micropython/test_amqp10_micropython.py runs them under
MicroPython too (a board's bridge to a 1.0 cloud runs this client).
"""

from amqp10_peer import forward
from amqp10_sections import sections, to_parts
from upstream_events import events

from hutch.amqp10 import spec
from hutch.amqp10.client import Protocol, quote, v2_address
from hutch.amqp10.frames import field, frame, split
from hutch.amqp10.types import Array, Described, Symbol, Ubyte, Uint, Ulong, Ushort, encode

SASL_HEADER = b"AMQP\x03\x01\x00\x00"
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"


def described(code, fields):
    return Described(Ulong(code), fields)


class Peer:
    """The other end, written frame by frame: what the client sent (decoded), what to send it."""

    def __init__(self, client):
        self.client = client
        self.pending = b""
        self.got = []  # the client's events, taken as it read what was sent (as a driver does)
        self.sizes = {}  # id(frame) -> its size in octets, as sent

    def read(self):
        """What the client sent since the last read: protocol headers (bytes) and Frames."""
        while True:
            data = self.client.data_to_send()
            if data is None:
                break
            self.pending += bytes(data)
        out = []
        while self.pending:
            if self.pending[:4] == b"AMQP":
                out.append(self.pending[:8])
                self.pending = self.pending[8:]
                continue
            found, end = split(self.pending, 0, 1 << 24)
            assert found is not None, "a frame cut short"
            out.append(found)
            self.sizes[id(found)] = end
            self.pending = self.pending[end:]
        return out

    def frames(self, code=None):
        return [f for f in self.read() if not isinstance(f, bytes) and (code is None or f.code == code)]

    def send(self, data, step=7):
        """data fed to the client a few octets at a time (frames split across reads)."""
        while data:
            n = self.client.receive_data(data[:step])
            data = data[n:]
            self.got += events(self.client)

    def events(self):
        got = self.got + events(self.client)
        self.got = []
        return got

    def say(self, code, fields, payload=b"", sasl=False):
        self.send(frame(0, code, fields, payload, sasl))


def connected(mechanisms=("PLAIN",), max_frame=65536, idle=0, window=100, credit=10, address="/queues/q", **kw):
    """(client, peer): a client through its handshake with a peer that says what is given."""
    client = Protocol(max_frame=kw.pop("our_max_frame", 65536))
    client.connect(0, "guest", "secret", "hub.example", address, **kw)
    peer = Peer(client)
    assert peer.read() == [SASL_HEADER]
    peer.send(SASL_HEADER)
    peer.say(spec.SASL_MECHANISMS, [Array(0xA3, [Symbol(m) for m in mechanisms])], sasl=True)
    init = peer.read()[0]
    assert init.code == spec.SASL_INIT
    peer.say(spec.SASL_OUTCOME, [Ubyte(0)], sasl=True)
    sent = peer.read()
    assert sent[0] == AMQP_HEADER and sent[1].code == spec.OPEN
    peer.send(AMQP_HEADER)
    peer.say(spec.OPEN, ["peer", None, Uint(max_frame), Ushort(0)] + ([Uint(idle)] if idle else []))
    begin = peer.frames()
    assert [f.code for f in begin] == [spec.BEGIN]
    peer.say(spec.BEGIN, [Ushort(0), Uint(0), Uint(window), Uint(window)])
    if client.cbs is None:
        attach = peer.frames()[0]
        assert attach.code == spec.ATTACH
        peer.say(spec.ATTACH, [field(attach, 0), Uint(7), True, None, None, field(attach, 5), field(attach, 6)])
        assert client.channel_open and client.room() == 0, "no message before credit"
        if credit:
            peer.say(spec.FLOW, [Uint(0), Uint(window), Uint(0), Uint(window), Uint(7), Uint(0), Uint(credit)])
    client.sasl_init = init
    return client, peer


# ---------------------------------------------------------------- the handshake


def test_the_handshake_goes_one_step_at_a_time_and_attaches_an_unsettled_sender():
    client = Protocol(max_frame=4096)
    client.connect(0, "edge", "s3cret", "central.example", "/exchange/sensors/site-7", idle_ms=30000)
    peer = Peer(client)
    assert peer.read() == [SASL_HEADER]
    peer.send(SASL_HEADER)
    assert peer.read() == [] and peer.events() == []
    peer.say(spec.SASL_MECHANISMS, [Array(0xA3, [Symbol("ANONYMOUS"), Symbol("PLAIN")])], sasl=True)
    init = peer.read()
    assert len(init) == 1 and init[0].kind == 1  # a SASL frame
    assert field(init[0], 0) == Symbol("PLAIN") and field(init[0], 1) == b"\x00edge\x00s3cret"
    assert field(init[0], 2) == "central.example"
    peer.say(spec.SASL_OUTCOME, [Ubyte(0)], sasl=True)
    sent = peer.read()
    assert sent[0] == AMQP_HEADER
    assert (field(sent[1], 1), field(sent[1], 2), field(sent[1], 4)) == ("central.example", Uint(4096), Uint(30000))
    assert len(sent) == 2, "nothing more before upstream's open (RabbitMQ 3.10 ends a pipelined attach)"
    peer.send(AMQP_HEADER)
    peer.say(spec.OPEN, ["rabbit", None, Uint(4096), Ushort(0), Uint(60000)])
    begin = peer.read()
    assert [f.code for f in begin] == [spec.BEGIN] and field(begin[0], 0) is None
    peer.say(spec.BEGIN, [Ushort(0), Uint(0), Uint(65535), Uint(65535)])
    attach = peer.read()
    assert [f.code for f in attach] == [spec.ATTACH]
    a = attach[0]
    assert field(a, 2) is False and field(a, 3) == Ubyte(0) and field(a, 4) == Ubyte(0)  # sender, unsettled, first
    assert field(a, 6) == described(spec.TARGET, ["/exchange/sensors/site-7"])
    assert not client.channel_open
    peer.say(spec.ATTACH, [field(a, 0), Uint(3), True, None, None, field(a, 5), field(a, 6)])
    assert client.channel_open and client.room() == 0
    peer.say(spec.FLOW, [Uint(0), Uint(65535), Uint(0), Uint(65535), Uint(3), Uint(0), Uint(65536)])
    assert client.room() == 65535  # the session's window bounds it first
    assert peer.events() == []


def test_a_refused_login_a_missing_mechanism_and_a_0_9_1_broker_end_it_with_why():
    client = Protocol()
    client.connect(0, "guest", "wrong", "h", "/queues/q")
    peer = Peer(client)
    peer.read()
    peer.send(SASL_HEADER)
    peer.say(spec.SASL_MECHANISMS, [Symbol("PLAIN")], sasl=True)  # (one mechanism: no array)
    peer.read()
    peer.say(spec.SASL_OUTCOME, [Ubyte(1)], sasl=True)
    ended = peer.events()
    assert len(ended) == 1 and ended[0][1] == "login refused: SASL outcome 1 (auth)"
    assert client.state == 8 and client.next_event() is None

    client.connect(0, "guest", "guest", "h", "/queues/q", mechanism="EXTERNAL")
    peer.read()
    peer.send(SASL_HEADER)
    peer.say(spec.SASL_MECHANISMS, [Array(0xA3, [Symbol("PLAIN"), Symbol("ANONYMOUS")])], sasl=True)
    assert peer.events()[0][1] == "login refused: upstream offers SASL PLAIN, ANONYMOUS, not EXTERNAL"

    client.connect(0, "guest", "guest", "h", "/queues/q")
    peer.read()
    peer.send(b"AMQP\x00\x00\x09\x01")  # a 0-9-1 broker's answer
    assert "does not speak AMQP 1.0" in peer.events()[0][1]


# ---------------------------------------------------------------- messages and their outcomes


def test_messages_are_numbered_from_1_and_each_outcome_is_a_confirm_or_a_refusal_with_why():
    client, peer = connected()
    assert client.room() == 10
    seqs = [forward(client, b"m%d" % i, headers={"n": i}, content_type=b"text/plain") for i in range(6)]
    assert seqs == [1, 2, 3, 4, 5, 6] and client.room() == 4
    transfers = peer.frames(spec.TRANSFER)
    assert [field(t, 1) for t in transfers] == [Uint(i) for i in range(6)]
    assert {field(t, 4) for t in transfers} == {False}, "unsettled"
    props, body = to_parts(transfers[2].payload)
    assert body == b"m2" and props["headers"] == {b"n": 2} and props["content-type"] == b"text/plain"
    assert props["delivery-mode"] == 1
    assert client.in_flight == [1, 2, 3, 4, 5, 6]

    peer.say(spec.DISPOSITION, [True, Uint(0), Uint(1), True, described(spec.ACCEPTED, [])])
    peer.say(spec.DISPOSITION, [True, Uint(3), None, True, described(spec.RELEASED, [])])
    rejected = described(spec.REJECTED, [described(spec.ERROR, [Symbol("amqp:resource-limit-exceeded"), "full"])])
    peer.say(spec.DISPOSITION, [True, Uint(2), None, True, rejected])
    peer.say(spec.DISPOSITION, [True, Uint(5), None, True, described(spec.MODIFIED, [True, True])])
    peer.say(spec.DISPOSITION, [True, Uint(4), None, True, described(spec.ACCEPTED, [])])
    assert peer.events() == [
        ("accepted", 2, True),
        ("released", 4, False, "released"),
        ("rejected", 3, False, "rejected (amqp:resource-limit-exceeded: full)"),
        ("released", 6, False, "modified (undeliverable here)"),
        ("accepted", 5, True),
    ]
    assert client.in_flight == []
    peer.say(spec.DISPOSITION, [True, Uint(0), Uint(5), True, described(spec.ACCEPTED, [])])
    assert peer.events() == [], "what is settled is settled once"


def test_an_acceptance_of_later_messages_first_confirms_each_and_a_received_state_is_no_outcome():
    client, peer = connected()
    for _ in range(4):
        forward(client, b"x")
    peer.say(spec.DISPOSITION, [True, Uint(2), Uint(3), True, described(spec.ACCEPTED, [])])
    peer.say(spec.DISPOSITION, [True, Uint(0), None, False, described(spec.RECEIVED, [Uint(0), Ulong(0)])])
    assert peer.events() == [("accepted", 3, False), ("accepted", 4, False)]
    peer.say(spec.DISPOSITION, [True, Uint(0), Uint(1), False, described(spec.ACCEPTED, [])])
    assert peer.events() == [("accepted", 2, True)]
    settle = peer.frames(spec.DISPOSITION)  # unsettled by the peer: we settle it
    assert [(field(d, 0), field(d, 1), field(d, 2), field(d, 3)) for d in settle] == [(False, Uint(0), Uint(1), True)]


def test_pre_settled_transfers_keep_nothing_in_flight():
    client, peer = connected(settled=True)
    assert forward(client, b"fire and forget") == 1
    transfer = peer.frames(spec.TRANSFER)[0]
    assert field(transfer, 4) is True and client.in_flight == []


def test_a_null_target_says_each_message_s_address_in_its_to():
    client, peer = connected(address=None)
    forward(client, b"a", exchange=b"amq.topic", routing_key=b"site 7/a")
    forward(client, b"b", exchange=b"", routing_key=b"readings")
    first, second = peer.frames(spec.TRANSFER)
    assert sections(first.payload)[spec.PROPERTIES][2] == "/exchanges/amq.topic/site%207%2Fa"
    assert sections(second.payload)[spec.PROPERTIES][2] == "/queues/readings"


def test_addresses_and_quoting():
    assert quote("a b/c~d") == "a%20b%2Fc~d" and quote(b"\xc3\xa9") == "%C3%A9"
    assert v2_address("x", "k") == "/exchanges/x/k" and v2_address(b"x") == "/exchanges/x"
    assert v2_address("", "q/1") == "/queues/q%2F1"


# ---------------------------------------------------------------- credit, windows, frames


def test_credit_is_counted_from_the_delivery_count_the_peer_saw_with_drain_and_echo():
    client, peer = connected(credit=3)
    forward(client, b"1")
    forward(client, b"2")
    assert client.room() == 1
    # the peer grants 5 counted from delivery count 1: one of ours crossed its flow
    peer.say(spec.FLOW, [Uint(1), Uint(100), Uint(0), Uint(100), Uint(7), Uint(1), Uint(5)])
    assert client.room() == 4
    peer.read()
    peer.say(spec.FLOW, [Uint(2), Uint(100), Uint(0), Uint(100), Uint(7), Uint(2), Uint(4), None, True])  # drain
    assert client.room() == 0
    drained = peer.frames(spec.FLOW)[0]
    assert field(drained, 5) == Uint(6) and field(drained, 6) == Uint(0) and field(drained, 8) is True
    peer.say(spec.FLOW, [Uint(2), Uint(100), Uint(0), Uint(100), None, None, None, None, False, True])  # echo
    echoed = peer.frames(spec.FLOW)[0]
    assert field(echoed, 2) == Uint(2) and field(echoed, 4) is None  # our next-outgoing-id; the session's alone


def test_a_message_larger_than_the_peer_s_frame_goes_in_parts_within_the_session_window():
    client, peer = connected(max_frame=512, window=3, credit=10)
    body = bytes(range(256)) * 8
    forward(client, body, headers={"k": "v"})
    sent = peer.frames(spec.TRANSFER)
    assert len(sent) == 3 and client.room() == 0, "three frames: the window; the rest waits"
    assert all(peer.sizes[id(f)] <= 512 for f in sent)
    assert field(sent[0], 1) == Uint(0) and field(sent[0], 5) is True and field(sent[1], 5) is True
    peer.say(spec.FLOW, [Uint(3), Uint(1), Uint(0), Uint(100), Uint(7), Uint(0), Uint(10)])
    sent += peer.frames(spec.TRANSFER)
    assert len(sent) == 4, "one more: the window the flow gave"
    peer.say(spec.FLOW, [Uint(4), Uint(100), Uint(0), Uint(100), Uint(7), Uint(0), Uint(10)])
    sent += peer.frames(spec.TRANSFER)
    assert len(sent) == 5 and [field(f, 5, False) for f in sent] == [True] * 4 + [False]
    assert field(sent[4], 1) is None, "continuations carry only the handle"
    props, received = to_parts(b"".join(f.payload for f in sent))
    assert received == body and props["headers"] == {b"k": b"v"}
    assert client.room() == 9
    forward(client, b"small")
    assert field(peer.frames(spec.TRANSFER)[0], 1) == Uint(1), "delivery ids count messages, not frames"


def test_our_frame_size_bounds_what_we_send_even_to_a_peer_that_takes_more():
    client, peer = connected(max_frame=1 << 20, our_max_frame=600)
    forward(client, b"z" * 2000)
    sent = peer.frames(spec.TRANSFER)
    assert all(peer.sizes[id(f)] <= 600 for f in sent)


def test_idle_time_outs_empty_frames_at_half_the_peer_s_and_silence_past_twice_ours():
    client, peer = connected(idle=1000, idle_ms=2000)
    peer.read()  # (the last of the handshake: sent at the next tick's time)
    assert client.tick(100) == 500 and client.data_to_send() is None
    assert client.tick(599) == 1
    assert client.tick(600) == 500
    assert client.data_to_send() == b"\x00\x00\x00\x08\x02\x00\x00\x00"  # half the peer's 1000 ms
    assert client.tick(3900) >= 0
    peer.send(b"\x00\x00\x00\x08\x02\x00\x00\x00")  # the peer's empty frame: it is alive
    assert client.tick(4100) >= 0 and client.tick(8000) >= 0 and peer.events() == []
    assert client.tick(8200) == -1, "nothing heard for more than twice our 2000 ms"


# ---------------------------------------------------------------- the link's end


def test_a_forced_detach_an_end_and_a_close_are_the_link_s_end_with_the_peer_s_condition():
    client, peer = connected()
    forward(client, b"in flight")
    why = described(spec.ERROR, [Symbol("amqp:link:detach-forced"), "token expired"])
    peer.say(spec.DETACH, [Uint(7), True, why])
    ended = peer.events()
    assert len(ended) == 1 and ended[0][0] == "ended"
    assert ended[0][2] == "amqp:link:detach-forced"
    assert ended[0][1] == "upstream detached the link to '/queues/q': amqp:link:detach-forced: token expired"

    client, peer = connected()
    peer.say(spec.END, [described(spec.ERROR, [Symbol("amqp:not-found"), "NOT_FOUND - no queue 'q'"])])
    assert peer.events()[0][1] == "upstream ended the session: amqp:not-found: NOT_FOUND - no queue 'q'"

    client, peer = connected()
    peer.read()
    peer.say(spec.CLOSE, [])
    assert peer.events()[0][1] == "upstream closed the connection"
    assert [f.code for f in peer.frames()] == [spec.CLOSE], "answered"


def test_octets_that_are_not_amqp_1_0_end_it_with_a_decode_error():
    client, peer = connected()
    peer.read()
    peer.send(b"\x00\x00\x00\x0c\x02\x00\x00\x00\xff\xff\xff\xff")
    ended = peer.events()
    assert ended[0][2] == "amqp:decode-error" and "not AMQP 1.0" in ended[0][1]
    close = peer.frames()[0]
    assert close.code == spec.CLOSE and field(close, 0).value[0] == Symbol("amqp:decode-error")


def test_a_refused_attach_is_followed_by_the_detach_that_says_why():
    client = Protocol()
    client.connect(0, "guest", "guest", "h", "/queues/nope")
    peer = Peer(client)
    peer.read()
    peer.send(SASL_HEADER)
    peer.say(spec.SASL_MECHANISMS, [Symbol("PLAIN")], sasl=True)
    peer.say(spec.SASL_OUTCOME, [Ubyte(0)], sasl=True)
    peer.send(AMQP_HEADER)
    peer.say(spec.OPEN, ["p"])
    peer.say(spec.BEGIN, [Ushort(0), Uint(0), Uint(10), Uint(10)])
    attach = peer.frames(spec.ATTACH)[0]
    peer.say(spec.ATTACH, [field(attach, 0), Uint(0), True, None, None, None, None])
    assert not client.channel_open and peer.events() == []
    peer.say(spec.DETACH, [Uint(0), True, described(spec.ERROR, [Symbol("amqp:not-found"), "no queue 'nope'"])])
    assert peer.events()[0][2] == "amqp:not-found"


# ---------------------------------------------------------------- $cbs


def token_reply(peer, receiver_handle, delivery_id, status, correlation):
    payload = (
        encode(described(spec.PROPERTIES, [None, None, None, None, None, correlation]))
        + encode(described(spec.APPLICATION_PROPERTIES, {"status-code": status, "status-description": "ok"}))
        + encode(described(spec.AMQP_VALUE, None))
    )
    peer.say(spec.TRANSFER, [Uint(receiver_handle), Uint(delivery_id), b"r", Uint(0), False], payload)


def test_cbs_puts_the_token_first_then_attaches_the_link_and_renews_in_band():
    cbs = ("hub.example/devices/d1", "servicebus.windows.net:sastoken", "SharedAccessSignature sr=a&sig=b&se=1")
    client, peer = connected(
        ("ANONYMOUS",), mechanism="ANONYMOUS", cbs=cbs, address="/devices/d1/messages/events", credit=0
    )
    assert field(client.sasl_init, 0) == Symbol("ANONYMOUS") and field(client.sasl_init, 1) == b""
    attaches = peer.frames()
    assert [f.code for f in attaches] == [spec.ATTACH, spec.ATTACH]
    sender, receiver = attaches
    assert field(sender, 2) is False and field(sender, 6) == described(spec.TARGET, ["$cbs"])
    assert field(receiver, 2) is True and field(receiver, 5).value[0] == "$cbs"
    peer.say(spec.ATTACH, [field(sender, 0), Uint(0), True, None, None, field(sender, 5), field(sender, 6)])
    peer.say(spec.ATTACH, [field(receiver, 0), Uint(1), False, None, None, field(receiver, 5), field(receiver, 6)])
    flow = peer.frames()
    assert [f.code for f in flow] == [spec.FLOW] and field(flow[0], 4) == Uint(1) and field(flow[0], 6).value > 0
    assert not client.channel_open, "no put-token before credit on $cbs"
    peer.say(spec.FLOW, [Uint(0), Uint(100), Uint(0), Uint(100), Uint(0), Uint(0), Uint(5)])
    put = peer.frames(spec.TRANSFER)
    assert len(put) == 1 and field(put[0], 0) == Uint(0)
    request = sections(put[0].payload)
    assert request[spec.APPLICATION_PROPERTIES] == {
        "operation": "put-token",
        "type": "servicebus.windows.net:sastoken",
        "name": "hub.example/devices/d1",
    }
    assert request[spec.AMQP_VALUE] == cbs[2]
    message_id, reply_to = request[spec.PROPERTIES][0], request[spec.PROPERTIES][4]
    assert reply_to == "cbs"
    peer.say(spec.DISPOSITION, [True, Uint(0), None, True, described(spec.ACCEPTED, [])])
    token_reply(peer, 1, 0, 200, message_id)
    answer = peer.frames()
    assert [f.code for f in answer] == [spec.DISPOSITION, spec.ATTACH], "the reply settled, then the link"
    link = answer[1]
    assert field(link, 1) == Uint(2) and field(link, 6) == described(spec.TARGET, ["/devices/d1/messages/events"])
    peer.say(spec.ATTACH, [field(link, 0), Uint(2), True, None, None, field(link, 5), field(link, 6)])
    peer.say(spec.FLOW, [Uint(1), Uint(100), Uint(0), Uint(100), Uint(2), Uint(0), Uint(10)])
    assert client.channel_open and client.room() == 10
    forward(client, b"telemetry")
    client.put_token("SharedAccessSignature sr=a&sig=c&se=2")
    forward(client, b"more")
    sent = peer.frames(spec.TRANSFER)
    assert [(field(f, 0), field(f, 1)) for f in sent] == [(Uint(2), Uint(1)), (Uint(0), Uint(2)), (Uint(2), Uint(3))]
    # the two messages accepted together with the put-token between them: two confirms, no more
    peer.say(spec.DISPOSITION, [True, Uint(1), Uint(3), True, described(spec.ACCEPTED, [])])
    assert peer.events() == [("accepted", 2, True)]
    token_reply(peer, 1, 1, 401, "put-token-2")
    ended = peer.events()
    assert len(ended) == 1 and ended[0][1].startswith("upstream refused the token on $cbs: status 401")
