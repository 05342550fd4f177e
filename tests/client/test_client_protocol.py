"""client/protocol.py, sans-IO: byte sequences in, events and bytes out, no broker needed.

The broker's side is played with codec/wire.py (the broker's value mapping); what the client
sends is read back with it. The interop tests (tests/interop/clients/test_sensor_client.py) run the
same protocol against the real broker, under CPython and MicroPython.
"""

from hutch.client.protocol import ChannelClosed, ConnectionClosed, Message, Protocol
from hutch.codec import spec, wire


def sent(p):
    """Everything the protocol has to send, as bytes."""
    out = b""
    data = p.data_to_send()
    while data is not None:
        out += bytes(data)
        data = p.data_to_send()
    return out


def frames(raw):
    """[(type, channel, payload)] of whole frames."""
    out = []
    pos = 0
    while pos < len(raw):
        kind, channel, start, stop = wire.frame_at(raw, pos, len(raw))
        out.append((kind, channel, raw[start:stop]))
        pos = stop + 1
    return out


def methods(raw):
    """[(method id, args)] of the method frames in raw (a client's mapping)."""
    out = []
    for kind, _channel, payload in frames(raw):
        if kind == 1:
            method_id = wire.get_long(payload, 0)
            out.append((method_id, wire.decode_args(wire.signature(method_id), payload, 4, len(payload), True)))
    return out


def feed(p, raw):
    """Hand raw to the protocol a few bytes at a time; every event that comes out."""
    events = []
    for i in range(0, len(raw), 5):
        chunk = raw[i : i + 5]
        while chunk:
            chunk = chunk[p.receive_data(chunk) :]
            event = p.next_event()
            while event is not None:
                events.append(event)
                event = p.next_event()
    return events


def opened(heartbeat=30, frame_max=4096):
    p = Protocol(frame_max)
    p.connect(0, "u", "pw", "/v", heartbeat, "node-1")
    assert sent(p) == wire.PROTOCOL_HEADER
    assert feed(p, wire.method_frame(0, spec.CONNECTION_START, (0, 9, {}, b"PLAIN AMQPLAIN", b"en_US"))) == []
    [(method_id, (props, mechanism, response, locale))] = methods(sent(p))
    assert method_id == spec.CONNECTION_START_OK and mechanism == "PLAIN" and locale == "en_US"
    assert response == "\x00u\x00pw" and props["connection_name"] == "node-1"
    assert props["capabilities"]["publisher_confirms"] is True
    assert feed(p, wire.method_frame(0, spec.CONNECTION_TUNE, (2047, 131072, 60))) == []
    assert methods(sent(p)) == [
        (spec.CONNECTION_TUNE_OK, [1, frame_max, heartbeat]),  # the smaller frame_max and heartbeat
        (spec.CONNECTION_OPEN, ["/v", "", False]),
    ]
    assert feed(p, wire.method_frame(0, spec.CONNECTION_OPEN_OK, (b"",))) == []
    assert methods(sent(p)) == [(spec.CHANNEL_OPEN, [""])]
    assert p.awaiting == spec.CHANNEL_OPEN and not p.channel_open
    assert feed(p, wire.method_frame(1, spec.CHANNEL_OPEN_OK, (b"",))) == [(spec.CHANNEL_OPEN_OK, [""])]
    assert p.awaiting == 0 and p.channel_open and p.state == "open" and p.frame_max == frame_max
    return p


def test_handshake_negotiates_and_opens_the_channel():
    opened()


def test_the_brokers_product_is_kept_from_connection_start():
    """A reader of streams relies on what hutch promises and RabbitMQ does not (the README's
    "Finding a stream's ends"): it tells them apart by the product the broker names."""
    p = Protocol()
    p.connect(0)
    sent(p)
    assert p.server_product is None
    start = (0, 9, {b"product": b"hutch", b"version": b"0.1.0"}, b"PLAIN", b"en_US")
    assert feed(p, wire.method_frame(0, spec.CONNECTION_START, start)) == []
    assert p.server_product == "hutch"
    p.connect(0)  # a new connection forgets the old broker's name
    assert p.server_product is None


def test_rpc_reply_clears_awaiting_and_comes_as_an_event():
    p = opened()
    p.call(spec.QUEUE_DECLARE, (0, "q", False, True, False, False, False, {"x-max-length": 3}))
    assert methods(sent(p)) == [(spec.QUEUE_DECLARE, [0, "q", False, True, False, False, False, {"x-max-length": 3}])]
    assert p.awaiting == spec.QUEUE_DECLARE
    assert feed(p, wire.method_frame(1, spec.QUEUE_DECLARE_OK, (b"q", 5, 1))) == [(spec.QUEUE_DECLARE_OK, ["q", 5, 1])]
    assert p.awaiting == 0
    p.call(spec.BASIC_GET, (0, "q", False))
    assert feed(p, wire.method_frame(1, spec.BASIC_GET_EMPTY, (b"",))) == [(spec.BASIC_GET_EMPTY, [""])]
    assert p.awaiting == 0


def test_deliveries_are_assembled_from_their_content_frames():
    p = opened()
    deliver = wire.method_frame(1, spec.BASIC_DELIVER, (b"ctag", 7, True, b"ex", b"key"))
    body = bytes(range(256)) * 40  # 10240 bytes: three body frames at frame_max 4096
    props = {"content-type": b"text/plain", "headers": {"a": 1, "s": b"t"}, "timestamp": 5}
    raw = deliver + wire.content_frames(1, body, props, 4096) + wire.HEARTBEAT_FRAME
    [m] = feed(p, raw)
    assert isinstance(m, Message) and m.kind == spec.BASIC_DELIVER
    assert (m.consumer_tag, m.delivery_tag, m.redelivered, m.exchange, m.routing_key) == ("ctag", 7, True, "ex", "key")
    assert m.body == body
    assert m.properties == {"content_type": "text/plain", "headers": {"a": 1, "s": "t"}, "timestamp": 5}
    get_ok = wire.method_frame(1, spec.BASIC_GET_OK, (3, False, b"", b"q", 2))
    p.call(spec.BASIC_GET, (0, "q", False))
    [m] = feed(p, get_ok + wire.content_frames(1, b"", None))  # an empty body: no body frame
    assert (m.kind, m.delivery_tag, m.message_count, m.body, m.properties) == (spec.BASIC_GET_OK, 3, 2, b"", {})
    assert p.awaiting == 0
    returned = wire.method_frame(1, spec.BASIC_RETURN, (312, b"NO_ROUTE", b"", b"nowhere"))
    [m] = feed(p, returned + wire.content_frames(1, b"r", None))
    assert (m.kind, m.reply_code, m.reply_text, m.routing_key, m.body) == (
        spec.BASIC_RETURN,
        312,
        "NO_ROUTE",
        "nowhere",
        b"r",
    )


def test_publish_lays_out_the_frames_of_small_and_large_bodies():
    p = opened()
    props = {"delivery_mode": 2, "message_id": "m", "headers": {"raw": b"\x00", "n": 1}}
    for body in (b"", b"small", bytes(5000), bytes(range(256)) * 40):
        assert p.publish("ex", "key", body, props, True) == 0
        got = frames(sent(p))
        assert methods(wire.frame(*got[0])) == [(spec.BASIC_PUBLISH, [0, "ex", "key", True, False])]
        assert got[1][0] == 2 and wire.get_longlong(got[1][2], 4) == len(body)
        m = Message(0, "", "")
        m._raw = got[1][2]
        assert m.properties == props  # pika's names, bytes as 'x' and back
        chunks = [payload for kind, _, payload in got[2:] if kind == 3]
        assert len(chunks) == len(got) - 2 and all(len(c) <= 4088 for c in chunks) and b"".join(chunks) == body


def test_an_unknown_property_name_is_an_error_before_anything_is_written():
    """pika's names ("delivery_mode"); the spec's ("delivery-mode") or a typo would be dropped
    without a word, and the readings published transient: refused, naming the name meant."""
    p = opened()
    for props, meant in (({"delivery-mode": 2}, "delivery_mode"), ({"delivery_mod": 2}, None)):
        try:
            p.publish("", "q", b"21.5", props)
        except ValueError as e:
            assert repr(list(props)[0]) in str(e) and (meant is None or "did you mean '%s'" % meant in str(e)), e
        else:
            raise AssertionError("published with %r" % props)
        assert sent(p) == b""  # nothing half written: the protocol goes on
    p.publish("", "q", b"21.5", {"delivery_mode": 2})
    assert methods(wire.frame(*frames(sent(p))[0])) == [(spec.BASIC_PUBLISH, [0, "", "q", False, False])]


def test_a_frame_queued_while_a_body_is_pending_follows_the_whole_message():
    p = opened()
    body = bytes(range(256)) * 40
    p.publish("", "q", body)
    first = p.data_to_send()  # method, header and the first body frame's header
    assert first is not None
    out = bytes(first)  # the view is valid until the next call: copied, let go
    del first
    p.send(spec.BASIC_ACK, (1, False))  # before the rest of the body was taken
    out += sent(p)
    kinds = [kind for kind, _, _ in frames(out)]
    assert kinds == [1, 2, 3, 3, 3, 1]
    assert b"".join(payload for kind, _, payload in frames(out) if kind == 3) == body


def test_confirms_settle_with_multiple_and_keep_what_was_nacked():
    p = opened()
    assert p.publish("", "q", b"x") == 0  # not in confirm mode
    p.call(spec.CONFIRM_SELECT, (False,))
    assert feed(p, wire.method_frame(1, spec.CONFIRM_SELECT_OK)) == [(spec.CONFIRM_SELECT_OK, [])]
    assert p.confirming
    assert [p.publish("", "q", b"x", None, False, "m%d" % i) for i in range(1, 6)] == [1, 2, 3, 4, 5]
    sent(p)
    assert p.in_flight == [1, 2, 3, 4, 5]
    events = feed(
        p, wire.method_frame(1, spec.BASIC_ACK, (2, True)) + wire.method_frame(1, spec.BASIC_NACK, (4, False, True))
    )
    assert events == [(spec.BASIC_ACK, [2, True]), (spec.BASIC_NACK, [4, False, True])]
    assert p.in_flight == [3, 5] and p.unconfirmed == ["m4"]
    p.publish("", "q", b"x")  # no record: its sequence number is kept
    feed(p, wire.method_frame(1, spec.BASIC_NACK, (6, True, True)))
    assert p.in_flight == [] and p.unconfirmed == ["m4", "m3", "m5", 6]


def test_the_brokers_channel_close_is_answered_and_loses_what_was_in_flight():
    p = opened()
    p.call(spec.CONFIRM_SELECT, (False,))
    feed(p, wire.method_frame(1, spec.CONFIRM_SELECT_OK))
    p.publish("nowhere", "k", b"x", None, False, "lost")
    sent(p)
    [e] = feed(p, wire.method_frame(1, spec.CHANNEL_CLOSE, (404, b"NOT_FOUND - no exchange", 60, 40)))
    assert isinstance(e, ChannelClosed) and (e.code, e.text, e.method) == (404, "NOT_FOUND - no exchange", (60, 40))
    assert methods(sent(p)) == [(spec.CHANNEL_CLOSE_OK, [])]
    assert not p.channel_open and not p.confirming and p.unconfirmed == ["lost"] and p.state == "open"
    try:
        p.publish("", "q", b"x")
        raise AssertionError("published on a closed channel")
    except OSError:
        pass
    p.call(spec.CHANNEL_OPEN, ("",))  # reopened on the same connection
    assert feed(p, wire.method_frame(1, spec.CHANNEL_OPEN_OK, (b"",))) == [(spec.CHANNEL_OPEN_OK, [""])]
    assert p.channel_open


def test_connection_close_both_ways():
    p = opened()
    [e] = feed(p, wire.method_frame(0, spec.CONNECTION_CLOSE, (320, b"CONNECTION_FORCED", 0, 0)))
    assert isinstance(e, ConnectionClosed) and e.code == 320
    assert methods(sent(p)) == [(spec.CONNECTION_CLOSE_OK, [])] and p.state == "closed"
    p = opened()
    p.call(spec.CONNECTION_CLOSE, (200, "bye", 0, 0))
    assert p.state == "closing" and methods(sent(p)) == [(spec.CONNECTION_CLOSE, [200, "bye", 0, 0])]
    # a delivery that arrives now is dropped (the broker requeues it)
    deliver = wire.method_frame(1, spec.BASIC_DELIVER, (b"c", 1, False, b"", b"q")) + wire.content_frames(1, b"x")
    assert feed(p, deliver + wire.method_frame(0, spec.CONNECTION_CLOSE_OK)) == [(spec.CONNECTION_CLOSE_OK, [])]
    assert p.state == "closed" and p.awaiting == 0


def test_blocked_flow_and_cancel_from_the_broker():
    p = opened()
    assert feed(p, wire.method_frame(0, spec.CONNECTION_BLOCKED, (b"low on memory",))) == [
        (spec.CONNECTION_BLOCKED, ["low on memory"])
    ]
    assert p.blocked == "low on memory"
    feed(p, wire.method_frame(0, spec.CONNECTION_UNBLOCKED))
    assert p.blocked is None
    assert feed(p, wire.method_frame(1, spec.CHANNEL_FLOW, (False,))) == [(spec.CHANNEL_FLOW, [False])]
    assert methods(sent(p)) == [(spec.CHANNEL_FLOW_OK, [False])]
    assert feed(p, wire.method_frame(1, spec.BASIC_CANCEL, (b"ctag", True))) == [(spec.BASIC_CANCEL, ["ctag", True])]


def test_heartbeats_are_sent_when_idle_and_a_silent_broker_is_noticed():
    p = opened(heartbeat=10)  # 10 s: one every 5 s, given up on after 20 s of silence
    assert p.tick(1000) == 4000 and sent(p) == b""
    assert p.tick(5000) == 5000 and sent(p) == wire.HEARTBEAT_FRAME
    assert p.tick(9000) == 1000 and sent(p) == b""
    p.receive_data(wire.HEARTBEAT_FRAME)
    assert p.next_event() is None
    assert p.tick(12000) >= 0
    assert p.tick(32001) == -1  # nothing since 12000
    q = opened(heartbeat=0)
    assert q.tick(10**6) > 10**6 and sent(q) == b""


def test_bad_frames_raise():
    for raw in (
        b"\x01\x00\x00\x00\x00\x00\x00\x00",  # no frame-end octet
        b"\x01\x00\x00\x00\x01\x00\x00",  # larger than frame_max
    ):
        p = opened()
        p.receive_data(raw)
        try:
            p.next_event()
            raise AssertionError("no DecodeError")
        except wire.DecodeError:
            pass


def test_a_property_of_the_wrong_type_is_named_before_anything_is_written():
    """delivery_mode "2" (a string from a config or JSON) is a TypeError that names the property
    and what it takes, not the encoder's own words; nothing of the message is queued."""
    p = opened()
    for props, words in (
        (
            {"delivery_mode": "2"},
            "message property delivery_mode must be 1 (transient) or 2 (persistent), an integer, not '2'",
        ),
        ({"content_type": 5}, "message property content_type must be a string, not 5"),
        ({"headers": "x=1"}, "message property headers must be a table (a dict), not 'x=1'"),
        ({"timestamp": "now"}, "message property timestamp must be an integer (seconds), not 'now'"),
    ):
        try:
            p.publish("", "q", b"21.5", props)
            raise AssertionError("no error for %r" % (props,))
        except TypeError as e:
            assert str(e) == words, str(e)
        assert sent(p) == b""
    p.publish("", "q", b"21.5", {"delivery_mode": 2})
    assert [kind for kind, _, _ in frames(sent(p))] == [1, 2, 3]  # the next message goes out whole
