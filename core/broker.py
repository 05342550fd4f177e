"""The broker: the single virtual host "/", its exchanges, queues and budgets.

Channels call the entity operations here (declare, bind, delete, route); they
raise ChannelException with RabbitMQ's reply codes and texts, so a client sees
the same errors it would from RabbitMQ.
"""

from . import spec
from .auth import Users
from .connection import Connection
from .errors import ChannelException
from .exchange import ROUTERS, Exchange, freeze
from .limits import Limits
from .message import Message
from .queue import Queue, check_queue_arguments
from .spec import ACCESS_REFUSED, NOT_FOUND, PRECONDITION_FAILED, RESOURCE_LOCKED
from .wire import Timestamp, encode_properties, shortstr, tail, text

VERSION = "0.1.0"

PREDECLARED = (
    (b"", b"direct"),
    (b"amq.direct", b"direct"),
    (b"amq.fanout", b"fanout"),
    (b"amq.topic", b"topic"),
    (b"amq.match", b"headers"),  # the 0-9-1 PDF's name
    (b"amq.headers", b"headers"),  # the 0-9-1 XML's name; RabbitMQ declares both
)

CAPABILITIES = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
}

# Arguments compared on redeclare, as RabbitMQ does; others are kept but not compared.
EQUIVALENT_QUEUE_ARGUMENTS = (
    "x-expires",
    "x-message-ttl",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-max-length",
    "x-max-length-bytes",
    "x-overflow",
    "x-queue-type",
    "x-queue-mode",
)
EQUIVALENT_EXCHANGE_ARGUMENTS = ("alternate-exchange",)


def _no_log(level, message, exc=None):
    pass


def _flag(value):
    return "true" if value else "false"


class Broker:
    def __init__(self, limits=None, users=None, log=None, platform="", entropy=b"hutch", frame_reader=None):
        self.limits = limits or Limits()
        self.users = users or Users()
        self.log = log or _no_log
        self.platform = platform
        self.now = 0  # milliseconds, from the port's monotonic clock
        self.wall_seconds = 0  # for x-death timestamps, from the port's wall clock
        self.default_exchange = Exchange(b"", b"direct")
        self.exchanges = {b"": self.default_exchange}  # amq.* ones appear on first use: see exchange()
        self.queues = {}
        self.connections = []
        self.open_connections = 0
        self.consumer_count = 0
        self.binding_count = 0
        self.held_messages = 0
        self.held_bytes = 0
        self.blocked = False  # publishers are held back, for one of these reasons:
        self.over_budget = False  # - queued messages passed total_max_messages/bytes
        self.alarm = None  # - the port says memory is short (set_alarm)
        self.disk_alarm = None  # - the journal is near its disk budget (check_disk)
        self.disk_failure = None  # - the journal cannot write (set_disk_failure)
        self.refuse_connections = None  # a reason to refuse connection.open, set by the port
        self.block_reason = ""
        self.paused = []  # connections held back from reading
        self.expiring = []  # queues that may hold entries with a TTL
        self.expirable = []  # queues with x-expires: deleted after that long unused
        self.journal = None  # core/durable.Journal, attached by the storage port after replay
        self.journal_waiters = []  # connections with confirms or commits waiting for the journal
        # How connections find frames: frame_reader() gives each new one its reader (core/batch.py
        # with the C scanner); None: connection.read_frames, frame by frame.
        self.frame_reader = frame_reader
        self._serial = 0
        self._name_stem = "".join("%02x" % b for b in entropy[:6])
        self._properties = None

    # ------------------------------------------------------------ connections and time

    def connect(self, peer):
        conn = Connection(self, peer, self.frame_reader()) if self.frame_reader else Connection(self, peer)
        self.connections.append(conn)
        return conn

    def connection_gone(self, conn):
        """The connection gave back its channels; its exclusive queues and its place go too."""
        if conn.counted:
            conn.counted = False
            self.open_connections -= 1
        if conn in self.paused:
            self.paused.remove(conn)
        for queue in list(self.queues.values()):
            if queue.owner is conn:
                self.delete_queue(queue)  # exclusive queues end with their connection
            elif conn in queue.waiting:
                queue.waiting.remove(conn)

    def forget(self, conn):
        """The connection is closed for good: no more ticks."""
        if conn in self.connections:
            self.connections.remove(conn)

    def tick(self, now, wall_seconds=0):
        self.now = now
        self.wall_seconds = wall_seconds
        for conn in list(self.connections):
            conn.tick(now)
        if self.expiring:
            for queue in list(self.expiring):
                queue.expire(now)
                queue.dispatch()
                if not queue.messages.length or queue.deleted:
                    self.expiring.remove(queue)
        if self.journal is not None:
            self.journal.tick()
        for queue in list(self.expirable):
            if not queue.consumers and now - queue.last_used >= queue.expires:
                self.log("info", "queue '%s' expired after %d ms unused" % (text(queue.name), queue.expires))
                self.delete_queue(queue)

    def shutdown(self):
        for conn in list(self.connections):
            conn.close()

    def server_properties(self):
        if self._properties is None:
            self._properties = {
                "product": "hutch",
                "version": VERSION,
                "platform": self.platform,
                "information": "AMQP 0-9-1 broker for edge and IoT hardware",
                "copyright": "the hutch developers",
                "capabilities": CAPABILITIES,
            }
        return self._properties

    def new_name(self, prefix):
        self._serial += 1
        return prefix + ("%s-%d" % (self._name_stem, self._serial)).encode()

    # ------------------------------------------------------------ budgets

    def hold(self, message):
        self.held_messages += 1
        self.held_bytes += message.cost
        if not self.over_budget:
            limits = self.limits
            if self.held_bytes > limits.total_max_bytes or self.held_messages > limits.total_max_messages:
                self.over_budget = True
                self._update_block(
                    "low on memory: queued messages use %d of %d bytes (%d messages)"
                    % (self.held_bytes, limits.total_max_bytes, self.held_messages)
                )

    def release(self, message):
        self.held_messages -= 1
        self.held_bytes -= message.cost
        if self.over_budget:
            limits = self.limits
            percent = limits.low_water_percent
            if (
                self.held_bytes * 100 <= limits.total_max_bytes * percent
                and self.held_messages * 100 <= limits.total_max_messages * percent
            ):
                self.over_budget = False
                self._update_block("queued messages back under %d%% of the budget" % percent)

    def set_alarm(self, reason):
        """The port's own view of memory: a reason (e.g. "free heap 9 KiB") blocks publishers
        as an exhausted budget does, None clears it. The core cannot measure the heap itself."""
        if reason != self.alarm:
            self.alarm = reason
            self._update_block("low on memory: " + reason if reason else "memory alarm cleared")

    def check_disk(self, journal):
        """Block publishers while the journal is near the disk budget (90%), until it is back
        under 75%: they are told (connection.blocked, basic.nack under confirms) and paused,
        never dropped. Consumers' acks still go through: they are what frees the disk."""
        budget = journal.max_bytes
        if budget <= 0:
            return
        if self.disk_alarm is None and journal.total * 10 >= budget * 9:
            self.disk_alarm = "journal uses %d of %d bytes" % (journal.total, budget)
            self._update_block("low on disk: " + self.disk_alarm)
        elif self.disk_alarm is not None and journal.total * 4 < budget * 3:
            self.disk_alarm = None
            self._update_block("journal back under 75%% of its %d bytes" % budget)

    def set_disk_failure(self, reason):
        """The storage port cannot write the journal (disk full, card gone): block publishers
        until it can again; None clears it."""
        if reason != self.disk_failure:
            self.disk_failure = reason
            self._update_block("disk: " + reason if reason else "journal writes again")

    def _update_block(self, reason):
        should_block = (
            self.over_budget or self.alarm is not None or self.disk_alarm is not None or self.disk_failure is not None
        )
        if should_block and not self.blocked:
            self.blocked = True
            self.block_reason = reason
            self.log("warning", "publishers blocked: " + self.block_reason)
            for conn in self.connections:
                conn.notify_blocked(self.block_reason)
        elif not should_block and self.blocked:
            self.blocked = False
            self.log("info", "publishers unblocked: " + reason)
            for conn in self.connections:
                conn.notify_unblocked()
            paused = self.paused
            self.paused = []
            for conn in paused:
                conn.resume_reading()

    # ------------------------------------------------------------ the journal

    def wait_for_journal(self, conn):
        if conn not in self.journal_waiters:
            self.journal_waiters.append(conn)

    def journal_synced(self, seq):
        """The storage port made every journal record up to seq durable: the confirms and
        tx.commit-oks that waited for them can go out."""
        journal = self.journal
        if journal is not None:
            journal.synced = seq
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
                    exchange = self.exchanges[name] = Exchange(name, kind)
        return exchange

    def declare_exchange(self, name, kind, passive, durable, auto_delete, internal, arguments):
        method = spec.EXCHANGE_DECLARE
        exchange = self.exchange(name)
        if passive:
            if exchange is None:
                raise ChannelException(NOT_FOUND, "NOT_FOUND - no exchange '%s' in vhost '/'" % text(name), method)
            return exchange
        if not name:
            raise _default_exchange_refused(method)
        if name.startswith(b"amq."):
            raise ChannelException(
                ACCESS_REFUSED,
                "ACCESS_REFUSED - exchange name '%s' contains reserved prefix 'amq.*'" % text(name),
                method,
            )
        if kind not in ROUTERS:
            raise ChannelException(
                PRECONDITION_FAILED, "PRECONDITION_FAILED - invalid exchange type '%s'" % text(kind), method
            )
        if exchange is not None:
            what = "exchange '%s'" % text(name)
            _equivalent("type", what, kind, exchange.kind, method)
            _equivalent("durable", what, durable, exchange.durable, method)
            _equivalent("auto_delete", what, auto_delete, exchange.auto_delete, method)
            _equivalent("internal", what, internal, exchange.internal, method)
            _equivalent_arguments(what, arguments, exchange.arguments, EQUIVALENT_EXCHANGE_ARGUMENTS, method)
            return exchange
        alternate = arguments.get("alternate-exchange")
        if alternate is not None and not isinstance(alternate, (bytes, str)):
            raise ChannelException(
                PRECONDITION_FAILED,
                "PRECONDITION_FAILED - invalid arg 'alternate-exchange' for exchange '%s'" % text(name),
                method,
            )
        if sum(1 for n in self.exchanges if not n.startswith(b"amq.") and n) >= self.limits.max_exchanges:
            raise ChannelException(
                PRECONDITION_FAILED,
                "PRECONDITION_FAILED - cannot declare exchange '%s': exchange limit (%d) is reached"
                % (text(name), self.limits.max_exchanges),
                method,
            )
        exchange = Exchange(name, kind, durable, auto_delete, internal, arguments)
        self.exchanges[name] = exchange
        if durable and self.journal is not None:
            self.journal.exchange_declared(exchange)
        return exchange

    def delete_exchange_named(self, name, if_unused):
        method = spec.EXCHANGE_DELETE
        if not name:
            raise _default_exchange_refused(method)
        if name.startswith(b"amq."):
            raise ChannelException(
                ACCESS_REFUSED,
                "ACCESS_REFUSED - exchange '%s' is a system exchange and cannot be deleted" % text(name),
                method,
            )
        exchange = self.exchange(name)
        if exchange is None:
            return  # deleting what is not there succeeds, as in RabbitMQ
        if if_unused and exchange.bindings:
            raise ChannelException(
                PRECONDITION_FAILED, "PRECONDITION_FAILED - exchange '%s' in vhost '/' in use" % text(name), method
            )
        self.delete_exchange(exchange)

    def delete_exchange(self, exchange):
        if self.exchanges.get(exchange.name) is not exchange:
            return
        del self.exchanges[exchange.name]
        if exchange.durable and self.journal is not None:
            self.journal.exchange_deleted(exchange)  # its bindings go with it, here and at replay
        for binding in list(exchange.bindings.values()):
            self._remove_binding(binding)
        for binding in list(exchange.inbound):
            self._remove_binding(binding)

    def exchange_for_publish(self, name):
        if not name:
            return self.default_exchange
        exchange = self.exchange(name)
        if exchange is None:
            raise ChannelException(
                NOT_FOUND, "NOT_FOUND - no exchange '%s' in vhost '/'" % text(name), spec.BASIC_PUBLISH
            )
        if exchange.internal:
            raise ChannelException(
                ACCESS_REFUSED,
                "ACCESS_REFUSED - cannot publish to internal exchange '%s' in vhost '/'" % text(name),
                spec.BASIC_PUBLISH,
            )
        return exchange

    # ------------------------------------------------------------ bindings

    def named_exchange(self, name, method):
        """An exchange that bind/unbind names: never the default one, and it must exist."""
        if not name:
            raise _default_exchange_refused(method)
        exchange = self.exchange(name)
        if exchange is None:
            raise ChannelException(NOT_FOUND, "NOT_FOUND - no exchange '%s' in vhost '/'" % text(name), method)
        return exchange

    def bind(self, source_name, destination, key, arguments, method):
        source = self.named_exchange(source_name, method)
        if self.binding_count >= self.limits.max_bindings:
            raise ChannelException(
                PRECONDITION_FAILED,
                "PRECONDITION_FAILED - binding limit (%d) is reached" % self.limits.max_bindings,
                method,
            )
        binding = source.bind(destination, key, arguments)
        if binding is not None:
            self.binding_count += 1
            if self.journal is not None:
                self.journal.bound(binding)

    def unbind(self, source_name, destination, key, arguments, method):
        source = self.named_exchange(source_name, method)
        binding = source.find(destination, key, arguments)
        if binding is not None:  # unbinding what is not bound succeeds, as in RabbitMQ
            self._remove_binding(binding)

    def _remove_binding(self, binding):
        source = binding.source
        if binding.identity not in source.bindings:
            return
        source.unbind(binding)
        self.binding_count -= 1
        if self.journal is not None:
            self.journal.unbound(binding)
        if source.auto_delete and not source.bindings:
            self.delete_exchange(source)

    # ------------------------------------------------------------ queues

    def declare_queue(self, conn, name, passive, durable, exclusive, auto_delete, arguments):
        method = spec.QUEUE_DECLARE
        if passive:
            queue = self.queues.get(name)
            if queue is None:
                raise ChannelException(NOT_FOUND, "NOT_FOUND - no queue '%s' in vhost '/'" % text(name), method)
            self.check_exclusive(queue, conn, method)
            return queue
        if not name:
            name = self.new_name(b"amq.gen-")
        elif name.startswith(b"amq."):
            raise ChannelException(
                ACCESS_REFUSED, "ACCESS_REFUSED - queue name '%s' contains reserved prefix 'amq.*'" % text(name), method
            )
        queue = self.queues.get(name)
        if queue is not None:
            if (queue.owner is not None and queue.owner is not conn) or (queue.owner is not None) != bool(exclusive):
                raise _locked(queue, method)
            what = "queue '%s'" % text(name)
            _equivalent("durable", what, durable, queue.durable, method)
            _equivalent("auto_delete", what, auto_delete, queue.auto_delete, method)
            _equivalent_arguments(what, arguments, queue.arguments, EQUIVALENT_QUEUE_ARGUMENTS, method)
            queue.last_used = self.now
            return queue
        check_queue_arguments(name, arguments)
        if len(self.queues) >= self.limits.max_queues:
            raise ChannelException(
                PRECONDITION_FAILED,
                "PRECONDITION_FAILED - cannot declare queue '%s': queue limit (%d) is reached"
                % (text(name), self.limits.max_queues),
                method,
            )
        queue = Queue(self, name, durable, conn if exclusive else None, auto_delete, arguments)
        self.queues[name] = queue
        if queue.journalled and self.journal is not None:
            self.journal.queue_declared(queue)
        if queue.expires:
            self.expirable.append(queue)
        return queue

    def check_exclusive(self, queue, conn, method):
        if queue.owner is not None and queue.owner is not conn:
            raise _locked(queue, method)

    def delete_queue(self, queue):
        """Delete a queue; returns how many ready messages it held."""
        if queue.deleted:
            return 0
        queue.deleted = True
        del self.queues[queue.name]
        if queue.journalled and self.journal is not None:
            self.journal.queue_deleted(queue)  # its messages and bindings go with it
        if queue in self.expirable:
            self.expirable.remove(queue)
        for binding in list(queue.inbound):
            self._remove_binding(binding)
        for consumer in list(queue.consumers):
            consumer.channel.server_cancel(consumer)
        queue.consumers = []
        return queue.purge()

    def count_consumer(self, method):
        if self.consumer_count >= self.limits.max_consumers:
            raise ChannelException(
                PRECONDITION_FAILED,
                "PRECONDITION_FAILED - consumer limit (%d) is reached" % self.limits.max_consumers,
                method,
            )
        self.consumer_count += 1

    def uncount_consumer(self):
        self.consumer_count -= 1

    # ------------------------------------------------------------ routing

    def route(self, exchange, message):
        """The queues a message goes to, each once."""
        if exchange is self.default_exchange:
            queue = self.queues.get(message.routing_key)
            return [queue] if queue is not None else []
        out = []
        exchange.route(message, out)
        if not out:
            alternate = exchange.alternate
            if alternate is not None:
                target = self.exchange(alternate)
                if target is not None and target is not exchange:
                    target.route(message, out)
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

    def dead_letter(self, queue, message, reason):
        """Republish a dropped message to the queue's dead-letter exchange, with x-death."""
        exchange = self.exchange(queue.dead_letter_exchange)
        if exchange is None:
            return  # RabbitMQ drops it too when the DLX is missing
        routing_key = queue.dead_letter_routing_key
        if routing_key is None:
            routing_key = message.routing_key
        props = dict(message.properties())
        headers = dict(props.get("headers") or {})
        deaths = list(headers.get("x-death") or [])
        for death in deaths:
            if isinstance(death, dict) and death.get("queue") == queue.name and death.get("reason") == reason:
                death["count"] = death.get("count", 0) + 1
                deaths.remove(death)
                deaths.insert(0, death)
                break
        else:
            deaths.insert(
                0,
                {
                    "count": 1,
                    "reason": reason,
                    "queue": queue.name,
                    "time": Timestamp(self.wall_seconds),
                    "exchange": message.exchange,
                    "routing-keys": [message.routing_key],
                },
            )
        headers["x-death"] = deaths
        for key, value in (
            ("x-first-death-reason", reason),
            ("x-first-death-queue", queue.name),
            ("x-first-death-exchange", message.exchange),
        ):
            if key not in headers:
                headers[key] = value
        props["headers"] = headers
        if reason == b"expired":
            props.pop("expiration", None)  # per-message TTL does not follow the message (RabbitMQ)
        header = bytes(message.header()[:12]) + encode_properties(props)
        route = shortstr(exchange.name) + shortstr(routing_key)
        dead = Message(exchange.name, routing_key, route, tail(header), message.body_tail, message.body_size)
        # A cycle back to a queue the message already died in, with no client rejection
        # in between, would spin forever: RabbitMQ drops it, and so do we.
        visited = [d.get("queue") for d in deaths if isinstance(d, dict)] if reason != b"rejected" else ()
        targets = [t for t in self.route(exchange, dead) if t.name not in visited and t.accepts(dead)]
        if targets and self.journal is not None:
            self.journal.add_message(dead, targets)  # before the queues: a consumer may ack it at once
        for target in targets:
            target.publish(dead, self.expiry(target, dead))


def _default_exchange_refused(method):
    return ChannelException(ACCESS_REFUSED, "ACCESS_REFUSED - operation not permitted on the default exchange", method)


def _locked(queue, method):
    return ChannelException(
        RESOURCE_LOCKED,
        "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '%s' in vhost '/'. "
        "It could be originally declared on another connection or the exclusive property value does not "
        "match that of the original declaration." % text(queue.name),
        method,
    )


def _equivalent(field, what, received, current, method):
    if received != current:
        if isinstance(received, bool) or isinstance(current, bool):
            received, current = _flag(received), _flag(current)
        else:
            received, current = text(received), text(current)
        raise ChannelException(
            PRECONDITION_FAILED,
            "PRECONDITION_FAILED - inequivalent arg '%s' for %s in vhost '/': "
            "received '%s' but current is '%s'" % (field, what, received, current),
            method,
        )


def _equivalent_arguments(what, received, current, keys, method):
    for key in keys:
        if freeze(received.get(key)) != freeze(current.get(key)):
            raise ChannelException(
                PRECONDITION_FAILED,
                "PRECONDITION_FAILED - inequivalent arg '%s' for %s in vhost '/': "
                "received %r but current is %r" % (key, what, received.get(key), current.get(key)),
                method,
            )
