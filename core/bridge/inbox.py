"""The local side of a down bridge: messages consumed from an upstream queue, published here
through the one publish path (Broker.publish), and acked upstream only once this broker
holds them as it promises (on disk, for a persistent message in a durable queue).

The bridge's decisions (core/bridge/down.py) hand each delivery to `receive` with its upstream
delivery tag, and ack upstream up to `ackable()` whenever the driver is woken (`wake`: after
a publish, and when the journal made more durable). A message that no queue here takes is
`refused` to upstream (basic.nack without requeue: upstream dead-letters it if it can), and
one that a full queue or the memory or disk alarm refuses is sent back (requeue) while the
port backs off; neither is acked and lost.

Sans-IO and MicroPython-clean.
"""

from ...codec.wire import shortstr
from ..broker import JOURNALLED, REFUSED, ROUTED
from ..message import Message

DROP = 1  # receive(): nack it, upstream dead-letters it (no queue here takes it)
REQUEUE = 2  # receive(): nack it back to upstream's queue and pause (refused here for now)


class Inbox:
    # What the journal's waiters have (core/broker.py journal_synced): an inbox is never closed.
    closed = False
    # As a publisher (Broker.publish): it can be told no, and it is never held back by waiting.
    confirming = True
    stats = None  # its counters: the broker's own (core/counters.py)

    def __init__(self, broker, exchange, routing_key, wake=None):
        self.broker = broker
        self.exchange = exchange  # bytes, or None: the message's own
        self.routing_key = routing_key  # bytes, or None: the message's own
        self.wake = wake
        self.pending = []  # [upstream delivery tag, journal seq it needs], in tag order
        self.received = 0

    def receive(self, tag, exchange, routing_key, header_tail, body_tail, body_size):
        """One delivery from upstream: published here. 0 once taken (acked when ackable), else
        DROP or REQUEUE."""
        broker = self.broker
        exchange = self.exchange if self.exchange is not None else exchange
        routing_key = self.routing_key if self.routing_key is not None else routing_key
        target = broker.exchange(exchange)
        if target is None:
            return DROP
        route = shortstr(exchange) + shortstr(routing_key)
        message = Message(exchange, routing_key, route, header_tail, body_tail, body_size)
        result = broker.publish(target, message, self)
        if not result & ROUTED:
            return DROP
        if result & REFUSED:
            return REQUEUE
        self.received += 1
        journal = broker.journal
        self.pending.append([tag, journal.seq if result & JOURNALLED and journal is not None else 0])
        if result & JOURNALLED:
            broker.wait_for_journal(self)
        elif self.wake is not None:
            self.wake()
        return 0

    def ackable(self):
        """The highest upstream delivery tag that may be acked (with multiple) now: every
        delivery up to it is held here as promised. 0 if none."""
        journal = self.broker.journal
        synced = journal.synced if journal is not None else 0
        pending = self.pending
        i = 0
        while i < len(pending) and pending[i][1] <= synced:
            i += 1
        if not i:
            return 0
        tag = pending[i - 1][0]
        del pending[:i]
        return tag

    def flush_confirms(self):
        """(Broker.journal_synced) More is durable: the port may ack more."""
        if self.pending and self.wake is not None:
            self.wake()

    def hold_for(self, queue):
        """(Broker.publish, for a publisher without confirms: never called, this one confirms.)"""

    def link_down(self):
        """The upstream link is gone: its unacked deliveries go back to upstream's queue by
        themselves; what they were here stays (sent again, it comes twice: at least once)."""
        self.pending = []
