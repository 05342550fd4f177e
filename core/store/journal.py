"""Durability, the core's half: what goes into the journal, and how a journal is replayed.

The broker tells the Journal about every change a restart must bring back: durable
exchanges, queues and bindings; persistent messages (delivery-mode 2) routed to durable
queues; and what becomes of those messages (delivered, removed). The Journal turns them
into records (core/store/records.py) in numbered segments. The storage port (ports/storage.py)
takes them, writes them to the segment files, makes them durable and says so
(Broker.journal_synced): only then do the confirms that waited for them go out.

Every segment starts with a snapshot of all durable definitions, so older segments are
never needed for those. A segment can be deleted once nothing in it is still needed:
all its messages are gone, and so is every older segment that its REMOVED and
DELIVERED records speak of (replaying that older segment without them would bring
back messages they had removed).

A durable queue keeps only a window of its messages in memory (core/store/paging.py): the
rest is known by segment and id, and read back from the segment files when the window
runs low. When a segment is full, the journal seals it with a summary: the definitions
at that moment, which of its messages went to which queue (a bitmap per queue) and a
copy of its removal and delivery records. The storage port closes the summary with a
trailer; at start, a sealed segment is known from its summary alone, without reading a
message (ports/recovery.py).

Replaying a journal at start is core/replay.py's job.

Sans-IO and MicroPython-clean, like the rest of core/.
"""

import struct

from ...codec.wire import encode_table, shortstr
from .records import record_parts

# Record kinds (the payloads are described at each encoder below).
SNAPSHOT = 1  # a segment's first record: the next message id; the definitions follow
SNAPSHOT_END = 2  # the snapshot is complete: definitions it did not name are gone
EXCHANGE = 3
EXCHANGE_GONE = 4
QUEUE = 5
QUEUE_GONE = 6
BINDING = 7
UNBINDING = 8
MESSAGE = 9
REMOVED = 10  # acked, purged, dropped, expired or delivered with no-ack
DELIVERED = 11  # handed to a consumer: redelivered if it comes back after a restart
SEGMENTS_GONE = 12  # segments deleted: at start, any other segment not found is reported missing
MEMBERS = 13  # (summaries) the ids of a segment that a queue holds, as a bitmap
PAGE_DROPPED = 14  # messages a queue dropped while they were on disk only (purge, delete), as a bitmap
SUMMARY = 15  # a sealed segment's summary starts here (no payload)
DEDUP = 16  # (snapshots) what core/dedup.py knows of one bridge origin: its state, whole
DEDUP_TAKEN = 17  # a bridged message's number, taken (core/dedup.py)
SENSOR = 18  # (snapshots) what core/dedup.py knows of one sensor: its state, whole
SENSOR_TAKEN = 19  # a sensor's reading's number, taken (core/dedup.py)

# MESSAGE flags
REDELIVERED = 1  # written again by compaction after it had been delivered
MOVED = 2  # written again by compaction: its id is older than the segment's
TRANSIENT = 4  # not persistent, journalled only to keep a paging queue's order: not restored
# A record that completes this one follows it: PAIRED, a QoS 2 publish's packet id (the next
# MESSAGE record: mqtt/publishing.py); NUMBERED, a bridge's or a sensor's number taken (a
# DEDUP_TAKEN or SENSOR_TAKEN record at the end of its group commit: core/dedup.py). The message
# without it would take the client's repeat twice. Found without it at the journal's end, the
# two did not both reach the disk: recovery cuts it (unpaired_tail), and the repeat brings it
# once.
PAIRED = 8
NUMBERED = 16

COMPACT_BELOW = 4  # compact a segment once at most 1/4 of its messages are still held (core/store/compaction.py)


def durable_binding(binding):
    """A binding survives a restart when both of its ends do (RabbitMQ's rule)."""
    destination = binding.destination
    ends_durable = destination.journalled if destination.is_queue else destination.durable
    return binding.source.durable and ends_durable


def _flags(*bits):
    value = 0
    for i in range(len(bits)):
        if bits[i]:
            value |= 1 << i
    return bytes((value,))


def _u32s(numbers):
    return b"".join(struct.pack(">I", n) for n in numbers)


def set_bits(bitmap, index, count=1):
    """Set count bits from index in a growing bitmap (bytearray); returns it. It grows 64 bytes
    at a time: a bitmap that gains a bit a message is not reallocated for each."""
    end = index + count
    if (end + 7) >> 3 > len(bitmap):
        bitmap.extend(bytes(((end + 7) >> 3) - len(bitmap) + 63))
    while index < end:
        if not index & 7 and end - index >= 8:
            bitmap[index >> 3] = 255  # a whole byte at a time: a dense range of thousands is quick
            index += 8
        else:
            bitmap[index >> 3] |= 1 << (index & 7)
            index += 1
    return bitmap


def _binding_payload(binding):
    # source shortstr, 1 if the destination is a queue else 0, destination shortstr, key shortstr, arguments table
    destination = binding.destination
    return (
        shortstr(binding.source.name)
        + bytes((1 if destination.is_queue else 0,))
        + shortstr(destination.name)
        + shortstr(binding.key)
        + encode_table(binding.arguments)
    )


class Journal:
    """The records still to write, segment bookkeeping, and the sequence of what is durable."""

    # ([bridges' taken payloads], [sensors']) since the last take (dedup_taken), or None
    taken = None

    def __init__(self, broker, segment_bytes, max_bytes):
        self.broker = broker
        self.segment_bytes = segment_bytes
        self.max_bytes = max_bytes  # the disk budget (board profile): publishers block near it
        self.wake = None  # the storage port's callback: records are waiting
        self.read = None  # the storage port's reader: read(segment, position, size) -> bytes
        self.read_size = broker.limits.page_read_bytes
        # how page-ins find a run's messages in what they read: core/store/paging.py's find_messages
        # (None), or its C twin on CPython (c_accel/, set by server/serve.py)
        self.find_messages = None
        self.seq = 0  # records appended so far
        self.synced = 0  # records the port has made durable
        # The oldest message whose own record may not be durable yet (its id; 0: every message's
        # is), and the record of the newest message: a message older than that one is durable
        # even while later records are not (a disk another program filled refuses them), so a
        # bridge may forward it (durable()).
        self.unsynced_from = 0
        self.message_seq = 0
        self.chunks = []  # [segment, [bytes, ...]] not yet taken by the port ([..., True]: a summary)
        self.segment = 0  # the segment records go to
        self.sizes = {}  # segment -> bytes (existing files and the current one)
        self.total = 0  # bytes in all segments
        self.appended = 0  # bytes appended since start (core/counters.py)
        self.live = {}  # segment -> (queue, message) pairs of it still held, in memory or on disk
        self.refers = {}  # segment -> older segments its REMOVED/DELIVERED records name
        self.next_id = 1
        self.marks = {}  # (kind, queue name, segment) -> [ids, bytes], written at the next take
        self.delivering = None  # (queue, segment, its DELIVERED ids in marks) of the last delivery
        # What the current segment's summary will say (see _summary)
        self.first_id = 0  # where the segment's bitmaps start: its first id, down to a multiple of 8
        # queue name -> [its first id here, count, body bytes, bitmap from first_id or None] (persistent
        # only): no bitmap while the queue's ids here follow one another (one queue published to)
        self.members = {}
        self.moved = {}  # queue name -> [ids written again here by compaction]
        self.copies = []  # (kind, payload) of the segment's REMOVED, DELIVERED, PAGE_DROPPED, SEGMENTS_GONE
        self.written = {}  # segment -> MESSAGE records written to it (core/store/compaction.py)
        self.next_compaction = 0
        self._woken = False

    # ------------------------------------------------------------ segments

    def start(self, segment):
        """Begin writing at segment (after a replay: the one after the last on disk)."""
        self.segment = segment
        self.sizes[segment] = 0
        self.first_id = self.next_id & ~7
        self._put(self._snapshot([]), False)

    def _roll(self):
        """Seal this segment and begin the next. A board whose heap has no room left in one
        piece for the summary (a list of its records' parts) keeps writing to this segment,
        past segment_bytes, and tries again at the next record: the summary is built before
        anything changes, so the journal is as it was."""
        # the numbers taken with this segment's messages, in their chunk (one write: a kill
        # between two writes cannot leave messages whose numbers are nowhere)
        self.write_taken(False)
        try:
            summary = self._summary()
        except MemoryError:
            return
        self._put(summary, True)
        self.segment += 1
        self.sizes[self.segment] = 0
        self.first_id = self.next_id & ~7
        self.members = {}
        self.moved = {}
        self.copies = []
        self._put(self._snapshot([]), False)

    def _summary(self):
        """The current segment's summary, as records (a list of parts) for its end (the port
        closes it with a trailer): what a restart needs of the segment without reading its
        messages."""
        out = self._snapshot(record_parts(SUMMARY, ()))
        for name in self.members:
            start, count, size, bitmap = self.members[name]
            if bitmap is None:
                bitmap = set_bits(bytearray(), start - self.first_id, count)
            out.extend(record_parts(MEMBERS, members_payload(name, 0, self.first_id, count, size, bitmap)))
        for name in self.moved:
            ids = self.moved[name]
            first = min(ids) & ~7
            bitmap = bytearray()
            for journal_id in ids:
                set_bits(bitmap, journal_id - first)
            out.extend(record_parts(MEMBERS, members_payload(name, MOVED, first, len(ids), 0, bitmap)))
        for kind, payload in self.copies:
            out.extend(record_parts(kind, (payload,)))
        return out

    def _snapshot(self, out):
        """Every durable definition, as records added to out (a list of parts), returned: at
        the start of each segment, so no older segment is needed for them; and in summaries."""
        broker = self.broker
        # the next message id, and the segments on disk before this one: at start, one of
        # those (or a later one) that is not found, and was not deleted since, is missing
        older = [n for n in self.sizes if n != self.segment]
        out.extend(record_parts(SNAPSHOT, (struct.pack(">Q", self.next_id), _u32s(older))))
        for exchange in list(broker.exchanges.values()):
            if exchange.durable and exchange.name and not exchange.name.startswith(b"amq."):
                out.extend(record_parts(EXCHANGE, _exchange_payload(exchange)))
        for queue in list(broker.queues.values()):
            if queue.journalled:
                out.extend(record_parts(QUEUE, queue_payload(queue.name, queue.auto_delete, queue.arguments)))
        for exchange in list(broker.exchanges.values()):
            for binding in list(exchange.bindings.values()):
                if durable_binding(binding):
                    out.extend(record_parts(BINDING, (_binding_payload(binding),)))
        dedup_state(out, broker.dedup, broker.sensors)
        out.extend(record_parts(SNAPSHOT_END, ()))
        return out

    def _put(self, parts, summary):
        """Records (parts) into the current segment as one chunk, whatever their size (a
        snapshot, a summary: the port closes a summary with the trailer)."""
        size = 0
        for part in parts:
            size += len(part)
        self.chunks.append([self.segment, parts, True] if summary else [self.segment, parts])
        self.sizes[self.segment] += size
        self.total += size
        self.appended += size
        self.seq += 1
        self._wake()

    def append_record(self, kind, parts, roll=True):
        """Add a record; returns the segment it went to (roll False: the current one, even if
        that makes it larger than segment_bytes)."""
        record = record_parts(kind, parts)
        size = 0
        for part in record:
            size += len(part)
        segment = self.segment
        if roll and self.sizes[segment] + size > self.segment_bytes and self.sizes[segment] > 0:
            self._roll()
            segment = self.segment
        chunks = self.chunks
        if chunks and chunks[-1][0] == segment and len(chunks[-1]) == 2:
            chunks[-1][1].extend(record)
        else:
            chunks.append([segment, record])
        self.sizes[segment] += size
        self.total += size
        self.appended += size
        self.seq += 1
        self._wake()
        return segment

    def mark_synced(self, seq):
        """(Broker.journal_synced) Every record up to seq is durable."""
        self.synced = seq
        if seq >= self.message_seq:
            self.unsynced_from = 0

    def durable(self, message):
        """Whether a journalled message's own record is durable (what came after it may not be)."""
        return not self.unsynced_from or message.journal_id < self.unsynced_from

    def _wake(self):
        if not self._woken:
            self._woken = True
            if self.wake is not None:
                self.wake()

    def take(self):
        """(chunks, deletions, seq) for the port: write each [segment, parts] in order (a new
        segment number means a new file; a third item, True, means the parts are the segment's
        summary: close it with the trailer), then delete the segments listed; once all of it
        is durable, call broker.journal_synced(seq)."""
        self.write_taken()
        self.write_marks()
        deletions = self._deletable()
        if deletions:
            payload = _u32s(deletions)
            self.append_record(SEGMENTS_GONE, (payload,))
            self.copies.append((SEGMENTS_GONE, payload))
        chunks = self.chunks
        self.chunks = []
        self._woken = False
        self.broker.flow.check_disk(self)
        return chunks, deletions, self.seq

    def _deletable(self):
        out = []
        sizes = self.sizes
        for segment in sorted(sizes):
            if segment == self.segment or self.live.get(segment, 0):
                continue
            needed = False
            for older in self.refers.get(segment, ()):
                if older in sizes:
                    needed = True
            if needed:
                continue
            out.append(segment)
            self.total -= sizes.pop(segment)
            self.refers.pop(segment, None)
            self.live.pop(segment, None)
            self.written.pop(segment, None)
        return out

    def tick(self, now):
        """From the broker's tick: records or marks waiting, or records not yet synced, get the
        port's attention (with no confirm waiting, it syncs them at its own pace). True when
        compaction should have a look (core/store/compaction.py): at most once a second, and only
        while the oldest segment still needed is older than the previous one and holds little
        (COMPACT_BELOW)."""
        if (self.chunks or self.marks or self.seq > self.synced) and self.wake is not None:
            self.wake()
        if now < self.next_compaction:
            return False
        self.next_compaction = now + 1000
        live = self.live
        oldest = None
        for segment in live:
            if segment < self.segment - 1 and live[segment] and (oldest is None or segment < oldest):
                oldest = segment
        # Checked here, not by compaction itself: a board does not load compaction for a backlog
        # that no compaction would touch (the oldest segment full of messages still queued).
        return oldest is not None and live[oldest] * COMPACT_BELOW <= self.written.get(oldest, 0)

    def unsynced(self):
        return self.seq > self.synced

    # ------------------------------------------------------------ definitions

    def exchange_declared(self, exchange):
        self.write_marks()
        self.append_record(EXCHANGE, _exchange_payload(exchange))

    def exchange_deleted(self, exchange):
        self.write_marks()
        self.append_record(EXCHANGE_GONE, (shortstr(exchange.name),))

    def queue_declared(self, queue):
        self.write_marks()
        self.append_record(QUEUE, queue_payload(queue.name, queue.auto_delete, queue.arguments))

    def queue_deleted(self, queue):
        self.write_marks()
        self.append_record(QUEUE_GONE, (shortstr(queue.name),))
        self.members.pop(queue.name, None)  # the summary must not bring them back
        self.moved.pop(queue.name, None)

    def bound(self, binding):
        if not durable_binding(binding):
            return
        self.write_marks()
        self.append_record(BINDING, (_binding_payload(binding),))

    def unbound(self, binding):
        if not durable_binding(binding):
            return
        self.write_marks()
        self.append_record(UNBINDING, (_binding_payload(binding),))

    # ------------------------------------------------------------ messages

    def add_message(self, message, queues, paging=False):
        """Journal message if it is persistent and one of queues is durable, or if paging (one
        of them keeps its backlog on disk: then a transient message goes to the journal too, to
        keep the queue's order; a restart does not bring it back). True if it was journalled.
        Must come before the queues get it: a consumer may take it (and ack it) at once."""
        names = []
        for queue in queues:
            if queue.journalled:
                names.append(queue.name_shortstr)
        if not names:
            return False
        flags = message.paired & (PAIRED | NUMBERED)
        if not message.persistent():
            if not paging:
                return False
            flags = TRANSIENT
        journal_id = self.next_id
        # (next_id moves on only after the append: a segment it rolls over starts at this id)
        segment = self.append_record(MESSAGE, message_parts(message, journal_id, flags, message.arrived, names))
        self.next_id = journal_id + 1
        if not self.unsynced_from:
            self.unsynced_from = journal_id
        self.message_seq = self.seq
        message.journal_id = journal_id
        message.segment = segment
        self.live[segment] = self.live.get(segment, 0) + len(names)
        self.written[segment] = self.written.get(segment, 0) + 1
        if not flags & TRANSIENT:  # (a persistent message: in the segment's summary)
            members = self.members
            for queue in queues:
                if queue.journalled:
                    entry = members.get(queue.name)
                    if entry is None:
                        entry = members[queue.name] = [journal_id, 0, 0, None]
                    elif entry[3] is None and journal_id != entry[0] + entry[1]:
                        # another queue's message came between: a bitmap from now on
                        entry[3] = set_bits(bytearray(), entry[0] - self.first_id, entry[1])
                    if entry[3] is not None:
                        set_bits(entry[3], journal_id - self.first_id)
                    entry[1] += 1
                    entry[2] += message.body_size
        return True

    def removed(self, queue, message):
        """A journalled message left a durable queue for good."""
        segment = message.segment
        self.live[segment] -= 1
        if not queue.deleted and message.persistent():  # else a restart does not bring it back anyway
            marks = self._marks(REMOVED, queue.name, segment)
            marks[0].append(message.journal_id)
            marks[1] += message.body_size

    def removed_all(self, queue, entries):
        """The journalled messages of entries (queue entries, in delivery order) left a durable
        queue for good together (acked): removed() for each, in one pass."""
        live = self.live
        keep = not queue.deleted
        segment = None
        marks = None
        for entry in entries:
            message = entry[0]
            if not message.journal_id:
                continue
            live[message.segment] -= 1
            if keep and message.persistent():
                if message.segment != segment:
                    segment = message.segment
                    marks = self._marks(REMOVED, queue.name, segment)
                marks[0].append(message.journal_id)
                marks[1] += message.body_size

    def delivered(self, queue, message):
        # a queue delivers from one segment at a time, mostly: the ids of the last one are kept
        last = self.delivering
        if last is None or last[0] is not queue or last[1] != message.segment:
            ids = self._marks(DELIVERED, queue.name, message.segment)[0]
            last = self.delivering = (queue, message.segment, ids)
        last[2].append(message.journal_id)

    def _marks(self, kind, name, segment):
        """[ids, their body bytes] of kind for queue name's messages in segment, written at the
        next take (write_marks)."""
        key = (kind, name, segment)
        marks = self.marks.get(key)
        if marks is None:
            marks = self.marks[key] = [[], 0]
        if not self._woken:
            self._wake()
        return marks

    def write_marks(self):
        """REMOVED/DELIVERED records for what was marked since the last take: one record per
        queue and segment for many messages (acks cost ~8 bytes of journal each)."""
        if not self.marks:
            return
        marks = self.marks
        self.marks = {}
        self.delivering = None
        for key in marks:
            kind, name, segment = key
            ids, size = marks[key]
            # queue name, the segment the messages are in, their body bytes, their ids
            payload = shortstr(name) + struct.pack(">IQ%dQ" % len(ids), segment, size, *ids)
            self.append_referring(kind, (payload,), segment)

    def append_referring(self, kind, parts, segment):
        """Append a record that speaks of messages in segment: the segment it goes to is kept
        while that one is (replaying it without them would bring back what it removed). The
        summary of the segment it goes to carries a copy."""
        written_to = self.append_record(kind, parts)
        self.copies.append((kind, b"".join(parts)))
        if segment != written_to:
            refers = self.refers.get(written_to)
            if refers is None:
                refers = self.refers[written_to] = []
            if segment not in refers:
                refers.append(segment)

    def dedup_taken(self, payload, sensor=False):
        """A bridged message's number, or a sensor's reading's, was taken (core/dedup.py
        taken_payload): written after its message's record, in the group commit its confirm
        waits for (take() writes those of a commit as one record of each kind)."""
        taken = self.taken
        if taken is None:
            taken = self.taken = ([], [])
        taken[1 if sensor else 0].append(payload)

    def write_taken(self, roll=True):
        """The DEDUP_TAKEN and SENSOR_TAKEN records of what was taken since the last take (or
        the last segment: roll False, _roll's): each lists its numbers one after another
        (core/dedup.py replay_taken)."""
        taken = self.taken
        if taken is None:
            return
        self.taken = None
        for kind, payloads in ((DEDUP_TAKEN, taken[0]), (SENSOR_TAKEN, taken[1])):
            if payloads:
                self.append_record(kind, (b"".join(payloads),), roll)

    # ------------------------------------------------------------ streams (core/streams/stream.py)

    def append_to(self, target, parts):
        """Records of a stream for `target`, one of its segment files as the storage port gives
        it (ports/streams.py: append(parts), sync()): written and synced by the port in the same
        group commit as the journal's own records, so what waits for seq waits for them too."""
        chunks = self.chunks
        if chunks and chunks[-1][0] is target:
            chunks[-1][1].extend(parts)
        else:
            chunks.append([target, parts])
        self.seq += 1
        self._wake()


def unpaired_tail(records):
    """How many of records (the journal's end, as read back: up to a sealed segment's summary)
    to cut: from the first MESSAGE record whose other half never came (PAIRED with no MESSAGE
    record after it, NUMBERED with no number taken after it), else none."""
    cut = len(records)
    message_after = taken_after = False
    for i in range(len(records) - 1, -1, -1):
        kind, payload = records[i]
        if kind == DEDUP_TAKEN or kind == SENSOR_TAKEN:
            taken_after = True
        elif kind == MESSAGE:
            flags = payload[ID_SIZE]
            if (flags & PAIRED and not message_after) or (flags & NUMBERED and not taken_after):
                cut = i
            message_after = True
    return len(records) - cut


def message_parts(message, journal_id, flags, arrived, names):
    # id, flags, arrival (wall clock, ms), exchange + routing key (the message's route), queue
    # count and names, the content header frame tail, then the body frame tail (empty for none)
    parts = [struct.pack(">QBQ", journal_id, flags, arrived), message.route, struct.pack(">H", len(names))]
    parts.extend(names)
    parts.append(struct.pack(">I", len(message.header_tail)))
    parts.append(message.header_tail)
    if message.body_tail is not None:
        parts.append(message.body_tail)
    return parts


# A MESSAGE record's fields, as message_fields gives them: FIELDS numbers, the first three
# values, the others offsets into the buffer holding the record.
ID_SIZE = 8  # the id, the first bytes of the payload
FIELDS = 9  # journal id, flags, arrival; where the exchange (route), routing key, queue count,
# content header frame tail and body frame tail start; where the payload ends
HEADER_TAIL_MIN = 19  # a content header frame's tail holds at least size, class to property flags, frame end


def dedup_state(out, bridges, sensors):
    """The DEDUP and SENSOR records of a snapshot or a summary (core/dedup.py: each origin's
    state, whole), added to out; bridges, sensors: Dedups, or None."""
    for kind, dedup in ((DEDUP, bridges), (SENSOR, sensors)):
        if dedup is not None:
            for payload in dedup.state_records():
                out.extend(record_parts(kind, (payload,)))


def message_fields(p, start, end):
    """The fields of the MESSAGE record whose payload is p[start:end] (see message_parts), as
    a list of FIELDS numbers, or None when they do not fit in it. The one reading of the
    layout: paging builds messages from it, the replay finds their queues with it, and
    c_accel's find_messages is its C twin."""
    route = start + 17
    if route >= end:
        return None
    key = route + 1 + p[route]
    if key >= end:
        return None
    names = key + 1 + p[key]
    if names + 2 > end:
        return None
    at = names + 2
    for _ in range((p[names] << 8) | p[names + 1]):
        if at >= end:
            return None
        at += 1 + p[at]
    if at + 4 > end:
        return None
    header = at + 4
    body = header + ((p[at] << 24) | (p[at + 1] << 16) | (p[at + 2] << 8) | p[at + 3])
    if body > end or body - header < HEADER_TAIL_MIN:
        return None
    journal_id, flags, arrived = struct.unpack_from(">QBQ", p, start)
    return [journal_id, flags, arrived, route, key, names, header, body, end]


def members_payload(name, flags, first_id, count, size, bitmap):
    # queue name, flags (MOVED), first id, message count, their body bytes, bitmap from first id
    return (shortstr(name), struct.pack(">BQIQ", flags, first_id, count, size), bytes(bitmap))


def _exchange_payload(exchange):
    # name, type, flags (auto-delete, internal), arguments
    return (
        shortstr(exchange.name),
        shortstr(exchange.kind),
        _flags(exchange.auto_delete, exchange.internal),
        encode_table(exchange.arguments),
    )


def queue_payload(name, auto_delete, arguments):
    # name, flags (auto-delete), arguments
    return (shortstr(name), _flags(auto_delete), encode_table(arguments))
