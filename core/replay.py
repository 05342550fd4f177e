"""Replaying the journal at start (core/store/journal.py writes it): the records of every segment,
in order, into plain data; then the broker's exchanges, queues, bindings and backlogs,
built in one go.

A sealed segment is read from its summary only (the storage port hands over its records):
definitions, which of its messages each queue holds (bitmaps), and copies of its removal
and delivery records. The segments written since the last seal (at most one or two) are
read whole. Either way no message is decoded: a queue comes back as runs
(core/store/paging.py) and reads its messages when consumers want them, in publish order;
those that had been delivered come back redelivered.

Only needed while the broker starts: a board drops this module afterwards (ports/recovery.py),
so its heap does not keep it. Sans-IO and MicroPython-clean.
"""

import struct

from ..codec import spec
from ..codec.errors import Refused
from ..codec.wire import decode_table, text
from . import topology
from .exchange import freeze
from .store.journal import (
    BINDING,
    DEDUP,
    DEDUP_TAKEN,
    DELIVERED,
    EXCHANGE,
    EXCHANGE_GONE,
    MEMBERS,
    MESSAGE,
    MOVED,
    PAGE_DROPPED,
    QUEUE,
    QUEUE_GONE,
    REMOVED,
    SEGMENTS_GONE,
    SENSOR,
    SENSOR_TAKEN,
    SNAPSHOT,
    SNAPSHOT_END,
    SUMMARY,
    TRANSIENT,
    UNBINDING,
    dedup_state,
    members_payload,
    message_fields,
    queue_payload,
    set_bits,
)
from .store.paging import Run
from .store.records import record_parts


class RecoveredQueue:
    def __init__(self, auto_delete, arguments):
        self.auto_delete = auto_delete
        self.arguments = arguments
        self.runs = {}  # (segment, moved) -> Run
        self.delivered = set()  # ids delivered and not removed

    def run(self, segment, first_id, moved):
        key = (segment, moved)
        run = self.runs.get(key)
        if run is None:
            run = self.runs[key] = Run(segment, first_id, moved, bytearray())
        return run

    def take(self, segment, journal_id):
        """Clear journal_id from the queue's runs of segment (any segment: None); its run or None."""
        for key in self.runs:
            if segment is None or key[0] == segment:
                run = self.runs[key]
                if _take(run, journal_id):
                    return run
        return None

    def fewer_bytes(self, segment, size):
        """Messages of segment's run left the queue: size body bytes fewer."""
        run = self.runs.get((segment, False))
        if run is not None:
            run.bytes -= size

    def count(self):
        n = 0
        for key in self.runs:
            n += self.runs[key].count
        return n


class Replay:
    """A journal read back: the segments' records, in order, into plain data; then apply()."""

    def __init__(self, limits=None):
        self.limits = limits  # core/limits.Limits: a sensors' Dedup's bounds (None: the defaults)
        self.exchanges = {}  # name -> (kind, auto_delete, internal, arguments)
        self.queues = {}  # name -> RecoveredQueue
        self.bindings = {}  # (source, to_queue, destination, key, frozen arguments) -> arguments
        self.refers = {}  # segment -> [older segments its records name]
        self.next_id = 1
        self.expected = []  # segments that should be on disk, by the last snapshot and since
        self.snapshot = None  # names seen since a SNAPSHOT record, until its SNAPSHOT_END
        self.undecodable = []  # what could not be decoded, said: reported at start, never fatal
        self.unknown = 0  # records of a kind a newer hutch wrote: nothing here to do with them
        self.dedup = None  # core/dedup.Dedup, made by the first DEDUP or DEDUP_TAKEN record
        self.sensors = None  # ... of sensors, by the first SENSOR or SENSOR_TAKEN record

    def segment(self, number, records, summary=False):
        """A segment's records: all of them, or its summary's (summary True)."""
        self.snapshot = None  # a snapshot cut short by the end of its segment resets nothing
        if number not in self.expected:
            self.expected.append(number)
        for kind, payload in records:
            if kind == SUMMARY and not summary:
                break  # a segment read whole: its summary (not trusted, or it would not be) says it again
            try:
                self.record(number, kind, payload)
            except Exception as e:
                # A record that passed its CRC but does not decode: a bug or a newer format.
                # Said, rather than refuse to boot.
                name = READERS[kind][0] if kind in READERS else "kind %d" % kind
                article = "an" if name[0] in "aeiou" else "a"
                self.undecodable.append("segment %08d: %s %s record did not decode: %r" % (number, article, name, e))

    def record(self, segment, kind, p):
        """One record of segment: what its kind does (READERS, below), or nothing for a kind a
        newer hutch wrote (counted in unknown)."""
        found = READERS.get(kind)
        if found is None:
            self.unknown += 1
        else:
            found[1](self, segment, kind, p)

    def _summary(self, segment, kind, p):
        pass  # (a sealed segment's summary starts here: its records follow)

    def _members(self, segment, kind, p):
        name, flags, first_id, count, size, bitmap = _members(p, 0)
        queue = self.queues.get(name)
        if queue is not None:
            run = queue.run(segment, first_id, bool(flags & MOVED))
            run.bitmap = bitmap
            run.count = count
            run.bytes = size
            if flags & MOVED:
                self._moved(queue, run, segment)

    def _removed_or_delivered(self, segment, kind, p):
        n = p[0]
        queue = self.queues.get(bytes(p[1 : 1 + n]))
        written_in, size = struct.unpack_from(">IQ", p, 1 + n)
        self._refer(segment, written_in)
        if queue is None:
            return
        for pos in range(13 + n, len(p), 8):
            journal_id = struct.unpack_from(">Q", p, pos)[0]
            if kind == REMOVED:
                queue.take(written_in, journal_id)
                queue.delivered.discard(journal_id)
            else:
                queue.delivered.add(journal_id)
        if kind == REMOVED:
            queue.fewer_bytes(written_in, size)

    def _page_dropped(self, segment, kind, p):
        written_in = struct.unpack_from(">I", p, 0)[0]
        name, _flags, first_id, _count, size, bitmap = _members(p, 4)
        self._refer(segment, written_in)
        queue = self.queues.get(name)
        if queue is not None:
            run = queue.runs.get((written_in, False))
            if run is not None:
                _clear(run, first_id, bitmap)
            queue.fewer_bytes(written_in, size)

    def _snapshot(self, segment, kind, p):
        self._ids(struct.unpack_from(">Q", p, 0)[0])
        self.expected = [segment]
        for pos in range(8, len(p), 4):
            self.expected.append(struct.unpack_from(">I", p, pos)[0])
        self.snapshot = ([], [], [])

    def _segments_gone(self, segment, kind, p):
        for pos in range(0, len(p), 4):
            gone = struct.unpack_from(">I", p, pos)[0]
            if gone in self.expected:
                self.expected.remove(gone)

    def _snapshot_end(self, segment, kind, p):
        if self.snapshot is not None:
            self._keep_only(*self.snapshot)
        self.snapshot = None

    def _exchange(self, segment, kind, p):
        name, pos = _shortstr(p, 0)
        kind_name, pos = _shortstr(p, pos)
        flags = p[pos]
        arguments = decode_table(p, pos + 1, len(p))[0]
        self.exchanges[name] = (kind_name, bool(flags & 1), bool(flags & 2), arguments)
        if self.snapshot is not None:
            self.snapshot[0].append(name)

    def _exchange_gone(self, segment, kind, p):
        name = _shortstr(p, 0)[0]
        self.exchanges.pop(name, None)
        self._drop_bindings(name, False)

    def _queue(self, segment, kind, p):
        name, pos = _shortstr(p, 0)
        flags = p[pos]
        arguments = decode_table(p, pos + 1, len(p))[0]
        queue = self.queues.get(name)
        if queue is None:
            self.queues[name] = RecoveredQueue(bool(flags & 1), arguments)
        else:  # a later snapshot names it again: its messages stay
            queue.auto_delete = bool(flags & 1)
            queue.arguments = arguments
        if self.snapshot is not None:
            self.snapshot[1].append(name)

    def _queue_gone(self, segment, kind, p):
        name = _shortstr(p, 0)[0]
        self.queues.pop(name, None)
        self._drop_bindings(name, True)

    def _binding(self, segment, kind, p):
        source, pos = _shortstr(p, 0)
        to_queue = p[pos] == 1
        destination, pos = _shortstr(p, pos + 1)
        key, pos = _shortstr(p, pos)
        arguments = decode_table(p, pos, len(p))[0]
        identity = (source, to_queue, destination, key, freeze(arguments))
        if kind == BINDING:
            self.bindings[identity] = arguments
            if self.snapshot is not None:
                self.snapshot[2].append(identity)
        else:
            self.bindings.pop(identity, None)

    def _dedup(self, segment, kind, p):
        sensor = kind == SENSOR or kind == SENSOR_TAKEN
        if sensor and self.limits is not None and not self.limits.max_sensors:
            return  # deduplication turned off since: nothing kept
        from .dedup import dedup_of  # only a journal a bridge or a numbered reading wrote to loads it

        dedup = dedup_of(self, sensor)
        if kind == DEDUP or kind == SENSOR:
            dedup.restore(p)
        else:
            dedup.replay_taken(p)

    def _message(self, segment, kind, p):
        """A MESSAGE record of a segment read whole: into its queues' runs (not decoded)."""
        fields = message_fields(p, 0, len(p))
        if fields is None:
            raise ValueError("a message record whose fields do not fit in it")
        journal_id, flags = fields[0], fields[1]
        self._ids(journal_id + 1)
        if flags & TRANSIENT:
            return  # journalled only for a queue's order: a restart does not bring it back
        pos = fields[5]
        count = (p[pos] << 8) | p[pos + 1]
        pos += 2
        names = []
        for _ in range(count):
            name, pos = _shortstr(p, pos)
            names.append(name)
        body_size = len(p) - fields[7] - 5 if len(p) > fields[7] else 0
        moved = bool(flags & MOVED)
        for name in names:
            queue = self.queues.get(name)
            if queue is not None:
                run = queue.run(segment, journal_id & ~7, moved)
                if journal_id < run.first_id:  # (moved ones only) an older id: the bitmap starts earlier
                    first = journal_id & ~7
                    run.bitmap = bytearray((run.first_id - first) >> 3) + run.bitmap
                    run.first_id = first
                run.bitmap = set_bits(run.bitmap, journal_id - run.first_id)
                run.count += 1
                run.bytes += body_size
                if moved:
                    self._moved(queue, run, segment, journal_id)

    def seal(self, segment, records):
        """The summary of a segment read whole at this start (its records), as record parts;
        the storage port appends it once the next segment's snapshot is durable. It gives the
        segment's runs as they stand after it (its own removals applied), the queues they are
        of, and copies of its records that speak of other segments or of deliveries."""
        out = record_parts(SUMMARY, ())
        for name in self.queues:
            queue = self.queues[name]
            declared = False
            for key in queue.runs:
                run = queue.runs[key]
                if key[0] != segment or not run.count:
                    continue
                if not declared:
                    declared = True
                    out.extend(record_parts(QUEUE, queue_payload(name, queue.auto_delete, queue.arguments)))
                flags = MOVED if key[1] else 0
                payload = members_payload(name, flags, run.first_id, run.count, run.bytes, run.bitmap)
                out.extend(record_parts(MEMBERS, payload))
        for kind, p in records:
            if kind == SUMMARY:
                break
            if kind == REMOVED:
                keep = struct.unpack_from(">I", p, 1 + p[0])[0] != segment
            elif kind == PAGE_DROPPED:
                keep = struct.unpack_from(">I", p, 0)[0] != segment
            else:
                keep = kind == DELIVERED or kind == SEGMENTS_GONE
            if keep:
                out.extend(record_parts(kind, (p,)))
        dedup_state(out, self.dedup, self.sensors)  # (the next segment's snapshot has it too, unless a crash cut it)
        return out

    def _moved(self, queue, moved_run, segment, journal_id=None):
        """Messages written again (compaction) into segment: not also in their old runs."""
        ids = [journal_id] if journal_id is not None else _ids_of(moved_run)
        for one in ids:
            for key in queue.runs:
                run = queue.runs[key]
                if run is not moved_run and key[0] < segment and _take(run, one):
                    break

    def _refer(self, segment, older):
        if older != segment:
            refers = self.refers.get(segment)
            if refers is None:
                refers = self.refers[segment] = []
            if older not in refers:
                refers.append(older)

    def _ids(self, next_id):
        if next_id > self.next_id:
            self.next_id = next_id

    def _keep_only(self, exchanges, queues, bindings):
        """A complete snapshot lists every durable definition of its moment: drop the rest."""
        for name in list(self.exchanges):
            if name not in exchanges:
                del self.exchanges[name]
        for name in list(self.queues):
            if name not in queues:
                del self.queues[name]
        for identity in list(self.bindings):
            if identity not in bindings:
                del self.bindings[identity]

    def _drop_bindings(self, name, to_queue):
        for identity in list(self.bindings):
            source, binds_queue, destination = identity[:3]
            if source == name and not to_queue or (destination == name and binds_queue == to_queue):
                del self.bindings[identity]

    def message_count(self):
        count = 0
        for name in self.queues:
            count += self.queues[name].count()
        return count

    # ------------------------------------------------------------ into the broker

    def apply(self, broker, journal, log):
        """Build the definitions and backlogs in broker; give journal the bookkeeping (live
        messages per segment, what refers to what, the next id). The journal is attached
        afterwards, so nothing here is written again."""
        for name in self.exchanges:
            kind, auto_delete, internal, arguments = self.exchanges[name]
            _quietly(log, "exchange", name, topology.declare_exchange, broker, None, name, kind, durable=True,
                     auto_delete=auto_delete, internal=internal, arguments=arguments)  # fmt: skip
        for name in self.queues:
            recovered = self.queues[name]
            _quietly(log, "queue", name, topology.declare_queue, broker, None, name, durable=True,
                     auto_delete=recovered.auto_delete, arguments=recovered.arguments)  # fmt: skip
        for identity in self.bindings:
            source, to_queue, destination_name, key = identity[:4]
            destination = broker.queues.get(destination_name) if to_queue else broker.exchange(destination_name)
            exchange = broker.exchange(source)
            if destination is not None and exchange is not None:
                args = (broker, exchange, destination, key, self.bindings[identity], spec.QUEUE_BIND)
                _quietly(log, "binding from", source, topology.add_binding, *args)
        live = journal.live
        for name in self.queues:
            queue = broker.queues.get(name)
            if queue is None:
                continue
            recovered = self.queues[name]
            runs = []
            for key in recovered.runs:
                run = recovered.runs[key]
                if run.count:
                    first = _first_id(run)
                    runs.append((first, _dense(run, first)))
                    live[run.segment] = live.get(run.segment, 0) + run.count
            runs.sort(key=_by_first)  # publish order (MicroPython's dicts keep no order)
            for _, run in runs:
                if not (queue.runs and _goes_on(queue.runs[-1], run)):
                    queue.runs.append(run)
                queue.paged += run.count
                queue.paged_bytes += run.bytes
            if recovered.delivered:
                queue.delivered_before = recovered.delivered
            if queue.message_ttl is not None:
                broker.expiring.append(queue)
        if self.dedup is not None:
            broker.dedup = self.dedup
        if self.sensors is not None:
            broker.sensors = self.sensors
        if broker.streams:
            from .streams.stream import retake_tails  # (loaded already: the streams are)

            retake_tails(broker)
        for segment in self.refers:
            journal.refers[segment] = self.refers[segment]
        journal.next_id = max(journal.next_id, self.next_id)


# What each record kind (core/store/journal.py, where each is encoded) does to a replay: kind ->
# (its name, as a report says it; the Replay method that reads it).
READERS = {
    SNAPSHOT: ("snapshot", Replay._snapshot),
    SNAPSHOT_END: ("snapshot-end", Replay._snapshot_end),
    EXCHANGE: ("exchange", Replay._exchange),
    EXCHANGE_GONE: ("exchange-gone", Replay._exchange_gone),
    QUEUE: ("queue", Replay._queue),
    QUEUE_GONE: ("queue-gone", Replay._queue_gone),
    BINDING: ("binding", Replay._binding),
    UNBINDING: ("unbinding", Replay._binding),
    MESSAGE: ("message", Replay._message),
    REMOVED: ("removed", Replay._removed_or_delivered),
    DELIVERED: ("delivered", Replay._removed_or_delivered),
    SEGMENTS_GONE: ("segments-gone", Replay._segments_gone),
    MEMBERS: ("members", Replay._members),
    PAGE_DROPPED: ("page-dropped", Replay._page_dropped),
    DEDUP: ("dedup", Replay._dedup),
    DEDUP_TAKEN: ("dedup-taken", Replay._dedup),
    SENSOR: ("sensor", Replay._dedup),
    SENSOR_TAKEN: ("sensor-taken", Replay._dedup),
    SUMMARY: ("summary", Replay._summary),
}


def _by_first(pair):
    return pair[0]


def _first_id(run):
    bitmap = run.bitmap
    for i in range(len(bitmap)):
        if bitmap[i]:
            for bit in range(8):
                if bitmap[i] & (1 << bit):
                    return run.first_id + i * 8 + bit
    return run.first_id


def _dense(run, first):
    """run as the queue keeps it: without its bitmap if its ids follow one another from first
    (what a backlog read or acked in order leaves), as when it was made (core/store/paging.py)."""
    if run.moved:
        # its records are in the order compaction wrote them, not always their ids': paging
        # reads a dense run's ids in order only (find_messages), so it keeps its bitmap
        return run
    bitmap = run.bitmap
    byte = len(bitmap) - 1
    while not bitmap[byte]:  # (run.count > 0: some bit is set)
        byte -= 1
    bit = 7
    while not bitmap[byte] & (1 << bit):
        bit -= 1
    if run.first_id + byte * 8 + bit != first + run.count - 1:
        return run  # a gap: its last id is further than count ids from its first
    dense = Run(run.segment, first)
    dense.count = run.count
    dense.bytes = run.bytes
    return dense


def _goes_on(run, after):
    """Join after to run if it goes on from run's last segment in the next, its ids following
    (both dense: as core/store/paging.py makes one run of them as they are published). True if joined."""
    parts = run.parts
    last = run.segment + (len(parts) >> 1 if parts else 0)
    if run.bitmap is not None or after.bitmap is not None or run.moved or after.moved:
        return False
    if after.segment != last + 1 or after.first_id != run.first_id + run.count:
        return False
    if parts is None:
        parts = run.parts = []
    parts.append(after.first_id)
    parts.append(after.bytes)
    run.count += after.count
    run.bytes += after.bytes
    return True


def _take(run, journal_id):
    """Clear journal_id's bit in run (a replay's runs all have a bitmap): True if it was set
    (the message was the run's)."""
    i = journal_id - run.first_id
    bitmap = run.bitmap
    if i < 0 or (i >> 3) >= len(bitmap):
        return False
    bit = 1 << (i & 7)
    if not bitmap[i >> 3] & bit:
        return False
    bitmap[i >> 3] ^= bit
    run.count -= 1
    return True


def _ids_of(run):
    out = []
    bitmap = run.bitmap
    for i in range(len(bitmap) * 8):
        if bitmap[i >> 3] & (1 << (i & 7)):
            out.append(run.first_id + i)
    return out


def _clear(run, first_id, bitmap):
    """Clear from run the bits of bitmap (from first_id; both start at a multiple of 8,
    so this goes a byte at a time: a dropped backlog of millions is cleared quickly)."""
    shift = (first_id - run.first_id) >> 3
    mine = run.bitmap
    ones = _ONES
    for j in range(len(bitmap)):
        mask = bitmap[j]
        k = shift + j
        if mask and 0 <= k < len(mine):
            gone = mine[k] & mask
            if gone:
                run.count -= ones[gone]
                mine[k] ^= gone


_ONES = bytes(bin(i).count("1") for i in range(256))  # bits set in each byte value


def _members(p, pos):
    name, pos = _shortstr(p, pos)
    flags, first_id, count, size = struct.unpack_from(">BQIQ", p, pos)
    return name, flags, first_id, count, size, bytearray(p[pos + 21 :])


def _shortstr(p, pos):
    n = p[pos]
    return bytes(p[pos + 1 : pos + 1 + n]), pos + 1 + n


def _quietly(log, what, name, operation, *args, **keywords):
    """Recreate one definition; one that the broker now refuses (a limit lowered since) is
    reported and left out, never a reason not to boot."""
    try:
        operation(*args, **keywords)
    except Refused as e:
        log("error", "journal: %s '%s' not restored: %s" % (what, text(name), e.text))
