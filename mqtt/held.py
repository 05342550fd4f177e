"""A session's own durable queue whose messages it holds unsettled while its client is connected:
the base of mqtt/qos2.py's and mqtt/qos2_out.py's, loaded with the first of them."""

from ..core.broker import ACCEPT, REQUEUE
from ..core.queue import Consumer
from . import own_queues


class Held:
    """A session's own durable queue whose messages it holds unsettled while its client is
    connected (mqtt/qos2.py, mqtt/qos2_out.py): the session of the queue's consumer
    (core/session.py). When the connection goes they go back to the queue, and the session's
    next connection (after a restart too) is given them again. Each kind says what it holds
    (held, held_entries) and what a message of the queue is (deliver)."""

    prefetch_global = 0
    consumer_unacked = 0
    stats = None  # (its bookkeeping counts as the broker's own: core/counters.py)
    number = 0  # (as hutch ctl lists its consumer: on its connection's one channel)

    @property
    def conn(self):
        return self.session.conn

    def __init__(self, session, prefix, tag):
        self.session = session
        self.broker = session.broker
        self.name = prefix + session.client_id
        self.tag = tag
        self.held = {}
        self.consumer = None

    def start(self):
        """The session begins: what its last connection left (or a restart), given again."""
        queue = self.broker.queues.get(self.name)
        if queue is not None:
            self._consume(queue)

    def _consume(self, queue):
        self.consumer = Consumer(self, self.tag, queue, False, False, 0)
        self.broker.consume(None, queue, self.consumer, 0)
        queue.dispatch()

    def keep(self, properties, body):
        """A persistent message into the queue (declared, kept as long as the session: its
        x-expires), consumed from now on. Returns the journal sequence number it is on disk at."""
        expiry = self.session.expiry
        found = own_queues.queue(self.broker, self.name, {"x-expires": expiry * 1000} if expiry else None)
        if self.consumer is None:
            self._consume(found)
        return own_queues.put(self.broker, self.name, properties, body)

    def held_entries(self):
        """(queue, entry) of each message held (unsettled)."""
        return self.held.values()

    def end(self, forget):
        """The connection goes: what is held goes back to the queue (forget: the session ends,
        and the queue with it)."""
        broker = self.broker
        if self.consumer is not None:
            broker.cancel(self.consumer)
            self.consumer = None
        for queue, entry in self.held_entries():
            broker.settle(queue, [entry], ACCEPT if forget else REQUEUE, None)
        self.held = {}
        if forget:
            own_queues.drop(broker, (self.name,))

    def can_deliver(self):
        return True

    def deliver_records(self, consumer, stream, cursor, room):
        return 0, None

    def server_cancel(self, consumer):
        self.consumer = None  # (its queue was deleted: what it held is forgotten)
        self.held = {}
