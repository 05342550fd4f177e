"""Stream queues (x-queue-type = stream): an append-only log that consumers read by offset,
as RabbitMQ's streams are read over AMQP 0-9-1.

A Stream stands where a Queue stands (the broker, topology and a channel use the same
calls), but nothing is removed by consuming: every message routed to it becomes a record
at the next offset (0, 1, 2, ...) in the stream's own segment files, and each consumer
reads on from an offset of its own choosing (the consume argument x-stream-offset):

- "first": the first record still retained; "last": the last record (hutch writes one
  record at a time, so RabbitMQ's "last chunk" is one record; on an empty stream, the
  first one to come); "next" (the default): the first record published after attaching;
- a number: that offset; below the first retained one, the first retained one (the
  first delivery's x-stream-offset header shows the jump); past the end, it waits;
- a timestamp (seconds), or an interval before now ("1h", x-max-age's grammar): the
  first record stamped at or after that moment; none yet: the next one to come.

Offsets are dense and only grow. Durable before visible: a consumer is given only records
the storage port has made durable (Broker.journal_synced), which it does in the same
group commit as the journal's (core/store/journal.py Journal.append_to), so a crash can never
take back a record a consumer saw, and a confirm waits for the disk as for a durable
queue. The port reserves offsets ahead in a small file of the stream's folder, made
durable before any record past the previous reservation is written: after a crash,
offsets start past the reservation, and a lost record's offset is never given to another.

Consumers must set a prefetch (basic.qos) and ack; an ack (nack and reject too, as in
RabbitMQ 3.13+) only moves the consumer's window on. Each consumer holds at most what it
read ahead (a sixteenth of a segment, at most 64 KiB, or one record) and an entry per
delivery it has not acked: reading goes through the storage port (ports/streams.py), never
through memory. What it read ahead becomes deliveries a run at a time: the consumer's session
makes them from the records in one call (deliver_records; a 0-9-1 channel's frames come from
amqp091/output.py, on CPython from its C twin), with no object per record.

Retention (x-max-length-bytes, x-max-age) drops whole segments, oldest first, when a
segment fills and on the broker's tick; the newest one always stays.

Sans-IO and MicroPython-clean; the storage port gives each stream its files (`log`).
"""

from ...codec.errors import PRECONDITION_FAILED, Refused
from ...codec.wire import encode_table, text
from .. import counters
from ..session import MESSAGE
from ..store.records import HEADER_SIZE
from .streamlog import BAD_RECORD, DONE, message_record, messages_in, needed, record_template
from .streamrules import FIRST as START_FIRST
from .streamrules import LAST, OFFSET, TIME, check_consumer, duration_ms, start_of

# A segment as the stream keeps it: [first offset, first record's timestamp (ms), bytes].
FIRST = 0
STAMP = 1
SIZE = 2


class Held:
    """What a delivery from a stream holds until it is settled, for the broker's budget
    (core/flow.py counts it as a held message): its delivery tag's entry in the channel. Its
    frames are the connection's output (bounded by output_high_water), and no copy of the
    record stays in memory."""

    journal_id = 0  # (not a journalled message: compaction and the journal pass it by)
    segment = 0
    cost = 64  # bytes: a dict slot (tag -> record) with its share of the table's slack


HELD = Held()
ENTRY = (HELD, False, None)  # every delivery's entry (message, redelivered, expires_at): they are all alike
NO_LIMIT = 1 << 30


def _room(consumer, flow):
    """How many deliveries consumer may be given now: its session can take them, its prefetch
    (and its channel's, if any) has room, and the broker's budget of held messages is not
    spent (the one that goes over it is given, as Flow.hold counts one at a time)."""
    session = consumer.session
    if not session.can_deliver():
        return 0
    room = consumer.prefetch - consumer.unacked if consumer.prefetch else NO_LIMIT
    limit = session.prefetch_global
    if limit and limit - session.consumer_unacked < room:
        room = limit - session.consumer_unacked
    limits = flow.limits
    budget = limits.total_max_messages - flow.held_messages + 1
    if budget < room:
        room = budget
    budget = (limits.total_max_bytes - flow.held_bytes) // HELD.cost + 1
    return budget if budget < room else room


def retake_tails(broker):
    """At start (core/replay.py), after a crash: the bridges' and sensors' numbers that each
    stream's newest records carry, taken (core/dedup.py retake: the journal's record of them may
    not have been written)."""
    for stream in broker.streams:
        tail = stream.log.tail
        if tail is not None:
            stream.log.tail = None
            if b"x-hutch-seq" in tail or b"x-sensor-seq" in tail:
                from ..dedup import retake  # (loaded only for a journal with numbered messages)

                retake(broker, messages_in(tail))


def new_stream(broker, name, arguments, method):
    """(core/topology.py, after core/streams/streamrules.py check_declare) A new stream, on the files the
    storage port opens for it (found again after a restart)."""
    if broker.open_stream is None:
        raise Refused(
            PRECONDITION_FAILED,
            "stream queues need the broker's data folder (queue '%s')" % text(name),
            method,
        )
    try:
        log = broker.open_stream(name, encode_table(arguments))
    except OSError as e:
        raise Refused(PRECONDITION_FAILED, "cannot open stream '%s': %s" % (text(name), e), method)
    return Stream(broker, name, arguments, log)


class Cursor:
    """Where one consumer reads: the offset it wants next, the segment it reads (by its first
    offset; -1: not found yet) and where in that file, and the bytes read ahead: buf[pos:end],
    one buffer read into again and again (a board's heap is not cut up by a new one per read;
    it grows only for a record larger than itself)."""

    def __init__(self, offset, after_ms):
        self.offset = offset  # the next record to deliver has this offset or a later one
        self.after_ms = after_ms  # 0, or records are read past until one stamped at or after this
        self.segment = -1
        self.position = 0  # the file position of buf[0]
        self.buf = None  # a bytearray, from the first read on
        self.pos = 0
        self.end = 0

    def rewind(self, offset):
        """Read again from offset (a bridge whose link was lost: core/bridge/streamout.py). The
        segment is found again at the next read; the buffer is kept."""
        self.offset = offset
        self.after_ms = 0
        self.segment = -1
        self.position = self.pos = self.end = 0


class Stream:
    # What it has had since the broker started (core/counters.py): class-level zeros until counted.
    published = 0
    delivered = 0
    acknowledged = 0
    entry = ENTRY  # what a session keeps for each delivery until it is settled (deliver_records)
    is_queue = True
    is_stream = True
    durable = True
    owner = None
    auto_delete = False
    # Its definition goes into the journal as a durable queue's does; its records go to its own
    # files (Broker.publish hands them to append(), never to Journal.add_message).
    journalled = True
    # What the broker asks of every queue, and a stream never has (nor messages in memory, nor
    # runs of them on disk for the journal's paging and compaction to look through).
    runs = ()
    messages = ()
    message_ttl = None
    expires = None
    overflow = b"drop-head"
    dead_letter_exchange = None
    # [(the offset next when the wall clock moved, by how many ms)] (core/clock_jump.py): a
    # segment begun before a jump is aged on the clock after it, for retention by x-max-age
    stamp_moves = ()  # type: tuple | list

    def __init__(self, broker, name, arguments, log):
        """log: the storage port's files for this stream (ports/streams.py), as found on disk."""
        self.broker = broker
        self.name = name
        self.arguments = arguments
        self.log = log
        self.consumers = []
        self.next_consumer = 0
        self.exclusive_consumer = None
        self.had_consumer = False
        self.inbound = []  # Bindings to this stream
        self.waiting = []  # (never: a stream is never full; its disk is the journal's budget)
        self.deleted = False
        self.last_used = broker.now
        limits = broker.limits
        self.max_bytes = arguments.get("x-max-length-bytes")
        age = arguments.get("x-max-age")
        self.max_age_ms = None if age is None else duration_ms(age)
        size = arguments.get("x-stream-max-segment-size-bytes")
        self.segment_bytes = limits.stream_segment_bytes if size is None else size
        # what a consumer reads at once (and holds read ahead): a board's profile sets small
        # segments (Limits.stream_segment_bytes), and so small reads
        self.read_bytes = min(65536, max(512, limits.stream_segment_bytes // 16))
        self.segments = log.segments  # [[first offset, first timestamp, bytes]], oldest first
        self.next = log.next  # the offset the next record gets
        self.first = self.segments[0][FIRST] if self.segments else self.next
        self.visible = self.next  # records below this are durable: consumers may have them
        # after a crash, the newest record found lies before the gap up to the reservation:
        # "last" is that record until one comes past the gap
        self.last_before_gap = log.last if log.last + 1 < self.next else None
        self.last_ms = log.last_ms  # the newest record's timestamp
        self.reserved = log.reserved  # offsets below this may be handed out (the port made it durable)
        self.bytes = 0
        for segment in self.segments:
            self.bytes += segment[SIZE]
        if isinstance(broker.streams, tuple):  # the first stream: the broker gets lists of its own (see Broker)
            broker.streams = []
            broker.stream_syncs = []
        broker.stream_bytes += self.bytes
        self.target = None  # the newest segment's file, as the journal's chunks name it
        self.marks = []  # [journal seq, offset, port writes]: once seq is durable, records below offset are
        self.gone_at = 0  # deleted: the journal seq of its QUEUE_GONE record (then its files go)
        self.damaged = []  # segments found damaged while reading (said once each)
        self.record_cache = []  # what the last record made can lend the next (streamlog.message_record)
        self.run_template = None  # (route, header tail, record template) of the last run (run_template_for)
        broker.streams.append(self)

    def __repr__(self):
        return "<Stream %s>" % text(self.name)

    # ------------------------------------------------------------ appending

    def append(self, message):
        """Broker.publish: message becomes the record at the next offset, in the next group
        commit of the journal (its confirm waits for journal.seq as for a durable queue's)."""
        self.reserve()
        now_ms = self.broker.wall_seconds * 1000
        parts, size = message_record(self.next, now_ms, message, self.record_cache)
        segments = self.segments
        rolled = False
        if not segments or (segments[-1][SIZE] and segments[-1][SIZE] + size > self.segment_bytes):
            segments.append([self.next, now_ms, 0])
            self.target = self.log.segment(self.next)
            rolled = len(segments) > 1
        elif self.target is None:
            self.target = self.log.segment(segments[-1][FIRST])  # after a restart: on with the newest
        self.append_records(parts, 1, size, now_ms)
        if rolled:
            self.retain()

    def reserve(self):
        """Offsets from self.next on may be given: at least one is reserved (on disk before
        a record with it is written, so a crash never gives an offset twice)."""
        if self.next >= self.reserved:
            self.reserved = self.log.reserve(self.next)

    def room(self):
        """Bytes the newest segment takes before the next record rolls a new one; 0 when the
        next append must choose its segment (append() does)."""
        segments = self.segments
        if not segments or self.target is None:
            return 0
        return max(0, self.segment_bytes - segments[-1][SIZE])

    def run_template_for(self, message):
        """The record template (core/streams/streamlog.py record_template) of a run of messages
        like message (core/runs.py publish_run): made once, kept while the runs are alike."""
        template = self.run_template
        if template is None or template[0] != message.route or template[1] != message.header_tail:
            template = self.run_template = (
                message.route,
                message.header_tail,
                record_template(message.route, message.header_tail),
            )
        return template[2]

    def append_records(self, parts, count, size, now_ms):
        """count records (parts: their bytes, size of them in all) for the offsets from
        self.next on, stamped now_ms, into the newest segment: append()'s, or a run of them
        made at once (core/runs.py publish_run, within reserve() and room())."""
        self.published += count
        self.next += count
        self.segments[-1][SIZE] += size
        self.bytes += size
        broker = self.broker
        broker.stream_bytes += size
        self.last_ms = now_ms
        journal = broker.journal
        journal.append_to(self.target, parts)
        self._mark(journal.seq)

    def _mark(self, seq):
        """Once journal seq is durable, so is every record below self.next. One mark per write
        of the port (log.writes counts them): what it writes next is in a later sync."""
        marks = self.marks
        writes = self.log.writes
        if marks and marks[-1][2] == writes:
            mark = marks[-1]
            mark[0] = seq
            mark[1] = self.next
            return
        if not marks:
            self.broker.stream_syncs.append(self)
        marks.append([seq, self.next, writes])

    def synced(self, seq):
        """(Broker.journal_synced) The journal is durable up to seq: consumers may have the
        records that came with it. True while this stream still waits for a later seq."""
        if self.deleted:
            if self.gone_at <= seq:
                self.log.discard()  # its deletion is durable: its files go
                return False
            return True
        marks = self.marks
        visible = self.visible
        while marks and marks[0][0] <= seq:
            visible = marks.pop(0)[1]
        if visible > self.visible:
            self.visible = visible
            self.last_before_gap = None  # records past the gap now
            self.dispatch()
        return bool(marks)

    # ------------------------------------------------------------ retention

    def tick(self):
        """(Broker.tick) Retention by age (and by size, for segments that became durable); and
        deliveries held back while the broker was short of memory go on."""
        if self.max_age_ms is not None or self.max_bytes is not None:
            self.retain()
        if self.consumers:
            self.dispatch()

    def retain(self):
        """Drop whole segments, oldest first, while the stream is larger than x-max-length-bytes
        or the next segment began before now - x-max-age (all this one holds is older); never
        the newest one, nor one holding a record not durable yet."""
        max_bytes = self.max_bytes
        cutoff = None
        if self.max_age_ms is not None and self.broker.wall_seconds:
            cutoff = self.broker.wall_seconds * 1000 - self.max_age_ms
        segments = self.segments
        while len(segments) > 1:
            following = segments[1]
            if following[FIRST] > self.visible:
                return
            if not ((max_bytes is not None and self.bytes > max_bytes) or (cutoff is not None and self._began(following) < cutoff)):  # fmt: skip
                return
            oldest = segments.pop(0)
            self.bytes -= oldest[SIZE]
            self.broker.stream_bytes -= oldest[SIZE]
            self.first = following[FIRST]
            self.log.remove(oldest[FIRST])

    def _began(self, segment):
        """When a segment began, in ms on the wall clock as it reads now (its stamp, written on
        the clock of then, moved by each jump since)."""
        stamp = segment[STAMP]
        for at, delta_ms in self.stamp_moves:
            if segment[FIRST] < at:
                stamp += delta_ms
        return stamp

    # ------------------------------------------------------------ consumers

    def check_consumer(self, consumer, arguments, method):
        """(Broker.consume) Refuse what RabbitMQ refuses of a stream consumer, in its order and
        words, and find where this one starts (consumer.cursor)."""
        kind, value = start_of(arguments or {}, self.name, method)
        check_consumer(consumer, self.name, method)
        after_ms = 0
        if kind == START_FIRST:
            offset = self.first
        elif kind == LAST:
            offset = max(self.first, self.last_record())
        elif kind == OFFSET:
            offset = max(value, self.first)
        elif kind == TIME:
            offset, after_ms = self._at_time(value if value >= 0 else self.broker.wall_seconds * 1000 + value)
        else:
            offset = self.next
        consumer.cursor = Cursor(offset, after_ms)

    def _at_time(self, ms):
        """Where a consumer starting at a moment reads from: the last segment begun at or before
        it, read past until a record stamped at or after it; none is yet: the next one."""
        segments = self.segments
        if not segments or ms > self.last_ms:
            return self.next, 0
        chosen = segments[0]
        for segment in segments:
            if segment[STAMP] > ms:
                break
            chosen = segment
        return max(chosen[FIRST], self.first), ms

    def last_record(self):
        """The offset of the newest record a consumer may have (-1: none): the one before the
        offsets a crash skipped while nothing has come past them."""
        if self.last_before_gap is None:
            return self.visible - 1
        return self.last_before_gap

    def add_consumer(self, consumer):
        """(Broker.consume, after check_consumer.) Deliveries start at the next dispatch()."""
        self.consumers.append(consumer)
        self.had_consumer = True
        if consumer.exclusive:
            self.exclusive_consumer = consumer

    def remove_consumer(self, consumer):
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        if self.exclusive_consumer is consumer:
            self.exclusive_consumer = None
        consumer.cursor = None  # what it read ahead goes with it
        self.last_used = self.broker.now

    def message_count(self):
        """Exact: the offsets from the first retained record to the next one to come that a
        consumer may have now (RabbitMQ's count lags by seconds)."""
        return self.visible - self.first

    # Settling a delivery only gives its consumer room for the next (Channel.apply counts it):
    # nothing leaves a stream, nothing goes back. What the delivery held in memory is given
    # back to the broker's budget (dispatch took it).
    def forget(self, message):
        self.broker.flow.release(message)

    def forget_all(self, entries):
        release = self.broker.flow.release
        for entry in entries:
            release(entry[MESSAGE])

    def requeue(self, entries):
        self.forget_all(entries)

    def drop(self, entry, reason):
        self.broker.flow.release(entry[MESSAGE])

    def accepts(self, message):
        return True

    def is_full(self):
        return False

    # ------------------------------------------------------------ delivering

    def dispatch(self):
        """Deliver to each consumer what is durable past its offset, as far as its window allows,
        a run of records at a time (_deliver). Until it is settled, a delivery counts in the
        broker's budget of held messages (core/flow.py) as a queued message does, and no more
        is read while the broker is over that budget or short of heap (Broker.tick tries
        again); a run stops at the delivery that goes over, as one at a time would."""
        if self.deleted:
            return
        visible = self.visible
        flow = self.broker.flow
        for consumer in list(self.consumers):
            cursor = consumer.cursor
            if cursor is None or cursor.offset >= visible:
                continue
            while True:
                if flow.over_budget or "memory" in flow.alarms:
                    return
                room = _room(consumer, flow)
                if room <= 0 or not self._deliver(consumer, cursor, room):
                    break
                if consumer.cursor is None:  # the delivery ended it (its channel closed)
                    break

    def _deliver(self, consumer, cursor, room):
        """Up to room deliveries to consumer from where its cursor reads: its session makes them
        from the records the cursor has read ahead, in one go (the session protocol's
        deliver_records: core/session.py). False when it can have nothing more now."""
        session = consumer.session
        while cursor.offset < self.visible:
            if cursor.end - cursor.pos >= HEADER_SIZE:  # a record's header at least: make what it can
                given, status = session.deliver_records(consumer, self, cursor, room)
                if given:
                    broker = self.broker
                    broker.flow.hold(HELD, given)
                    self.delivered += given
                    (session.stats or broker.stats)[
                        counters.DELIVERED_CONSUME_AUTO_ACK
                        if consumer.no_ack
                        else counters.DELIVERED_CONSUME_MANUAL_ACK
                    ] += given
                    return True
                if status == BAD_RECORD:
                    self._skip_damage(cursor)
                    continue
                if status == DONE:
                    return False  # the next record is not durable yet
            if not self._read(cursor, needed(cursor.buf, cursor.pos, cursor.end)):
                return False
        return False

    def _read(self, cursor, need):
        """Read on for cursor (need: the bytes its next record takes): more of its segment, or the
        next segment. False when there is nothing more to read now."""
        segments = self.segments
        i = self._index(cursor.segment)
        if i < 0 or cursor.offset < self.first:
            i = self._locate(cursor)  # not started, or retention took its segment
            if i < 0:
                return False
        at = cursor.position + cursor.pos
        size = segments[i][SIZE]
        if at >= size:
            if i + 1 == len(segments):
                return False
            cursor.segment = segments[i + 1][FIRST]
            cursor.position = cursor.pos = cursor.end = 0
            return True
        buf = cursor.buf
        if buf is None or len(buf) < need:
            buf = cursor.buf = bytearray(need if need > self.read_bytes else self.read_bytes)
        try:
            got = self.log.read_into(cursor.segment, at, buf)
        except OSError:
            if self._index(cursor.segment) < 0:
                return self._locate(cursor) >= 0  # retention removed it meanwhile: on from the first retained
            self._skip_damage(cursor)  # a file gone from under the stream (by hand?): on to the next
            return True
        if got < need:
            # The file ends before the record the stream says is there: the rest is still being
            # written (none of it durable: after a restart's gap), or it was cut.
            if i + 1 < len(segments):
                self._skip_damage(cursor)
                return True
            if self.visible == self.next:
                cursor.offset = self.visible  # nothing is on its way: the offsets before are a gap
            return False
        cursor.position = at
        cursor.pos = 0
        cursor.end = got
        return True

    def _locate(self, cursor):
        """Point cursor at the segment holding its offset (the first retained one, if its offset
        is below it): the segment's index, or -1 if the stream has none."""
        segments = self.segments
        if not segments:
            return -1
        if cursor.offset < self.first:
            cursor.offset = self.first
        i = len(segments) - 1
        while i > 0 and segments[i][FIRST] > cursor.offset:
            i -= 1
        cursor.segment = segments[i][FIRST]
        cursor.position = cursor.pos = cursor.end = 0
        return i

    def _index(self, first):
        """The index of the segment that begins at offset first, or -1."""
        segments = self.segments
        low = 0
        high = len(segments) - 1
        while low <= high:
            middle = (low + high) // 2
            value = segments[middle][FIRST]
            if value == first:
                return middle
            if value < first:
                low = middle + 1
            else:
                high = middle - 1
        return -1

    def _skip_damage(self, cursor):
        """A record that does not check out: what is left of its segment is passed over."""
        i = self._index(cursor.segment)
        if cursor.segment not in self.damaged:
            self.damaged.append(cursor.segment)
            self.broker.log(
                "warning",
                "stream '%s': segment %d damaged at byte %d; its later records are skipped"
                % (text(self.name), cursor.segment, cursor.position + cursor.pos),
            )
        cursor.position = self.segments[i][SIZE] if i >= 0 else 0
        cursor.pos = cursor.end = 0
        if i < 0 or i + 1 == len(self.segments):
            cursor.offset = max(cursor.offset, self.visible)

    # ------------------------------------------------------------ going away

    def purge(self):
        """(delete_queue, after the journal's QUEUE_GONE.) The stream is deleted: its folder is set
        aside now and removed once its deletion is durable. Returns how many records it held.
        (queue.purge itself is refused on a stream: amqp091/declare.py.)"""
        count = self.visible - self.first
        broker = self.broker
        if self in broker.streams:
            broker.streams.remove(self)
        broker.stream_bytes -= self.bytes
        self.log.destroy()
        self.marks = []
        journal = broker.journal
        self.gone_at = journal.seq if journal is not None else 0
        if self not in broker.stream_syncs:
            broker.stream_syncs.append(self)
        return count

    def close(self):
        """A clean stop: the next offset, exactly, so the next start leaves no gap."""
        self.log.close(self.next)
