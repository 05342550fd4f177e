"""The broker: the single virtual host "/", its connections, exchanges and queues, and the
one way messages go in and out of queues, whatever front end carries them.

    result = broker.publish(exchange, message, publisher)   # route, journal, enqueue: ROUTED|REFUSED|JOURNALLED|HELD
    broker.consume(who, queue, consumer, method) ... broker.cancel(consumer)
    entry = broker.get(who, queue, no_ack, method)
    broker.delivered(queue, entry, settled)                 # a queue's entry went to a consumer
    broker.settle(queue, entries, ACCEPT or REQUEUE or REJECT, stats)   # stats: the settler's counters

A 0-9-1 channel (amqp091/channel.py), an AMQP 1.0 link (amqp10/links.py), an MQTT session
(mqtt/session.py, mqtt/publishing.py), the bridges' local sides (core/bridge/) and
dead-lettering (core/deadletter.py) all call these; routing, the journal, budgets and flow
control live behind them once. Declaring and deleting exchanges, queues and bindings is
core/topology.py's; budgets and alarms are core/flow.py's. A stream (core/streams/stream.py)
stands where a queue stands; a message routed to one becomes a record of its log.
"""

from ..codec import spec
from ..codec.errors import ACCESS_REFUSED, PRECONDITION_FAILED, Refused
from ..codec.wire import text
from . import counters
from .access import WRITE
from .auth import Users
from .exchange import ROUTERS, Exchange
from .flow import Flow
from .limits import Limits
from .message import FLAG_EXPIRATION, FLAG_HEADERS, FLAG_REPLY_TO, FLAG_USER_ID
from .session import MESSAGE, REDELIVERED
from .topology import check_exclusive, delete_queue, exchange_for_publish, permit, permit_topic

TYPE_CHECKING = False
if TYPE_CHECKING:  # read by type checkers only: MicroPython has no typing module
    from .dedup import Dedup
    from .store.journal import Journal

VERSION = "0.1.0"

PREDECLARED = (
    (b"", b"direct"),
    (b"amq.direct", b"direct"),
    (b"amq.fanout", b"fanout"),
    (b"amq.topic", b"topic"),
    (b"amq.match", b"headers"),  # the 0-9-1 PDF's name
    (b"amq.headers", b"headers"),  # the 0-9-1 XML's name; RabbitMQ declares both
)

BRIDGE_SEQ = b"\x0bx-hutch-seq"  # (shortstr) the header a bridge numbers its messages with (core/dedup.py)
CC = b"\x02CC"
BCC = b"\x03BCC"

# What Broker.publish says of a message (bits).
ROUTED = 1  # it matched at least one queue (a mandatory message that matched none comes back)
REFUSED = 2  # some queue refused it (x-overflow reject-publish, a full queue, publishers blocked)
JOURNALLED = 4  # it went into the journal: confirm it once the journal has synced up to journal.seq
HELD = 8  # not taken: a full queue holds its publisher back, which publishes it again once it has room

# How a delivered message is settled (Broker.settle), as AMQP 1.0 names the outcomes.
ACCEPT = 0  # done with: it leaves the queue and the journal (basic.ack, a no-ack delivery)
REQUEUE = 1  # back to its queue, marked redelivered (basic.nack/reject with requeue, a closed channel)
REJECT = 2  # dropped, dead-lettered if the queue says so (basic.nack/reject without requeue)


def _no_log(level, message, exc=None):
    pass


def add_to_group(groups, queue, entry):
    """entry added to its queue's group in groups ([queue, entries], in the order the queues
    first appear): for Broker.settle_groups."""
    for group in groups:
        if group[0] is queue:
            group[1].append(entry)
            return
    groups.append([queue, [entry]])


class Broker:
    # Set by the storage port after replay (an annotation alone: it costs nothing at run time).
    journal: "Journal | None"
    dedup: "Dedup | None"
    sensors: "Dedup | None"
    # Streams (core/streams/stream.py): the storage port's opener of their files, open_stream(name,
    # arguments) (None: no data folder, so no streams); the live ones, those waiting for the
    # journal to sync, and the bytes they hold on disk (the journal's disk budget counts them).
    # Class-level until the first stream makes them its broker's own: a board without
    # streams pays nothing for them.
    open_stream = None
    streams = ()
    stream_syncs = ()
    stream_bytes = 0
    # What clients may cost before their login (core/connections.py): made with the first connection.
    guard = None
    # core/dedup.Dedup of sensors' readings, made with the first numbered one (a class default:
    # a board that takes none pays nothing for it)
    sensors = None

    def guarded(self):
        """The broker's core/connections.py Guard (made with the first client)."""
        if self.guard is None:
            from .connections import Guard

            self.guard = Guard(self)
        return self.guard

    # The bridges' decisions (core/bridge/machine.py), which register here: core/snapshot.py
    # reads their status. A list of its own with the first.
    bridges = ()
    # The journal id each start numbered from (server/bridges/driver.py run_starts): set by the first up
    # bridge; what its outbox names the start a persistent message was numbered in by.
    bridge_runs = None
    # The config's [uplink] (core/bridge/uplink.py): a byte budget all up bridges share, and the
    # windows they connect in; None without one.
    uplink = None
    # This gateway's name ([server] name, set at start and by a reload): what its bridges stamp
    # on what they forward (x-hutch-gateway) and its devices on their readings.
    name = "hutch"
    started = 0  # (ms, its clock) its first tick
    # The wall clock's jumps while it runs (core/clock_jump.py), and for the messages paged out
    # then, [(the journal id the jump came before, ms)]: their stamps move when paged in.
    clock_jumps = 0
    stamp_moves = ()

    def __init__(self, limits=None, users=None, log=None, platform="", entropy=b"hutch"):
        self.limits = limits or Limits()
        self.users = users or Users()
        self.log = log or _no_log
        self.platform = platform
        self.now = 0  # milliseconds, from the port's monotonic clock
        self.wall_seconds = 0  # for x-death timestamps, from the port's wall clock
        # wall clock ms - now, to the second (the port's wall clock has seconds): now + wall_offset
        # moves with the monotonic clock between ticks. When a message arrived, in the journal:
        # a paged message's TTL counts from it, across a restart too.
        self.wall_offset = 0
        self.default_exchange = Exchange(b"", b"direct")
        self.exchanges = {b"": self.default_exchange}  # amq.* ones appear on first use: see exchange()
        self.queues = {}
        self.connections = []
        self.open_connections = 0
        self.consumer_count = 0
        self.binding_count = 0
        self.flow = Flow(self)  # budgets and alarms: whether publishers may go on (core/flow.py)
        # what it has done since it started, by core/counters.py's constants: 0-9-1's and its own
        # (another front end's: stats_by, counters.of)
        self.stats = [0] * counters.COUNT
        self.expiring = []  # queues that may hold entries with a TTL
        self.expirable = []  # queues with x-expires: deleted after that long unused
        self.journal = None  # core/journal.Journal, attached by the storage port after replay
        self.dedup = None  # core/dedup.Dedup, made with the first message from a bridge
        self.journal_waiters = []  # connections with confirms or commits waiting for the journal
        # What each front end keeps once per broker, by its name (amqp091/connection.py Serving): the
        # broker holds it without knowing what is in it.
        self.front_ends = {}
        self._serial = 0
        self.published = 0  # messages numbered (Message.order)
        self._name_stem = "".join("%02x" % b for b in entropy[:6])

    # ------------------------------------------------------------ connections and time

    def connection_gone(self, conn):
        """The connection gave back its channels (and each publisher of it left the queues it
        waited for); its client's exclusive queues and its place go too."""
        if conn.counted:
            conn.counted = False
            self.open_connections -= 1
            (conn.stats or self.stats)[counters.CONNECTIONS_CLOSED] += 1
        self.flow.let_go(conn)
        client = conn.client
        if client is not None:
            for queue in list(self.queues.values()):
                if queue.owner is client:
                    delete_queue(self, queue)  # exclusive queues end with their connection

    stats_by = None  # a front end's label -> its counters (core/counters.py of), but 0-9-1's

    # Each exchange type's router class, for the exchanges it makes (a class default: the plain
    # ones of core/exchange.py; a broker on CPython is handed core/route_cache.py's, whose topic
    # router remembers each routing key's queues: server/startup.py).
    routers = ROUTERS

    # What else wants the clock besides connections, as a tuple (a front end's timers: MQTT's
    # delayed wills); each has tick(now). (A class default: most brokers have none.)
    tickers = ()

    def forget(self, conn):
        """The connection is closed for good: no more ticks."""
        if conn in self.connections:
            self.connections.remove(conn)

    ticked = False  # (a class default: set by the first tick)

    def tick(self, now, wall_seconds=0):
        if not self.ticked:  # the first: what was declared before it (the journal's replay) was used now
            self.ticked = True
            self.started = now  # (the broker's clock at its start: what "down since the start" counts from)
            for queue in self.expirable:
                queue.last_used = now
        self.now = now
        self.wall_seconds = wall_seconds
        if wall_seconds:
            offset = wall_seconds * 1000 - now
            if offset - self.wall_offset > 2000 or self.wall_offset - offset > 2000:
                if self.wall_offset:  # not the first tick: the wall clock was set
                    from .clock_jump import clock_moved

                    clock_moved(self, offset - self.wall_offset)
                self.wall_offset = offset
        for conn in list(self.connections):
            try:
                conn.tick(now)
            except MemoryError:  # (a heartbeat, a close: what ran out ends this connection, not the ticks)
                conn.out_of_memory()
        for ticker in self.tickers:
            ticker.tick(now)
        if self.expiring:
            for queue in list(self.expiring):
                queue.expire(now)
                queue.dispatch()
                if not (queue.messages.length or queue.paged) or queue.deleted:
                    self.expiring.remove(queue)
        if self.journal is not None:
            if self.journal.tick(self.now):
                from .store.compaction import compact  # only when a segment may need it: boards keep heap

                compact(self)
        for stream in self.streams:
            stream.tick()
        for queue in list(self.expirable):
            if not queue.consumers and now - queue.last_used >= queue.expires:
                self.log("info", "queue '%s' expired after %d ms unused" % (text(queue.name), queue.expires))
                delete_queue(self, queue)

    def shutdown(self):
        for conn in list(self.connections):
            conn.close()

    def new_name(self, prefix):
        self._serial += 1
        return prefix + ("%s-%d" % (self._name_stem, self._serial)).encode()

    # ------------------------------------------------------------ the journal

    def wait_for_journal(self, conn):
        if conn not in self.journal_waiters:
            self.journal_waiters.append(conn)

    def journal_synced(self, seq):
        """The storage port made every journal record up to seq durable: streams may deliver
        the records that came with it, and the confirms and tx.commit-oks that waited for
        them can go out (in that order: a client confirmed finds its record counted)."""
        self.stats[counters.JOURNAL_SYNCS] += 1
        journal = self.journal
        if journal is not None:
            journal.mark_synced(seq)
        if self.stream_syncs:
            streams = self.stream_syncs
            self.stream_syncs = []
            for stream in streams:
                if stream.synced(seq):
                    self.stream_syncs.append(stream)
        waiters = self.journal_waiters
        self.journal_waiters = []
        for conn in waiters:
            if not conn.closed:
                conn.flush_confirms()

    # ------------------------------------------------------------ exchanges

    def exchange(self, name):
        """The exchange called name, or None. The predeclared amq.* exchanges always exist;
        each is built the first time it is named (an unused one costs a board ~700 bytes)."""
        exchange = self.exchanges.get(name)
        if exchange is None:
            for predeclared, kind in PREDECLARED:
                if name == predeclared:
                    exchange = self.exchanges[name] = Exchange(name, kind, routers=self.routers)
        return exchange

    # ------------------------------------------------------------ the one publish path

    def admit(self, publisher, exchange_name, message):
        """The gates a client's publish passes before it is routed, in RabbitMQ's order: the
        publisher may write to the exchange (403, core/access.py), which exists and is not
        internal (404, 403), and, on a topic exchange, its topic permission allows the routing
        key (403); a reply-to of amq.rabbitmq.reply-to is
        the publisher's direct reply-to (publisher.direct_reply_to makes the message that
        goes, or refuses it); user-id is the user the publisher logged in as (406); expiration
        is a whole number of milliseconds (406: the message's TTL); the keys of CC and BCC
        headers route too. Returns (exchange, message to publish); raises Refused.
        Every front end's publish goes admit() then publish() (or core/runs.py publish_run),
        and no gate is anywhere else."""
        who = publisher.client
        checked = who is not None and who.permissions is not None  # (every permission: nothing to check)
        if checked:
            permit(who, WRITE, "exchange", exchange_name, spec.BASIC_PUBLISH)  # (403 before 404)
        exchange = exchange_for_publish(self, exchange_name)
        if checked:
            permit_topic(who, WRITE, exchange, message.routing_key, spec.BASIC_PUBLISH)
        flags = message.flags()
        if flags & FLAG_REPLY_TO and message.properties().get("reply-to") == b"amq.rabbitmq.reply-to":
            message = publisher.direct_reply_to(message)
        if flags & FLAG_USER_ID:
            user_id = message.properties().get("user-id")
            if user_id != publisher.client.user:
                raise Refused(
                    PRECONDITION_FAILED,
                    "user_id property set to '%s' but authenticated user was '%s'"
                    % (text(user_id), text(publisher.client.user)),
                    spec.BASIC_PUBLISH,
                )
        if flags & FLAG_EXPIRATION:
            expiration = message.properties().get("expiration")
            if not expiration or not expiration.isdigit():
                raise Refused(
                    PRECONDITION_FAILED,
                    "invalid expiration '%s': no_integer" % text(expiration),
                    spec.BASIC_PUBLISH,
                )
            message.ttl = int(expiration)
        if flags & FLAG_HEADERS and (message.has_header(CC) or message.has_header(BCC)):
            from .headers import sender_selected  # loaded with the first such message

            sender_selected(message)
        return exchange, message

    def exchange_for_publish(self, name):
        """The exchange a publish names: it must exist and not be internal (admit(), and a
        transaction's publishes again at its commit: the exchange may be gone by then)."""
        return exchange_for_publish(self, name)

    # ------------------------------------------------------------ routing

    def publish(self, exchange, message, publisher=None, exclude=None, identity=None):
        """Route message from exchange, journal it (persistent, to a durable queue) and enqueue
        it: the one way into queues. Returns ROUTED, REFUSED and JOURNALLED bits.

        publisher is who publishes, for flow control: publisher.confirming is true when it can
        be told no (then it is refused, rather than held back, by a full queue or while
        publishers are blocked), and publisher.hold_for(queue) stops reading it until queue
        has room; it returns true when the publisher keeps this message back and publishes it
        again then (HELD: nothing of it is taken), false when it cannot (a transaction's commit,
        a will) and the message is taken. None is the broker itself (dead-lettering): never held back; a queue that
        refuses it drops it, or dead-letters it again if it is x-overflow reject-publish-dlx
        (as RabbitMQ does: its cycle check keeps that finite). exclude: names of queues the
        message must not go to (dead-lettering's cycle check). identity: a sensor's reading's
        headers x-sensor-id and x-sensor-seq, where its publisher read them already
        (mqtt/identity.py): the dedup takes them from there (core/dedup.py Dedup.numbered)."""
        queues = self.route(exchange, message)
        if publisher is not None and not publisher.confirming:
            # Held back before anything of the message is taken: taken, one message over the
            # budget per publisher grew a full queue without end under clients that publish and go
            held = False
            for queue in queues:
                if not queue.is_stream and queue.is_full() and publisher.hold_for(queue):
                    held = True
            if held:
                return HELD
        if publisher is not None:  # a client's (the broker's own publishes count where they are made)
            stats = publisher.stats or self.stats  # (its front end's counters: core/counters.py)
            stats[counters.RECEIVED] += 1
            if publisher.confirming:
                stats[counters.RECEIVED_CONFIRM] += 1
            if not queues:
                stats[counters.UNROUTABLE] += 1
                return 0
            stats[counters.ROUTED] += 1
        elif not queues:
            return 0
        numbered = dedup = None  # a bridge's message or a sensor's reading (core/dedup.py Dedup.numbered)
        # (what the broker publishes itself, a dead letter, came in once already)
        if publisher is not None:
            bridged = message.has_header(BRIDGE_SEQ)
            # (x-sensor-seq as a literal, core/dedup.py's SENSOR_SEQ_KEY: a module constant here
            # costs a board's idle heap 96 B, and dedup.py is loaded with the first reading only)
            if bridged or (message.has_header(b"\x0cx-sensor-seq") and self.limits.max_sensors):
                dedup = self.dedup if bridged else self.sensors
                if dedup is None:
                    from .dedup import dedup_of  # (loaded with the first numbered message)

                    dedup = dedup_of(self, not bridged)
                numbered = dedup.numbered(message, None if bridged else identity)
            if numbered is True:  # a repeat: confirmed once what was taken before it is on disk
                return ROUTED | JOURNALLED if self.journal is not None else ROUTED
        message.arrived = self.now + self.wall_offset  # wall clock ms (tick): its age, and TTL after a restart
        self.published += 1
        message.order = self.published  # where a requeue puts it back (Message.order)
        if publisher is not None and publisher.confirming and self.flow.blocked:
            # Out of memory or disk, a publisher with confirms is told no (basic.nack) and still
            # read: its connection may carry acks too, and they are what frees memory.
            return ROUTED | REFUSED
        result = ROUTED
        targets = []
        for queue in queues:
            if exclude and queue.name in exclude:
                continue
            if queue.is_stream:
                queue.append(message)  # a record of its log, in the journal's next group commit
                result |= JOURNALLED
                continue
            if not queue.accepts(message):
                result |= REFUSED  # x-overflow reject-publish(-dlx)
                queue.refused += 1
                if queue.overflow == b"reject-publish-dlx" and queue.dead_letter_exchange is not None:
                    from .deadletter import dead_letter  # (loaded with the first dead letter)

                    dead_letter(self, queue, message, b"maxlen")
                continue
            if publisher is not None and publisher.confirming and queue.is_full():
                result |= REFUSED  # the board's budget for this queue is spent: nack, never drop silently
                continue
            targets.append(queue)  # (a publisher without confirms was held back above)
        result |= self.store(message, targets)
        if numbered is not None and (targets or result & JOURNALLED):
            dedup.took(self, numbered, result & JOURNALLED)
        return result

    def store(self, message, targets):
        """Journal message (persistent, to a durable queue; or to one that pages) and enqueue it
        into targets, the queues that take it: publish()'s last step, and each message's of a
        run that the journal acts on (core/runs.py). JOURNALLED if the journal took it, else 0."""
        result = 0
        journal = self.journal
        if journal is not None:
            journalled = paging = False
            for queue in targets:
                if queue.journalled:
                    journalled = True
                    if queue.pages():
                        paging = True
            # into the journal before any queue has it: a consumer may take (and ack) it at once
            if journalled and journal.add_message(message, targets, paging):
                result = JOURNALLED
        for queue in targets:
            queue.publish(message, self.expiry(queue, message))
        return result

    def consume(self, who, queue, consumer, method, arguments=None):
        """Add consumer to queue for who (core/auth.py Login; None: the broker itself), or
        refuse it (another client's exclusive queue: 405; exclusive use: 403; the consumer limit: 406;
        method: the request to name in the error, as the front end numbers its requests (0:
        none: the broker's own side, MQTT); arguments: the consumer's, which a stream
        reads its x-stream-offset from). Deliveries start at queue.dispatch(), which the
        front end calls once it has told its client the consumer is on."""
        check_exclusive(queue, who, method)
        if queue.is_stream:
            queue.check_consumer(consumer, arguments, method)  # RabbitMQ's refusals; where it starts
        elif arguments and "x-priority" in arguments:
            priority = arguments["x-priority"]
            if not isinstance(priority, int) or isinstance(priority, bool):
                from .refusals import invalid_arg, not_an_integer  # (loaded with the first refusal)

                raise invalid_arg("x-priority", queue.name, not_an_integer(priority), method)
            if priority:
                consumer.priority = priority
        if queue.exclusive_consumer is not None or (
            consumer.exclusive and (queue.consumers or queue.single_active)  # (RabbitMQ refuses both)
        ):
            raise Refused(
                ACCESS_REFUSED,
                "queue '%s' in vhost '/' in exclusive use" % text(queue.name),
                method,
            )
        if self.consumer_count >= self.limits.max_consumers:
            raise Refused(
                PRECONDITION_FAILED,
                "consumer limit (%d) is reached" % self.limits.max_consumers,
                method,
            )
        self.consumer_count += 1
        queue.add_consumer(consumer)

    def get(self, who, queue, no_ack, method):
        """The next message of queue for who, taken (basic.get): its entry, or None when the
        queue is empty. no_ack: it is settled as it is taken; else it waits for settle()."""
        check_exclusive(queue, who, method)
        queue.last_used = self.now
        entry = queue.take()
        stats = self.stats
        if entry is None:
            stats[counters.GET_EMPTY] += 1
            return None
        if no_ack:
            stats[counters.DELIVERED_GET_AUTO_ACK] += 1
        else:
            stats[counters.DELIVERED_GET_MANUAL_ACK] += 1
        if entry[REDELIVERED]:
            stats[counters.REDELIVERIES] += 1
        queue.delivered += 1
        self.delivered(queue, entry, no_ack)
        return entry

    def cancel(self, consumer, serve_next=True):
        """Stop a consumer (its messages still unsettled stay with its session); an auto-delete
        queue goes with its last consumer. On a single active consumer queue the next consumer
        takes over and is served at once, as in RabbitMQ 4 (3.10 serves no one, and its queue
        process crashes at the next publish); serve_next=False leaves that to the caller, which first
        requeues the messages the consumer held (a channel closing: Channel.cleanup)."""
        self.consumer_count -= 1
        queue = consumer.queue
        queue.remove_consumer(consumer)
        if queue.auto_delete and queue.had_consumer and not queue.consumers and not queue.deleted:
            delete_queue(self, queue)
        elif serve_next and getattr(queue, "single_active", False):  # (a stream has no such mode)
            queue.dispatch()

    def delivered(self, queue, entry, settled):
        """entry of queue was handed to a consumer: settled (no ack to wait for) means it is gone
        (out of the budget and the journal); else the journal learns it was delivered, so a
        restart brings it back redelivered."""
        message = entry[MESSAGE]
        if settled:
            queue.forget(message)
        elif message.journal_id and not entry[REDELIVERED] and queue.journalled:
            self.journal.delivered(queue, message)

    def settle(self, queue, entries, outcome, stats):
        """Delivered entries of queue, settled: ACCEPT, REQUEUE (back at their places in the
        queue, redelivered) or REJECT; counted in stats, its settler's counters (None: the
        broker's, core/counters.py)."""
        stats = stats or self.stats
        if outcome == ACCEPT:
            stats[counters.ACKNOWLEDGED] += len(entries)
            queue.acknowledged += len(entries)
            queue.forget_all(entries)
        elif outcome == REQUEUE:
            stats[counters.REQUEUED] += len(entries)
            queue.requeue(entries)
        else:
            stats[counters.REJECTED] += len(entries)
            for entry in entries:
                queue.drop(entry, b"rejected")

    def settle_groups(self, groups, outcome, stats):
        """settle() each queue's entries of groups ([queue, entries], grouped by add_to_group),
        in the order the queues first appeared: what a front end does with a settlement that
        names many deliveries (a 0-9-1 ack with multiple, a 1.0 disposition's range)."""
        for queue, entries in groups:
            self.settle(queue, entries, outcome, stats)

    def route(self, exchange, message):
        """The queues a message goes to, each once: by its routing key and by each key of its CC
        and BCC headers (message.cc), all on the same exchange, then its alternate exchange's
        if none matched (RabbitMQ routes all the keys at once)."""
        cc = message.cc
        if exchange is self.default_exchange:
            queue = self.queues.get(message.routing_key)
            if cc is None:
                return [queue] if queue is not None else []
            out = [queue] if queue is not None else []
            for key in cc:
                queue = self.queues.get(key)
                if queue is not None and queue not in out:
                    out.append(queue)
            return out
        out = []
        exchange.route(message, out)
        if cc is not None:
            for key in cc:
                exchange.route(message.with_key(key), out)
        if not out:
            alternate = exchange.alternate
            if alternate is not None:
                target = self.exchange(alternate)
                if target is not None and target is not exchange:
                    target.route(message, out)
                    if cc is not None:
                        for key in cc:
                            target.route(message.with_key(key), out)
        if len(out) > 1:
            out = list(dict.fromkeys(out))
        return out

    def expiry(self, queue, message):
        """When an entry of message in queue expires (ms clock), or None."""
        ttl = queue.message_ttl
        if message.ttl is not None and (ttl is None or message.ttl < ttl):
            ttl = message.ttl
        if ttl is None:
            return None
        if queue not in self.expiring:
            self.expiring.append(queue)
        return self.now + ttl
