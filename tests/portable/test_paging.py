"""Durable queues whose backlog waits on disk (core/store/paging.py): a bounded window in memory,
runs read back from real segment files, sealed segments' summaries at restart, and what
every queue feature does with messages that are on disk only. Also run under MicroPython.
"""

import struct

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
from hutch.core.limits import Limits
from hutch.core.message import Message
from hutch.core.store.journal import FIELDS, MESSAGE, message_parts
from hutch.core.store.paging import Run, find_messages, page_in
from hutch.core.store.records import record_parts

WINDOW = [4]  # the window _small gives a queue (the esp32 profile's 1: see the last test)


def _small(folder, window=None, segment_bytes=4096):
    return Node(folder, segment_bytes=segment_bytes, limits=Limits(queue_window_messages=window or WINDOW[0]))


def _fill(node, count, queue=b"q", arguments=None, properties=PERSISTENT):
    c = node.client()
    c.queue(1, queue, durable=True, arguments=arguments or {})
    for i in range(count):
        c.publish(1, b"", queue, b"m%03d" % i + b"." * 100, properties)
    return c


def _numbers(bodies):
    return [int(body[1:4]) for body, _ in bodies]


@in_folder
def _window(folder):
    node = _small(folder)
    c = _fill(node, 100)
    queue = node.broker.queues[b"q"]
    assert queue.messages.length == 4 and queue.paged == 96, (queue.messages.length, queue.paged)
    assert queue.message_count() == 100
    assert c.call(1, spec.QUEUE_DECLARE, (0, b"q", True, True, False, False, False, {}))[0].args[1] == 100
    assert _numbers(taken_bodies(c, b"q")) == list(range(100))
    assert queue.paged == 0 and queue.runs == [] and queue.message_count() == 0


def test_a_durable_queue_keeps_a_window_in_memory_and_reads_the_rest_back_in_order():
    _window()


@in_folder
def _consumer(folder):
    node = _small(folder)
    c = _fill(node, 50)
    c.call(1, spec.BASIC_QOS, (0, 3, False))
    c.call(1, spec.BASIC_CONSUME, (0, b"q", b"tag", False, False, False, False, {}))
    seen = []
    for _ in range(100):
        deliveries = [e for e in c.read() + c.events if e.name == "basic.deliver"]
        c.events = []
        if not deliveries:
            break
        for event in deliveries:
            seen.append(int(event.body[1:4]))
            c.ack(1, event.args[1])
    assert seen == list(range(50)), seen


def test_a_consumer_drains_a_paged_backlog_in_order():
    _consumer()


@in_folder
def _requeue(folder):
    node = _small(folder)
    c = _fill(node, 20)
    tags = [c.get(1, b"q")[0].args[0] for _ in range(6)]  # 0..5 delivered, unacked; 6.. on disk
    c.call(1, spec.BASIC_NACK, (tags[-1], True, True))  # all six back, at the head
    bodies = taken_bodies(c, b"q")
    assert _numbers(bodies) == list(range(20))
    assert [redelivered for _, redelivered in bodies] == [True] * 6 + [False] * 14


def test_requeued_messages_go_back_before_the_backlog_on_disk():
    _requeue()


@in_folder
def _requeue_order(folder):
    node = _small(folder)
    c = _fill(node, 20)
    tags = [c.get(1, b"q")[0].args[0] for _ in range(10)]  # read back from disk on the way
    for i in (7, 2, 9, 0, 5):
        c.call(1, spec.BASIC_REJECT, (tags[i], True))  # one at a time, out of order
    c.call(1, spec.CHANNEL_CLOSE, (200, b"", 0, 0))  # the other five back too
    c.channel(2)
    bodies = []
    for _ in range(20):
        event = c.get(2, b"q", True)[0]
        bodies.append((event.body, event.args[1]))
    assert _numbers(bodies) == list(range(20))
    assert [redelivered for _, redelivered in bodies] == [True] * 10 + [False] * 10


def test_requeued_messages_of_a_paged_queue_go_back_to_their_places():
    _requeue_order()


@in_folder
def _interleaved(folder):
    node = _small(folder)
    c = _fill(node, 30, queue=b"a")
    a = node.broker.queues[b"a"]
    assert [run.bitmap for run in a.runs] == [None] * len(a.runs)  # one queue: ids follow each other
    c.queue(1, b"b", durable=True)
    c.bind(1, b"a", b"amq.fanout")
    c.bind(1, b"b", b"amq.fanout")
    for i in range(30, 90):
        if i % 3 == 2:
            c.publish(1, b"amq.fanout", b"", b"m%03d" % i + b"." * 100, PERSISTENT)  # to both
        else:
            c.publish(1, b"", b"ab"[i % 2 : i % 2 + 1], b"m%03d" % i + b"." * 100, PERSISTENT)
    b = node.broker.queues[b"b"]
    assert a.runs[-1].bitmap is not None and b.runs[-1].bitmap is not None  # the other's ids between
    mine = {b"a": list(range(30)), b"b": []}
    for i in range(30, 90):
        for name in (b"a", b"b") if i % 3 == 2 else (b"ab"[i % 2 : i % 2 + 1],):
            mine[name].append(i)
    node.crash()
    again = Node(folder, segment_bytes=4096, limits=Limits(queue_window_messages=4))
    runs = again.broker.queues[b"a"].runs
    assert runs[0].bitmap is None and runs[-1].bitmap is not None  # dense again where ids follow each other
    d = again.client()
    assert _numbers(taken_bodies(d, b"b")) == mine[b"b"]
    assert _numbers(taken_bodies(d, b"a", 10)) == mine[b"a"][:10]
    assert d.call(1, spec.QUEUE_PURGE, (0, b"a", False))[0].args[0] == len(mine[b"a"]) - 10
    again.crash()
    last = Node(folder, segment_bytes=4096)
    assert last.broker.queues[b"a"].message_count() == 0  # the purge of runs with and without bitmaps holds


def test_runs_hold_no_bitmap_while_their_ids_follow_each_other_and_one_when_queues_interleave():
    _interleaved()


class _Published:
    def __init__(self, journal_id, persistent=True, segment=1):
        self.journal_id = journal_id
        self.body_size = 10
        self.segment = segment
        self._persistent = persistent

    def persistent(self):
        return self._persistent


def _read(run, ids, want=100):
    """What read_run takes of run from a read holding MESSAGE records of ids, in that order:
    the ids find_messages gives (at most want, and what the run has in its first segment),
    then Run.took."""
    header = struct.pack(">IHHQHB", 15, 60, 0, 0, 0x1000, 2) + b"\xce"  # no body, delivery-mode 2
    message = Message(b"", b"q", b"\x00\x01q", header, None, 0)
    data = b"".join(b"".join(record_parts(MESSAGE, message_parts(message, i, 0, 0, [b"\x01q"]))) for i in ids)
    fields = find_messages(data, 0, run.first_id, run.bitmap, min(want, run.here()))[0]
    found = [fields[k] for k in range(0, len(fields), FIELDS)]
    run.took(len(found))
    return found


def test_a_run_takes_a_bitmap_only_when_its_ids_stop_following_each_other():
    run = Run(1, 13)
    for journal_id in (13, 14, 15):
        assert run.add(_Published(journal_id))
    assert run.bitmap is None and (run.first_id, run.count, run.bytes) == (13, 3, 30)
    assert _read(run, (12, 13, 16), 1) == [13]  # 12 and 16 are not its own; the oldest first
    assert run.bitmap is None and (run.first_id, run.count) == (14, 2)
    assert run.add(_Published(18, persistent=False))  # 16 and 17 went elsewhere
    assert run.bitmap is not None and run.first_id == 8 and run.count == 3 and run.transient_bytes == 10
    assert not run.add(_Published(19, segment=2))  # a run with a bitmap stays in its segment
    assert _read(run, range(8, 24)) == [14, 15, 18] and run.count == 0
    dense = Run(1, 40)
    for journal_id in range(40, 50):
        dense.add(_Published(journal_id))
    # a dense run's ids come in order in its segment: the next one only, 45 is not yet
    assert _read(dense, (45, 40, 41)) == [40, 41] and dense.bitmap is None and dense.count == 8
    assert _read(dense, range(40, 60)) == list(range(42, 50)) and dense.count == 0


def test_a_dense_run_goes_on_into_the_next_segments_with_two_numbers_each():
    run = Run(3, 100)
    for journal_id, segment in ((100, 3), (101, 3), (102, 4), (103, 4), (104, 4), (105, 5)):
        assert run.add(_Published(journal_id, segment=segment))
    assert (run.segment, run.first_id, run.count, run.bytes, run.parts) == (3, 100, 6, 60, [102, 30, 105, 10])
    assert not run.add(_Published(107, segment=5))  # an id between went elsewhere: a run of its own
    assert not run.add(_Published(106, persistent=False, segment=5))  # (its bytes would not come back)
    assert not run.add(_Published(106, segment=7))  # segment 6 in between
    run.position = 500
    assert _read(run, (102,)) == []  # not read in id order: not taken
    assert _read(run, (100, 101, 102)) == [100, 101]  # its first segment's part, no further
    assert (run.segment, run.first_id, run.position, run.parts) == (4, 102, 0, [105, 10])  # on to segment 4
    assert _read(run, (102, 103, 104, 105)) == [102, 103, 104] and run.parts is None and run.segment == 5
    assert _read(run, (105,)) == [105] and run.count == 0


@in_folder
def _ttl(folder):
    node = _small(folder)
    c = _fill(node, 30, arguments={"x-message-ttl": 1000})
    queue = node.broker.queues[b"q"]
    assert queue.paged == 30 - WINDOW[0]
    c.tick(500)
    assert queue.message_count() == 30
    c.tick(1500)
    assert queue.message_count() == 0 and queue.paged == 0, queue.message_count()
    assert names(c.get(1, b"q", True)) == ["basic.get-empty"]


def test_messages_on_disk_expire_by_their_ttl():
    _ttl()


@in_folder
def _dead_letters(folder):
    node = _small(folder)
    c = node.client()
    c.queue(1, b"dead", durable=True)
    _fill(node, 12, arguments={"x-max-length": 5, "x-dead-letter-exchange": b""}).queue(
        1, b"q", durable=True, arguments={"x-max-length": 5, "x-dead-letter-exchange": b""}
    )
    assert node.broker.queues[b"q"].message_count() == 5
    assert _numbers(taken_bodies(c, b"q")) == [7, 8, 9, 10, 11]


def test_max_length_drops_the_oldest_of_a_paged_queue():
    _dead_letters()


@in_folder
def _purge(folder):
    node = _small(folder)
    c = _fill(node, 40)
    assert c.call(1, spec.QUEUE_PURGE, (0, b"q", False))[0].args[0] == 40
    assert node.broker.queues[b"q"].message_count() == 0
    _fill(node, 3, queue=b"other")
    node.writer.commit()
    node.crash()
    again = Node(folder, segment_bytes=4096, limits=Limits(queue_window_messages=4))
    assert again.broker.queues[b"q"].message_count() == 0  # the purge holds after a restart
    assert again.broker.queues[b"other"].message_count() == 3


def test_a_purged_paged_queue_stays_empty_after_a_restart():
    _purge()


@in_folder
def _delete(folder):
    node = _small(folder)
    c = _fill(node, 40)
    assert c.call(1, spec.QUEUE_DELETE, (0, b"q", False, False, False))[0].args[0] == 40
    c.queue(1, b"q", durable=True)
    node.writer.commit()
    assert len(segment_names(folder)) == 1, segment_names(folder)  # nothing keeps the old segments
    node.crash()
    again = Node(folder, segment_bytes=4096)
    assert again.broker.queues[b"q"].message_count() == 0


def test_a_deleted_paged_queue_frees_its_segments():
    _delete()


@in_folder
def _restart(folder):
    node = _small(folder)
    c = _fill(node, 200)
    tags = [c.get(1, b"q")[0].args[0] for _ in range(3)]  # 0, 1, 2 delivered; 2 is acked
    c.ack(1, tags[2])
    node.crash()
    again = Node(folder, segment_bytes=4096, limits=Limits(queue_window_messages=4))
    queue = again.broker.queues[b"q"]
    assert queue.messages.length == 0 and queue.paged == 199  # nothing read yet: all on disk
    # the first segment's run has a gap (2 was acked); from the next segment on, one dense run
    assert [run.bitmap is None for run in queue.runs] == [False, True] and len(queue.runs[1].parts) >= 4
    bodies = taken_bodies(again.client(), b"q")
    assert _numbers(bodies) == [0, 1] + list(range(3, 200))
    assert [r for _, r in bodies[:3]] == [True, True, False]
    log = [text for level, text in again.logs if "recovered" in text]
    assert "recovered 199 messages" in log[0], log


def test_a_paged_backlog_comes_back_after_a_crash_from_the_summaries():
    _restart()


@in_folder
def _transient(folder):
    node = _small(folder)
    c = _fill(node, 10)
    for i in range(10, 20):
        c.publish(1, b"", b"q", b"m%03d" % i + b"." * 100, TRANSIENT)  # journalled: the queue pages
    c.publish(1, b"", b"q", b"m020", PERSISTENT)
    node.writer.commit()
    node.crash()
    # Nothing was taken: a restart brings back the persistent ones only, in order.
    again = Node(folder, segment_bytes=4096)
    assert _numbers(taken_bodies(again.client(), b"q")) == list(range(10)) + [20]


def test_transient_messages_keep_a_paged_queue_in_order_and_do_not_come_back():
    _transient()


@in_folder
def _transient_order(folder):
    node = _small(folder)
    c = _fill(node, 10)
    for i in range(10, 20):
        c.publish(1, b"", b"q", b"m%03d" % i + b"." * 100, TRANSIENT)
    assert _numbers(taken_bodies(c, b"q")) == list(range(20))


def test_transient_messages_behind_a_backlog_on_disk_come_in_order():
    _transient_order()


@in_folder
def _one_ack_of_many(folder):
    node = _small(folder)
    c = _fill(node, 30)
    for i in range(30, 40):
        c.publish(1, b"", b"q", b"m%03d" % i + b"." * 100, TRANSIENT)  # journalled: the queue pages
    for i in range(40, 60):
        c.publish(1, b"", b"q", b"m%03d" % i + b"." * 100, PERSISTENT)
    c.call(1, spec.BASIC_QOS, (0, 100, False))
    c.call(1, spec.BASIC_CONSUME, (0, b"q", b"tag", False, False, False, False, {}))
    deliveries = []
    for _ in range(100):
        found = [e for e in c.read() + c.events if e.name == "basic.deliver"]
        c.events = []
        if not found:
            break
        deliveries += found
    assert [int(e.body[1:4]) for e in deliveries] == list(range(60))
    assert len(node.broker.journal.live) >= 3  # the messages span several segments
    c.ack(1, deliveries[49].args[1], True)  # 0..49 at once: persistent, transient, persistent
    node.stop()
    # A restart brings back only the persistent ones left unacked, as delivered ones
    again = Node(folder, segment_bytes=4096)
    bodies = taken_bodies(again.client(), b"q")
    assert _numbers(bodies) == list(range(50, 60)), _numbers(bodies)
    assert all(redelivered for _, redelivered in bodies)


def test_one_ack_of_many_removes_them_all_across_segments():
    _one_ack_of_many()


@in_folder
def _sealed(folder):
    node = _small(folder)
    _fill(node, 120)
    node.crash()
    Node(folder, segment_bytes=4096)  # seals the segment the crash left open
    segments = segment_names(folder)
    for name in segments[:-1]:
        with open(folder + "/journal/" + name, "rb") as f:
            assert f.read()[-16:-12] == b"HSUM", name  # every segment but the newest is sealed
    # A flipped byte among the messages of a sealed segment: its CRC says so, and it is read
    # record by record, quarantined and cut like an unsealed one.
    middle = segments[len(segments) // 2]

    def flip(data):
        data = bytearray(data)
        data[200] ^= 0x08
        return bytes(data)

    damage_segment(folder, middle, flip)
    node = Node(folder, segment_bytes=4096)
    report = recovery_report(folder)
    assert "corrupt" in report and "quarantined" in report, report
    numbers = _numbers(taken_bodies(node.client(), b"q"))
    assert numbers == sorted(numbers) and 0 in numbers and 119 in numbers and len(numbers) < 120


def test_a_flipped_byte_in_a_sealed_segment_is_found_by_its_checksum():
    _sealed()


@in_folder
def _summary_damage(folder):
    node = _small(folder)
    _fill(node, 120)
    node.crash()
    Node(folder, segment_bytes=4096).stop()
    segments = segment_names(folder)
    first, second = segments[0], segments[1]
    damage_segment(folder, first, lambda data: data[:-3])  # the trailer cut: read whole
    damage_segment(folder, second, lambda data: data[:-20] + bytes((data[-20] ^ 1,)) + data[-19:])  # the summary
    node = Node(folder, segment_bytes=4096)
    assert _numbers(taken_bodies(node.client(), b"q")) == list(range(120))  # nothing was lost


def test_a_damaged_summary_or_trailer_only_means_reading_the_segment_whole():
    _summary_damage()


@in_folder
def _cut_during_paging(folder):
    node = _small(folder)
    c = _fill(node, 60)
    node.writer.commit()
    queue = node.broker.queues[b"q"]
    [run] = queue.runs  # one run, over several segments
    assert run.parts is not None and len(run.parts) >= 4, run.parts
    # the card loses the end of a segment under a running broker: one in the middle of the run
    damage_segment(folder, "%08d.seg" % (run.segment + 1), lambda data: data[: len(data) // 2])
    numbers = _numbers(taken_bodies(c, b"q"))
    assert numbers == sorted(numbers) and numbers[:4] == [0, 1, 2, 3] and len(numbers) < 60
    assert 59 in numbers  # what the segments after it hold is read
    assert any(level == "error" and "lost" in text for level, text in node.logs), node.logs
    assert queue.message_count() == 0 and queue.paged_bytes == 0


def test_a_segment_cut_under_a_running_broker_loses_only_what_it_held():
    _cut_during_paging()


@in_folder
def _compaction(folder):
    node = Node(folder, segment_bytes=4096)
    c = node.client()
    c.queue(1, b"q", durable=True)
    c.tick(500)
    c.publish(1, b"", b"q", b"pinned", PERSISTENT)
    tag = c.get(1, b"q")[0].args[0]  # held unacked for good
    arrived = node.broker.connections[0].unsettled()[0][1][0].arrived
    for round in range(6):
        for i in range(40):
            c.publish(1, b"", b"q", b"m%03d" % i + b"." * 100, PERSISTENT)
        assert len(taken_bodies(c, b"q")) == 40
        node.writer.commit()
        c.tick(1000 * (round + 1))
    node.writer.commit()
    assert any("compacted" in text for _, text in node.logs), node.logs
    # the pinned message was written again: nothing holds the old segments any more
    assert len(segment_names(folder)) <= 3, segment_names(folder)
    assert "00000001.seg" not in segment_names(folder)
    node.crash()
    again = Node(folder, segment_bytes=4096)
    queue = again.broker.queues[b"q"]
    page_in(queue)
    # the copy keeps the message's arrival (its TTL and age run from its publish, not the move)
    assert queue.messages.peek()[0].arrived == arrived > 0
    assert taken_bodies(again.client(), b"q") == [(b"pinned", True)]
    assert tag == 1


def test_compaction_moves_a_pinned_message_forward_and_the_replay_finds_it():
    _compaction()


@in_folder
def _confirms_and_tx(folder):
    node = _small(folder)
    c = _fill(node, 10)
    c.expect(1, spec.CONFIRM_SELECT, (False,))
    assert c.publish(1, b"", b"q", b"m010" + b"." * 100, PERSISTENT) == []  # on disk only, not synced yet
    node.writer.commit()
    assert names(c.read()) == ["basic.ack"]
    c.channel(2)
    c.expect(2, spec.TX_SELECT)
    c.publish(2, b"", b"q", b"m011" + b"." * 100, PERSISTENT)
    c.publish(2, b"", b"q", b"m012" + b"." * 100, PERSISTENT)
    assert c.call(2, spec.TX_COMMIT) == []
    node.writer.commit()
    assert names(c.read()) == ["tx.commit-ok"]
    assert node.broker.queues[b"q"].paged == 13 - WINDOW[0]
    assert _numbers(taken_bodies(c, b"q")) == list(range(13))


def test_confirms_and_transactions_on_a_paged_queue():
    _confirms_and_tx()


def test_every_feature_of_a_paged_queue_with_a_window_of_one_message():
    """The esp32 profile's window (boards/esp32.py): one message in memory, the rest on disk."""
    WINDOW[0] = 1
    try:
        for scenario in (
            _consumer,
            _requeue,
            _ttl,
            _dead_letters,
            _purge,
            _delete,
            _restart,
            _transient,
            _transient_order,
            _one_ack_of_many,
            _interleaved,
            _confirms_and_tx,
        ):
            scenario()
    finally:
        WINDOW[0] = 4


@in_folder
def _squeezed(folder):
    from hutch.core.store.squeeze import SQUEEZED, squeeze

    node = Node(folder, segment_bytes=4096)
    c = _fill(node, 100)  # all in memory: the window holds 1024
    for _ in range(20):  # given to a consumer and back: the first 20 redelivered
        c.get(1, b"q")
    c.expect(1, spec.CHANNEL_CLOSE, (200, b"", 0, 0))
    c.channel(1)
    node.writer.commit()
    broker = node.broker
    queue = broker.queues[b"q"]
    held = broker.flow.held_messages
    assert queue.messages.length == 100 and not queue.paged
    assert squeeze(broker, True) == 100 - SQUEEZED  # the memory alarm: to disk, past the first 16
    assert queue.messages.length == SQUEEZED and queue.paged == 100 - SQUEEZED
    assert broker.flow.held_messages == held - (100 - SQUEEZED)
    c.publish(1, b"", b"q", b"m100" + b"." * 100, PERSISTENT)  # (after the backlog: order kept)
    taken = taken_bodies(c, b"q", 40)
    assert _numbers(taken) == list(range(40)), taken
    assert [redelivered for _, redelivered in taken] == [True] * 20 + [False] * 20  # (marks kept on disk)
    assert queue.messages.length <= SQUEEZED, "read back a squeezed window at a time"
    squeeze(broker, False)  # the alarm cleared: the window is its size again
    assert queue.window_messages == broker.limits.queue_window_messages
    assert _numbers(taken_bodies(c, b"q")) == list(range(40, 101))
    assert queue.message_count() == 0 and queue.paged_bytes == 0 and queue.ready_bytes == 0


def test_under_the_memory_alarm_a_durable_queue_pages_its_window_to_disk_in_order():
    _squeezed()
