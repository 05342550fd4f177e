"""Durability through real journal files: what a restart brings back, confirms that wait for
the disk, segments that roll and go, the disk budget, and recovery from damaged segments.

A "restart" is a new Broker replaying the same folder (ports/storage.recover), as
`hutch serve` does at start. These tests also run under MicroPython.
"""

import os

from harness import names, opened
from scratch import remove_tree, scratch_folder

from hutch.codec import spec
from hutch.core.broker import Broker
from hutch.core.limits import Limits
from hutch.ports.recovery import recover

PERSISTENT = {"delivery-mode": 2}
TRANSIENT = {"delivery-mode": 1}


class Node:
    """A broker on a data folder, with what it logged."""

    def __init__(self, folder, segment_bytes=1 << 20, max_bytes=1 << 30, limits=None):
        self.logs = []
        self.broker = Broker(limits or Limits(), log=self._log)
        self.writer = recover(folder, self.broker, segment_bytes, max_bytes, self.broker.log)

    def _log(self, level, text, exc=None):
        self.logs.append((level, text))

    def client(self):
        return opened(self.broker)

    def stop(self):
        """A clean stop: everything written and synced, the file closed."""
        self.writer.commit()
        self.writer.files.close()

    def crash(self):
        """A killed process: what was written stays, nothing more is synced or closed."""
        self.writer.write()


def _bodies(client, queue, count=1000):
    out = []
    for _ in range(count):
        events = client.get(1, queue, True)
        if events[0].name == "basic.get-empty":
            return out
        out.append((events[0].body, events[0].args[1]))
    return out


def _segments(folder):
    return sorted(n for n in os.listdir(folder + "/journal") if n.endswith(".seg"))


def _in_folder(test):
    def run():
        folder = scratch_folder()
        try:
            test(folder)
        finally:
            remove_tree(folder)

    return run


@_in_folder
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


@_in_folder
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


@_in_folder
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
    assert _bodies(c, b"q") == [(b"m0", True), (b"m2", False), (b"m3", False), (b"m4", False)]
    assert b"t" not in again.broker.queues
    assert any("recovered 4 messages in 1 queues" in text for _, text in again.logs), again.logs


def test_messages_come_back_in_order_with_their_redelivered_flags():
    _messages()


@_in_folder
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


@_in_folder
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


@_in_folder
def _segments_go(folder):
    node = Node(folder, segment_bytes=4096)
    c = node.client()
    c.queue(1, b"q", durable=True)
    for i in range(200):
        c.publish(1, b"", b"q", b"%03d" % i + b"x" * 100, PERSISTENT)
    node.writer.commit()
    assert len(_segments(folder)) > 5
    assert len(_bodies(c, b"q")) == 200
    node.writer.commit()
    assert len(_segments(folder)) == 1, _segments(folder)  # only the one being written
    node.stop()
    again = Node(folder, segment_bytes=4096)
    assert again.broker.queues[b"q"].message_count() == 0


def test_segments_roll_over_and_fully_acked_ones_are_deleted():
    _segments_go()


@_in_folder
def _pinned(folder):
    node = Node(folder, segment_bytes=4096)
    c = node.client()
    c.queue(1, b"q", durable=True)
    c.publish(1, b"", b"q", b"kept", PERSISTENT)
    tag = c.get(1, b"q")[0].args[0]  # held unacked: its segment must stay
    for _i in range(100):
        c.publish(1, b"", b"q", b"x" * 100, PERSISTENT)
    assert len(_bodies(c, b"q")) == 100  # acked (no-ack gets), in later segments
    node.writer.commit()  # their REMOVED records and the delivery of "kept" go to the segment written now
    for _i in range(50):
        c.publish(1, b"", b"q", b"y" * 100, PERSISTENT)
    assert len(_bodies(c, b"q")) == 50
    node.writer.commit()
    assert len(_segments(folder)) > 2  # that segment stays with segment 1: its records speak of it
    node.crash()
    again = Node(folder, segment_bytes=4096)
    assert _bodies(again.client(), b"q") == [(b"kept", True)]
    assert tag == 1


def test_removals_in_later_segments_stay_valid_while_an_older_one_is_kept():
    _pinned()


@_in_folder
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
    assert len(_bodies(c, b"q")) == ready
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
    return _segments(folder)


def _damage(folder, name, change):
    path = folder + "/journal/" + name
    with open(path, "rb") as f:
        data = f.read()
    data = change(data)
    if data is None:
        os.remove(path)
        return
    with open(path, "wb") as f:
        f.write(data)


def _report(folder):
    with open(folder + "/recovery.txt") as f:
        return f.read()


def _ids(client):
    return [int(body[1:3]) for body, _ in _bodies(client, b"q")]


@_in_folder
def _truncated(folder):
    segments = _fill(folder)
    _damage(folder, segments[-1], lambda data: data[: len(data) - 100])
    node = Node(folder, segment_bytes=4096)
    ids = _ids(node.client())
    assert ids == list(range(len(ids))) and 45 < len(ids) < 60, ids  # only the cut-off write is lost
    assert "torn tail cut" in _report(folder)


def test_a_truncated_segment_is_cut_at_its_last_good_record():
    _truncated()


@_in_folder
def _zeros(folder):
    segments = _fill(folder)
    _damage(folder, segments[-1], lambda data: data + bytes(3000))
    node = Node(folder, segment_bytes=4096)
    assert _ids(node.client()) == list(range(60))
    assert "torn tail cut" in _report(folder)


def test_a_zero_filled_tail_is_cut_and_nothing_is_lost():
    _zeros()


@_in_folder
def _flipped(folder):
    segments = _fill(folder)
    middle = segments[len(segments) // 2]

    def flip(data):
        data = bytearray(data)
        data[len(data) // 2] ^= 0x40
        return bytes(data)

    _damage(folder, middle, flip)
    node = Node(folder, segment_bytes=4096)
    ids = _ids(node.client())
    assert 0 < len(ids) < 60 and ids == sorted(ids), ids
    assert 0 in ids and 59 in ids  # the segments before and after are served
    report = _report(folder)
    assert "corrupt" in report and "quarantined" in report, report
    assert os.listdir(folder + "/quarantine") == [middle]
    assert any(level == "warning" and "quarantined" in text for level, text in node.logs)
    # the next start finds the cut segment sound, and the same messages
    node.stop()
    Node(folder, segment_bytes=4096)
    assert "nothing was cut" in _report(folder)


def test_a_segment_with_a_flipped_byte_is_quarantined_and_the_rest_served():
    _flipped()


@_in_folder
def _missing(folder):
    segments = _fill(folder)
    gone = segments[1]
    _damage(folder, gone, lambda data: None)
    node = Node(folder, segment_bytes=4096)
    ids = _ids(node.client())
    assert 0 in ids and 59 in ids and len(ids) < 60, ids
    assert "segment %s: missing" % gone[:-4] in _report(folder), _report(folder)


def test_a_missing_segment_is_reported_and_the_rest_served():
    _missing()


@_in_folder
def _garbage(folder):
    os.mkdir(folder + "/journal")
    with open(folder + "/journal/00000001.seg", "wb") as f:
        f.write(b"this is not a journal at all" * 10)
    node = Node(folder)
    c = node.client()
    assert c.queue(1, b"q", durable=True) == b"q"  # boots, and serves
    assert "corrupt at byte 0" in _report(folder)


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
