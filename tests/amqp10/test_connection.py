"""The AMQP 1.0 front end (amqp10/connection.py, session.py, links.py) driven with bytes, in
process: the handshake and hutch's own limits, links to and from queues and streams, credit,
windows, drain and echo, every outcome, multi-frame and aborted transfers, and each error at
its level (link, session, connection)."""

import pytest
from harness10 import AMQP_HEADER, SASL_HEADER, Client10, condition, data_message, outcome, section

from hutch.amqp10 import spec
from hutch.amqp10.sections import Sections
from hutch.amqp10.types import Described, Symbol, Ubyte, Uint, Ulong, Ushort, decode
from hutch.core import topology
from hutch.core.limits import Limits


def declare(broker, name, arguments=None, durable=False):
    topology.declare_queue(broker, None, name.encode(), durable=durable, arguments=arguments or {})
    return broker.queues[name.encode()]


def opened(limits=None, **login):
    client = Client10(limits=limits)
    said = client.login(**login)
    assert said[:2] == [SASL_HEADER, said[1]] and said[1].name == "sasl-mechanisms"
    return client, said


# ---------------------------------------------------------------- the handshake


def test_sasl_then_open_with_hutch_s_own_limits():
    client, said = opened(max_frame=1 << 20, idle=60000)
    assert said[1]["sasl-server-mechanisms"].value == [Symbol("PLAIN")]
    assert said[2].name == "sasl-outcome" and said[2]["code"] == Ubyte(0)
    assert said[3] == AMQP_HEADER
    open_ = said[4]
    assert open_.name == "open"
    # our frame size, channel-max and idle time-out: never an echo of the client's 1 MiB
    assert (open_["max-frame-size"], open_["channel-max"], open_["idle-time-out"]) == (
        Uint(131072),
        Ushort(63),
        Uint(30000),
    )
    assert client.conn.max_frame == 131072


def test_a_board_s_limits_are_what_it_says():
    client, said = opened(limits=Limits(frame_max=4096, heartbeat=30, amqp10_sessions=2), max_frame=65536)
    assert (said[4]["max-frame-size"], said[4]["channel-max"], said[4]["idle-time-out"]) == (
        Uint(4096),
        Ushort(1),
        Uint(15000),
    )


@pytest.mark.parametrize(
    "login, expected",
    [
        ({"max_frame": 256}, ("amqp:frame-size-too-small", "max-frame-size 256 is below the smallest, 512")),
        ({"idle": 500}, ("amqp:not-allowed", "idle-time-out 500 ms is below 1000 ms")),
        ({"hostname": "vhost:other"}, ("amqp:not-found", "virtual host 'other' does not exist")),
    ],
)
def test_an_open_hutch_cannot_serve_is_closed_with_why(login, expected):
    client, said = opened(**login)
    close = said[-1]
    assert close.name == "close"
    assert (condition(close), close["error"].value[1]) == expected
    assert client.conn.closed


@pytest.mark.parametrize("header", [b"AMQP\x00\x01\x00\x00", b"AMQP\x02\x01\x00\x00"])
def test_a_plain_or_tls_header_is_answered_with_sasl_s(header):
    client = Client10()
    client.send(header)
    assert client.read() == [SASL_HEADER]
    assert client.conn.closed


def test_a_wrong_password_is_refused_at_sasl():
    client = Client10()
    client.send(SASL_HEADER)
    client.frame(0, spec.SASL_INIT, [Symbol("PLAIN"), b"\x00guest\x00nope"], sasl=True)
    said = client.read()
    assert said[-1].name == "sasl-outcome" and said[-1]["code"] == Ubyte(1)
    client.send(AMQP_HEADER)  # not read: it is hung up on at its deadline
    assert client.read() == []


def test_guest_logs_in_from_any_loopback_address_as_over_0_9_1():
    """127.0.0.0/8 and IPv4-mapped 127.* are this machine too (core/auth.py is_loopback, which
    the 0-9-1 front end asks: tests/portable/test_handshake.py); another address is not."""
    for address, code in (("127.0.0.2", 0), ("::ffff:127.0.0.1", 0), ("::1", 0), ("192.0.2.7", 1)):
        client = Client10(peer={"address": address, "port": 40000, "transport": "tcp"})
        client.send(SASL_HEADER)
        client.frame(0, spec.SASL_INIT, [Symbol("PLAIN"), b"\x00guest\x00guest"], sasl=True)
        assert client.read()[-1]["code"] == Ubyte(code), address


def test_anonymous_is_offered_only_when_configured():
    client = Client10()
    client.broker.users.anonymous = "guest"
    client.send(SASL_HEADER)
    mechanisms = client.read()[1]["sasl-server-mechanisms"].value
    assert mechanisms == [Symbol("PLAIN"), Symbol("ANONYMOUS")]
    client.frame(0, spec.SASL_INIT, [Symbol("ANONYMOUS")], sasl=True)
    assert client.read()[-1]["code"] == Ubyte(0)


# ---------------------------------------------------------------- sending


def test_a_reading_named_in_application_properties_is_taken_once():
    """x-sensor-id and x-sensor-seq as a 1.0 client sets them: application properties (core/dedup.py)."""
    client, _ = opened()
    queue = declare(client.broker, "readings")
    client.begin()
    client.attach_sender("/queues/readings")
    reading = {"x-sensor-id": "t-1", "x-sensor-seq": 7}
    for delivery_id in range(3):  # the second and third: sent again, as after a lost disposition
        client.transfer(data_message(b"21.5", application=reading), delivery_id=delivery_id)
    said = client.frames("disposition")
    assert [f["state"] for f in said] == [outcome(spec.ACCEPTED)] * 3
    assert queue.messages.length == 1 and client.broker.sensors.dropped == 2


def test_a_sender_gets_credit_and_rabbitmq_4_s_outcomes():
    client, _ = opened()
    queue = declare(client.broker, "readings")
    client.begin()
    said = client.attach_sender("/queues/readings")
    assert [f.name for f in said] == ["attach", "flow"]
    assert said[1]["link-credit"] == Uint(170)
    client.transfer(data_message(b"one"), delivery_id=0)
    disposition = client.frames("disposition")[0]
    assert (disposition["first"], disposition["settled"], disposition["state"]) == (
        Uint(0), True, outcome(spec.ACCEPTED)
    )  # fmt: skip
    assert queue.messages.length == 1
    client.attach_sender("/exchanges/amq.direct/nobody", handle=1)
    client.transfer(data_message(b"lost"), handle=1, delivery_id=1)
    assert client.frames("disposition")[0]["state"] == outcome(spec.RELEASED)


def test_a_missing_queue_ends_the_link_and_the_session_goes_on():
    client, _ = opened()
    declare(client.broker, "readings")
    client.begin()
    said = client.attach_sender("/queues/nope")
    assert [f.name for f in said] == ["attach", "detach"]
    assert said[0]["target"] is None
    assert (condition(said[1]), said[1]["closed"]) == ("amqp:not-found", True)
    client.frame(0, spec.DETACH, [Uint(0), True])  # the client answers: its handle is free again
    assert client.frames() == []
    said = client.attach_sender("/queues/readings", handle=0)
    assert [f.name for f in said] == ["attach", "flow"]


def test_the_broker_s_refusals_in_1_0_s_words():
    """What the core refuses (core/session.py Refused) goes as a 1.0 condition, its text the
    description as RabbitMQ 4 words it (0-9-1 says "NOT_FOUND - no queue 'nope' in vhost '/'":
    tests/portable/test_queues.py)."""
    client, _ = opened()
    declare(client.broker, "mine").owner = object()  # another connection's exclusive queue
    client.begin()
    said = client.attach_receiver("/queues/nope")
    assert (condition(said[-1]), said[-1].fields[-1].value[1]) == ("amqp:not-found", "no queue 'nope' in vhost '/'")
    said = client.attach_receiver("/queues/mine", handle=1)
    assert condition(said[-1]) == "amqp:resource-locked"
    assert said[-1].fields[-1].value[1].startswith("cannot obtain exclusive access to locked queue 'mine'")


@pytest.mark.parametrize(
    "address, expected",
    [
        ("/amq/queue/readings", "amqp:invalid-field"),  # RabbitMQ 3's v1 form: not served
        ("/exchange/amq.direct/k", "amqp:invalid-field"),
        ("readings", "amqp:invalid-field"),
        ("/exchanges/amq.default/readings", "amqp:invalid-field"),
        ("/exchanges/nope", "amqp:not-found"),
    ],
)
def test_what_is_not_a_v2_address_is_a_link_error(address, expected):
    client, _ = opened()
    declare(client.broker, "readings")
    client.begin()
    said = client.attach_sender(address)
    assert condition(said[-1]) == expected


def test_a_null_target_routes_by_each_message_s_to():
    client, _ = opened()
    queue = declare(client.broker, "readings")
    client.begin()
    client.attach_sender(None)
    client.transfer(data_message(b"x", properties=[None, None, "/queues/readings"]))
    client.transfer(data_message(b"y", properties=[None, None, "/queues/nope"]), delivery_id=1)
    states = [f["state"] for f in client.frames("disposition")]
    assert states[0] == outcome(spec.ACCEPTED)
    assert states[1].descriptor == Ulong(spec.REJECTED) and states[1].value[0].value[0] == Symbol("amqp:not-found")
    assert queue.messages.length == 1


def test_a_message_in_frames_and_an_aborted_one():
    client, _ = opened(max_frame=512)
    queue = declare(client.broker, "readings")
    client.begin()
    client.attach_sender("/queues/readings")
    payload = data_message(b"x" * 2000)
    for i in range(0, len(payload), 400):
        client.transfer(payload[i : i + 400], delivery_id=0, more=i + 400 < len(payload))
    assert client.frames("disposition")[0]["state"] == outcome(spec.ACCEPTED)
    assert bytes(queue.messages.peek()[0].body()) == b"x" * 2000
    client.transfer(payload[:400], delivery_id=1, more=True)
    client.frame(0, spec.TRANSFER, [Uint(0), Uint(1), None, None, None, True, None, None, None, True])  # aborted
    assert client.frames("disposition") == [] and queue.messages.length == 1


def test_a_message_larger_than_allowed_ends_its_link():
    client, _ = opened(limits=Limits(max_message_bytes=1000))
    declare(client.broker, "readings")
    client.begin()
    client.attach_sender("/queues/readings")
    client.transfer(data_message(b"x" * 1500))
    detach = client.frames("detach")[0]
    assert condition(detach) == "amqp:link:message-size-exceeded"


def test_a_client_past_the_session_window_ends_its_session_not_its_connection():
    client, _ = opened(limits=Limits(amqp10_session_window=4))
    declare(client.broker, "readings")
    client.begin()
    client.attach_sender("/queues/readings")
    burst = b""
    for i in range(5):  # in one read: the window is not opened again before the fifth
        burst += _transfer_octets(data_message(b"m"), i)
    client.send(burst)
    end = client.frames("end")[0]
    assert condition(end) == "amqp:session:window-violation"
    assert not client.conn.closed
    client.frame(0, spec.END, [])
    assert client.begin()[0].name == "begin"  # a new session on the same channel


def _transfer_octets(payload, delivery_id):
    from hutch.amqp10.frames import frame

    return frame(0, spec.TRANSFER, [Uint(0), Uint(delivery_id), b"t", Uint(0), False], payload)


def test_no_credit_while_publishers_are_blocked_and_a_transfer_past_it_ends_the_link():
    client, _ = opened(limits=Limits(amqp10_link_credit=2))
    declare(client.broker, "readings")
    client.begin()
    client.broker.flow.blocked = True
    said = client.attach_sender("/queues/readings")
    assert [f.name for f in said] == ["attach"]  # no flow: no credit
    client.transfer(data_message(b"m"))
    assert condition(client.frames("detach")[0]) == "amqp:link:transfer-limit-exceeded"


def test_a_transfer_on_an_unknown_handle_ends_the_session():
    client, _ = opened()
    client.begin()
    client.transfer(data_message(b"m"), handle=9)
    assert condition(client.frames("end")[0]) == "amqp:session:unattached-handle"


def test_a_frame_on_a_channel_without_a_session_closes_the_connection():
    client, _ = opened()
    client.transfer(data_message(b"m"), channel=3)
    assert condition(client.frames("close")[0]) == "amqp:connection:framing-error"


def test_octets_that_are_not_a_frame_close_with_decode_error():
    client, _ = opened()
    client.send(b"\x00\x00\x00\x10\x02\x00\x00\x00\x00\x53\x14\xff\xff\xff\xff\xff")
    assert condition(client.frames("close")[0]) == "amqp:decode-error"


def test_transactions_and_second_settlement_are_refused_on_the_link():
    client, _ = opened()
    declare(client.broker, "readings")
    client.begin()
    client.frame(0, spec.ATTACH, ["tx", Uint(0), False, None, None, None, Described(Ulong(spec.COORDINATOR), [])])
    assert condition(client.frames("detach")[0]) == "amqp:not-implemented"
    client.frame(
        0, spec.ATTACH, ["r", Uint(1), True, Ubyte(0), Ubyte(1), Described(Ulong(spec.SOURCE), ["/queues/readings"])]
    )
    assert condition(client.frames("detach")[0]) == "amqp:not-implemented"


# ---------------------------------------------------------------- receiving


def _publish(broker, queue_name, *bodies):
    client, _ = opened()
    client.broker = broker
    sender = Client10(broker=broker)
    sender.login()
    sender.begin()
    sender.attach_sender("/queues/" + queue_name)
    for i, body in enumerate(bodies):
        sender.transfer(data_message(body, properties=["id-%d" % i]), delivery_id=i)
    sender.read()


def bodies_of(frames):
    out = []
    for f in frames:
        if f.name == "transfer":
            out.append(bytes(Sections(f.payload).body[0][1]))
    return out


def test_a_receiver_gets_what_its_credit_allows_and_drain_gives_the_rest_up():
    client, _ = opened()
    queue = declare(client.broker, "readings")
    _publish(client.broker, "readings", b"a", b"b", b"c")
    client.begin()
    said = client.attach_receiver("/queues/readings")
    assert [f.name for f in said] == ["attach"]  # nothing before the client's first credit
    client.flow(0, 2)
    assert bodies_of(client.frames()) == [b"a", b"b"]
    client.flow(0, 5, delivery_count=2, drain=True)
    said = client.frames()
    assert bodies_of(said) == [b"c"]
    flow = [f for f in said if f.name == "flow"][-1]
    assert (flow["delivery-count"], flow["link-credit"], flow["drain"]) == (Uint(7), Uint(0), True)
    assert queue.messages.length == 0


def test_echo_is_answered_with_the_link_s_state():
    client, _ = opened()
    declare(client.broker, "readings")
    client.begin()
    client.attach_receiver("/queues/readings")
    client.flow(0, 3, echo=True)
    flow = client.frames("flow")[-1]
    assert (flow["handle"], flow["link-credit"]) == (Uint(0), Uint(3))


@pytest.mark.parametrize(
    "state, back, dead",
    [
        (outcome(spec.ACCEPTED), 0, 0),
        (outcome(spec.RELEASED), 1, 0),
        (outcome(spec.REJECTED), 0, 1),
        (outcome(spec.MODIFIED, True), 1, 0),
        (outcome(spec.MODIFIED, True, True), 0, 1),
    ],
)
def test_each_outcome_settles_as_rabbitmq_4_settles_it(state, back, dead):
    client, _ = opened()
    broker = client.broker
    queue = declare(broker, "readings", {"x-dead-letter-exchange": b"", "x-dead-letter-routing-key": b"dead"})
    dead_queue = declare(broker, "dead")
    _publish(broker, "readings", b"a")
    client.begin()
    client.attach_receiver("/queues/readings")
    client.flow(0, 1)
    client.read()
    client.disposition(0, state=state)
    assert (queue.messages.length, dead_queue.messages.length) == (back, dead)


def test_what_a_link_holds_goes_back_when_it_detaches_and_comes_again_redelivered():
    client, _ = opened()
    queue = declare(client.broker, "readings")
    _publish(client.broker, "readings", b"a", b"b")
    client.begin()
    client.attach_receiver("/queues/readings")
    client.flow(0, 2)
    client.read()
    client.frame(0, spec.DETACH, [Uint(0), True])
    assert client.frames("detach")[0]["handle"] == Uint(0)
    assert queue.messages.length == 2
    client.attach_receiver("/queues/readings", handle=1)
    client.flow(1, 1)
    transfer = client.frames("transfer")[0]
    header = decode(transfer.payload)[0]
    assert header.value[4] == Uint(1)  # delivery-count: it was delivered before


def test_a_settled_receiver_is_a_no_ack_consumer():
    client, _ = opened()
    queue = declare(client.broker, "readings")
    _publish(client.broker, "readings", b"a")
    client.begin()
    said = client.attach_receiver("/queues/readings", settled=True)
    assert said[0]["snd-settle-mode"] == Ubyte(1)
    client.flow(0, 5)
    transfer = client.frames("transfer")[0]
    assert transfer["settled"] is True
    assert queue.messages.length == 0 and client.conn.unsettled() == []


def test_large_deliveries_go_in_frames_of_the_client_s_size():
    client, _ = opened(max_frame=512)
    declare(client.broker, "readings")
    _publish(client.broker, "readings", b"y" * 3000)
    client.begin()
    client.attach_receiver("/queues/readings")
    client.flow(0, 1)
    transfers = client.frames("transfer")
    assert len(transfers) > 6 and all(t["more"] is True for t in transfers[:-1])
    payload = b"".join(t.payload for t in transfers)
    assert bytes(Sections(payload).body[0][1]) == b"y" * 3000


def test_deliveries_wait_for_the_client_s_session_window():
    client, _ = opened()
    declare(client.broker, "readings")
    _publish(client.broker, "readings", b"a", b"b", b"c")
    client.begin(incoming_window=2)
    client.attach_receiver("/queues/readings")
    client.flow(0, 10, window=2)
    assert bodies_of(client.frames()) == [b"a", b"b"]
    client.flow(0, 8, delivery_count=2, next_incoming=2, window=2)  # the window opens: the rest comes
    assert bodies_of(client.frames()) == [b"c"]


def test_a_1_0_message_comes_back_to_a_1_0_consumer_byte_for_byte():
    client, _ = opened()
    declare(client.broker, "readings")
    bare = (
        section(spec.PROPERTIES, [Ulong(77), b"guest", None, "subj", None, None, Symbol("text/plain")])
        + section(spec.APPLICATION_PROPERTIES, {"n": Uint(1), "f": 1.5, "s": Symbol("sym")})
        + section(spec.AMQP_VALUE, {"reading": [1, 2, 3]})
        + section(spec.FOOTER, {Symbol("x-check"): b"\x01"})
    )
    sender = Client10(broker=client.broker)
    sender.login()
    sender.begin()
    sender.attach_sender("/queues/readings")
    sender.transfer(section(spec.HEADER, [True]) + bare)
    assert sender.frames("disposition")[0]["state"] == outcome(spec.ACCEPTED)
    client.begin()
    client.attach_receiver("/queues/readings")
    client.flow(0, 1)
    payload = client.frames("transfer")[0].payload
    assert payload.endswith(bare)
    found = Sections(payload)
    assert found.header[0] is True
    assert found.annotations == {Symbol("x-exchange"): "", Symbol("x-routing-key"): "readings"}


def test_a_stream_is_read_from_the_offset_its_filter_asks(tmp_path):
    from hutch.core.broker import Broker
    from hutch.ports.recovery import recover

    broker = Broker(Limits())
    writer = recover(str(tmp_path), broker, 1 << 20, 1 << 30, broker.log)
    broker.tick(0, 1700000000)
    declare(broker, "log", {"x-queue-type": b"stream"}, durable=True)
    _publish(broker, "log", b"r0", b"r1", b"r2")
    writer.commit()  # the group commit: the records are durable, so readable
    client = Client10(broker=broker)
    client.login()
    client.begin()
    said = client.attach_receiver("/queues/log", filters={Symbol("rabbitmq:stream-offset-spec"): Ulong(1)})
    assert said[0]["source"].value[7] == {Symbol("rabbitmq:stream-offset-spec"): Ulong(1)}
    client.flow(0, 10)
    transfers = client.frames("transfer")
    assert bodies_of(transfers) == [b"r1", b"r2"]
    client.disposition(0, 1, outcome(spec.ACCEPTED))
    assert client.conn.unsettled() == []
