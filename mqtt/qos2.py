"""A session's QoS 2 packet ids between PUBREC and PUBREL, kept on disk: the client may send its
PUBLISH again (with DUP) until it has our PUBREC, and its PUBREL after a reconnect or a restart
of the broker; a PUBLISH with an id held here was taken already, and is not taken again.

The ids are messages of a durable queue of the session's, `mqtt-qos2-<client id>`, each a
persistent message whose body is the id: a PUBREC waits until the journal has it (with the
message it answers), a PUBREL settles it (gone from the journal). While the client is
connected, the queue's messages are all delivered to this object and held unsettled; when it
goes, they go back to the queue, and the next connection of the session (after a restart too)
is given them again.
"""

from ..core.broker import ACCEPT, REQUEUE
from ..core.queue import Consumer
from ..core.session import MESSAGE
from . import own_queues

PREFIX = b"mqtt-qos2-"


class AwaitingRelease:
    """The session's held QoS 2 packet ids (core/session.py: the session of the queue's consumer)."""

    prefetch_global = 0
    consumer_unacked = 0
    stats = None  # (its bookkeeping counts as the broker's own: core/counters.py)
    number = 0  # (as hutch ctl lists its consumer: on its connection's one channel)

    @property
    def conn(self):
        return self.session.conn

    def __init__(self, session):
        self.session = session
        self.broker = session.broker
        self.name = PREFIX + session.client_id
        self.held = {}  # packet id -> (queue, entry) of its message, unsettled
        self.consumer = None

    def start(self):
        """The session begins: the ids it holds (from its last connection, or before a restart)."""
        queue = self.broker.queues.get(self.name)
        if queue is not None:
            self._consume(queue)

    def _consume(self, queue):
        self.consumer = Consumer(self, b"mqtt-qos2", queue, False, False, 0)
        self.broker.consume(None, queue, self.consumer, 0)
        queue.dispatch()

    def __contains__(self, packet_id):
        return packet_id in self.held

    def hold(self, packet_id):
        """A QoS 2 PUBLISH was taken: hold its id. Returns the journal sequence number its PUBREC
        waits for (0: none)."""
        expiry = self.session.expiry  # (kept as long as the session: its x-expires)
        queue = own_queues.queue(self.broker, self.name, {"x-expires": expiry * 1000} if expiry else None)
        if self.consumer is None:
            self._consume(queue)
        return own_queues.put(self.broker, self.name, {}, bytes(((packet_id >> 8) & 0xFF, packet_id & 0xFF)))

    def release(self, packet_id):
        """PUBREL: True if the id was held (now let go)."""
        found = self.held.pop(packet_id, None)
        if found is None:
            return False
        queue, entry = found
        self.consumer.unacked -= 1
        self.broker.settle(queue, [entry], ACCEPT, None)
        return True

    def end(self, forget):
        """The connection goes: the held ids go back to their queue (forget: the session ends,
        and the queue with them)."""
        broker = self.broker
        if self.consumer is not None:
            broker.cancel(self.consumer)
            self.consumer = None
        for found in self.held.values():
            broker.settle(found[0], [found[1]], ACCEPT if forget else REQUEUE, None)
        self.held = {}
        if forget:
            own_queues.drop(broker, (self.name,))

    # ------------------------------------------------------------ the queue's consumer's session

    def can_deliver(self):
        return True

    def deliver(self, consumer, queue, entry):
        message = entry[MESSAGE]
        body = bytes(message.body())
        consumer.unacked += 1
        if message.journal_id:
            self.broker.delivered(queue, entry, False)
        self.held[(body[0] << 8) | body[1]] = (queue, entry)

    def deliver_records(self, consumer, stream, cursor, room):
        return 0, None

    def server_cancel(self, consumer):
        self.consumer = None  # (its queue was deleted: the ids it held are forgotten)
        self.held = {}
