"""A durable queue's backlog on disk: what it does not hold in memory, it knows as runs.

A run is messages of one queue that are on disk only, in id order: the segment they are in,
the id of the first and how many there are, no object each. While their ids follow one
another (the usual case: nothing else was published between them) that is all a run holds, and
it goes on from one segment into the next noting only where that segment's part starts and its
bytes: so a backlog costs a few numbers per segment however long it is. Once another queue's
message comes between two of them, a run keeps a bitmap over the ids from its first (a bit a
message) and stays in its segment. A queue holds a bounded window of entries in memory
(Limits.queue_window_messages and queue_window_bytes); when it runs dry, the queue reads the
next messages of its first run back with large sequential reads of the segment file
(read_run). A run also remembers where in the file it stopped, so each byte of a segment is
read about once.

Each read is searched in one call (find_messages: on CPython its C twin in c_accel/,
about ten times faster), which gives the fields of the run's messages as numbers; only
then are they made Messages, straight into the window (enqueue).

This module is loaded when a queue first pages (a board without a backlog does not hold it):
it is kept small, since on a board every function and class it defines takes heap.

Sans-IO like the rest of core/: the storage port gives the journal its reader,
read(segment, position, size) -> bytes (shorter at the end of the file).
"""

import struct

from ...codec.wire import text
from ..message import FLAG_EXPIRATION, Message
from .journal import (
    FIELDS,
    ID_SIZE,
    MESSAGE,
    PAGE_DROPPED,
    REDELIVERED,
    TRANSIENT,
    members_payload,
    message_fields,
    set_bits,
)
from .records import CLEAN, CORRUPT, INCOMPLETE, TRAILER_SIZE, next_record


def page_out(queue, message, priority=0):
    """A message published to a paging queue (Queue.pages()): journalled, and on disk only.
    priority: its priority in a priority queue (core/priority.py), whose runs are each of one
    priority, highest first (and oldest first within one); a plain queue's are all 0."""
    runs = queue.runs
    i = len(runs)
    while i and runs[i - 1].priority < priority:
        i -= 1
    if not i or runs[i - 1].priority != priority or not runs[i - 1].add(message):
        run = Run(message.segment, message.journal_id)
        run.add(message)
        if priority:
            run.priority = priority
        runs.insert(i, run)
    queue.paged += 1
    queue.paged_bytes += message.body_size


def page_in(queue):
    """Refill queue's window from its runs, oldest first, in large reads."""
    broker = queue.broker
    journal = broker.journal
    want = queue.window_messages - queue.messages.length
    if want < 1:
        want = 1  # (a priority queue reads a message of a higher priority into a full window)
    read = False
    while queue.runs and want > 0 and (queue.ready_bytes < queue.window_bytes or not read):
        read = True
        run = queue.runs[0]
        count, damaged = read_run(journal, run, want, queue)
        want -= count
        if damaged is not None:
            segment = run.segment
            if segment == journal.segment and journal.chunks:
                return  # the disk refuses writes: what is missing is still waiting to be written
            lost = drop_run(queue, run, True)  # the run's other segments are sound
            broker.log(
                "error",
                "journal: segment %08d ends or is damaged at byte %d: %d messages of queue '%s' lost"
                % (segment, damaged, lost, text(queue.name)),
            )
        elif not run.count:
            queue.runs.pop(0)


def drop_run(queue, run, first_segment_only=False):
    """A run's messages leave the queue unread: all of them (purged, deleted), or those in its
    first segment (lost to a damaged one: the run goes on with the next). How many left."""
    journal = queue.broker.journal
    dropped = 0
    while True:
        parts = run.parts
        count = run.here()
        size = run.bytes - sum(parts[1::2]) if parts else run.bytes
        dropped += count
        queue.paged -= count
        queue.paged_bytes -= size
        journal.live[run.segment] -= count
        if not queue.deleted:  # (else its QUEUE_GONE record says it all)
            journal.write_marks()
            first_id, bitmap = run.first_id, run.bitmap
            if bitmap is None:  # the record holds a bitmap
                first_id, bitmap = _bitmap(first_id, count)
            # the segment, then as MEMBERS: which of its messages the queue dropped (their
            # bytes: of the persistent ones, what a replay brings back)
            payload = members_payload(queue.name, 0, first_id, count, size - run.transient_bytes, bitmap)
            journal.append_referring(PAGE_DROPPED, (struct.pack(">I", run.segment),) + payload, run.segment)
        if not parts:
            queue.runs.remove(run)
            return dropped
        run.count -= count
        run.bytes -= size
        run.next_segment()
        if first_segment_only:
            return dropped


class Run:
    """A queue's messages that are on disk only, in id order: count of them from first_id, in
    segment and maybe the ones after it. Dense (no bitmap) while those are the ids first_id,
    first_id + 1, ...; else bit i of bitmap is id first_id + i (first_id then a multiple of 8:
    a replay's bitmaps line up), and the run is all in one segment."""

    # Class defaults: a run holds these itself only once they differ (each attribute of each
    # run takes a board's heap).
    bitmap = None  # type: bytearray | None
    moved = False  # messages compaction wrote again: ids older than the segment's
    position = 0  # where in the segment file reading goes on
    transient_bytes = 0  # body bytes of its transient messages (a restart does not bring them back)
    # A dense run of persistent messages that goes on into the following segments: for each,
    # the id its part there starts at, and that part's body bytes (the first segment's part
    # has the rest of count and bytes).
    parts = None  # type: list | None
    priority = 0  # its messages' priority, in a priority queue (core/priority.py)

    def __init__(self, segment, first_id, moved=False, bitmap=None):
        self.segment = segment
        self.first_id = first_id
        self.count = 0
        self.bytes = 0  # body bytes
        if moved:
            self.moved = True
        if bitmap is not None:
            self.bitmap = bitmap

    def add(self, message):
        """A message published to the queue, on disk only from the start (ids only grow): added
        if it is in the run's last segment, or in the next one and the run goes on densely with
        persistent messages. False if it needs a run of its own."""
        if self.moved:
            return False
        parts = self.parts
        last = self.segment + (len(parts) >> 1 if parts else 0)  # the segment of its last message
        journal_id = message.journal_id
        size = message.body_size
        goes_on = (
            self.bitmap is None
            and not self.transient_bytes
            and journal_id == self.first_id + self.count
            and message.persistent()
        )
        if message.segment == last + 1 and goes_on:
            if parts is None:
                parts = self.parts = []
            parts.append(journal_id)
            parts.append(size)
        elif message.segment != last or not (goes_on or parts is None):
            return False
        else:
            if self.bitmap is None and journal_id != self.first_id + self.count:
                # another queue's message came between: a bitmap from now on
                self.first_id, self.bitmap = _bitmap(self.first_id, self.count)
            if self.bitmap is not None:
                set_bits(self.bitmap, journal_id - self.first_id)
            if parts:
                parts[-1] += size
            if not message.persistent():
                self.transient_bytes += size
        self.count += 1
        self.bytes += size
        return True

    def here(self):
        """How many of its messages are in its first segment (the one reading is in)."""
        return self.parts[0] - self.first_id if self.parts else self.count

    def took(self, found):
        """found of its messages were read back (find_messages cleared their bits, if it has a
        bitmap): a dense run starts found ids later, and goes on with its next segment once its
        part there is all read."""
        self.count -= found
        if self.bitmap is None:
            self.first_id += found
            if self.parts and self.first_id == self.parts[0]:
                self.next_segment()

    def next_segment(self):
        """Its first segment's part is gone (read or dropped): on with the next segment's."""
        parts = self.parts
        self.first_id = parts[0]
        self.segment += 1
        self.position = 0
        del parts[0:2]
        if not parts:
            self.parts = None


def _bitmap(first_id, count):
    """The ids first_id .. first_id + count - 1 as (the bitmap's first id, the bitmap): it
    starts at a multiple of 8, as a replay's bitmaps do, so they line up."""
    start = first_id & ~7
    return start, set_bits(bytearray(), first_id - start, count)


def read_run(journal, run, want, queue):
    """Up to want messages of run, in id order, read from its segments into queue's window (see
    enqueue): (how many, None), or (how many, the file position) when a segment file ends, or
    stops being sound, before its part of the run is all found. The records of each read are
    found in one call (find_messages, or its C twin on CPython: journal.find_messages), not
    one at a time."""
    find = journal.find_messages or find_messages
    read_size = journal.read_size
    count = 0
    while run.count and count < want:
        position = run.position
        data = journal.read(run.segment, position, read_size)
        n = len(data)
        if not n:  # the file ends before the run's last message there: cut short or gone
            return count, position
        # (at most the run's messages in this segment: a dense run's next ones are in the next)
        fields, stop, status, size = find(data, 0, run.first_id, run.bitmap, min(want - count, run.here()))
        run.position = position + stop
        if fields:
            count += enqueue(queue, run, data, fields)  # (then the run may be in its next segment)
        if status == INCOMPLETE and n == read_size:  # the record goes on past this read
            if stop == 0:  # one record larger than a read (its header is sound: its size can be believed)
                read_size = max(read_size * 2, size)
        elif status != CLEAN:
            return count, position + stop
    return count, None


def enqueue(queue, run, data, fields):
    """The messages found in data (fields: FIELDS numbers each, see message_fields) into queue's
    window, as entries (message, redelivered, expires_at); out of the run (Run.took) and its
    totals. How many. (data is bytes: its slices are the messages' own.)"""
    broker = queue.broker
    wall = broker.now + broker.wall_offset
    moves = broker.stamp_moves  # (the wall clock's jumps since they were paged out: core/clock_jump.py)
    before = queue.delivered_before
    push = queue.messages.push
    segment = run.segment
    total = transient = cost = 0
    for k in range(0, len(fields), FIELDS):
        journal_id, flags, arrived, route, key, names, header, body, end = fields[k : k + FIELDS]
        body_tail = data[body:end] if end > body else None
        size = end - body - 5 if body_tail is not None else 0
        message = Message(
            data[route + 1 : key], data[key + 1 : names], data[route:names], data[header:body], body_tail, size
        )
        message.journal_id = journal_id
        if moves and arrived:
            for before_id, delta in moves:
                if journal_id < before_id:
                    arrived += delta
        message.arrived = arrived
        message.segment = segment
        broker.published += 1
        message.order = broker.published  # after all the queue holds: its backlog is its last messages
        if data[header + 16] & FLAG_EXPIRATION >> 8:  # (Message.flags, read from the buffer)
            expiration = message.properties().get("expiration")
            if expiration and expiration.isdigit():
                message.ttl = int(expiration)
        total += size
        if flags & TRANSIENT:
            transient += size
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
    if transient:  # (else the class default stays: no attribute of its own)
        run.transient_bytes -= transient
    run.took(found)
    return found


def find_messages(data, pos, first_id, bitmap, want):
    """The messages of a run in data (bytes read from its segment) from pos on: those of its
    MESSAGE records whose id has its bit set in bitmap (bit i: id first_id + i), which is
    cleared; or, for a dense run (bitmap None or empty), those whose id is the next of first_id,
    first_id + 1, ... (its ids follow one another in the file: a record of another id is not
    the run's, even one further on in its range). (fields, stop, status, size): FIELDS numbers
    per message found (message_fields), at most want of them; where the next record starts;
    how the scan ended: CLEAN (want found, or the data ends between records), INCOMPLETE (a
    sound record goes on past the data: size is its size, 0 if its header is cut too), TORN
    or CORRUPT (next_record: no good record at stop; CORRUPT also for a message whose fields
    do not fit in its record). The reference of c_accel's find_messages, which gives the same
    on any input."""
    fields = []
    n = len(data)
    found = 0
    dense = not bitmap
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
            if dense:
                mine = i == found
            else:
                mine = i >= 0 and (i >> 3) < len(bitmap) and bitmap[i >> 3] & (1 << (i & 7))
            if mine:
                one = message_fields(data, start, end)
                if one is None:
                    return fields, pos, CORRUPT, 0
                if not dense:
                    bitmap[i >> 3] ^= 1 << (i & 7)
                fields.extend(one)
                found += 1
        pos = end + TRAILER_SIZE
    return fields, pos, CLEAN, 0
