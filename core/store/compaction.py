"""Compaction: the messages that keep an old segment alive, written again at the end.

A journal segment can be deleted only once nothing in it is needed (core/store/journal.py).
One old message still unacknowledged, or still waiting in a queue's window, would keep
its whole segment, and with it every later segment whose removal records speak of it:
gigabytes held for a few bytes. So when the oldest segment still needed holds little
(COMPACT_BELOW of the messages written to it), its messages still held in memory are
written again into the current segment (MESSAGE records flagged MOVED, keeping their
ids), and the segment is free to go. A restart then finds each such message in its new
segment, and not in the old one if that is still there (core/replay.py).

Only messages in memory are moved: a queue whose backlog on disk starts in that segment
is about to read it anyway. And only when every message the journal counts as live
there is found, in a queue's window or held by a consumer: a move that missed one
would let a later removal of it name the wrong segment.

Sans-IO, MicroPython-clean: the broker's tick calls compact() when Journal.tick says the
oldest segment still needed holds little (at most once a second); a board imports this
module only then, not for a backlog that fills its old segments.
"""

from .journal import COMPACT_BELOW, MESSAGE, MOVED, TRANSIENT, message_parts

SEGMENTS_PER_TICK = 8  # oldest segments compacted one after the other in one tick, at most


def compact(broker):
    """Compact the oldest segments still needed, one after the other, while each qualifies (at
    most SEGMENTS_PER_TICK: a journal that fills segments faster than one a second must not
    outrun its compaction). The number compacted."""
    done = 0
    while done < SEGMENTS_PER_TICK and _compact_oldest(broker):
        done += 1
    return done


def _compact_oldest(broker):
    """One compaction step: True if a segment was compacted."""
    journal = broker.journal
    segment = _candidate(broker, journal)
    if segment is None:
        return False
    held = _held(broker, segment)
    if held is None:
        return False
    moved = 0
    for message in sorted(held, key=_journal_id):
        queues, delivered = held[message]
        _move(journal, message, queues)
        for queue in delivered:
            journal.delivered(queue, message)  # at a restart it comes back redelivered
        moved += 1
    broker.log("info", "journal: segment %08d compacted: %d messages written again" % (segment, moved))
    return True


def _journal_id(message):
    return message.journal_id


def _candidate(broker, journal):
    """The oldest segment still needed, if it holds little and no queue reads it from disk."""
    live = journal.live
    oldest = None
    for segment in journal.sizes:
        if segment != journal.segment and live.get(segment, 0) and (oldest is None or segment < oldest):
            oldest = segment
    if oldest is None or oldest >= journal.segment - 1:
        return None
    if live[oldest] * COMPACT_BELOW > journal.written.get(oldest, 0):
        return None
    for queue in broker.queues.values():
        for run in queue.runs:
            if run.segment == oldest:
                return None
    return oldest


def _held(broker, segment):
    """{message: ([queues holding it], [queues that delivered it])} for every live message of
    segment, or None if some could not be found."""
    held = {}
    found = 0
    for queue in broker.queues.values():
        if not queue.journalled:
            continue
        for message, redelivered, _expires_at in queue.messages:
            if message.journal_id and message.segment == segment:
                found += _add(held, message, queue, redelivered)
    for conn in broker.connections:
        for queue, (message, _redelivered, _expires_at) in conn.unsettled():
            if queue.journalled and not queue.deleted and message.journal_id and message.segment == segment:
                found += _add(held, message, queue, True)
    if found != broker.journal.live.get(segment, 0):
        return None
    return held


def _add(held, message, queue, delivered):
    pair = held.get(message)
    if pair is None:
        pair = held[message] = ([], [])
    if queue in pair[0]:
        return 0
    pair[0].append(queue)
    if delivered:
        pair[1].append(queue)
    return 1


def _move(journal, message, queues):
    """Write a message held by queues again, into the current segment, keeping its id."""
    persistent = message.persistent()
    names = [queue.name_shortstr for queue in queues]
    flags = MOVED if persistent else MOVED | TRANSIENT
    old = message.segment
    segment = journal.append_record(
        MESSAGE,
        message_parts(message, message.journal_id, flags, message.arrived, names),  # its TTL still runs from then
    )
    message.segment = segment
    live = journal.live
    live[old] -= len(names)
    live[segment] = live.get(segment, 0) + len(names)
    journal.written[segment] = journal.written.get(segment, 0) + 1
    if persistent:  # the segment's summary lists them (a transient one does not come back)
        for queue in queues:
            ids = journal.moved.get(queue.name)
            if ids is None:
                ids = journal.moved[queue.name] = []
            ids.append(message.journal_id)
