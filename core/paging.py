"""A durable queue's backlog on disk: what it does not hold in memory, it knows as runs.

A run is the messages of one queue in one journal segment that are on disk only: the
segment, the id of the first, and a bitmap over the ids from there (a bit a message: no
object each, so a backlog of millions costs its bitmaps, ~1 bit per message). A queue
holds a bounded window of entries in memory (Limits.queue_window_messages and
queue_window_bytes); when it runs dry, the queue reads the next messages of its first
run back with large sequential reads of the segment file (read_run). A run also
remembers where in the file it stopped, so each byte of a segment is read about once.

Each read is searched in one call (find_messages: on CPython its C twin in c_accel/,
about ten times faster), which gives the fields of the run's messages as numbers; only
then are they made Messages, straight into the window (enqueue).

Sans-IO like the rest of core/: the storage port gives the journal its reader,
read(segment, position, size) -> bytes (shorter at the end of the file).
"""

import struct

from .journal import (
    FIELDS,
    ID_SIZE,
    MESSAGE,
    PAGE_DROPPED,
    REDELIVERED,
    TRANSIENT,
    members_payload,
    message_fields,
    set_bit,
)
from .message import FLAG_EXPIRATION, Message
from .records import CLEAN, CORRUPT, INCOMPLETE, TRAILER_SIZE, next_record
from .wire import text


def page_out(queue, message):
    """A message published to a paging queue (Queue.pages()): journalled, and on disk only."""
    runs = queue.runs
    run = runs[-1] if runs else None
    if run is None or run.segment != message.segment or run.moved:
        run = Run(message.segment, message.journal_id & ~7, bytearray(), 0, 0)  # bitmaps start on a byte
        runs.append(run)
    run.add(message)
    queue.paged += 1
    queue.paged_bytes += message.body_size


def page_in(queue):
    """Refill queue's window from its runs, oldest first, in large reads."""
    broker = queue.broker
    journal = broker.journal
    want = queue.window_messages - queue.messages.length
    if want < 1:
        want = 1
    while queue.runs and want > 0 and queue.ready_bytes < queue.window_bytes:
        run = queue.runs[0]
        try:
            count = read_run(journal, run, want, queue)
            damaged = None
        except Damaged as e:
            count = e.count
            damaged = e
        want -= count
        if damaged is not None:
            if run.segment == journal.segment and journal.chunks:
                return  # the disk refuses writes: what is missing is still waiting to be written
            broker.log(
                "error",
                "journal: segment %08d ends or is damaged at byte %d: %d messages of queue '%s' lost"
                % (run.segment, damaged.position, run.count, text(queue.name)),
            )
            drop_run(queue, run)
        elif not run.count:
            queue.runs.pop(0)


def drop_run(queue, run):
    """A run leaves the queue unread (purged, deleted, or lost to a damaged segment)."""
    queue.runs.remove(run)
    queue.paged -= run.count
    queue.paged_bytes -= run.bytes
    journal = queue.broker.journal
    journal.live[run.segment] -= run.count
    if not queue.deleted:  # (else its QUEUE_GONE record says it all)
        journal.write_marks()
        # the segment, then as MEMBERS: which of its messages the queue dropped
        parts = (struct.pack(">I", run.segment),) + members_payload(
            queue.name, 0, run.first_id, run.count, run.persistent_bytes, run.bitmap
        )
        journal.append_referring(PAGE_DROPPED, parts, run.segment)


class Run:
    def __init__(self, segment, first_id, bitmap, count, size, moved=False):
        self.segment = segment
        self.first_id = first_id
        self.bitmap = bitmap  # bytearray: bit i is message first_id + i, still on disk only
        self.count = count  # bits set
        self.bytes = size  # their body bytes
        self.persistent_bytes = size  # ... of the persistent ones (what a restart brings back)
        self.moved = moved  # messages compaction wrote again: ids older than the segment's
        self.position = 0  # where in the segment file reading goes on

    def add(self, message):
        """A message published to a paging queue: on disk only from the start."""
        set_bit(self.bitmap, message.journal_id - self.first_id)
        self.count += 1
        self.bytes += message.body_size
        if message.persistent():
            self.persistent_bytes += message.body_size

    def take(self, journal_id):
        """Clear journal_id's bit: True if it was set (the message is this run's)."""
        i = journal_id - self.first_id
        if i < 0 or (i >> 3) >= len(self.bitmap):
            return False
        bit = 1 << (i & 7)
        if not self.bitmap[i >> 3] & bit:
            return False
        self.bitmap[i >> 3] ^= bit
        self.count -= 1
        return True


class Damaged(Exception):
    """The segment ended or was damaged before the run's messages were all found."""

    def __init__(self, position, count):
        super().__init__(position)
        self.position = position
        self.count = count  # messages found (and queued) before that


def read_run(journal, run, want, queue):
    """Up to want messages of run, in id order, read from its segment into queue's window (see
    enqueue); how many. Raises Damaged when the file ends, or stops being sound, before they
    are all found. The records of each read are found in one call (find_messages, or its C
    twin on CPython: journal.find_messages), not one at a time."""
    find = journal.find_messages or find_messages
    read_size = journal.read_size
    count = 0
    position = run.position
    while run.count and count < want:
        data = journal.read(run.segment, position, read_size)
        n = len(data)
        if not n:  # the file ends before the run's last message: cut short or gone
            run.position = position
            raise Damaged(position, count)
        fields, stop, status, size = find(data, 0, run.first_id, run.bitmap, min(want - count, run.count))
        found = len(fields) // FIELDS
        run.count -= found
        count += found
        if found:
            enqueue(queue, run, data, fields)
        if status == INCOMPLETE and n == read_size:  # the record goes on past this read
            if stop == 0:  # one record larger than a read (its header is sound: its size can be believed)
                read_size = max(read_size * 2, size)
                continue
        elif status != CLEAN:
            run.position = position + stop
            raise Damaged(position + stop, count)
        position += stop
    run.position = position
    return count


def enqueue(queue, run, data, fields):
    """The messages found in data (fields: FIELDS numbers each, see message_fields) into queue's
    window, as entries (message, redelivered, expires_at); out of the run's totals. (data is
    bytes: its slices are the messages' own.)"""
    broker = queue.broker
    wall = broker.now + broker.wall_offset
    before = queue.delivered_before
    push = queue.messages.push
    segment = run.segment
    total = persistent = cost = 0
    for k in range(0, len(fields), FIELDS):
        journal_id, flags, arrived, route, key, names, header, body, end = fields[k : k + FIELDS]
        body_tail = data[body:end] if end > body else None
        size = end - body - 5 if body_tail is not None else 0
        message = Message(
            data[route + 1 : key], data[key + 1 : names], data[route:names], data[header:body], body_tail, size
        )
        message.journal_id = journal_id
        message.arrived = arrived
        message.segment = segment
        if data[header + 16] & FLAG_EXPIRATION >> 8:  # (Message.flags, read from the buffer)
            expiration = message.properties().get("expiration")
            if expiration and expiration.isdigit():
                message.ttl = int(expiration)
        total += size
        if not flags & TRANSIENT:
            persistent += size
        cost += message.cost
        redelivered = bool(flags & REDELIVERED) or (before is not None and journal_id in before)
        expires_at = None
        if queue.message_ttl is not None or message.ttl is not None:
            expires_at = broker.expiry(queue, message) + arrived - wall  # its TTL runs from its arrival
        push((message, redelivered, expires_at))
    found = len(fields) // FIELDS
    broker.flow.hold_many(found, cost)
    queue.ready_bytes += total
    queue.paged -= found
    queue.paged_bytes -= total
    run.bytes -= total
    run.persistent_bytes -= persistent


def find_messages(data, pos, first_id, bitmap, want):
    """The messages of a run in data (bytes read from its segment) from pos on: those of its
    MESSAGE records whose id has its bit set in bitmap (bit i: id first_id + i), which is
    cleared. (fields, stop, status, size): FIELDS numbers per message found (message_fields),
    at most want of them; where the next record starts; how the scan ended: CLEAN (want
    found, or the data ends between records), INCOMPLETE (a sound record goes on past the
    data: size is its size, 0 if its header is cut too), TORN or CORRUPT (next_record: no
    good record at stop; CORRUPT also for a message whose fields do not fit in its record).
    The reference of c_accel's find_messages, which gives the same on any input."""
    fields = []
    n = len(data)
    found = 0
    while pos < n and found < want:
        kind, start, end = next_record(data, pos)
        if kind < 0:
            return fields, pos, -kind, end if kind == -INCOMPLETE else 0
        if kind == MESSAGE:
            if end - start < ID_SIZE:
                return fields, pos, CORRUPT, 0
            i = 0
            for j in range(start, start + ID_SIZE):
                i = (i << 8) | data[j]
            i -= first_id
            if i >= 0 and (i >> 3) < len(bitmap) and bitmap[i >> 3] & (1 << (i & 7)):
                one = message_fields(data, start, end)
                if one is None:
                    return fields, pos, CORRUPT, 0
                bitmap[i >> 3] ^= 1 << (i & 7)
                fields.extend(one)
                found += 1
        pos = end + TRAILER_SIZE
    return fields, pos, CLEAN, 0
