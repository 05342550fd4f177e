"""The wall clock set while the broker runs (core/clock_jump.py): NTP's first answer after a
boot without a real-time clock. Durations never read it; the arrival stamps of the messages
held (in memory, and on disk when paged in) move with it, so their ages stay what really
elapsed, and the jump is said once."""

from journal_node import PERSISTENT, Node, in_folder

from hutch.core import snapshot
from hutch.core.limits import Limits
from hutch.core.store.paging import page_in

WALL = 1700000000  # (s) the clock as the board booted
YEAR = 365 * 86400


def _stamps(queue):
    return [entry[0].arrived for entry in queue.messages]


@in_folder
def _jump(folder):
    node = Node(folder, segment_bytes=4096, limits=Limits(queue_window_messages=4))
    broker = node.broker
    broker.tick(1000, WALL)
    c = node.client()
    c.queue(1, b"q", durable=True)
    for i in range(12):
        c.publish(1, b"", b"q", b"m%02d" % i, PERSISTENT)
    node.writer.commit()
    queue = broker.queues[b"q"]
    assert queue.paged, "some of them wait on disk"
    held = _stamps(queue)
    assert held and all(stamp == WALL * 1000 for stamp in held), held

    broker.tick(1500, WALL)  # the same clock: nothing moves
    broker.tick(2000, WALL + 1 + YEAR)  # NTP answers: a year forward (and the second that passed)
    assert broker.clock_jumps == 1
    assert _stamps(queue) == [stamp + YEAR * 1000 for stamp in held]
    said = [text for level, text in node.logs if "clock: the wall clock moved" in text]
    assert len(said) == 1 and "+%d s" % YEAR in said[0], node.logs
    # the ages shown are what elapsed (a second), not a year
    [shown] = [q for q in snapshot.snapshot(broker)["queues"] if q["name"] == "q"]
    assert 0 <= shown["oldest_age_s"] < 5, shown

    broker.tick(3000, WALL + 2 + YEAR - 86400)  # and back a day
    assert broker.clock_jumps == 2
    while queue.paged:  # what waited on disk comes back with its stamp moved by both jumps
        page_in(queue)
    stamps = _stamps(queue)
    assert len(stamps) == 12 and set(stamps) == {(WALL + YEAR - 86400) * 1000}, stamps
    node.stop()


def test_a_jump_of_the_wall_clock_moves_the_arrival_stamps_of_what_is_held():
    _jump()
