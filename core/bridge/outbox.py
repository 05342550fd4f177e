"""The local side of an up bridge: a consumer of its source queue inside the broker, whose
deliveries wait to be sent upstream and leave the queue only once upstream took them.

It is a consumer session as core/queue.py's Consumer describes one (as a 0-9-1 channel is),
with no socket: the bridge's decisions (core/bridge/up.py) drive it, and server/bridges/driver.py
drives them. A stream's is core/bridge/streamout.py.

- While the link is up (`up`), the queue delivers to it: at most `window` messages (the
  bridge's prefetch) waiting to be sent or in flight, and as many again held, until the
  journal has them or the link's window has room (`held`): a link's window is not spent
  waiting for the edge's group commit. Each is journalled as delivered, as for any consumer, so a restart
  brings it back marked redelivered.
- The port takes them in queue order (`take`), sends them upstream and numbers them 1, 2, ...
  as the upstream channel's publisher confirms do (a new count per connection).
- `confirmed(seq, multiple)` settles what upstream confirmed: those messages leave the queue
  and the journal. `nacked(seq, multiple)` puts them back.
- `down()` when the link is lost: everything in flight goes back to the head of the queue, in
  order and marked redelivered, to be sent again first on the next link. So order is kept
  per bridge, and only messages in flight when a link dies can reach upstream twice.

Each forwarded message is persistent and carries three headers: x-hutch-origin (this node
and bridge), x-hutch-seq (a number that only grows along the queue and stays the same when
the message is sent again: its journal id, which survives restarts; a transient message,
which does not, counts in a lane of this run's own, named in its origin) and x-hutch-hops
(one more than it came with). So an upstream can tell a message sent again from a new one.
A message without x-hutch-gateway gets this gateway's name (the broker's [server] name) in it:
the gateway a reading was first taken at, which a relay further up keeps.

A message upstream cannot route comes back (basic.return) before its confirm: it is put back
and sent again, up to MAX_RETURNS times; then it is dead-lettered from the source queue if
that has a dead-letter exchange, and otherwise it stays at the head and the bridge says it
is stuck (`stuck`), never confirmed-and-lost.

Sans-IO and MicroPython-clean.
"""

import struct

from ...codec.wire import shortstr
from ..broker import ACCEPT, REJECT, REQUEUE
from ..headers import with_entries
from ..queue import Consumer
from ..session import MESSAGE

ORIGIN = b"x-hutch-origin"
SEQ = b"x-hutch-seq"
HOPS = b"x-hutch-hops"
KEYS = (ORIGIN, SEQ, HOPS)
GATEWAY = b"x-hutch-gateway"
GATEWAY_KEY = b"\x0fx-hutch-gateway"  # (as a shortstr: Message.has_header looks for it so)
MAX_RETURNS = 5


class Outbox:
    HELD_WINDOWS = 2  # the consumer's window: the link's and what is held (a stream's reads: 1)
    # A consumer session's fields that bound deliveries across its consumers (basic.qos
    # global in 0-9-1): an outbox has one consumer, bounded by its own prefetch.
    prefetch_global = 0
    consumer_unacked = 0
    stats = None  # its counters: the broker's own (core/counters.py)
    last_return = ""  # the code and text of upstream's last basic.return

    def __init__(self, broker, queue, name, window, wake=None, node=b"hutch", arguments=None):
        self.broker = broker
        self.queue = queue
        self.name = name
        self.origin = node + b"/" + name.encode()  # x-hutch-origin of persistent messages
        self.run_origin = self.origin + b"/" + broker.new_name(b"run-")  # and of transient ones
        self.transient_seq = 0
        self.heads = {}  # origin -> its encoded entries before the number (_head)
        self.run_origins = {}  # a start's first journal id -> the origin of what it numbered
        self.hops_key = shortstr(HOPS) + b"I"  # x-hutch-hops's key and type, before its value
        self.template = None  # (header_for) the last message's header, but for its number (_template)
        self.returns = {}  # message -> how often upstream returned it
        self.returned = []  # in-flight entries upstream returned, their confirm still to come
        self.stuck = None  # why the head of the queue cannot go upstream (see the module's docstring)
        self.up = False
        self.window = window
        self.waiting = []  # entries delivered to the bridge, not sent upstream yet, in order
        # ... and before them, entries not yet durable here or not yet in the link's window:
        # [journal seq, entry], in order (_release moves them to waiting once the journal is
        # synced that far and the window has room)
        self.held = []
        self.in_flight = []  # [seq, entry] sent upstream, awaiting a confirm, in order
        self.seq = 0  # the last sequence number given on this link
        self.forwarded = 0  # confirmed by upstream, since start
        self.wake = wake  # called when messages arrive for the port to send
        # (by position: core/session.py says why)
        self.consumer = Consumer(
            self, b"hutch.bridge." + name.encode(), queue, False, False, window * self.HELD_WINDOWS
        )
        broker.consume(None, queue, self.consumer, 0, arguments)  # (a stream's: where it reads from)

    # ------------------------------------------------------------ the queue's side

    def can_deliver(self):
        return self.up

    def deliver(self, consumer, queue, entry):
        broker = self.broker
        consumer.unacked += 1
        held = self.held
        if entry[MESSAGE].journal_id:  # a restart brings it back redelivered
            broker.delivered(queue, entry, False)
            journal = broker.journal
            if held or not journal.durable(entry[MESSAGE]):
                # Not forwarded before it is durable here: a crash would take it back, and the
                # publisher (a sensor) would send it again, to be numbered anew: upstream would
                # have it twice. (As a stream's records: durable before visible.) A message
                # already durable goes, whatever came after it: a backlog drains even while
                # the disk refuses new records (another program filled it).
                held.append([journal.seq, entry])
                broker.wait_for_journal(self)
                return
        elif held:  # (behind what is held: in order)
            held.append([held[-1][0], entry])
            return
        if len(self.waiting) + len(self.in_flight) >= self.window:  # (its turn comes with a confirm)
            held.append([0, entry])
            return
        self.waiting.append(entry)
        if self.wake is not None:
            self.wake()

    closed = False  # (for Broker.journal_synced, as a connection waiting for the journal)

    def flush_confirms(self):
        """(Broker.journal_synced) What is durable now goes to waiting, in order, as far as the
        link's window has room (the rest as confirms make room: _settle)."""
        self._release()
        if self.held:
            self.broker.wait_for_journal(self)

    def _release(self):
        """The held entries the journal has, into waiting while the link's window has room."""
        held = self.held
        if not held:
            return
        journal = self.broker.journal
        synced = journal.synced if journal is not None else held[-1][0]
        room = self.window - len(self.waiting) - len(self.in_flight)
        n = 0
        while n < len(held) and n < room and (held[n][0] <= synced or _durable(journal, held[n][1][MESSAGE])):
            self.waiting.append(held[n][1])
            n += 1
        if n:
            del held[:n]
            if self.wake is not None:
                self.wake()

    def server_cancel(self, consumer):
        """The source queue was deleted: nothing more comes; the port says so in its status."""
        self.up = False
        self.broker.cancel(consumer)
        self.waiting = []
        self.held = []
        self.in_flight = []
        self.consumer = None

    # ------------------------------------------------------------ the link's side

    def link_up(self):
        """A new upstream link is open (its confirms count from 1): deliveries start."""
        self.up = True
        self.seq = 0
        self.queue.dispatch()

    def take(self, limit=None, after=None):
        """The messages to send now (at most limit), in order, each numbered as upstream will
        confirm it: after the link's last number (after; else this outbox's own, seq), and seq
        is the last given. (A bridge's classes share one link, so one count.)"""
        if after is not None:
            self.seq = after
        waiting = self.waiting
        if limit is not None and limit < len(waiting):
            self.waiting = waiting[limit:]
            waiting = waiting[:limit]
        else:
            self.waiting = []
        for entry in waiting:
            self.seq += 1
            self.in_flight.append([self.seq, entry])
        return waiting

    def confirmed(self, seq, multiple):
        """Upstream confirmed seq (and every one before it, if multiple): settle them."""
        entries = self._settled(seq, multiple)
        if self.returned:
            back = [entry for entry in entries if entry in self.returned]
            entries = [entry for entry in entries if entry not in self.returned]
            self._retry(back)
        self.forwarded += self._settle(entries, ACCEPT)

    # ------------------------------------------------------------ what goes upstream

    def header_for(self, message):
        """The content header forwarded for message: persistent, with the bridge's headers."""
        origin, seq = self._key(message)
        hops = 1
        tail = message.header_tail
        if HOPS in tail:  # it came over a bridge already: one hop more
            came = message.properties().get("headers", {}).get(HOPS.decode())
            if isinstance(came, int):
                hops = came + 1
        template = self.template
        name = self.broker.name  # (a reload may change it)
        if (
            template is None
            or template[0] != tail
            or template[1] != origin
            or template[2] != hops
            or template[5] != name
        ):
            template = self.template = self._template(tail, origin, hops, name)
        return b"".join((template[3], struct.pack(">q", seq), template[4]))

    def _template(self, tail, origin, hops, name):
        """(tail, origin, hops, before, after, name): the header forwarded for a message with
        that content header tail, origin and hop count, from the gateway called name, is before +
        its number (8 bytes) + after. A backlog's messages mostly share their properties: its
        headers are rewritten once, not once a message. (Where the number goes: the first byte
        two numbers differ at.)"""
        gateway = b""
        if not (tail[16] & 0x20 and GATEWAY_KEY in tail):  # (no headers, or none of that name)
            gateway = GATEWAY_KEY + b"S" + struct.pack(">I", len(name)) + name.encode()
        made = []
        for seq in (0, -1):
            entries = b"".join(
                (self._head(origin), struct.pack(">q", seq), self.hops_key, struct.pack(">i", hops), gateway)
            )
            made.append(with_entries(tail, entries, KEYS, True))
        at = 0
        while made[0][at] == made[1][at]:
            at += 1
        return (tail, origin, hops, made[0][:at], made[0][at + 8 :], name)

    def _head(self, origin):
        """The encoded entries that come before a message's number: x-hutch-origin and the key
        of x-hutch-seq. The same for every message of an origin, so made once (encoding them
        for each message was a third of the bridge's time when forwarding a backlog)."""
        head = self.heads.get(origin)
        if head is None:
            head = b"".join((shortstr(ORIGIN), b"S", struct.pack(">I", len(origin)), origin, shortstr(SEQ), b"l"))
            self.heads[origin] = head
        return head

    def _key(self, message):
        """(x-hutch-origin, x-hutch-seq) of message: its journal id, or for a transient message
        a number in this run's lane, given the first time it is asked for and kept."""
        journal_id = message.journal_id
        if journal_id:
            return self._numbered_by(journal_id), journal_id
        if not message.forward_seq:
            self.transient_seq += 1
            message.forward_seq = self.transient_seq
        return self.run_origin, message.forward_seq

    def _numbered_by(self, journal_id):
        """The origin of a persistent message: this node's and bridge's, and the start of the
        broker that gave it its journal id (server/bridges/driver.py run_starts says why), the last start
        whose first id is at most journal_id."""
        runs = self.broker.bridge_runs
        if not runs:
            return self.origin
        i = len(runs) - 1
        while i > 0 and runs[i] > journal_id:
            i -= 1
        start = runs[i]
        origin = self.run_origins.get(start)
        if origin is None:
            origin = self.run_origins[start] = self.origin + b"/" + str(start).encode()
        return origin

    def returned_by(self, origin, seq, reason):
        """Upstream returned the message with these headers (basic.return, reason: its code and
        text): its confirm, which follows, puts it back instead of settling it."""
        for pair in self.in_flight:
            if self._key(pair[1][0]) == (origin, seq):
                self.returned.append(pair[1])
                self.last_return = reason
                return True
        return False

    def _retry(self, entries):
        """Returned entries: again (at the head), or dead-lettered after MAX_RETURNS."""
        returns = self.returns
        again = []
        dead = []
        for entry in entries:
            self.returned.remove(entry)
            key = self.return_key(entry[MESSAGE])
            count = returns.get(key, 0) + 1
            if count < MAX_RETURNS:
                returns[key] = count
                again.append(entry)
            elif self.queue.dead_letter_exchange is not None:
                returns.pop(key, None)
                dead.append(entry)
            else:
                returns[key] = count
                again.append(entry)
                self.stuck = "upstream returned a message %d times (%s) and the queue has no dead-letter exchange" % (
                    count,
                    self.last_return,
                )
        if dead:
            self.broker.log(
                "warning",
                "bridge %s: %d messages dead-lettered after %d returns (%s)"
                % (self.name, len(dead), MAX_RETURNS, self.last_return),
            )
        self._settle(dead, REJECT)
        if again:
            self._settle(again + self._behind(), REQUEUE)

    def return_key(self, message):
        """What upstream's returns of a message are counted by: the message (a queue gives the
        same one back when it is sent again)."""
        return message

    def nacked(self, seq, multiple):
        """Upstream refused seq (and the ones before it, if multiple): back to the queue's head,
        what waits to be sent behind them (in order: they go first again)."""
        entries = self._settled(seq, multiple)
        if entries:
            self._settle(entries + self._behind(), REQUEUE)

    def _behind(self):
        """What waits to be sent (waiting, then held), taken back to be requeued."""
        entries = self.waiting + [pair[1] for pair in self.held]
        self.waiting = []
        self.held = []
        return entries

    def down(self):
        """The link is gone: what was in flight or waiting goes back to the queue, in order."""
        self.up = False
        self.returned = []
        entries = [pair[1] for pair in self.in_flight] + self._behind()
        self.in_flight = []
        self._settle(entries, REQUEUE)

    def backlog(self):
        """Messages waiting in the source queue and not yet forwarded."""
        return self.queue.message_count() + len(self.waiting) + len(self.held) + len(self.in_flight)

    def oldest_arrival(self):
        """When the oldest message not yet confirmed upstream arrived (wall-clock ms), or None:
        in flight, held, waiting to go, or still in the queue (the age `hutch ctl bridges`,
        /metrics and the alarms show)."""
        for pairs in (self.in_flight, self.held):
            if pairs:
                return pairs[0][1][MESSAGE].arrived
        if self.waiting:
            return self.waiting[0][MESSAGE].arrived
        queue = self.queue
        if not queue.is_stream and queue.messages.length:
            return queue.messages.peek()[MESSAGE].arrived
        return None

    def _settled(self, seq, multiple):
        in_flight = self.in_flight
        if multiple:
            i = 0
            while i < len(in_flight) and in_flight[i][0] <= seq:
                i += 1
            entries = [pair[1] for pair in in_flight[:i]]
            del in_flight[:i]
            return entries
        if not in_flight or not in_flight[0][0] <= seq <= in_flight[-1][0]:
            return []  # (another class's, on a link the classes share)
        for i in range(len(in_flight)):
            if in_flight[i][0] == seq:
                return [in_flight.pop(i)[1]]
        return []

    def _settle(self, entries, outcome):
        if not entries or self.consumer is None:
            return 0
        if outcome == ACCEPT and self.returns:
            for entry in entries:
                self.returns.pop(self.return_key(entry[MESSAGE]), None)
        self.consumer.unacked -= len(entries)
        self.broker.settle(self.queue, entries, outcome, None)  # (counted as the broker's own)
        if self.up:
            self._release()
            self.queue.dispatch()
        return len(entries)

    def close(self):
        """The bridge stops: in-flight messages go back, the consumer goes."""
        self.down()
        if self.consumer is not None:
            self.broker.cancel(self.consumer)
            self.consumer = None


def _durable(journal, message):
    """Whether a held message's own record is durable (a transient one, never journalled: no)."""
    return journal is not None and message.journal_id and journal.durable(message)
