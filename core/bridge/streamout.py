"""The local side of an up bridge whose source is a stream (x-queue-type = stream): the Outbox
(core/bridge/outbox.py) as a stream's consumer session.

A stream is read, not consumed away, so what "leaves the queue" on a confirm is the bridge's
place in it:

- The stream delivers through the session protocol's `deliver_records` (core/session.py): the
  records the consumer's cursor read ahead become messages (core/streams/streamlog.py says
  what a record holds; each is checked, header and CRC-32, before it is believed), forwarded
  as a queue's are. Each is settled through Broker.settle with stream.entry, as a 0-9-1
  channel settles its stream deliveries, which gives the window room.
- x-hutch-seq is the record's offset + 1 (the dedup of an upstream hutch needs numbers from
  1), in a lane of the bridge's own: x-hutch-origin is NODE/BRIDGE/LANE.
- A nack or a return puts the record back at the head of what waits (a stream gives nothing
  back); a lost link lets go of everything not confirmed and rewinds the cursor to the oldest
  of it, read again first on the next link, in order.
- Where a restart reads from (`next_offset`: the oldest record not confirmed) goes to the
  bridge's offset file (server/bridges/driver.py writes it; core/bridge/up.py says when). At start,
  `saved` (that file: offset, lane, stream name) is read from if it fits the stream: the
  same stream name, and an offset the stream has reached (a stream made again under the
  same name starts below it). Otherwise the bridge starts a new lane at the stream's first
  record. A file that lags only sends records again; one lost sends what is retained
  again under a new lane: at least once, never a skipped record.

Sans-IO and MicroPython-clean; loaded with the first stream source.
"""

from ..broker import ACCEPT, REQUEUE
from ..session import MESSAGE
from ..streams.streamlog import read_messages
from .outbox import Outbox

LANE = b"lane-"


class StreamOutbox(Outbox):
    HELD_WINDOWS = 1  # (its records are durable before they are read: none is held)

    def __init__(self, broker, stream, name, window, wake=None, node=b"hutch", saved=None):
        start = None
        lane = None
        if saved is not None and saved[2] == stream.name and saved[0] <= stream.next:
            start, lane = saved[0], saved[1]
        self.saved = start  # the offset the file holds (None: it must be written before anything goes)
        Outbox.__init__(
            self, broker, stream, name, window, wake, node, {"x-stream-offset": b"first" if start is None else start}
        )
        self.lane = lane if lane is not None else broker.new_name(LANE)
        self.run_origin = self.origin + b"/" + self.lane  # x-hutch-origin of every record (Outbox._key)

    # ------------------------------------------------------------ the stream's side

    def deliver_records(self, consumer, stream, cursor, room):
        """Up to room of the records the cursor has read ahead, below stream.visible, as messages
        waiting to go: (how many, why it stopped: streamlog.read_messages says)."""
        found, status = read_messages(cursor, stream.visible, room)
        waiting = self.waiting
        for offset, message in found:
            message.forward_seq = offset + 1
            waiting.append((message, False, None))
        given = len(found)
        if given:
            consumer.unacked += given
            if self.wake is not None:
                self.wake()
        return given, status

    def server_cancel(self, consumer):
        """The stream was deleted: a stream made again under its name starts at 0, in a new lane."""
        self.down()
        Outbox.server_cancel(self, consumer)
        self.lane = self.broker.new_name(LANE)
        self.saved = None

    # ------------------------------------------------------------ settling

    def return_key(self, message):
        """Returns are counted by offset: the record read again after a lost link is a new
        message object."""
        return message.forward_seq

    def _settle(self, entries, outcome):
        count = len(entries)
        if not count or self.consumer is None:
            return 0
        if outcome == REQUEUE and self.up:  # nacked or returned: first again, in offset order
            waiting = entries + self.waiting
            waiting.sort(key=_seq)
            self.waiting = waiting
            if self.wake is not None:
                self.wake()
            return count
        if outcome == ACCEPT and self.returns:
            for entry in entries:
                self.returns.pop(entry[MESSAGE].forward_seq, None)
        self._release(count, outcome)
        return count

    def _release(self, count, outcome):
        """count deliveries settled with the stream (its entries are all alike): the window and
        the broker's budget get their room back."""
        self.consumer.unacked -= count
        stream = self.queue
        self.broker.settle(stream, [stream.entry] * count, outcome, None)
        if self.up:
            stream.dispatch()

    def down(self):
        """The link is gone: what was in flight or waiting is let go and read again first on the
        next link (the cursor goes back to the oldest of it)."""
        offset = self.next_offset()
        self.up = False
        self.returned = []
        count = len(self.in_flight) + len(self.waiting)
        self.in_flight = []
        self.waiting = []
        consumer = self.consumer
        if count and consumer is not None:
            self._release(count, REQUEUE)
            if consumer.cursor is not None:
                consumer.cursor.rewind(offset)

    # ------------------------------------------------------------ where it stands

    def next_offset(self):
        """The oldest offset upstream has not confirmed: where a restart reads from."""
        low = 0
        for pair in self.in_flight:  # (not in offset order once a record was sent again)
            seq = pair[1][MESSAGE].forward_seq
            if not low or seq < low:
                low = seq
        if self.waiting:  # (in offset order)
            seq = self.waiting[0][MESSAGE].forward_seq
            if not low or seq < low:
                low = seq
        if low:
            return low - 1
        consumer = self.consumer
        if consumer is None or consumer.cursor is None:  # stopped: as last saved; the stream gone: 0
            return self.saved if self.saved is not None else 0
        return consumer.cursor.offset

    def backlog(self):
        """Records in the stream not confirmed upstream yet."""
        if self.consumer is None:
            return 0
        return max(0, self.queue.visible - self.next_offset())


def _seq(entry):
    return entry[MESSAGE].forward_seq
