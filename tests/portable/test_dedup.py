"""core/dedup.py: a message a bridge sends again is dropped by the broker that took it."""

from harness import names, opened
from journal_node import Node, in_folder, segment_names, taken_bodies

from hutch.core import dedup
from hutch.core.dedup import Dedup


def test_numbers_taken_are_seen_and_a_skipped_one_is_still_new():
    d = Dedup()
    for n in (1, 2, 3, 5):  # 4 was returned upstream, unroutable: the bridge sends it again later
        assert not d.seen(b"edge/up", n)
        d.take(b"edge/up", n)
    assert d.seen(b"edge/up", 3) and d.seen(b"edge/up", 5)
    assert not d.seen(b"edge/up", 4) and not d.seen(b"edge/up", 6)
    assert not d.seen(b"other/up", 1), "origins are apart"
    d.take(b"edge/up", 4)
    assert d.seen(b"edge/up", 4)


def test_the_window_moves_with_the_highest_number():
    d = Dedup()
    d.take(b"o", 10)
    d.take(b"o", 10 + dedup.WINDOW - 1)
    assert d.seen(b"o", 10) and not d.seen(b"o", 11)
    d.take(b"o", 10 + dedup.WINDOW + 5)  # 10 is behind the window now: counted as taken
    assert d.seen(b"o", 10)
    assert not d.seen(b"o", 10 + dedup.WINDOW + 1), "skipped, inside the window: new"
    assert not d.seen(b"o", 10 + dedup.WINDOW), "its bit was cleared as the window moved on"
    d.take(b"o", 10 + 3 * dedup.WINDOW)  # a jump past the whole window
    assert not d.seen(b"o", 10 + 3 * dedup.WINDOW - 1) and d.seen(b"o", 10 + 2 * dedup.WINDOW)


def test_at_most_max_origins_the_oldest_forgotten():
    d = Dedup()
    for i in range(dedup.MAX_ORIGINS + 1):
        d.take(b"o%d" % i, 1)
    assert len(d.origins) == dedup.MAX_ORIGINS
    assert not d.seen(b"o0", 1) and d.seen(b"o1", 1)


def _bridged(client, seq, body):
    headers = {"x-hutch-origin": b"edge-1/up", "x-hutch-seq": seq}
    return client.publish(1, b"", b"q", body, {"headers": headers, "delivery-mode": 2})


def test_the_broker_confirms_a_duplicate_and_queues_it_once():
    client = opened()
    client.declare_queue(1, b"q")
    client.call(1, 0x0055000A, (False,))  # confirm.select
    events = []
    for seq, body in ((1, b"a"), (2, b"b"), (1, b"a"), (3, b"c"), (2, b"b")):
        events += _bridged(client, seq, body)
    assert names(events) == ["basic.ack"] * 5
    assert [client.get(1, b"q", True)[0].body for _ in range(3)] == [b"a", b"b", b"c"]
    assert names(client.get(1, b"q", True)) == ["basic.get-empty"]
    assert client.broker.dedup.dropped == 2


def test_a_message_no_queue_took_is_not_marked():
    client = opened()
    headers = {"x-hutch-origin": b"edge-1/up", "x-hutch-seq": 7}
    client.publish(1, b"", b"missing", b"x", {"headers": headers})  # no such queue: unroutable
    client.declare_queue(1, b"q")
    _bridged(client, 7, b"x")  # sent again once upstream can route it: taken
    assert client.get(1, b"q", True)[0].body == b"x"


def test_the_state_a_snapshot_records_comes_back_whole():
    """DEDUP records: the numbers not taken listed (few) or the whole bitmap (many)."""
    d = Dedup()
    for n in list(range(1, 40)) + [41, 45]:  # 40, 42-44 not taken
        d.take(b"few", n)
    for n in range(1, 400, 2):  # every other one
        d.take(b"many", n)
    d.take(b"far", 5 * dedup.WINDOW + 7)
    payloads = d.state_records()
    assert len(payloads[0]) < 100, "a few gaps are listed, not a 2 KiB bitmap"
    again = Dedup()
    for p in payloads:
        again.restore(p)
    for origin, top in ((b"few", 50), (b"many", 410), (b"far", 5 * dedup.WINDOW + 10)):
        for n in range(1, top):
            assert again.seen(origin, n) == d.seen(origin, n), (origin, n)
    again.replay_taken(dedup.taken_payload(b"few", 40))
    assert again.seen(b"few", 40) and not again.seen(b"few", 42)


def _bridged_durable(client, seq):
    headers = {"x-hutch-origin": b"edge-1/up", "x-hutch-seq": seq}
    return client.publish(1, b"", b"dq", b"m%d" % seq, {"headers": headers, "delivery-mode": 2})


@in_folder
def _restart(folder):
    node = Node(folder, segment_bytes=2048)  # small: the snapshots move on, the old segments go
    c = node.client()
    c.declare_queue(1, b"dq", durable=True)
    c.call(1, 0x0055000A, (False,))  # confirm.select
    for seq in range(1, 61):
        if seq != 30:  # 30 was returned upstream: the bridge sends it later
            _bridged_durable(c, seq)
        if seq % 10 == 0:
            node.writer.commit()
            for _ in range(10):  # consumed and acked: the segments that held them can go
                c.get(1, b"dq", True)
    node.writer.commit()
    assert len(segment_names(folder)) < 10, "old segments were deleted: their records are gone"
    node.crash()  # (a kill: what was written stays)

    after = Node(folder, segment_bytes=2048)
    c = after.client()
    c.call(1, 0x0055000A, (False,))
    for seq in (1, 29, 31, 60, 30, 61):  # sent again after the restart, and the two new ones
        _bridged_durable(c, seq)
    after.writer.commit()
    assert after.broker.dedup.dropped == 4
    assert names(c.read()) == ["basic.ack"], "confirmed, the duplicates too"
    assert [body for body, _ in taken_bodies(c, b"dq")] == [b"m30", b"m61"]


def test_numbers_taken_before_a_restart_are_still_duplicates_after_it():
    _restart()


@in_folder
def _killed_at_a_roll(folder):
    node = Node(folder, segment_bytes=2048)
    c = node.client()
    c.declare_queue(1, b"dq", durable=True)
    node.writer.commit()
    for seq in range(1, 31):  # more than a segment holds: one group commit across a new segment
        _bridged_durable(c, seq)
    chunks = node.writer.journal.take()[0]
    first = chunks[0][0]
    assert [target for target, *_ in chunks][:3] == [first, first, first + 1], chunks
    node.writer.files.append(first, chunks[0][1], None)  # killed there: the old segment's summary unwritten
    after = Node(folder, segment_bytes=2048)
    c = after.client()
    got = [body for body, _ in taken_bodies(c, b"dq")]
    assert got and len(got) < 30, got  # what the first chunk held came back ...
    for seq in range(1, 31):  # ... and, sent again, is not taken twice
        _bridged_durable(c, seq)
    after.writer.commit()
    assert after.broker.dedup.dropped == len(got)
    assert [body for body, _ in taken_bodies(c, b"dq")] == [b"m%d" % seq for seq in range(len(got) + 1, 31)]


def test_a_kill_between_two_segments_of_one_commit_leaves_no_repeat():
    _killed_at_a_roll()
