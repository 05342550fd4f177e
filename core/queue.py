"""Queues and consumers.

A queue holds entries (message, redelivered, expires_at) in FIFO order and
hands them round-robin to consumers that have room: their session is open and
flowing, its connection is not backed up, and the prefetch windows allow.
A message leaves the broker's budget when it is acknowledged (or delivered
with no-ack), purged, expired or dropped; until then it is "held".

A durable queue keeps only a window of entries in memory once its backlog grows; the
rest waits in the journal as runs (core/store/paging.py), read back as the window empties.
Its messages in memory count against the broker's budgets, those on disk against the
journal's disk budget.
"""

from ..codec.wire import shortstr, text
from . import counters
from .arguments import as_bytes
from .fifo import Fifo
from .session import EXPIRES_AT, MESSAGE, REDELIVERED

_paging = []  # core/store/paging.py once a queue first pages (see paging_module())


def paging_module():
    """core/store/paging.py, imported the first time a queue needs it (an idle board does not hold it),
    then kept: an import statement run for every publish to a paging queue cost ~2 us."""
    if not _paging:
        from .store import paging as module

        _paging.append(module)
    return _paging[0]


def publish_order(entry):
    return entry[MESSAGE].order


def stop_waiting(publisher):
    """publisher is going (its channel or session ends): the queues it waited for (Queue.hold)
    forget it."""
    if publisher.held_by is not None:
        for queue in publisher.held_by:
            if publisher in queue.waiting:
                queue.waiting.remove(publisher)
        publisher.held_by = None


class Consumer:
    """A consumer of a queue, whatever front end serves it. Its session delivers and settles
    (a 0-9-1 channel; the bridge or an AMQP 1.0 link to come): session.deliver(consumer, queue,
    entry) hands it a message, session.can_deliver() says whether it may take one now, and
    session.prefetch_global and session.consumer_unacked bound what all its consumers hold
    together (0-9-1's basic.qos global; 0 for no bound)."""

    priority = 0  # its x-priority (Broker.consume sets another): a class default costs a consumer nothing
    cursor = None  # a stream consumer's place in the stream (core/streams/stream.py Cursor)

    def __init__(self, session, tag, queue, no_ack, exclusive, prefetch):
        self.session = session
        self.tag = tag
        self.queue = queue
        self.no_ack = no_ack
        self.exclusive = exclusive
        self.prefetch = prefetch
        self.unacked = 0

    def ready(self):
        session = self.session
        if not session.can_deliver():
            return False
        if self.no_ack:
            return True
        if self.prefetch and self.unacked >= self.prefetch:
            return False
        limit = session.prefetch_global
        return not limit or session.consumer_unacked < limit


class Queue:
    # What it has had since the broker started (core/counters.py): class-level zeros until counted.
    published = 0
    delivered = 0
    acknowledged = 0
    dropped = 0  # left undelivered: expired, over its length (x-overflow drop-head), rejected
    refused = 0  # publishes refused over its length (x-overflow reject-publish)
    is_queue = True
    is_stream = False  # a stream (core/streams/stream.py) stands where a queue stands; Broker.publish tells them apart
    # How it picks a consumer: round-robin over all (the class defaults), or, once set on the
    # queue, the first of its consumers (x-single-active-consumer) or by consumer priority
    # (a consumer with x-priority): see _next_in_order. `ordered` is either (one look-up per
    # delivery for the plain case).
    ordered = False
    single_active = False
    by_priority = False

    def __init__(self, broker, name, durable, owner, auto_delete, arguments):
        self.broker = broker
        self.name = name
        self.name_shortstr = shortstr(name)  # as the journal's message records name it
        self.durable = durable
        self.owner = owner  # the client (core/auth.py Login) of an exclusive queue, else None
        # Its persistent messages go to the journal: exclusive queues end with their
        # connection, so a restart (which ends every connection) never brings them back.
        self.journalled = durable and owner is None
        self.auto_delete = auto_delete
        self.arguments = arguments
        self.messages = Fifo()
        self.ready_bytes = 0
        self.consumers = []
        self.next_consumer = 0
        self.had_consumer = False
        self.exclusive_consumer = None
        self.inbound = []  # Bindings to this queue
        self.waiting = []  # publishers held back until this queue has room (publisher.hold_for)
        self.deleted = False
        limits = broker.limits
        self.message_ttl = arguments.get("x-message-ttl")
        self.expires = arguments.get("x-expires")
        self.max_length = arguments.get("x-max-length")
        self.max_length_bytes = arguments.get("x-max-length-bytes")
        self.overflow = as_bytes(arguments.get("x-overflow", b"drop-head"))
        dlx = arguments.get("x-dead-letter-exchange")
        self.dead_letter_exchange = None if dlx is None else as_bytes(dlx)
        dlk = arguments.get("x-dead-letter-routing-key")
        self.dead_letter_routing_key = None if dlk is None else as_bytes(dlk)
        self.hard_max_messages = limits.queue_max_messages
        self.hard_max_bytes = limits.queue_max_bytes
        self.last_used = broker.now
        # The backlog on disk (durable queues with a journal): runs oldest first, their totals
        self.runs = []
        self.paged = 0
        self.paged_bytes = 0
        self.window_messages = limits.queue_window_messages
        self.window_bytes = limits.queue_window_bytes
        self.delivered_before = None  # ids delivered before the last restart, still here (a set)
        if arguments.get("x-single-active-consumer"):
            self.single_active = self.ordered = True

    def __repr__(self):
        return "<Queue %s>" % text(self.name)

    # ------------------------------------------------------------ publishing

    def is_full(self):
        """True when the board's hard per-queue budget is used up."""
        return (self.hard_max_messages and self.messages.length >= self.hard_max_messages) or (
            self.hard_max_bytes and self.ready_bytes >= self.hard_max_bytes
        )

    def _over_user_limit(self, extra_bytes):
        if self.max_length is not None and self.messages.length + self.paged + 1 > self.max_length:
            return True
        return (
            self.max_length_bytes is not None
            and self.ready_bytes + self.paged_bytes + extra_bytes > self.max_length_bytes
        )

    def _over_limit(self):
        if self.max_length is not None and self.messages.length + self.paged > self.max_length:
            return True
        return self.max_length_bytes is not None and self.ready_bytes + self.paged_bytes > self.max_length_bytes

    def pages(self):
        """Does a new message go to disk only? (A journalled queue whose window is full, or
        that has a backlog on disk already: order is kept.)"""
        return self.journalled and (
            self.paged or self.messages.length >= self.window_messages or self.ready_bytes >= self.window_bytes
        )

    def accepts(self, message):
        """Would a publish be refused by x-overflow=reject-publish(-dlx)?"""
        return self.overflow == b"drop-head" or not self._over_user_limit(message.body_size)

    def publish(self, message, expires_at):
        """Enqueue (or hand straight to a ready consumer). The caller checked accepts()."""
        broker = self.broker
        self.published += 1
        if message.journal_id and self.pages():
            self._page_out(message)
            if self.overflow == b"drop-head":
                self._drop_head_over_limit()
            return
        broker.flow.hold(message)
        entry = (message, False, expires_at)
        if self.consumers and not self.messages.length and not self.paged:
            consumer = self._next_ready_consumer()
            if consumer is not None:
                self._hand(consumer, entry)
                return
        if self.overflow == b"drop-head":
            while (self.messages.length or self.paged) and self._over_user_limit(message.body_size):
                oldest = self._pop()
                if oldest is None:
                    break
                self.drop(oldest, b"maxlen")
            if self.max_length == 0 or (
                self.max_length_bytes is not None and message.body_size > self.max_length_bytes
            ):
                self.drop(entry, b"maxlen")
                return
        self.messages.push(entry)
        self.ready_bytes += message.body_size

    def _drop_head_over_limit(self):
        """drop-head: the oldest ready messages go (dead-lettered as maxlen) until the queue is
        within its x-max-length and x-max-length-bytes again."""
        while self._over_limit():
            entry = self._pop()
            if entry is None:
                break
            self.drop(entry, b"maxlen")

    # ------------------------------------------------------------ the backlog on disk

    def _page_out(self, message):
        paging_module().page_out(self, message)

    def page_in(self):
        """Refill the window from the runs on disk, oldest first."""
        paging_module().page_in(self)

    def forget(self, message):
        """A message this queue held leaves it for good (acked, delivered with no-ack, dropped,
        purged): out of the broker's budget, and out of the journal if it was there."""
        self.broker.flow.release(message)
        if message.journal_id and self.journalled:
            self.broker.journal.removed(self, message)

    def forget_all(self, entries):
        """Entries this queue delivered leave it for good together (acked): forget() for each,
        in one go (an ack of many costs the journal one pass, not one call per message)."""
        cost = 0
        for entry in entries:
            cost += entry[MESSAGE].cost
        broker = self.broker
        broker.flow.release_many(len(entries), cost)
        if self.journalled and broker.journal is not None:
            broker.journal.removed_all(self, entries)

    # ------------------------------------------------------------ delivering

    def _next_ready_consumer(self):
        if self.ordered:
            return self._next_in_order()
        consumers = self.consumers
        n = len(consumers)
        i = self.next_consumer
        for _ in range(n):
            if i >= n:
                i = 0
            consumer = consumers[i]
            i += 1
            if consumer.ready():
                self.next_consumer = i
                return consumer
        return None

    def _next_in_order(self):
        """A single active consumer queue's first consumer (the active one: _hand_over), if it
        is ready; else the first ready consumer of the highest priority, which then goes behind
        its equals (round-robin among them). The consumers are kept in that order
        (add_consumer)."""
        consumers = self.consumers
        if self.single_active:
            return consumers[0] if consumers[0].ready() else None
        n = len(consumers)
        for i in range(n):
            consumer = consumers[i]
            if consumer.ready():
                j = i + 1
                while j < n and consumers[j].priority == consumer.priority:
                    j += 1
                if j > i + 1:
                    consumers.insert(j - 1, consumers.pop(i))
                return consumer
        return None

    def _hand_over(self):
        """The active consumer of a single active consumer queue (its first) goes: the one of
        the highest priority among the rest, the first of them to come, goes first (RabbitMQ
        3.10 reads x-priority only here, not when the first consumer comes)."""
        consumers = self.consumers
        best = 1
        for i in range(2, len(consumers)):
            if consumers[i].priority > consumers[best].priority:
                best = i
        if best < len(consumers):
            consumers.insert(1, consumers.pop(best))

    def _pop(self):
        if not self.messages.length and self.paged:
            self.page_in()
            if not self.messages.length:
                return None  # the rest of the backlog was lost to a damaged segment (logged)
        entry = self.messages.pop()
        self.ready_bytes -= entry[MESSAGE].body_size
        if self.waiting and not self.is_full():
            self._wake_waiting()
        return entry

    def take(self):
        """The next live entry, dropping expired ones on the way (basic.get)."""
        now = self.broker.now
        while self.messages.length or self.paged:
            entry = self._pop()
            if entry is None:
                return None
            if entry[EXPIRES_AT] is not None and entry[EXPIRES_AT] <= now:
                self.drop(entry, b"expired")
                continue
            return entry
        return None

    def dispatch(self):
        if self.deleted:
            return
        while self.consumers and (self.messages.length or self.paged):
            consumer = self._next_ready_consumer()
            if consumer is None:
                return
            entry = self.take()
            if entry is None:
                return
            self._hand(consumer, entry)

    def _hand(self, consumer, entry):
        """One delivery to consumer's session, counted (core/counters.py)."""
        stats = consumer.session.stats or self.broker.stats  # (the consumer's front end's: core/counters.py)
        if consumer.no_ack:
            stats[counters.DELIVERED_CONSUME_AUTO_ACK] += 1
        else:
            stats[counters.DELIVERED_CONSUME_MANUAL_ACK] += 1
        if entry[REDELIVERED]:
            stats[counters.REDELIVERIES] += 1
        self.delivered += 1
        consumer.session.deliver(consumer, self, entry)

    def requeue(self, entries):
        """Put unacknowledged entries back where they were, marked redelivered: each before the
        messages published after it (RabbitMQ's order, whatever order they come back in)."""
        if self.deleted:
            for message, _redelivered, _expires_at in entries:
                self.forget(message)
            return
        back = []
        for message, _redelivered, expires_at in entries:
            back.append((message, True, expires_at))
            self.ready_bytes += message.body_size
        self.messages.put_back(back, publish_order)
        if self.overflow == b"drop-head":
            self._drop_head_over_limit()  # requeued, they count again: RabbitMQ drops from the head
        self.dispatch()

    def drop(self, entry, reason):
        """A message leaves the queue without being delivered: dead-letter it if configured."""
        message = entry[MESSAGE]
        self.dropped += 1
        if self.dead_letter_exchange is not None:
            # loaded with the first dead letter: a board that never dead-letters does not hold it
            from .deadletter import dead_letter

            dead_letter(self.broker, self, message, reason)
        self.forget(message)

    def expire(self, now):
        """Drop expired entries at the head (as RabbitMQ does: only the head is checked)."""
        while self.messages.length or self.paged:
            if not self.messages.length:
                self.page_in()
                if not self.messages.length:
                    return
            expires_at = self.messages.peek()[2]  # (message, redelivered, expires_at)
            if expires_at is None or expires_at > now:
                return
            self.drop(self._pop(), b"expired")

    def purge(self):
        entries = self.messages.clear()
        self.ready_bytes = 0
        for message, _redelivered, _expires_at in entries:
            self.forget(message)
        count = len(entries) + self.paged
        if self.runs:
            for run in list(self.runs):
                paging_module().drop_run(self, run)
        self._wake_waiting()
        return count

    def hold(self, publisher):
        """publisher (a front end's, in its hold_for) waits until this queue has room: its
        resume() is called then. Its held_by lists the queues it waits for (stop_waiting)."""
        if publisher not in self.waiting:
            self.waiting.append(publisher)
            if publisher.held_by is None:
                publisher.held_by = []
            publisher.held_by.append(self)

    def _wake_waiting(self):
        if self.waiting:
            waiting = self.waiting
            self.waiting = []
            for publisher in waiting:
                publisher.resume()

    # ------------------------------------------------------------ consumers

    def add_consumer(self, consumer):
        """(Broker.consume.) Deliveries start at the next dispatch()."""
        consumers = self.consumers
        if consumer.priority and not self.single_active:
            self.by_priority = self.ordered = True
        if self.by_priority:  # behind those of its priority and higher
            i = len(consumers)
            while i and consumers[i - 1].priority < consumer.priority:
                i -= 1
            consumers.insert(i, consumer)
        else:
            consumers.append(consumer)
        self.had_consumer = True
        if consumer.exclusive:
            self.exclusive_consumer = consumer

    def remove_consumer(self, consumer):
        """(Broker.cancel, which also deletes an auto-delete queue left without consumers.)"""
        consumers = self.consumers
        if consumer in consumers:
            if self.single_active and consumers[0] is consumer:
                self._hand_over()
            consumers.remove(consumer)
        if self.exclusive_consumer is consumer:
            self.exclusive_consumer = None
        self.last_used = self.broker.now

    def message_count(self):
        return self.messages.length + self.paged
