"""Durability through real journal files: what a restart brings back, confirms that wait for
the disk, segments that roll and go, the disk budget, and recovery from damaged segments.

A "restart" is a new Broker replaying the same folder (ports/storage.recover), as
`hutch serve` does at start. These tests also run under MicroPython.
"""

import os

from harness import names
from journal_node import (
    PERSISTENT,
    TRANSIENT,
    Node,
    damage_segment,
    in_folder,
    recovery_report,
    segment_names,
    taken_bodies,
)

from hutch.codec import spec


@in_folder
def _definitions(folder):
    node = Node(folder)
    c = node.client()
    c.declare_exchange(1, b"durable.x", b"topic", durable=True)
    c.declare_exchange(1, b"transient.x", b"fanout")
    c.queue(1, b"durable.q", durable=True, arguments={"x-max-length": 10})
    c.queue(1, b"transient.q")
    c.queue(1, b"exclusive.q", durable=True, exclusive=True)
    c.bind(1, b"durable.q", b"durable.x", b"a.#")
    c.bind(1, b"durable.q", b"amq.fanout")
    c.bind(1, b"transient.q", b"durable.x", b"b.#")
    c.bind(1, b"durable.q", b"transient.x")
    node.stop()
    broker = Node(folder).broker
    assert sorted(broker.queues) == [b"durable.q"]
    assert broker.queues[b"durable.q"].arguments == {"x-max-length": 10}
    assert broker.exchange(b"durable.x").kind == b"topic"
    assert broker.exchange(b"transient.x") is None
    bindings = sorted((b.source.name, b.key) for b in broker.queues[b"durable.q"].inbound)
    assert bindings == [(b"amq.fanout", b""), (b"durable.x", b"a.#")], bindings


def test_durable_definitions_come_back_and_transient_ones_do_not():
    _definitions()


@in_folder
def _expiry_after_restart(folder):
    node = Node(folder)
    node.broker.tick(5_000)
    node.client().queue(1, b"session", durable=True, arguments={"x-expires": 60_000})
    node.stop()
    broker = Node(folder).broker
    # a machine up for a day: the first tick's clock is far from the 0 the replay ran at
    broker.tick(86_400_000)
    assert b"session" in broker.queues
    broker.tick(86_400_000 + 59_000)
    assert b"session" in broker.queues
    broker.tick(86_400_000 + 60_000)
    assert b"session" not in broker.queues


def test_a_queue_s_expiry_counts_from_the_restart_not_from_the_clock_s_zero():
    _expiry_after_restart()


@in_folder
def _messages(folder):
    node = Node(folder)
    c = node.client()
    c.queue(1, b"q", durable=True)
    c.queue(1, b"t")
    for i in range(5):
        c.publish(1, b"", b"q", b"m%d" % i, PERSISTENT)
    c.publish(1, b"", b"q", b"not persistent", TRANSIENT)
    c.publish(1, b"", b"t", b"persistent, but to a transient queue", PERSISTENT)
    first = c.get(1, b"q")[0]  # delivered, never acked: comes back redelivered
    second = c.get(1, b"q")[0]
    c.ack(1, second.args[0])  # acked: gone for good
    assert first.body == b"m0" and second.body == b"m1"
    node.crash()
    again = Node(folder)
    c = again.client()
    assert taken_bodies(c, b"q") == [(b"m0", True), (b"m2", False), (b"m3", False), (b"m4", False)]
    assert b"t" not in again.broker.queues
    assert any("recovered 4 messages in 1 queues" in text for _, text in again.logs), again.logs


def test_messages_come_back_in_order_with_their_redelivered_flags():
    _messages()


@in_folder
def _confirms(folder):
    node = Node(folder)
    c = node.client()
    c.queue(1, b"q", durable=True)
    c.queue(1, b"t")
    c.call(1, spec.CONFIRM_SELECT, (False,))
    assert c.publish(1, b"", b"q", b"p", PERSISTENT) == []  # not on disk yet: no confirm
    assert c.publish(1, b"", b"t", b"x") == []  # after one that waits: waits too
    node.writer.commit()
    events = c.read()
    assert names(events) == ["basic.ack"] and events[0].args == [2, True], events
    assert names(c.publish(1, b"", b"t", b"y")) == ["basic.ack"]  # nothing waits: at once


def test_a_confirm_waits_until_the_journal_is_synced():
    _confirms()


@in_folder
def _tx(folder):
    node = Node(folder)
    c = node.client()
    c.queue(1, b"q", durable=True)
    c.expect(1, spec.TX_SELECT)
    c.publish(1, b"", b"q", b"p", PERSISTENT)
    assert c.call(1, spec.TX_COMMIT) == []
    node.writer.commit()
    assert names(c.read()) == ["tx.commit-ok"]


def test_tx_commit_ok_waits_until_the_journal_is_synced():
    _tx()


@in_folder
def _segments_go(folder):
    node = Node(folder, segment_bytes=4096)
    c = node.client()
    c.queue(1, b"q", durable=True)
    for i in range(200):
        c.publish(1, b"", b"q", b"%03d" % i + b"x" * 100, PERSISTENT)
    node.writer.commit()
    assert len(segment_names(folder)) > 5
    assert len(taken_bodies(c, b"q")) == 200
    node.writer.commit()
    assert len(segment_names(folder)) == 1, segment_names(folder)  # only the one being written
    node.stop()
    again = Node(folder, segment_bytes=4096)
    assert again.broker.queues[b"q"].message_count() == 0


def test_segments_roll_over_and_fully_acked_ones_are_deleted():
    _segments_go()


@in_folder
def _pinned(folder):
    node = Node(folder, segment_bytes=4096)
    c = node.client()
    c.queue(1, b"q", durable=True)
    c.publish(1, b"", b"q", b"kept", PERSISTENT)
    tag = c.get(1, b"q")[0].args[0]  # held unacked: its segment must stay
    for _i in range(100):
        c.publish(1, b"", b"q", b"x" * 100, PERSISTENT)
    assert len(taken_bodies(c, b"q")) == 100  # acked (no-ack gets), in later segments
    node.writer.commit()  # their REMOVED records and the delivery of "kept" go to the segment written now
    for _i in range(50):
        c.publish(1, b"", b"q", b"y" * 100, PERSISTENT)
    assert len(taken_bodies(c, b"q")) == 50
    node.writer.commit()
    assert len(segment_names(folder)) > 2  # that segment stays with segment 1: its records speak of it
    node.crash()
    again = Node(folder, segment_bytes=4096)
    assert taken_bodies(again.client(), b"q") == [(b"kept", True)]
    assert tag == 1


def test_removals_in_later_segments_stay_valid_while_an_older_one_is_kept():
    _pinned()


@in_folder
def _budget(folder):
    node = Node(folder, segment_bytes=4096, max_bytes=16384)
    c = node.client()
    c.queue(1, b"q", durable=True)
    c.call(1, spec.CONFIRM_SELECT, (False,))
    blocked = nacked = 0
    for _ in range(300):
        c.publish(1, b"", b"q", b"x" * 200, PERSISTENT)
        node.writer.commit()
        for event in c.read() + c.events:
            if event.name == "connection.blocked":
                blocked += 1
            if event.name == "basic.nack":
                nacked += 1
        c.events = []
        if nacked:
            break
    assert node.broker.flow.blocked and "low on disk" in node.broker.flow.reason, node.broker.flow.reason
    assert nacked, "a publisher with confirms is told no near the disk budget"
    ready = node.broker.queues[b"q"].message_count()
    assert ready > 0  # every confirmed message is still there: nothing was dropped
    assert len(taken_bodies(c, b"q")) == ready
    node.writer.commit()
    assert not node.broker.flow.blocked, node.broker.flow.reason


def test_near_the_disk_budget_publishers_are_blocked_and_nacked_not_dropped():
    _budget()


# ---------------------------------------------------------------- damaged journals


def _fill(folder, count=60):
    """A journal of several 4 KiB segments holding m0..m(count-1) in a durable queue."""
    node = Node(folder, segment_bytes=4096)
    c = node.client()
    c.queue(1, b"q", durable=True)
    for i in range(count):
        c.publish(1, b"", b"q", b"m%02d" % i + b"." * 200, PERSISTENT)
    node.crash()
    return segment_names(folder)


def _ids(client):
    return [int(body[1:3]) for body, _ in taken_bodies(client, b"q")]


@in_folder
def _truncated(folder):
    segments = _fill(folder)
    damage_segment(folder, segments[-1], lambda data: data[: len(data) - 100])
    node = Node(folder, segment_bytes=4096)
    ids = _ids(node.client())
    assert ids == list(range(len(ids))) and 45 < len(ids) < 60, ids  # only the cut-off write is lost
    assert "torn tail cut" in recovery_report(folder)


def test_a_truncated_segment_is_cut_at_its_last_good_record():
    _truncated()


@in_folder
def _zeros(folder):
    segments = _fill(folder)
    damage_segment(folder, segments[-1], lambda data: data + bytes(3000))
    node = Node(folder, segment_bytes=4096)
    assert _ids(node.client()) == list(range(60))
    assert "torn tail cut" in recovery_report(folder)


def test_a_zero_filled_tail_is_cut_and_nothing_is_lost():
    _zeros()


@in_folder
def _flipped(folder):
    segments = _fill(folder)
    middle = segments[len(segments) // 2]

    def flip(data):
        data = bytearray(data)
        data[len(data) // 2] ^= 0x40
        return bytes(data)

    damage_segment(folder, middle, flip)
    node = Node(folder, segment_bytes=4096)
    ids = _ids(node.client())
    assert 0 < len(ids) < 60 and ids == sorted(ids), ids
    assert 0 in ids and 59 in ids  # the segments before and after are served
    report = recovery_report(folder)
    assert "corrupt" in report and "quarantined" in report, report
    assert os.listdir(folder + "/quarantine") == [middle]
    assert any(level == "warning" and "quarantined" in text for level, text in node.logs)
    # the next start finds the cut segment sound, and the same messages
    node.stop()
    Node(folder, segment_bytes=4096)
    assert "nothing was cut" in recovery_report(folder)


def test_a_segment_with_a_flipped_byte_is_quarantined_and_the_rest_served():
    _flipped()


@in_folder
def _missing(folder):
    segments = _fill(folder)
    gone = segments[1]
    damage_segment(folder, gone, lambda data: None)
    node = Node(folder, segment_bytes=4096)
    ids = _ids(node.client())
    assert 0 in ids and 59 in ids and len(ids) < 60, ids
    assert "segment %s: missing" % gone[:-4] in recovery_report(folder), recovery_report(folder)


def test_a_missing_segment_is_reported_and_the_rest_served():
    _missing()


@in_folder
def _garbage(folder):
    os.mkdir(folder + "/journal")
    with open(folder + "/journal/00000001.seg", "wb") as f:
        f.write(b"this is not a journal at all" * 10)
    node = Node(folder)
    c = node.client()
    assert c.queue(1, b"q", durable=True) == b"q"  # boots, and serves
    assert "corrupt at byte 0" in recovery_report(folder)


def test_a_segment_of_garbage_does_not_stop_the_broker():
    _garbage()


def test_a_record_that_does_not_decode_is_reported_by_its_kind_and_segment():
    """A record whose checksum is sound but whose payload does not read (a bug, or a format of
    another version) is said by its kind and segment; a kind this hutch does not know is left."""
    from hutch.core.replay import Replay
    from hutch.core.store.journal import EXCHANGE, QUEUE

    replay = Replay()
    replay.segment(7, [(QUEUE, b"\x09too-short"), (EXCHANGE, b""), (200, b"from a newer hutch")])
    assert len(replay.undecodable) == 2
    assert replay.undecodable[0].startswith("segment 00000007: a queue record did not decode: ")
    assert replay.undecodable[1].startswith("segment 00000007: an exchange record did not decode: ")
    assert replay.unknown == 1
