"""Durability, the core's half: what goes into the journal, and how a journal is replayed.

The broker tells the Journal about every change a restart must bring back: durable
exchanges, queues and bindings; persistent messages (delivery-mode 2) routed to durable
queues; and what becomes of those messages (delivered, removed). The Journal turns them
into records (core/records.py) in numbered segments. The storage port (ports/storage.py)
takes them, writes them to the segment files, makes them durable and says so
(Broker.journal_synced): only then do the confirms that waited for them go out.

Every segment starts with a snapshot of all durable definitions, so older segments are
never needed for those. A segment can be deleted once nothing in it is still needed:
all its messages are gone, and so is every older segment that its REMOVED and
DELIVERED records speak of (replaying that older segment without them would bring
back messages they had removed).

Replaying a journal at start is core/replay.py's job.

Sans-IO and MicroPython-clean, like the rest of core/.
"""

import struct

from .records import record_parts
from .wire import encode_table, shortstr

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

    def __init__(self, broker, segment_bytes, max_bytes):
        self.broker = broker
        self.segment_bytes = segment_bytes
        self.max_bytes = max_bytes  # the disk budget (board profile): publishers block near it
        self.wake = None  # the storage port's callback: records are waiting
        self.seq = 0  # records appended so far
        self.synced = 0  # records the port has made durable
        self.chunks = []  # [segment, [bytes, ...]] not yet taken by the port
        self.segment = 0  # the segment records go to
        self.sizes = {}  # segment -> bytes (existing files and the current one)
        self.total = 0  # bytes in all segments
        self.live = {}  # segment -> (queue, message) pairs of it still held
        self.refers = {}  # segment -> older segments its REMOVED/DELIVERED records name
        self.next_id = 1
        self.marks = {}  # (kind, queue name) -> [(id, segment)], written at the next take
        self._woken = False
        self._snapshotting = False

    # ------------------------------------------------------------ segments

    def start(self, segment):
        """Begin writing at segment (after a replay: the one after the last on disk)."""
        self.segment = segment
        self.sizes[segment] = 0
        self._snapshot()

    def _roll(self):
        self.segment += 1
        self.sizes[self.segment] = 0
        self._snapshot()

    def _snapshot(self):
        """Every durable definition, so no older segment is needed for them."""
        self._snapshotting = True
        try:
            broker = self.broker
            # the next message id, and the segments on disk before this one: at start, one of
            # those (or a later one) that is not found, and was not deleted since, is missing
            older = [n for n in self.sizes if n != self.segment]
            self._append(SNAPSHOT, (struct.pack(">Q", self.next_id), _u32s(older)))
            for exchange in list(broker.exchanges.values()):
                if exchange.durable and exchange.name and not exchange.name.startswith(b"amq."):
                    self.exchange_declared(exchange)
            for queue in list(broker.queues.values()):
                if queue.journalled:
                    self.queue_declared(queue)
            for exchange in list(broker.exchanges.values()):
                for binding in list(exchange.bindings.values()):
                    self.bound(binding)
            self._append(SNAPSHOT_END, ())
        finally:
            self._snapshotting = False

    def _append(self, kind, parts):
        """Add a record; returns the segment it went to."""
        record = record_parts(kind, parts)
        size = 0
        for part in record:
            size += len(part)
        segment = self.segment
        if not self._snapshotting and self.sizes[segment] + size > self.segment_bytes and self.sizes[segment] > 0:
            self._roll()
            segment = self.segment
        chunks = self.chunks
        if chunks and chunks[-1][0] == segment:
            chunks[-1][1].extend(record)
        else:
            chunks.append([segment, record])
        self.sizes[segment] += size
        self.total += size
        self.seq += 1
        self._wake()
        return segment

    def _wake(self):
        if not self._woken:
            self._woken = True
            if self.wake is not None:
                self.wake()

    def take(self):
        """(chunks, deletions, seq) for the port: write each [segment, parts] in order (a new
        segment number means a new file), then delete the segments listed; once all of it is
        durable, call broker.journal_synced(seq)."""
        self._write_marks()
        deletions = self._deletable()
        if deletions:
            self._append(SEGMENTS_GONE, (_u32s(deletions),))
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
        return out

    def tick(self):
        """From the broker's tick: records or marks waiting, or records not yet synced, get the
        port's attention (with no confirm waiting, it syncs them at its own pace)."""
        if (self.chunks or self.marks or self.seq > self.synced) and self.wake is not None:
            self.wake()

    def unsynced(self):
        return self.seq > self.synced

    # ------------------------------------------------------------ definitions

    def exchange_declared(self, exchange):
        # name, type, flags (auto-delete, internal), arguments
        self._write_marks()
        self._append(
            EXCHANGE,
            (
                shortstr(exchange.name),
                shortstr(exchange.kind),
                _flags(exchange.auto_delete, exchange.internal),
                encode_table(exchange.arguments),
            ),
        )

    def exchange_deleted(self, exchange):
        self._write_marks()
        self._append(EXCHANGE_GONE, (shortstr(exchange.name),))

    def queue_declared(self, queue):
        # name, flags (auto-delete), arguments
        self._write_marks()
        self._append(QUEUE, (shortstr(queue.name), _flags(queue.auto_delete), encode_table(queue.arguments)))

    def queue_deleted(self, queue):
        self._write_marks()
        self._append(QUEUE_GONE, (shortstr(queue.name),))

    def bound(self, binding):
        if not durable_binding(binding):
            return
        self._write_marks()
        self._append(BINDING, (_binding_payload(binding),))

    def unbound(self, binding):
        if not durable_binding(binding):
            return
        self._write_marks()
        self._append(UNBINDING, (_binding_payload(binding),))

    # ------------------------------------------------------------ messages

    def add_message(self, message, queues):
        """Journal message if it is persistent and one of queues is durable; True if it was.
        Must come before the queues get it: a consumer may take it (and ack it) at once."""
        names = []
        for queue in queues:
            if queue.journalled:
                names.append(shortstr(queue.name))
        if not names or not message.persistent():
            return False
        journal_id = self.next_id
        self.next_id = journal_id + 1
        # id, flags (none yet), exchange + routing key (the message's route), queue count and
        # names, the content header frame tail, then the body frame tail (empty for no body)
        parts = [struct.pack(">Q", journal_id), b"\x00", message.route, struct.pack(">H", len(names))]
        parts.extend(names)
        parts.append(struct.pack(">I", len(message.header_tail)))
        parts.append(message.header_tail)
        if message.body_tail is not None:
            parts.append(message.body_tail)
        segment = self._append(MESSAGE, parts)
        message.journal_id = journal_id
        message.segment = segment
        self.live[segment] = self.live.get(segment, 0) + len(names)
        return True

    def removed(self, queue, message):
        """A journalled message left a durable queue for good."""
        segment = message.segment
        self.live[segment] -= 1
        if not queue.deleted:  # else the queue's QUEUE_GONE record said it already
            self._mark(REMOVED, queue.name, message.journal_id, segment)

    def delivered(self, queue, message):
        self._mark(DELIVERED, queue.name, message.journal_id, message.segment)

    def _mark(self, kind, name, journal_id, segment):
        key = (kind, name)
        marks = self.marks.get(key)
        if marks is None:
            marks = self.marks[key] = []
        marks.append((journal_id, segment))
        self._wake()

    def _write_marks(self):
        """REMOVED/DELIVERED records for what was marked since the last take: one record per
        queue for many messages (acks cost ~8 bytes of journal each)."""
        if not self.marks:
            return
        marks = self.marks
        self.marks = {}
        for key in marks:
            kind, name = key
            pairs = marks[key]
            ids = bytearray(8 * len(pairs))
            older = []
            for i in range(len(pairs)):
                journal_id, segment = pairs[i]
                struct.pack_into(">Q", ids, 8 * i, journal_id)
                if segment not in older:
                    older.append(segment)
            written_to = self._append(kind, (shortstr(name), bytes(ids)))
            refers = self.refers.get(written_to)
            if refers is None:
                refers = self.refers[written_to] = []
            for segment in older:
                if segment != written_to and segment not in refers:
                    refers.append(segment)

    # ------------------------------------------------------------ streams (core/stream.py)

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
