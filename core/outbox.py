"""The local side of an up bridge: a consumer of its source queue inside the broker, whose
deliveries wait to be sent upstream and leave the queue only once upstream took them.

It is a consumer session as core/queue.py's Consumer describes one (as a 0-9-1 channel is),
with no socket: the bridge's port (server/bridge.py) drives it.

- While the link is up (`up`), the queue delivers to it, at most `window` messages at a time
  (the bridge's prefetch). Each is journalled as delivered, as for any consumer, so a restart
  brings it back marked redelivered.
- The port takes them in queue order (`take`), sends them upstream and numbers them 1, 2, ...
  as the upstream channel's publisher confirms do (a new count per connection).
- `confirmed(seq, multiple)` settles what upstream confirmed: those messages leave the queue
  and the journal. `nacked(seq, multiple)` puts them back.
- `down()` when the link is lost: everything in flight goes back to the head of the queue, in
  order and marked redelivered, to be sent again first on the next link. So order is kept
  per bridge, and only messages in flight when a link dies can reach upstream twice.

Sans-IO and MicroPython-clean.
"""

from .broker import ACCEPT, REQUEUE
from .queue import Consumer


class Outbox:
    # A consumer session's fields that bound deliveries across its consumers (basic.qos
    # global in 0-9-1): an outbox has one consumer, bounded by its own prefetch.
    prefetch_global = 0
    consumer_unacked = 0

    def __init__(self, broker, queue, name, window, wake=None):
        self.broker = broker
        self.queue = queue
        self.name = name
        self.up = False
        self.waiting = []  # entries delivered to the bridge, not sent upstream yet, in order
        self.in_flight = []  # [seq, entry] sent upstream, awaiting a confirm, in order
        self.seq = 0  # the last sequence number given on this link
        self.forwarded = 0  # confirmed by upstream, since start
        self.wake = wake  # called when messages arrive for the port to send
        self.consumer = Consumer(self, b"hutch.bridge." + name.encode(), queue, False, False, window)
        broker.consume(queue, self.consumer, 0)

    # ------------------------------------------------------------ the queue's side

    def can_deliver(self):
        return self.up

    def deliver(self, consumer, queue, entry):
        if entry[0].journal_id:  # a restart brings it back redelivered
            self.broker.delivered(queue, entry, False)
        consumer.unacked += 1
        self.waiting.append(entry)
        if self.wake is not None:
            self.wake()

    def server_cancel(self, consumer):
        """The source queue was deleted: nothing more comes; the port says so in its status."""
        self.up = False
        self.broker.cancel(consumer)
        self.waiting = []
        self.in_flight = []
        self.consumer = None

    # ------------------------------------------------------------ the link's side

    def link_up(self):
        """A new upstream link is open (its confirms count from 1): deliveries start."""
        self.up = True
        self.seq = 0
        self.queue.dispatch()

    def take(self):
        """The messages to send now, in order, each numbered as upstream will confirm it."""
        waiting = self.waiting
        self.waiting = []
        for entry in waiting:
            self.seq += 1
            self.in_flight.append([self.seq, entry])
        return waiting

    def confirmed(self, seq, multiple):
        """Upstream confirmed seq (and every one before it, if multiple): settle them."""
        self.forwarded += self._settle(self._settled(seq, multiple), ACCEPT)

    def nacked(self, seq, multiple):
        """Upstream refused seq (and the ones before it, if multiple): back to the queue's head."""
        self._settle(self._settled(seq, multiple), REQUEUE)

    def down(self):
        """The link is gone: what was in flight or waiting goes back to the queue, in order."""
        self.up = False
        entries = [pair[1] for pair in self.in_flight] + self.waiting
        self.in_flight = []
        self.waiting = []
        self._settle(entries, REQUEUE)

    def backlog(self):
        """Messages waiting in the source queue and not yet forwarded."""
        return self.queue.message_count() + len(self.waiting) + len(self.in_flight)

    def _settled(self, seq, multiple):
        in_flight = self.in_flight
        if multiple:
            i = 0
            while i < len(in_flight) and in_flight[i][0] <= seq:
                i += 1
            entries = [pair[1] for pair in in_flight[:i]]
            del in_flight[:i]
            return entries
        for i in range(len(in_flight)):
            if in_flight[i][0] == seq:
                return [in_flight.pop(i)[1]]
        return []

    def _settle(self, entries, outcome):
        if not entries or self.consumer is None:
            return 0
        self.consumer.unacked -= len(entries)
        self.broker.settle(self.queue, entries, outcome)
        if self.up:
            self.queue.dispatch()
        return len(entries)

    def close(self):
        """The bridge stops: in-flight messages go back, the consumer goes."""
        self.down()
        if self.consumer is not None:
            self.broker.cancel(self.consumer)
            self.consumer = None
