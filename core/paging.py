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

This module is loaded when a queue first pages (a board without a backlog does not hold it):
it is kept small, since on a board every function and class it defines takes heap.

Sans-IO like the rest of core/: the storage port gives the journal its reader,
read(segment, position, size) -> bytes (shorter at the end of the file).
"""

import struct

from .journal import MESSAGE, PAGE_DROPPED, REDELIVERED, TRANSIENT, members_payload, set_bits
from .message import FLAG_EXPIRATION, Message
from .records import INCOMPLETE, TRAILER_SIZE, next_record
from .wire import text


def page_out(queue, message):
    """A message published to a paging queue (Queue.pages()): journalled, and on disk only."""
    runs = queue.runs
    if not runs or not runs[-1].add(message):
        run = Run(message.segment, message.journal_id)
        run.add(message)
        runs.append(run)
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
        found, damaged = read_run(journal.read, run, want, journal.read_size)
        wall = broker.now + broker.wall_offset
        before = queue.delivered_before
        for message, flags, arrived in found:
            size = message.body_size
            redelivered = bool(flags & REDELIVERED) or (before is not None and message.journal_id in before)
            expires_at = broker.expiry(queue, message)
            if expires_at is not None:
                expires_at += arrived - wall  # its TTL runs from its arrival
            broker.flow.hold(message)
            queue.messages.push((message, redelivered, expires_at))
            queue.ready_bytes += size
            queue.paged -= 1
            queue.paged_bytes -= size
            run.bytes -= size
            if flags & TRANSIENT:
                run.transient_bytes -= size
        want -= len(found)
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
        if parts:  # (dense) its ids up to where the next segment's part starts
            count = parts[0] - run.first_id
            size = run.bytes - sum(parts[1::2])
        else:
            count, size = run.count, run.bytes
        dropped += count
        queue.paged -= count
        queue.paged_bytes -= size
        journal.live[run.segment] -= count
        if not queue.deleted:  # (else its QUEUE_GONE record says it all)
            journal.write_marks()
            first_id, bitmap = run.first_id, run.bitmap
            if bitmap is None:  # the record holds a bitmap, from a multiple of 8
                first_id &= ~7
                bitmap = set_bits(bytearray(), run.first_id - first_id, count)
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
                _spread(self)  # another queue's message came between
            if self.bitmap is not None:
                set_bits(self.bitmap, journal_id - self.first_id)
            if parts:
                parts[-1] += size
            if not message.persistent():
                self.transient_bytes += size
        self.count += 1
        self.bytes += size
        return True

    def take(self, journal_id):
        """Clear journal_id: True if it was the run's (the message is this queue's). Messages
        are read back in id order: once its first segment's part is all taken, the run goes
        on with the next segment (read from its start)."""
        i = journal_id - self.first_id
        bitmap = self.bitmap
        if bitmap is None:
            if i < 0 or i >= self.count:
                return False
            if i == 0:  # the oldest, as reading back takes them
                self.first_id += 1
                self.count -= 1
                if self.parts and self.first_id == self.parts[0]:
                    self.next_segment()
                return True
            if self.parts:
                return False  # (not in id order: a run of several segments cannot be a bitmap)
            bitmap = _spread(self)
            i = journal_id - self.first_id
        if i < 0 or (i >> 3) >= len(bitmap):
            return False
        bit = 1 << (i & 7)
        if not bitmap[i >> 3] & bit:
            return False
        bitmap[i >> 3] ^= bit
        self.count -= 1
        return True

    def next_segment(self):
        """Its first segment's part is gone (read or dropped): on with the next segment's."""
        parts = self.parts
        self.first_id = parts[0]
        self.segment += 1
        self.position = 0
        del parts[0:2]
        if not parts:
            self.parts = None


def _spread(run):
    """A dense run's ids as a bitmap, from its first id down to a multiple of 8; the bitmap."""
    first_id = run.first_id & ~7
    bitmap = run.bitmap = set_bits(bytearray(), run.first_id - first_id, run.count)
    run.first_id = first_id
    return bitmap


def read_run(read, run, want, read_size):
    """Up to want messages of run, in id order, read from its segments: (a list of (message,
    flags, arrived), None), or (what was found, the file position) when a segment file ends,
    or stops being sound, before its part of the run is all found."""
    found = []
    damaged = None
    while run.count and len(found) < want and damaged is None:
        segment, position = run.segment, run.position
        data = read(segment, position, read_size)
        n = len(data)
        if not n:  # the file ends before the run's last message there: cut short or gone
            damaged = position
            break
        at = 0
        while at < n and run.count and len(found) < want and run.segment == segment:
            kind, start, end = next_record(data, at)
            if kind == -INCOMPLETE and n == read_size:
                break  # the record goes on past this read: read again from it
            if kind < 0:
                damaged = position + at
                break
            if kind == MESSAGE and run.take(struct.unpack_from(">Q", data, start)[0]):
                found.append(decode_message(data, start, end))
                found[-1][0].segment = segment
            at = end + TRAILER_SIZE
        if run.segment != segment:
            continue  # on to the next segment, from its start
        if at == 0 and damaged is None and run.count and len(found) < want:
            # one record larger than a read (its header is sound: its size can be believed)
            read_size = max(read_size * 2, next_record(data, 0)[2])
            continue
        run.position = position + at
    return found, damaged


def decode_message(p, start, end, names=None):
    """A MESSAGE record's payload (p[start:end]) as (Message, flags, arrived); the queue
    names it lists are appended to names when given."""
    journal_id, flags, arrived = struct.unpack_from(">QBQ", p, start)
    pos = start + 17
    n = p[pos]
    exchange = bytes(p[pos + 1 : pos + 1 + n])
    k = pos + 1 + n
    m = p[k]
    routing_key = bytes(p[k + 1 : k + 1 + m])
    route = bytes(p[pos : k + 1 + m])
    pos = k + 1 + m
    count = (p[pos] << 8) | p[pos + 1]
    pos += 2
    for _ in range(count):
        length = p[pos]
        if names is not None:
            names.append(bytes(p[pos + 1 : pos + 1 + length]))
        pos += 1 + length
    size = struct.unpack_from(">I", p, pos)[0]
    pos += 4
    header_tail = bytes(p[pos : pos + size])
    body_tail = bytes(p[pos + size : end]) or None
    body_size = len(body_tail) - 5 if body_tail is not None else 0
    message = Message(exchange, routing_key, route, header_tail, body_tail, body_size)
    message.journal_id = journal_id
    if message.flags() & FLAG_EXPIRATION:
        expiration = message.properties().get("expiration")
        if expiration and expiration.isdigit():
            message.ttl = int(expiration)
    message.arrived = arrived
    return message, flags, arrived
