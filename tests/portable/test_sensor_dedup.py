"""core/dedup.py for sensors: a reading sent again (same x-sensor-id and x-sensor-seq) is
confirmed and dropped, through a restart, within the limits' bounds."""

from harness import names, opened
from journal_node import Node, in_folder, taken_bodies

from hutch.core.limits import Limits
from hutch.core.snapshot import snapshot

CONFIRM_SELECT = 0x0055000A


def _reading(client, sensor, seq, body=None, queue=b"q", exchange=b"", more=None):
    headers = {"x-sensor-id": sensor, "x-sensor-seq": seq}
    if more:
        headers.update(more)
    if body is None:
        body = b"%s-%s" % (sensor.encode() if isinstance(sensor, str) else sensor, str(seq).encode())
    return client.publish(1, exchange, queue, body, {"headers": headers, "delivery-mode": 2})


def _confirming(broker=None, limits=None):
    client = opened(broker, limits=limits)
    client.declare_queue(1, b"q")
    client.call(1, CONFIRM_SELECT, (False,))
    return client


def _queued(client, queue=b"q"):
    out = []
    while True:
        events = client.get(1, queue, True)
        if names(events) == ["basic.get-empty"]:
            return out
        out.append(events[0].body)


def test_a_reading_sent_again_is_confirmed_and_queued_once():
    client = _confirming()
    events = []
    for sensor, seq in (("s1", 1), ("s1", 2), ("s2", 1), ("s1", 1), ("s1", 3), ("s2", 1), ("s1", 2)):
        events += _reading(client, sensor, seq)
    assert names(events) == ["basic.ack"] * 7, "every one confirmed, the repeats too"
    assert _queued(client) == [b"s1-1", b"s1-2", b"s2-1", b"s1-3"]
    sensors = snapshot(client.broker)["sensors"]
    assert sensors["duplicates_dropped"] == 3 and sensors["known"] == 2


def test_the_sequence_may_be_digits_and_the_id_bytes():
    """As an MQTT 5 user property or a JSON field written as a string carries it."""
    client = _confirming()
    _reading(client, "s1", 7)
    _reading(client, b"s1", "7", body=b"again")
    _reading(client, "s1", b"8", body=b"eight")
    assert _queued(client) == [b"s1-7", b"eight"]


def test_a_reading_without_a_valid_identity_is_routed_as_it_is():
    client = _confirming()
    for seq in (-1, "7a", True, 1.5, "", "1" * 21):
        _reading(client, "s1", seq, body=b"x")
        _reading(client, "s1", seq, body=b"x")
    _reading(client, "", 1, body=b"y")
    _reading(client, "", 1, body=b"y")
    _reading(client, 12, 1, body=b"z")
    _reading(client, 12, 1, body=b"z")
    assert len(_queued(client)) == 16, "nothing dropped that carries no identity"
    assert snapshot(client.broker)["sensors"]["duplicates_dropped"] == 0


def test_only_a_reading_some_queue_took_is_marked():
    client = _confirming()
    _reading(client, "s1", 5, queue=b"missing")  # unroutable: not taken
    _reading(client, "s1", 5)
    assert _queued(client) == [b"s1-5"]


def test_max_sensors_0_turns_it_off():
    client = _confirming(limits=Limits(max_sensors=0))
    _reading(client, "s1", 1)
    _reading(client, "s1", 1)
    assert _queued(client) == [b"s1-1", b"s1-1"]
    assert client.broker.sensors is None, "no state is kept"


def test_past_max_sensors_the_first_heard_from_is_forgotten_and_counted():
    client = _confirming(limits=Limits(max_sensors=2))
    for sensor in ("a", "b", "c"):
        _reading(client, sensor, 1)
    assert snapshot(client.broker)["sensors"] == {"known": 2, "duplicates_dropped": 0, "forgotten": 1, "restarted": 0}
    _reading(client, "a", 1)  # forgotten: its repeat is taken again
    _reading(client, "c", 1)
    assert _queued(client) == [b"a-1", b"b-1", b"c-1", b"a-1"]


def test_a_count_that_started_over_is_taken_and_said_once():
    broker_logs = []
    client = opened(limits=Limits(sensor_window=64))
    client.broker.log = lambda level, text, exc=None: broker_logs.append((level, text))
    client.declare_queue(1, b"q")
    client.call(1, CONFIRM_SELECT, (False,))
    for seq in range(100, 110):
        _reading(client, "s1", seq)
    _reading(client, "s1", 1)  # a reflashed sensor counting from 1 again
    _reading(client, "s1", 2)
    _reading(client, "s1", 1)  # and a repeat after it: dropped
    _reading(client, "s2", 1)
    _reading(client, "s2", 200)
    _reading(client, "s2", 3)  # s2 did the same
    bodies = _queued(client)
    assert bodies[-5:] == [b"s1-1", b"s1-2", b"s2-1", b"s2-200", b"s2-3"], bodies
    assert snapshot(client.broker)["sensors"]["restarted"] == 2
    said = [text for level, text in broker_logs if "started over" in text]
    assert said == [
        "sensor 's1' numbered a reading 1 after 109: taken as a count that started over "
        "(its readings are deduplicated from there)",
        "sensor 's2' numbered a reading 3 after 200: taken as a count that started over "
        "(its readings are deduplicated from there)",
    ], said
    for seq in range(500, 510):
        _reading(client, "s1", seq)
    _reading(client, "s1", 3)
    assert len([text for level, text in broker_logs if "started over" in text]) == 2, "once a sensor"


def test_a_dead_lettered_reading_is_not_taken_for_a_repeat():
    client = opened()
    client.call(1, 0x0028000A, (0, b"dlx", b"fanout", False, False, False, False, False, {}))  # exchange.declare
    client.declare_queue(1, b"dead")
    client.call(1, 0x00320014, (0, b"dead", b"dlx", b"", False, {}))  # queue.bind
    client.declare_queue(1, b"q", arguments={"x-dead-letter-exchange": b"dlx"})
    client.call(1, CONFIRM_SELECT, (False,))
    _reading(client, "s1", 1)
    delivery = client.get(1, b"q")[0]
    client.call(1, 0x003C005A, (delivery.args[0], False))  # basic.reject, no requeue
    assert _queued(client, b"dead") == [b"s1-1"]


def test_a_bridged_reading_is_deduplicated_by_its_bridge_s_numbers_only():
    """Two bridges may carry copies of one reading (fanned out at the edge): both are taken."""
    client = _confirming()
    _reading(client, "s1", 1, more={"x-hutch-origin": b"edge/a", "x-hutch-seq": 1})
    _reading(client, "s1", 1, more={"x-hutch-origin": b"edge/b", "x-hutch-seq": 1})
    _reading(client, "s1", 1, more={"x-hutch-origin": b"edge/a", "x-hutch-seq": 1})  # a's repeat
    assert _queued(client) == [b"s1-1", b"s1-1"]
    assert client.broker.sensors is None


@in_folder
def _through_a_restart(folder):
    node = Node(folder, segment_bytes=2048)  # small: snapshots move on, old segments go
    c = node.client()
    c.declare_queue(1, b"dq", durable=True)
    c.call(1, CONFIRM_SELECT, (False,))
    for seq in range(1, 41):
        for sensor in ("s1", "s2"):
            if (sensor, seq) != ("s2", 20):  # lost before it reached the broker
                _reading(c, sensor, seq, queue=b"dq")
        if seq % 10 == 0:
            node.writer.commit()
            taken_bodies(c, b"dq")  # consumed: the segments that held them can go
    node.writer.commit()
    node.crash()

    after = Node(folder, segment_bytes=2048)
    c = after.client()
    c.call(1, CONFIRM_SELECT, (False,))
    for sensor, seq in (("s1", 1), ("s1", 40), ("s2", 19), ("s2", 20), ("s2", 41), ("s1", 40)):
        _reading(c, sensor, seq, queue=b"dq")
    after.writer.commit()
    assert names(c.read()) == ["basic.ack"]
    assert [body for body, _ in taken_bodies(c, b"dq")] == [b"s2-20", b"s2-41"]
    assert after.broker.sensors.dropped == 4


def test_readings_taken_before_a_restart_are_still_repeats_after_it():
    _through_a_restart()


@in_folder
def _window_resized(folder):
    node = Node(folder, limits=Limits(sensor_window=1024))
    c = node.client()
    c.declare_queue(1, b"dq", durable=True)
    first = list(range(1, 300, 3)) + [300]  # (more gaps than a record lists: the bitmap)
    for seq in first:
        _reading(c, "s1", seq, queue=b"dq")
    node.stop()
    for window in (64, 4096):
        after = Node(folder, limits=Limits(sensor_window=window))
        c = after.client()
        for seq in (298, 299, 300):
            _reading(c, "s1", seq, queue=b"dq")
        taken = [body for body, _ in taken_bodies(c, b"dq")][len(first) :]  # (after the first node's)
        assert taken == ([b"s1-299"] if window == 64 else []), (window, taken)
        after.stop()


def test_a_sensor_s_state_survives_a_change_of_sensor_window():
    _window_resized()


@in_folder
def _turned_off(folder):
    node = Node(folder)
    c = node.client()
    c.declare_queue(1, b"dq", durable=True)
    _reading(c, "s1", 1, queue=b"dq")
    node.stop()
    after = Node(folder, limits=Limits(max_sensors=0))  # the journal has a sensor's state
    c = after.client()
    _reading(c, "s1", 1, queue=b"dq")
    assert after.broker.sensors is None
    assert [body for body, _ in taken_bodies(c, b"dq")] == [b"s1-1", b"s1-1"]
    after.stop()


def test_a_journal_with_sensors_restarts_with_deduplication_turned_off():
    _turned_off()
