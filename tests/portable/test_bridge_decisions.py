"""The bridge's decisions (core/bridge/machine.py, up.py, down.py, streamout.py), driven in-process:
events and the time go in, what to send, settle and wait come out. No socket, no clock: the
test is the driver. These tests also run under MicroPython.
"""

from harness import opened
from scratch import remove_tree, scratch_folder

from hutch.codec import spec
from hutch.codec.wire import decode_properties
from hutch.core.bridge.down import DownMachine
from hutch.core.bridge.outbox import MAX_RETURNS
from hutch.core.bridge.up import SAVE_EVERY_MS, UpMachine, source_queues
from hutch.core.snapshot import snapshot


def _uri(host, timeout=30000):
    return {
        "uri": "amqp://guest:***@%s:5672/" % host,
        "tls": False,
        "host": host,
        "port": 5672,
        "user": "guest",
        "password": "guest",
        "vhost": "/",
        "heartbeat": 60,
        "frame_max": 0,
        "connection_timeout": timeout,
    }


def settings(**over):
    """A [[bridge]] as server/bridges/config.py hands it over (its defaults; prefetch 4)."""
    out = {
        "name": "b",
        "direction": "up",
        "uris": [_uri("up")],
        "queue": "src",
        "source_exchange": None,
        "binding_key": "",
        "exchange": None,
        "routing_key": None,
        "ack_mode": "on-confirm",
        "prefetch": 4,
        "reconnect_delay": 1.0,
        "max_reconnect_delay": 30.0,
        "watchdog": 60.0,
        "max_rate": 0,
        "max_byte_rate": 0,
        "tls": {"verify": True, "server_name": None, "ca_file": None, "cert_file": None, "key_file": None},
        "declare": None,
        "protocol": "0-9-1",
        "credit": False,
        "set_up": True,
        "priority": 0,
        "always_connected": False,
        "classes": None,
        "alarm_backlog": None,
        "alarm_age": None,
        "alarm_bytes": None,
    }
    for key in over:
        out[key] = over[key]
    return out


EXACT = 0  # 16 random bits that make the jitter's factor exactly 1


def bits(*values):
    """A random source (random.getrandbits's shape) that gives these values, in turn, then
    EXACT."""
    values = list(values)

    def take(n):
        return values.pop(0) if values else EXACT

    return take


class Log:
    def __init__(self):
        self.lines = []

    def __call__(self, level, text, exc=None):
        self.lines.append((level, text))

    def texts(self):
        return [text for _level, text in self.lines]


class Sink:
    """The driver's protocol.forward: what was published, in order."""

    def __init__(self):
        self.sent = []

    def __call__(self, exchange, routing_key, header_tail, body_tail, mandatory):
        self.sent.append((exchange, routing_key, header_tail, body_tail, mandatory))

    def bodies(self):
        return [bytes(body[4:-1]) for _e, _k, _h, body, _m in self.sent]

    def headers(self, i):
        return decode_properties(memoryview(self.sent[i][2])[4:-1])["headers"]


def up_bridge(count=0, random_bits=None, **over):
    """(client, machine, log): an up machine over the local queue src holding count messages."""
    client = opened()
    log = Log()
    config = settings(**over)
    queues = source_queues(client.broker, config)
    for i in range(count):
        client.publish(1, b"", b"src", b"m%d" % i)
    machine = UpMachine(client.broker, config, log, random_bits or bits(EXACT), queues)
    return client, machine, log


def run_link(machine, now=0):
    """A link opened at now and set up (after the backoff, if a round of URIs just ended): the
    words of the set-up steps it took."""
    if machine.connect_to() is None:
        assert machine.state == 5 and machine.connect_to() is not None  # BACKOFF
    machine.opened(now)
    steps = []
    while True:
        step = machine.next_step()
        if step is None:
            return steps
        steps.append(step[0])


# ---------------------------------------------------------------- between links


def test_the_uris_in_turn_then_a_backoff_that_doubles_up_to_the_most_with_jitter():
    uris = [_uri("a"), _uri("b")]
    # jitter factors 1, (almost) 0.5 and 0.75: the doubling goes on underneath them, and the
    # wait never passes max_reconnect_delay
    client, machine, log = up_bridge(
        random_bits=bits(EXACT, 65535, 32768, EXACT, EXACT), uris=uris, reconnect_delay=1.0, max_reconnect_delay=5.0
    )
    waits = []
    for _round in range(5):
        assert machine.connect_to()["host"] == "a" and machine.state == 1  # CONNECTING
        machine.lost("connection refused")
        assert machine.connect_to()["host"] == "b"
        machine.lost("connection refused")
        assert machine.connect_to() is None and machine.state == 5  # BACKOFF
        waits.append(machine.wait_ms)
    assert waits == [1000, 1000, 3000, 5000, 5000], waits  # 1, 2 * 0.5, 4 * 0.75, then the most
    assert machine.last_error == "amqp://guest:***@b:5672/: connection refused"
    # the first round is said, each URI's reason once; its retries are not (the outage's summary)
    assert log.texts() == [
        "bridge b: connecting to amqp://guest:***@a:5672/",
        "bridge b: amqp://guest:***@a:5672/: connection refused",
        "bridge b: amqp://guest:***@b:5672/: connection refused",
        "bridge b: backoff for 1.0 s (amqp://guest:***@b:5672/: connection refused)",
    ]


def test_an_outage_is_said_once_then_summed_up_every_few_minutes_and_its_end_says_what_it_cost():
    """Retries every 5 s for 12 minutes: the first round's lines, a new reason once, a summary
    every OUTAGE_SUMMARY_MS (two), and the link that runs again says how many attempts failed."""
    from hutch.core.bridge.machine import OUTAGE_SUMMARY_MS

    client, machine, log = up_bridge(random_bits=bits(*[EXACT] * 200), reconnect_delay=5.0, max_reconnect_delay=5.0)
    now = 0
    attempts = 0
    while now < 12 * 60000:
        assert machine.connect_to(now) is not None
        attempts += 1
        machine.lost("connection refused" if now < 6 * 60000 else "login refused: 403 (ACCESS_REFUSED)")
        assert machine.connect_to(now) is None and machine.state == 5  # BACKOFF
        now += machine.wait_ms
    machine.connect_to(now)
    machine.opened(now)
    while machine.next_step() is not None:
        pass
    upstream = "amqp://guest:***@up:5672/"
    assert OUTAGE_SUMMARY_MS == 300000 and attempts == 144
    assert log.texts() == [
        "bridge b: connecting to " + upstream,
        "bridge b: %s: connection refused" % upstream,
        "bridge b: backoff for 5.0 s (%s: connection refused)" % upstream,
        "bridge b: still down after 61 attempts in 5 min; last error: %s: connection refused; "
        "retrying every 5 s at most" % upstream,
        "bridge b: %s: login refused: 403 (ACCESS_REFUSED)" % upstream,  # a new reason: said
        "bridge b: still down after 121 attempts in 10 min; last error: %s: login refused: 403 "
        "(ACCESS_REFUSED); retrying every 5 s at most" % upstream,
        "bridge b: running (upstream %s), after 144 failed attempts in 12 min" % upstream,
    ]
    assert [level for level, _ in log.lines] == ["info", "warning", "info", "warning", "warning", "warning", "info"]
    # a link that runs, then is lost: said again, the next outage anew
    machine.lost("upstream closed the connection")
    assert machine.connect_to(now) is None and machine.connect_to(now + machine.wait_ms) is not None
    assert log.texts()[-3:] == [
        "bridge b: %s: upstream closed the connection" % upstream,
        "bridge b: backoff for 5.0 s (%s: upstream closed the connection)" % upstream,
        "bridge b: connecting to " + upstream,
    ]


def test_a_link_that_ran_brings_the_backoff_back_to_its_start():
    client, machine, log = up_bridge(random_bits=bits(*[EXACT] * 4))
    for _round in range(3):
        machine.connect_to()
        machine.lost("connection refused")
        machine.connect_to()
    assert machine.wait_ms == 4000
    run_link(machine)
    machine.lost("upstream closed the connection")
    assert machine.connect_to() is None and machine.wait_ms == 1000


def test_the_handshake_has_connection_timeout_and_a_silent_link_ends():
    client, machine, log = up_bridge(uris=[_uri("a", timeout=2000)])
    machine.connect_to()
    machine.opened(10000)
    assert machine.tick(12000, False) is None
    assert machine.tick(12001, False) == "no answer to the handshake within 2000 ms"
    run_link(machine, 20000)
    assert machine.tick(99000, False) is None, "running: no handshake timeout"
    assert machine.tick(99500, True) == "missed heartbeats: upstream is silent"


def test_stop_ends_the_consumer_and_says_so():
    client, machine, log = up_bridge(2)
    run_link(machine)
    machine.lost(None)
    machine.stop()
    assert machine.connect_to() is None and machine.state == 6  # STOPPED
    assert log.texts()[-1] == "bridge b: stopped"
    assert client.broker.queues[b"src"].consumers == [] and machine.outbox.backlog() == 2


# ---------------------------------------------------------------- up: set-up and forwarding


def test_set_up_declares_the_destination_then_selects_confirms_then_runs():
    declare = {"exchange_type": "topic", "queue": "readings", "binding_key": "#"}
    client, machine, log = up_bridge(3, exchange="sensors", declare=declare)
    assert run_link(machine) == ["exchange", "queue", "bind", "confirm"]
    assert machine.state == 3 and log.texts()[-1] == "bridge b: running (upstream amqp://guest:***@up:5672/)"
    sink = Sink()
    assert machine.sendable(0) == 3 and machine.forward(sink, 3) == 3
    assert sink.bodies() == [b"m0", b"m1", b"m2"]
    assert {(e, k, m) for e, k, _h, _b, m in sink.sent} == {("sensors", b"src", True)}, "mandatory, to `exchange`"
    assert [sink.headers(i)["x-hutch-seq"] for i in range(3)] == [1, 2, 3]


def test_without_confirms_what_is_written_is_settled():
    client, machine, log = up_bridge(3, ack_mode="on-publish")
    assert run_link(machine) == []
    machine.forward(Sink(), machine.sendable(0))
    assert machine.outbox.forwarded == 3 and len(machine.outbox.in_flight) == 0 and machine.outbox.backlog() == 0


def test_confirms_settle_nacks_put_back_and_the_window_refills():
    client, machine, log = up_bridge(6)
    run_link(machine)
    sink = Sink()
    machine.forward(sink, machine.sendable(0))
    assert sink.bodies() == [b"m0", b"m1", b"m2", b"m3"] and machine.sendable(0) == 0  # the window (4)
    machine.accepted(2, True)
    machine.rejected(3, False, "basic.nack")
    assert machine.outbox.forwarded == 2 and len(machine.outbox.in_flight) == 1
    # upstream refused: sending pauses (reconnect_delay), said in the log
    assert machine.sendable(0) == 0 and machine.wake_ms == 1000
    assert log.texts()[-1] == (
        "bridge b: upstream refused 1 messages (basic.nack): sending again after a pause, longer each time while "
        "it accepts nothing"
    )
    assert machine.sendable(999) == 0
    # after a refusal, one at a time until upstream confirms one: m3 is still in flight
    assert machine.sendable(1000) == 0
    machine.accepted(4, False)  # m3: upstream confirms again
    machine.forward(sink, machine.sendable(1000))
    # m4 and m5 came when the ack made room; the nacked one goes back to its place in the
    # queue with them behind it: the queue's order, kept
    assert sink.bodies()[4:] == [b"m2", b"m4", b"m5"]
    machine.accepted(7, True)
    assert machine.outbox.forwarded == 6 and machine.outbox.backlog() == 0


def test_refusals_pause_sending_longer_each_time_until_upstream_accepts_again():
    """An AMQP 1.0 upstream's rejected, released or modified (amqp10/client.py says them as a
    basic.nack with why): the message goes back to the head of the queue and sending pauses,
    reconnect_delay doubled up to max_reconnect_delay while nothing is accepted in between."""
    client, machine, log = up_bridge(
        3, prefetch=1, reconnect_delay=0.5, max_reconnect_delay=1.5, protocol="1.0", set_up=False, credit=True
    )
    assert run_link(machine) == [], "over 1.0 the client's attach is the whole set-up"
    sink = Sink()
    now = 0
    pauses = []
    for _ in range(4):  # upstream refuses m0 four times
        machine.forward(sink, machine.sendable(now))
        machine.released(machine.outbox.seq, False, "released")
        assert machine.sendable(now) == 0
        pauses.append(machine.wake_ms)
        now += machine.wake_ms
    assert pauses == [500, 1000, 1500, 1500]
    assert sink.bodies() == [b"m0"] * 4 and machine.outbox.backlog() == 3, "nothing lost"
    refusals = [text for text in log.texts() if "refuse" in text]
    assert refusals == [
        "bridge b: upstream refused 1 messages (released): sending again after a pause, longer each time while "
        "it accepts nothing"
    ], "said once, not once a pause"
    machine.forward(sink, machine.sendable(now))
    machine.accepted(machine.outbox.seq, False)  # accepted at last
    assert log.texts()[-1] == "bridge b: upstream accepts again, after refusing 4 messages for 0 s"
    machine.forward(sink, machine.sendable(now))
    machine.rejected(machine.outbox.seq, False, "rejected (amqp:resource-limit-exceeded)")
    assert machine.sendable(now) == 0 and machine.wake_ms == 500, "the backoff starts over"
    assert sink.bodies() == [b"m0"] * 5 + [b"m1"]


def test_a_link_refused_twice_with_nothing_taken_between_ends_and_the_next_one_starts_slow():
    """A quorum queue's leader killed: a RabbitMQ 3.10 channel that published during the
    election refused all it was sent afterwards, and a new connection's channel was taken. A
    second refusal on one link with nothing accepted in between ends the link (the next URI,
    after the pause); an acceptance between two refusals keeps it."""
    client, machine, log = up_bridge(
        4, prefetch=2, reconnect_delay=0.5, max_reconnect_delay=1.5, uris=[_uri("a"), _uri("b")]
    )
    run_link(machine)
    sink = Sink()
    machine.forward(sink, machine.sendable(0))
    machine.rejected(machine.outbox.seq, True, "basic.nack")  # a whole window refused
    assert machine.sendable(0) == 0 and machine.tick(100, False) is None, "one refusal: the link stays"
    now = machine.wake_ms
    assert machine.sendable(now) == 1, "then one message at a time"
    machine.forward(sink, 1)
    machine.rejected(machine.outbox.seq, False, "basic.nack")
    assert machine.sendable(now) == 0
    assert machine.tick(now + 100, False) == (
        "upstream refused what it was sent again, one message at a time: a new link"
    )
    machine.lost("upstream refused what it was sent again, one message at a time: a new link")
    assert machine.unconfirmed_links == 1
    assert machine.connect_to()["host"] == "b", "the next URI"
    machine.opened(now + 200)
    while machine.next_step() is not None:
        pass
    machine.running()
    now += machine.wake_ms + 200
    assert machine.sendable(now) == 1, "the new link starts slow"
    machine.forward(sink, 1)
    machine.rejected(machine.outbox.seq, False, "basic.nack")
    assert machine.sendable(now) == 0 and machine.tick(now + 100, False) is None, "its first refusal: it stays"
    now += machine.wake_ms
    machine.forward(sink, machine.sendable(now))
    machine.accepted(machine.outbox.seq, False)
    machine.forward(sink, machine.sendable(now))
    machine.rejected(machine.outbox.seq, True, "basic.nack")
    assert machine.sendable(now) == 0 and machine.tick(now + 100, False) is None, "taken in between: it stays"
    assert sink.bodies()[0:2] == [b"m0", b"m1"] and machine.outbox.backlog() == 3, "nothing lost"


def test_blocked_and_paused_links_send_nothing_until_upstream_lets_go():
    client, machine, log = up_bridge(2)
    run_link(machine)
    machine.blocked("low on memory")
    assert machine.sendable(0) == 0 and machine.state == 4
    assert log.texts()[-1] == "bridge b: blocked by upstream: low on memory"
    machine.unblocked()
    machine.flow(False)
    assert machine.sendable(0) == 0 and log.texts()[-1] == "bridge b: blocked by upstream: channel.flow"
    machine.flow(True)
    assert machine.sendable(0) == 2 and machine.state == 3


def test_max_rate_lets_a_tenth_of_a_second_go_at_a_time():
    client, machine, log = up_bridge(10, max_rate=20.0, prefetch=100)
    run_link(machine, 1000)
    sink = Sink()
    assert machine.sendable(1000) == 2 and machine.wake_ms == 50  # the bucket holds 2
    machine.forward(sink, 2)
    assert machine.sendable(1000) == 0
    assert machine.sendable(1050) == 1, "20/s: one more every 50 ms"
    machine.forward(sink, 1)
    assert machine.sendable(5000) == 2, "never more than the bucket holds"


def test_max_byte_rate_counts_body_bytes():
    client, machine, log = up_bridge(0, max_byte_rate=100.0, prefetch=100)
    for _ in range(5):
        client.publish(1, b"", b"src", b"x" * 6)
    run_link(machine, 0)
    assert machine.sendable(0) == 1 and machine.wake_ms == 100  # 10 bytes in the bucket: one 6-byte body
    machine.forward(Sink(), 1)
    assert machine.sendable(10) == 0 and machine.sendable(20) == 1  # 100 bytes/s: 6 bytes after 60 ms


def test_the_watchdog_ends_a_link_that_confirms_nothing_while_messages_wait():
    client, machine, log = up_bridge(3, watchdog=1.5)
    run_link(machine, 0)
    assert machine.tick(10000, False) is None, "nothing in flight: nothing to wait for"
    machine.forward(Sink(), machine.sendable(10000))
    assert machine.tick(11000, False) is None
    machine.accepted(1, False)
    assert machine.tick(12000, False) is None, "a confirm is progress"
    assert machine.tick(13501, False) == "watchdog: no confirm for 1.5 s while 2 messages wait"


def test_a_returned_message_goes_again_then_the_bridge_is_stuck_and_the_link_ends():
    client, machine, log = up_bridge(2)
    run_link(machine)
    sink = Sink()
    for attempt in range(MAX_RETURNS):
        machine.forward(sink, machine.sendable(0))
        head = sink.headers(len(sink.sent) - (2 if attempt == 0 else 1))
        assert head["x-hutch-seq"] == 1
        machine.returned(head, 312, "NO_ROUTE")
        machine.accepted(machine.outbox.seq, True)  # its confirm follows the return
        assert machine.outbox.forwarded == 1 and machine.outbox.backlog() == 1
    reason = machine.check()
    assert reason and "returned a message 5 times (312 NO_ROUTE)" in reason
    machine.lost(reason)
    machine.connect_to()
    machine.opened(0)
    assert machine.check() is None, "found again if upstream still returns it"
    machine.returned({"x-hutch-origin": "elsewhere", "x-hutch-seq": 9}, 312, "NO_ROUTE")
    assert log.texts()[-1] == "bridge b: upstream returned a message it was not sent"


def test_a_lost_link_puts_what_was_in_flight_back_in_order():
    client, machine, log = up_bridge(5)
    run_link(machine)
    sink = Sink()
    machine.forward(sink, machine.sendable(0))
    machine.accepted(1, False)
    machine.lost("connection reset")
    assert len(machine.outbox.in_flight) == 0 and machine.outbox.backlog() == 4
    assert log.lines[-1] == ("warning", "bridge b: amqp://guest:***@up:5672/: connection reset")
    run_link(machine)
    machine.forward(sink, machine.sendable(0))
    assert sink.bodies()[4:] == [b"m1"], "a new link after a lost one: one at a time until a confirm"
    machine.accepted(1, False)
    machine.forward(sink, machine.sendable(0))
    assert sink.bodies()[4:] == [b"m1", b"m2", b"m3", b"m4"]


def test_the_snapshot_shows_each_bridge():
    client, machine, log = up_bridge(3)
    run_link(machine)
    machine.forward(Sink(), 2)
    machine.accepted(1, False)
    shown = snapshot(client.broker)["bridges"]
    assert len(shown) == 1
    bridge = shown[0]
    assert (bridge["name"], bridge["direction"], bridge["state"], bridge["queue"]) == ("b", "up", "running", "src")
    assert (bridge["forwarded"], bridge["in_flight"], bridge["backlog"]) == (1, 1, 2)
    assert bridge["upstream"] == "amqp://guest:***@up:5672/" and bridge["last_error"] is None
    assert "confirmed_offset" not in bridge and "oldest_age_s" in bridge
    assert snapshot(opened().broker)["bridges"] == []


# ---------------------------------------------------------------- down


def down_bridge(**over):
    client = opened()
    client.declare_queue(1, b"cmd")
    log = Log()
    config = settings(direction="down", queue="upstream-cmds", routing_key="cmd", **over)
    return client, DownMachine(client.broker, config, log, bits(EXACT)), log


BARE_HEADER = b"\x00\x00\x00\x0e\x00\x3c\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\xce"  # a 2-byte body


def test_a_down_bridge_consumes_then_acks_what_it_holds_and_refuses_what_it_cannot_take():
    client, machine, log = down_bridge()
    assert run_link(machine) == ["has-queue", "prefetch", "consume"]
    machine.backlog(7)
    assert machine.upstream_backlog == 7
    for tag in (1, 2):
        assert machine.delivered(tag, b"", b"x", BARE_HEADER, b"\x00\x00\x00\x02go\xce", 2) is None
    assert machine.to_ack() == 2 and machine.to_ack() == 0  # (acked with every one before it)
    assert machine.inbox.received == 2
    elsewhere = DownMachine(client.broker, settings(direction="down", exchange="", routing_key="nowhere"), log, bits())
    refused = elsewhere.delivered(3, b"", b"x", BARE_HEADER, b"\x00\x00\x00\x02go\xce", 2)
    assert refused == (3, False)  # (refused upstream, not requeued: its dead-letter exchange there)
    assert "no local queue takes a message routed 'x'" in log.texts()[-1]
    client.broker.flow.set_alarm("memory", "low on memory")
    assert machine.delivered(4, b"", b"x", BARE_HEADER, b"\x00\x00\x00\x02go\xce", 2) == (4, True)  # (requeued)
    assert "refused a message" in machine.check()


def test_a_down_bridge_needs_its_local_exchange():
    from hutch.core.bridge.machine import BridgeError

    client = opened()
    try:
        DownMachine(client.broker, settings(direction="down", exchange="missing"), Log(), bits())
    except BridgeError as e:
        assert "no local exchange 'missing'" in str(e)
    else:
        raise AssertionError("no BridgeError")


# ---------------------------------------------------------------- a stream as the source


def _stream_node():
    """(folder, node, client): a broker on a data folder with the stream src."""
    from test_streams import STREAM, Node

    folder = scratch_folder("bridge")
    node = Node(folder)
    client = node.client()
    assert client.queue(1, b"src", durable=True, arguments=STREAM) == b"src"
    return folder, node, client


def _records(node, client, start, stop):
    for i in range(start, stop):
        client.publish(1, b"", b"src", b"r%d" % i)
    node.sync()  # durable: consumers may have them


def stream_bridge(node, saved=None, **over):
    config = settings(**over)
    queues = source_queues(node.broker, config)
    assert queues[0].is_stream
    return UpMachine(node.broker, config, Log(), bits(EXACT), queues, b"n", None, saved)


def test_a_stream_source_forwards_its_records_in_order_numbered_by_offset():
    folder, node, client = _stream_node()
    try:
        _records(node, client, 0, 6)
        machine = stream_bridge(node)
        outbox = machine.outbox
        assert machine.offset_to_save(0, True) == (0, outbox.lane, b"src"), "a new lane: on disk before anything goes"
        assert outbox.lane.startswith(b"lane-")
        run_link(machine)
        sink = Sink()
        machine.forward(sink, machine.sendable(0))
        assert sink.bodies() == [b"r0", b"r1", b"r2", b"r3"]
        headers = sink.headers(3)
        assert headers["x-hutch-seq"] == 4 and headers["x-stream-offset"] == 3
        assert headers["x-hutch-origin"] == b"n/b/" + outbox.lane
        machine.accepted(3, True)
        assert machine.outbox.forwarded == 3 and machine.outbox.backlog() == 3
        assert machine.offset_to_save(SAVE_EVERY_MS - 1) is None, "not that often"
        assert machine.offset_to_save(SAVE_EVERY_MS) == (3, outbox.lane, b"src")
        assert machine.offset_to_save(5000, True) is None, "not moved since"
        machine.forward(sink, machine.sendable(0))
        assert sink.bodies()[4:] == [b"r4", b"r5"]
        machine.accepted(6, True)
        assert machine.outbox.backlog() == 0 and node.broker.flow.held_messages == 0
        shown = snapshot(node.broker)["bridges"][0]
        assert shown["confirmed_offset"] == 5 and shown["forwarded"] == 6
        node.stop()
    finally:
        remove_tree(folder)


def test_a_stream_source_sends_again_from_the_oldest_unconfirmed_after_a_lost_link_or_a_nack():
    folder, node, client = _stream_node()
    try:
        _records(node, client, 0, 6)
        machine = stream_bridge(node)
        run_link(machine)
        sink = Sink()
        machine.forward(sink, machine.sendable(0))
        machine.accepted(1, False)
        machine.rejected(3, False, "basic.nack")  # r2 back, before what waits
        assert machine.sendable(0) == 0  # (the pause after a refusal)
        assert machine.sendable(1000) == 0  # (one at a time after it: r1 and r3 are in flight)
        machine.accepted(4, False)  # r3: upstream confirms again
        machine.forward(sink, machine.sendable(1000))
        # r4 came when the ack made room; r2 goes again before it (a stream gives nothing back:
        # the record waits at the head of what the bridge holds, in offset order)
        assert sink.bodies() == [b"r0", b"r1", b"r2", b"r3", b"r2", b"r4", b"r5"]
        assert machine.outbox.next_offset() == 1
        machine.lost("connection reset")
        assert (
            node.broker.flow.held_messages == 0 and len(machine.outbox.in_flight) == 0 and machine.outbox.backlog() == 5
        )
        run_link(machine)
        machine.forward(sink, machine.sendable(0))
        assert sink.bodies()[7:] == [b"r1"], "one at a time on a new link, until a confirm"
        machine.accepted(1, False)
        machine.forward(sink, machine.sendable(0))
        assert sink.bodies()[7:] == [b"r1", b"r2", b"r3", b"r4", b"r5"], "read again from the oldest unconfirmed"
        node.stop()
    finally:
        remove_tree(folder)


def test_a_stream_source_starts_where_its_offset_file_says_when_it_fits_the_stream():
    folder, node, client = _stream_node()
    try:
        _records(node, client, 0, 5)
        kept = stream_bridge(node, (3, b"lane-old", b"src"))
        assert kept.outbox.lane == b"lane-old" and kept.offset_to_save(0, True) is None
        run_link(kept)
        sink = Sink()
        kept.forward(sink, kept.sendable(0))
        assert sink.bodies() == [b"r3", b"r4"] and sink.headers(0)["x-hutch-seq"] == 4
        kept.lost(None)
        kept.stop()
        for saved in ((6, b"lane-old", b"src"), (3, b"lane-old", b"another")):  # past its end; another stream
            fresh = stream_bridge(node, saved)
            assert fresh.outbox.lane != b"lane-old" and fresh.offset_to_save(0, True) == (0, fresh.outbox.lane, b"src")
            run_link(fresh)
            sink = Sink()
            fresh.forward(sink, fresh.sendable(0))
            assert sink.bodies() == [b"r0", b"r1", b"r2", b"r3"]
            fresh.lost(None)
            fresh.stop()
        node.stop()
    finally:
        remove_tree(folder)


def test_a_stream_source_stuck_on_a_returned_record_counts_its_returns_across_links():
    folder, node, client = _stream_node()
    try:
        _records(node, client, 0, 1)
        machine = stream_bridge(node)
        sink = Sink()
        for attempt in range(MAX_RETURNS):
            if attempt % 2 == 0:  # a new link now and then: the record is read again from the stream
                if attempt:
                    machine.lost("again")
                run_link(machine)
            machine.forward(sink, machine.sendable(0))
            machine.returned(sink.headers(len(sink.sent) - 1), 312, "NO_ROUTE")
            machine.accepted(machine.outbox.seq, True)
        assert machine.outbox.forwarded == 0 and "returned a message 5 times" in machine.check()
        node.stop()
    finally:
        remove_tree(folder)


def test_a_stream_source_whose_stream_is_deleted_starts_a_new_lane_at_0_and_a_stopped_one_keeps_its_place():
    folder, node, client = _stream_node()
    try:
        _records(node, client, 0, 3)
        machine = stream_bridge(node)
        old_lane = machine.outbox.lane
        machine.offset_to_save(0, True)
        run_link(machine)
        machine.forward(Sink(), machine.sendable(0))
        machine.accepted(2, True)
        machine.lost(None)
        assert machine.offset_to_save(0, True) == (2, old_lane, b"src")
        machine.stop()
        assert snapshot(node.broker)["bridges"][0]["confirmed_offset"] == 1, "stopped: where it was"
        again = stream_bridge(node, (2, old_lane, b"src"))
        client.call(1, spec.QUEUE_DELETE, (0, b"src", False, False, False))
        assert again.outbox.consumer is None and node.broker.flow.held_messages == 0
        saving = again.offset_to_save(0, True)
        assert saving[0] == 0 and saving[1] != old_lane
        node.stop()
    finally:
        remove_tree(folder)


# ---------------------------------------------------------------- classes


def classes_bridge(prefetch=4, **over):
    """(client, machine, log): an up bridge from amq.topic with two classes on its one link,
    telemetry (sensors.#, priority 1) and alarms (alarms.#, priority 9)."""
    classes = [
        {"name": "cloud.telemetry", "queue": "hutch.bridge.cloud.telemetry", "binding_key": "sensors.#", "priority": 1,
         "always_connected": False, "ttl": None, "max_bytes": None, "when_full": None},
        {"name": "cloud.alarms", "queue": "hutch.bridge.cloud.alarms", "binding_key": "alarms.#", "priority": 9,
         "always_connected": over.pop("alarms_always", False), "ttl": None, "max_bytes": None, "when_full": None},
    ]  # fmt: skip
    client = opened()
    log = Log()
    config = settings(name="cloud", queue=None, source_exchange="amq.topic", classes=classes, prefetch=prefetch, **over)
    machine = UpMachine(client.broker, config, log, bits(EXACT), source_queues(client.broker, config))
    return client, machine, log


def test_classes_share_one_link_and_the_highest_priority_with_messages_goes_first():
    """server/bridges/config.py classes: one link, one count of numbers; the alarms go before any
    telemetry, and a class whose messages are not all ready (its window full) holds back those
    below it."""
    client, machine, log = classes_bridge(prefetch=2)
    for key, body in (("sensors.t", b"t0"), ("alarms.a", b"a0"), ("sensors.t", b"t1"), ("alarms.a", b"a1")):
        client.publish(1, b"amq.topic", key.encode(), body)
    client.publish(1, b"amq.topic", b"alarms.a", b"a2")
    client.publish(1, b"amq.topic", b"sensors.t", b"t2")
    run_link(machine)
    machine.running()
    sink = Sink()
    assert machine.sendable(0) == 2 and machine.forward(sink, 2) == 2
    assert sink.bodies() == [b"a0", b"a1"]
    assert machine.sendable(0) == 0, "a2 waits for room in the alarms' window: the telemetry waits for it"
    machine.accepted(1, False)  # room: a2 is ready, and so every alarm is: the telemetry follows
    assert machine.sendable(0) == 3 and machine.forward(sink, 3) == 3
    assert sink.bodies() == [b"a0", b"a1", b"a2", b"t0", b"t1"]
    assert [bytes(sink.headers(i)["x-hutch-origin"]).split(b"/")[1] for i in (0, 3)] == [
        b"cloud.alarms",
        b"cloud.telemetry",
    ]
    client.publish(1, b"amq.topic", b"alarms.a", b"a3")  # an alarm while telemetry is in flight: next
    assert machine.sendable(0) == 0, "the alarms' window is full (a1, a2): a3 waits, and the telemetry"
    machine.accepted(4, True)  # (a1, a2 and t0: a3 and t2 get their room)
    assert machine.sendable(0) == 2 and machine.forward(sink, 2) == 2
    assert sink.bodies()[5:] == [b"a3", b"t2"]
    machine.accepted(7, True)
    shown = {b["name"]: b for b in snapshot(client.broker)["bridges"]}
    assert sorted(shown) == ["cloud.alarms", "cloud.telemetry"]
    assert (shown["cloud.alarms"]["forwarded"], shown["cloud.telemetry"]["forwarded"]) == (4, 3)
    assert shown["cloud.alarms"]["queue"] == "hutch.bridge.cloud.alarms" and shown["cloud.alarms"]["priority"] == 9


def test_a_nack_puts_back_only_its_class_and_a_lost_link_all_in_order():
    client, machine, log = classes_bridge()
    for key, body in (("sensors.t", b"t0"), ("alarms.a", b"a0"), ("sensors.t", b"t1")):
        client.publish(1, b"amq.topic", key.encode(), body)
    run_link(machine)
    machine.running()
    sink = Sink()
    machine.forward(sink, machine.sendable(0))
    assert sink.bodies() == [b"a0", b"t0", b"t1"]
    machine.rejected(2, False, "basic.nack")  # t0
    assert machine.sendable(0) == 0, "a pause after a refusal"
    assert (machine.classes[0].outbox.backlog(), machine.classes[1].outbox.backlog()) == (1, 2)
    machine.accepted(1, False)
    machine.lost("connection reset")
    run_link(machine)
    machine.running()
    machine.forward(sink, machine.sendable(10000))
    machine.accepted(1, False)  # (one at a time on a new link, until a confirm)
    machine.forward(sink, machine.sendable(10000))
    assert sink.bodies()[3:] == [b"t0", b"t1"], "the queue's order, kept"


def test_a_persistent_message_is_forwarded_only_once_durable_here():
    """A crash before the journal has it would take it back, and its publisher, never
    confirmed, would send it again (a new message, numbered anew): upstream would have it twice."""
    from test_streams import Node

    folder = scratch_folder("bridge")
    try:
        node = Node(folder)
        client = node.client()
        client.declare_queue(1, b"src", durable=True)
        node.sync()
        config = settings()
        machine = UpMachine(node.broker, config, Log(), bits(EXACT), source_queues(node.broker, config))
        run_link(machine)
        machine.running()
        client.publish(1, b"", b"src", b"persistent", {"delivery-mode": 2})
        client.publish(1, b"", b"src", b"transient")  # (behind it: waits with it, in order)
        assert machine.sendable(0) == 0 and machine.outbox.backlog() == 2
        node.sync()  # the journal's group commit
        sink = Sink()
        assert machine.sendable(0) == 2 and machine.forward(sink, 2) == 2
        assert sink.bodies() == [b"persistent", b"transient"]
        # what waits for the journal has a window of its own: the link's (prefetch 4) is not spent on it
        for i in range(10):
            client.publish(1, b"", b"src", b"p%d" % i, {"delivery-mode": 2})
        outbox = machine.outbox
        assert (len(outbox.held), len(outbox.in_flight)) == (6, 2), "held: the link's window and 4 more"
        node.sync()
        assert (len(outbox.waiting), len(outbox.held)) == (2, 4), "2 into the link's window, durable or not"
        machine.accepted(2, True)  # room: 2 more go, 2 more are held
        assert (len(outbox.waiting), len(outbox.held), len(outbox.in_flight)) == (4, 4, 0)
        node.sync()
        assert sink.bodies() == [b"persistent", b"transient"] and outbox.consumer.unacked == 8
        machine.lost("cut")  # what was held and waiting goes back
        assert outbox.consumer.unacked == 0 and outbox.backlog() == 10
    finally:
        remove_tree(folder)


def test_an_alarm_is_said_once_when_crossed_and_once_when_cleared():
    from hutch.core.bridge.alarms import check

    client, machine, log = up_bridge(3, alarm_backlog=3, alarm_age=None, alarm_bytes=None)
    wall = client.broker.now + client.broker.wall_offset
    for _ in range(2):
        assert check(machine, wall) == "backlog 3 messages (alarm_backlog 3)"
    run_link(machine)
    machine.running()
    sink = Sink()
    machine.forward(sink, machine.sendable(0))
    machine.accepted(3, True)
    for _ in range(2):
        assert check(machine, wall) is None
    said = [text for text in log.texts() if "alarm" in text]
    assert said == ["bridge b: alarm: backlog 3 messages (alarm_backlog 3)", "bridge b: alarm cleared"], said
    assert snapshot(client.broker)["bridges"][0]["alarm"] is None


# ---------------------------------------------------------------- the [uplink]


def _uplink(client, hours=None, every=None, open_for=None, max_byte_rate=None):
    from hutch.core.bridge.uplink import Uplink

    client.broker.uplink = Uplink(
        {"max_byte_rate": max_byte_rate, "hours": hours, "every": every, "open_for": open_for}, 0
    )


def test_outside_its_window_a_bridge_waits_and_a_closing_window_ends_the_link_once_all_is_settled():
    client, machine, log = up_bridge(3)
    _uplink(client, every=60, open_for=10)
    assert machine.connect_to(0, 25) is None and machine.state == 7  # WAITING
    assert machine.wait_ms == 10000 and machine.window == "opens at 00:01:00"
    assert machine.connect_to(0, 59) is None and machine.wait_ms == 1000
    assert machine.connect_to(1000, 60)["host"] == "up" and machine.window == "open, closes at 00:01:10"
    machine.opened(1000)
    while machine.next_step() is not None:
        pass
    machine.running()
    sink = Sink()
    assert machine.forward(sink, machine.sendable(1000)) == 3
    assert machine.tick(10999, False, 69.999) is None
    assert machine.tick(11000, False, 70) is None and machine.sendable(11000) == 0, "3 in flight: they settle first"
    machine.accepted(3, True)
    assert machine.tick(11500, False, 70.5) == "its window closed"
    machine.lost("its window closed")
    assert ("info", "bridge b: its window closed") in log.lines and machine.last_error is None
    assert machine.connect_to(11500, 71) is None and machine.state == 7


def test_a_schedule_given_while_a_link_runs_applies_at_its_next_tick():
    """A reload that adds [uplink] windows (server/reload.py sets broker.uplink): a running link
    outside them sends nothing new and ends, as a closing window ends it."""
    client, machine, log = up_bridge(2)
    run_link(machine)
    machine.running()
    assert machine.tick(1000, False, 25) is None
    _uplink(client, every=60, open_for=10)
    assert machine.tick(1500, False, 25.5) == "its window closed", "nothing in flight: at once"
    assert machine.sendable(1500) == 0 and machine.outbox.backlog() == 2


def test_a_class_always_connected_keeps_the_link_and_the_others_wait_for_their_window():
    client, machine, log = classes_bridge(alarms_always=True)
    _uplink(client, every=60, open_for=10)
    for key, body in (("sensors.t", b"t0"), ("alarms.a", b"a0")):
        client.publish(1, b"amq.topic", key.encode(), body)
    assert machine.connect_to(0, 25) is not None, "a class is always connected: so is the link"
    machine.opened(0)
    while machine.next_step() is not None:
        pass
    machine.running()
    assert machine.tick(500, False, 25.5) is None, "the link stays"
    sink = Sink()
    machine.forward(sink, machine.sendable(500))
    assert sink.bodies() == [b"a0"], "the telemetry waits for its window"
    shown = {b["name"]: b["state"] for b in snapshot(client.broker)["bridges"]}
    assert shown == {"cloud.alarms": "running", "cloud.telemetry": "waiting"}, shown
    assert machine.tick(35000, False, 60) is None
    machine.forward(sink, machine.sendable(35000))
    assert sink.bodies() == [b"a0", b"t0"]


def test_the_gateway_budget_is_shared_and_a_higher_priority_goes_first():
    """[uplink] max_byte_rate: one token bucket for every up bridge; a lower priority waits while a
    higher one has messages and its link up."""
    client = opened()
    log = Log()
    _uplink(client, max_byte_rate=1000)
    machines = {}
    for name, priority in (("telemetry", 1), ("alarms", 9)):
        config = settings(name=name, queue=name, priority=priority, prefetch=100)
        machines[name] = UpMachine(client.broker, config, log, bits(EXACT), source_queues(client.broker, config))
    telemetry, alarms = machines["telemetry"], machines["alarms"]
    for queue in (b"telemetry", b"alarms"):
        for _ in range(3):
            client.publish(1, b"", queue, b"x" * 40)
    for machine in (telemetry, alarms):
        run_link(machine, 0)
        machine.running()
    assert telemetry.sendable(0) == 0, "the alarms have messages and a link: they go first"
    assert alarms.sendable(0) == 2 and alarms.wake_ms == 100, "the bucket holds a tenth of 1000 bytes/s"
    alarms.forward(Sink(), 2)
    assert alarms.sendable(40) == 1, "40 bytes more after 40 ms"
    alarms.forward(Sink(), 1)
    alarms.accepted(3, True)
    assert telemetry.sendable(40) == 0, "the budget is spent: telemetry waits for it too"
    assert telemetry.sendable(120) == 2


def test_a_message_larger_than_the_budget_goes_alone_and_what_it_overdrew_is_said_and_shown():
    """The [uplink]'s 1,000 bytes/s: a 100,000-byte message goes once the bucket is full, and the
    100 s it overdrew hold back what follows: said once (and once when it lets go), shown as the
    bridge's budget and alarm, the oldest waiting message's age shown."""
    client, machine, log = up_bridge(0, prefetch=100)
    _uplink(client, max_byte_rate=1000)
    client.publish(1, b"", b"src", b"x" * 100000)
    client.publish(1, b"", b"src", b"small")
    run_link(machine)
    machine.running()
    sink = Sink()
    assert machine.sendable(0) == 1 and machine.forward(sink, 1) == 1
    machine.accepted(1, False)
    for now in (0, 50000):
        assert machine.sendable(now) == 0
    said = [text for text in log.texts() if "budget" in text]
    assert said == [
        "bridge b: waiting 100 s for budget: a 100,000-byte message went over the [uplink]'s 1,000 bytes/s"
    ], said
    shown = snapshot(client.broker)["bridges"][0]
    assert shown["budget"].startswith("waiting 50 s for budget: a 100,000-byte message") and shown["alarm"]
    assert shown["backlog"] == 1
    assert machine.sendable(100100) == 1
    assert log.texts()[-1] == "bridge b: the budget lets it send again"
    assert snapshot(client.broker)["bridges"][0]["alarm"] is None


def test_a_queue_a_bridge_left_behind_goes_to_the_classes_that_take_it_or_stays_unbound():
    """core/bridge/leftovers.py: hutch.bridge.cloud (the bridge before it had classes) holds
    readings and alarms and a debug line; its heir, cloud with classes, takes the first two by
    their keys into its classes' queues, in order, and the queue is deleted once empty; a queue
    whose bridge is gone is unbound (it grows no more) and said."""
    from hutch.core.bridge.leftovers import take_in

    client = opened()
    broker = client.broker
    old = source_queues(broker, settings(name="cloud", queue="hutch.bridge.cloud", source_exchange="amq.topic",
                                         binding_key="#"))[0]  # fmt: skip
    gone = source_queues(broker, settings(name="gone", queue="hutch.bridge.gone", source_exchange="amq.topic",
                                          binding_key="sensors.#"))[0]  # fmt: skip
    for key, body in (("sensors.t", b"t0"), ("alarms.a", b"a0"), ("sensors.t", b"t1")):
        client.publish(1, b"amq.topic", key.encode(), body)
    classes = [
        {"name": "cloud.telemetry", "queue": "hutch.bridge.cloud.telemetry", "binding_key": "sensors.#", "priority": 1,
         "always_connected": False, "ttl": None, "max_bytes": None, "when_full": None},
        {"name": "cloud.alarms", "queue": "hutch.bridge.cloud.alarms", "binding_key": "alarms.#", "priority": 9,
         "always_connected": False, "ttl": None, "max_bytes": None, "when_full": None},
    ]  # fmt: skip
    heir = settings(name="cloud", queue=None, source_exchange="amq.topic", classes=classes)
    source_queues(broker, heir)  # (the bridge with classes starts: its queues, bound)
    assert old.message_count() == 3 and gone.message_count() == 2
    said = take_in(broker, [heir])
    assert said == [
        "queue hutch.bridge.cloud: its 3 messages went to bridge cloud, and it was deleted",
        "queue hutch.bridge.gone: 2 messages left (no bridge forwards it); it is unbound: `hutch ctl delete queue "
        "hutch.bridge.gone` drops them",
    ], said
    assert b"hutch.bridge.cloud" not in broker.queues, "emptied: deleted"
    telemetry, alarms = broker.queues[b"hutch.bridge.cloud.telemetry"], broker.queues[b"hutch.bridge.cloud.alarms"]
    assert [bytes(telemetry.take()[0].body()) for _ in range(telemetry.message_count())] == [b"t0", b"t1"]
    assert bytes(alarms.take()[0].body()) == b"a0"
    assert not gone.inbound and gone.message_count() == 2
    client.publish(1, b"amq.topic", b"sensors.t", b"t2")
    assert gone.message_count() == 2, "unbound: it grows no more"


def set_up(machine, now=0):
    """The link to the URI connect_to() gave opened and set up: running."""
    machine.opened(now)
    while machine.next_step() is not None:
        pass


def test_a_link_on_another_uri_is_a_fail_over_said_with_why_the_last_ended():
    client, machine, log = up_bridge(uris=[_uri("a"), _uri("b")])
    assert machine.connect_to()["host"] == "a"
    set_up(machine)
    assert machine.failovers == 0
    machine.lost("connection reset")
    assert machine.connect_to()["host"] == "b"
    set_up(machine)
    assert machine.failovers == 1
    failed_over = "bridge b: failed over from amqp://guest:***@a:5672/ to amqp://guest:***@b:5672/"
    assert failed_over + " (it ended: connection reset)" in log.texts()
    machine.lost("connection reset")
    assert machine.connect_to() is None and machine.connect_to()["host"] == "a"  # (a backoff: then a again)
    set_up(machine)
    assert machine.failovers == 2


def test_a_link_into_another_named_cluster_is_said_once_and_unnamed_nodes_never():
    for prefer_first in (False, True):
        client, machine, log = up_bridge(uris=[_uri("a"), _uri("b")], prefer_first=prefer_first)
        for cluster in ("rabbit@a", "rabbit@b", "farm", "farm", "other", "other", None, "farm"):
            machine.connect_to()
            set_up(machine)
            machine.in_cluster(cluster)  # (what the link's node said; None: nothing)
            machine.lost("connection reset")
            machine.connect_to()  # (the backoff after b: a again next)
        said = [text for text in log.texts() if "is in cluster" in text]
        if prefer_first:  # (a primary and its standby elsewhere: two clusters by design)
            assert said == []
            continue
        assert len(said) == 2, said  # farm -> other, other -> farm; a node's own name is no cluster's
        assert "is in cluster 'other', not 'farm' as the node before" in said[0]
        assert "is in cluster 'farm', not 'other' as the node before" in said[1]


def test_no_confirm_from_any_uri_makes_the_bridge_unconfirmed_until_one_comes():
    client, machine, log = up_bridge(4, uris=[_uri("a"), _uri("b")], watchdog=1.0)
    now = 0
    for host in ("a", "b"):
        assert machine.connect_to(now)["host"] == host
        set_up(machine, now)
        machine.forward(Sink(), machine.sendable(now))
        assert not machine.unconfirmed()
        assert machine.tick(now + 1001, False).startswith("watchdog: no confirm for 1.0 s while ")
        machine.lost("watchdog")
        now += 2000
    assert machine.unconfirmed(), "each URI had its turn: no confirm from any"
    assert machine.connect_to(now) is None and machine.connect_to(now)["host"] == "a"
    set_up(machine, now)
    machine.forward(Sink(), machine.sendable(now))
    machine.accepted(machine.seq, True)  # (one, then the rest)
    assert not machine.unconfirmed()
    machine.forward(Sink(), machine.sendable(now))
    machine.accepted(machine.seq, True)
    assert machine.outbox.forwarded == 4


def test_prefer_first_probes_earlier_uris_and_moves_back_once_one_answers_and_the_link_drained():
    client, machine, log = up_bridge(
        4, uris=[_uri("a"), _uri("b"), _uri("c")], prefer_first=True, max_reconnect_delay=2.0
    )
    for _ in range(3):  # a and b refuse: the link runs on c
        uri = machine.connect_to(0)
        if uri["host"] != "c":
            machine.lost("connection refused")
    set_up(machine)
    assert machine.upstream == "amqp://guest:***@c:5672/"
    assert machine.probe_due(0) is None, "the first probe a max_reconnect_delay after the link runs"
    assert machine.probe_due(2000) == (0, machine.settings["uris"][0]) and machine.probe_due(2000) is None
    machine.probe_ended(0, False, "no answer within connection_timeout")  # a hung a: nothing changes
    assert machine.tick(3000, False) is None and machine.state == 3 and not machine.draining
    assert machine.probe_due(3000) is None and machine.probe_due(4000)[0] == 1  # then b
    sink = Sink()
    machine.forward(sink, machine.sendable(4000))
    machine.probe_ended(1, True)  # b answers: nothing new is sent; once what is in flight is confirmed, move
    assert machine.draining and machine.sendable(4000) == 0
    assert machine.tick(4500, False) is None, "4 messages in flight: the link waits for their confirms"
    machine.accepted(4, True)
    assert machine.tick(5000, False) == "moving back to an earlier URI that answers again"
    machine.lost("moving back to an earlier URI that answers again")
    assert machine.connect_to(5000)["host"] == "b", "at once, no backoff"
    set_up(machine, 5000)
    assert (machine.failbacks, machine.failovers) == (1, 0)
    assert "bridge b: moved back from amqp://guest:***@c:5672/ to amqp://guest:***@b:5672/" in log.texts()
    assert not [text for text in log.texts() if "failed over" in text], "a move back is no fail-over"
    # a move whose drain takes too long goes anyway (MOVE_DRAIN_MS); from b, a is probed
    assert machine.probe_due(5000) is None and machine.probe_due(7000)[0] == 0
    client.publish(1, b"", b"src", b"m9")
    machine.forward(sink, machine.sendable(7000))
    machine.probe_ended(0, True)
    assert machine.tick(7100, False) is None
    assert machine.tick(12101, False) == "moving back to an earlier URI that answers again"
