"""What the broker's own side is as a publisher and as a session (core/session.py's contracts)
unless it says otherwise: a bridge's inbox and outbox, the devices' readings and the commands
they take, an MQTT session's held messages. Each says only what it does differently.

Loaded by the first of them: an idle board holds none of it. Every no-op is one function (a
board's heap holds a function object per def: ~1 KiB for these bases written out, ~0.3 KiB so).
"""


def _nothing(self, *_):
    """(a call that needs nothing done: the contract's default)"""


def _yes(self):
    return True


class BrokerPublisher:
    """Publishes into the broker with no client behind it: told no (a full queue, blocked
    publishers) rather than held back, so hold_for and resume are never called; counted in the
    broker's own counters (a front end's sets stats); never closed while the journal syncs what
    it published (Broker.wait_for_journal), and nothing of it waits for that unless it says so
    (flush_confirms)."""

    client = None
    stats = None
    confirming = True
    closed = False
    hold_for = resume = flush_confirms = _nothing


class BrokerSession:
    """Where one consumer of the broker's own side is given messages: always ready (its
    Consumer's prefetch bounds it), with no bound across consumers, counted in the broker's own
    counters, reading no stream; its queue deleted, the consumer is simply gone unless it says
    what to do (server_cancel)."""

    stats = None
    prefetch_global = 0
    consumer_unacked = 0
    can_deliver = _yes
    server_cancel = _nothing

    def deliver_records(self, consumer, stream, cursor, room):
        return 0, None
