"""A run of alike publishes taken in one go: the broker's run path (publish_run).

A front end with the C accelerator (amqp091/batch.py PublishRun, on CPython; mqtt/runs.py's
QoS 0 and QoS 1 runs) finds run after run of publishes alike but for their bodies (a sensor's
readings). publish_run passes the first through the gates of Broker.admit and routes it
once; then the whole run goes into its stream (its records made from the front end's bytes)
or into its queues (publish_to_queues), and a queue's consumer that can take them gets their
deliveries made in one call by the front end's run (run.deliver: a 0-9-1 channel's frames
straight from the publisher's bytes, amqp091/output.py deliver_run; another front end's
consumer is handed them one by one). A no-ack consumer's deliveries need no Message at all;
the rest of the run is made into Messages once and enqueued as Broker.publish would enqueue
each. Persistent messages into durable queues are journalled together, their records those
Broker.store makes one by one (core/store/journal_runs.py), then enqueued together where the
queue's window in memory holds them all (else each as one publish is, part of them to disk).

The one-by-one path (Broker.publish) is the reference: a run is taken only when the effect
is the same, byte for byte, as publishing its messages one after the other
(tests/accel/test_accel_runs.py, the journal's files included), and otherwise goes that way.
So a run is not taken where a publish is numbered (a bridge's, a counted sensor's: the dedup
takes them one by one), into a queue that treats messages one by one (a TTL, a length limit,
priorities, a budget the run would reach), nor where the order of deliveries between queues
could differ (two of its queues' consumers on one connection).

Never on a board: only the C run paths import it.
"""

from ..codec.errors import Refused
from . import counters
from .broker import BCC, BRIDGE_SEQ, CC, JOURNALLED, ROUTED
from .dedup import SENSOR_SEQ_KEY
from .message import FLAG_HEADERS, MESSAGE_OVERHEAD
from .queue import Queue
from .store.journal_runs import add_run

# The most publishes one run takes: the frame scanner's batch is smaller anyway.
MOST = 1 << 16


def publish_run(broker, publisher, exchange_name, message, run):
    """A run of publishes alike but for their bodies (same exchange, routing key and
    properties, the first of them as message; the front end's run: amqp091/batch.py
    PublishRun, mqtt/runs.py MqttRun) into one stream or into queues, taken in one go. They
    pass the gates of Broker.admit as the first one does (they are alike), and are routed
    once. Into a stream, run.stream_records(stream, record template, now ms, max body) makes
    their records from the front end's bytes and they take their offsets in order; into
    queues, publish_to_queues. (taken, end, result as Broker.publish says of each); taken is
    0 when they must go one by one instead: something of a publish would differ between them
    (a direct reply-to, a bridge's number or a counted sensor's, CC or BCC), or a gate refuses
    it (the one-by-one path says so), or publishers are blocked, or what the one-by-one path
    does per message would differ (takes_run says when), or nothing is routed."""
    if broker.flow.blocked or (
        message.flags() & FLAG_HEADERS
        and (
            message.has_header(BRIDGE_SEQ)
            or (message.has_header(SENSOR_SEQ_KEY) and broker.limits.max_sensors)
            or message.has_header(CC)
            or message.has_header(BCC)
        )
    ):
        return 0, 0, 0
    # Where it would go first (no effect: when they must go one by one, they leave here
    # before the gates, which the one-by-one path then passes them through)
    exchange = broker.exchange(exchange_name) if exchange_name else broker.default_exchange
    if exchange is None:
        return 0, 0, 0
    queues = broker.route(exchange, message)
    if not queues:
        return 0, 0, 0
    stream = queues[0] if len(queues) == 1 and queues[0].is_stream else None
    if stream is None:
        for queue in queues:
            if queue.is_stream:
                return 0, 0, 0
    try:
        exchange, admitted = broker.admit(publisher, exchange_name, message)
    except Refused:
        return 0, 0, 0
    if admitted is not message:
        return 0, 0, 0
    if stream is None:
        taken, end, journalled = publish_to_queues(broker, publisher, queues, message, run)
        return taken, end, ROUTED | journalled
    stream.reserve()
    now_ms = broker.wall_seconds * 1000
    taken, end, made = run.stream_records(
        stream, stream.run_template_for(message), now_ms, broker.limits.max_message_bytes
    )
    if taken:
        stream.append_records([made], taken, len(made), now_ms)
        stats = publisher.stats or broker.stats
        stats[counters.RECEIVED] += taken
        stats[counters.ROUTED] += taken
        if publisher.confirming:
            stats[counters.RECEIVED_CONFIRM] += taken
    return taken, end, ROUTED | JOURNALLED


def publish_to_queues(broker, publisher, queues, message, run):
    """(taken, where the frame after them starts, JOURNALLED or 0: whether the journal took
    them) of the run whose first publish is message, routed to queues (ordinary queues, each
    once), admitted; 0 taken: one by one instead."""
    taken, end, size = run.take(MOST, broker.limits.max_message_bytes)
    if not taken:
        return 0, 0, 0
    cost = size + taken * MESSAGE_OVERHEAD  # what their Messages cost the budget, each queue's
    flow = broker.flow
    limits = broker.limits
    if (
        flow.held_bytes + cost * len(queues) > limits.total_max_bytes
        or flow.held_messages + taken * len(queues) > limits.total_max_messages
    ):
        return 0, 0, 0  # the budget's alarm would be raised part way: one by one
    stored = journalled(broker, queues, message)
    sessions = []
    for queue in queues:
        if not takes_run(queue, message, taken, size, stored):
            return 0, 0, 0
        if len(queues) > 1:
            for consumer in queue.consumers:
                conn = getattr(consumer.session, "conn", consumer.session)
                if conn in sessions:
                    return 0, 0, 0  # one by one, its deliveries would interleave with another queue's
                sessions.append(conn)
    stats = publisher.stats or broker.stats  # (the publisher's front end's: core/counters.py)
    stats[counters.RECEIVED] += taken
    stats[counters.ROUTED] += taken
    if publisher.confirming:
        stats[counters.RECEIVED_CONFIRM] += taken
    arrived = broker.now + broker.wall_offset
    order = broker.published + 1
    broker.published += taken
    if stored:
        made = run.messages(arrived, order)
        if not add_run(broker.journal, made, queues):
            # each into the journal and then its queues, as Broker.publish stores one: what the
            # run spares is each publish's parsing, gates and routing
            result = 0
            store = broker.store
            for one in made:
                result |= store(one, queues)
            return taken, end, result
        # the journal has them all, as Broker.store would have each: now their queues
        for queue in queues:
            if queue.journalled and not takes_run(queue, message, taken, size, False):
                for one in made:  # (its window fills part way: the rest to disk, as Broker.store)
                    queue.publish(one, None)
            else:
                hand_or_enqueue(queue, made, 0, taken)
        return taken, end, JOURNALLED
    for queue in queues:
        given = 0
        consumers = queue.consumers
        if len(consumers) == 1 and not queue.messages.length:
            consumer = consumers[0]
            if consumer.ready():
                given = run.deliver(consumer, queue, taken, arrived, order)
                if given:
                    queue.next_consumer = 1  # (as _next_ready_consumer leaves it)
                    queue.published += given  # (queue.publish counts the rest)
                    queue.delivered += given
                    delivered = consumer.session.stats or broker.stats  # (the consumer's)
                    if consumer.no_ack:  # (held and settled at once: the budget does not move)
                        delivered[counters.DELIVERED_CONSUME_AUTO_ACK] += given
                    else:
                        delivered[counters.DELIVERED_CONSUME_MANUAL_ACK] += given
                        messages = run.messages(arrived, order)
                        held = 0
                        for i in range(given):
                            held += messages[i].cost
                        flow.hold_many(given, held)
        if given < taken:
            hand_or_enqueue(queue, run.messages(arrived, order), given, taken)
    return taken, end, 0


def journalled(broker, queues, message):
    """Whether the journal takes each message of a run (persistent, to a durable queue): they
    are then stored one after another (Broker.store). A run of transient messages never is
    (takes_run: not where a queue would page)."""
    if broker.journal is None or not message.persistent():
        return False
    for queue in queues:
        if queue.journalled:
            return True
    return False


def hand_or_enqueue(queue, messages, first, end):
    """messages[first:end] into queue as Queue.publish puts each there: one by one where a
    consumer may be handed one (the queue holds none and has consumers: Queue.publish decides),
    else behind what it holds, in one go."""
    if queue.consumers and not queue.messages.length:
        for i in range(first, end):
            queue.publish(messages[i], None)
    else:
        enqueue(queue, messages, first, end)


def enqueue(queue, messages, first, end):
    """messages[first:end] into queue behind what it holds, as Queue.publish puts each there when no
    consumer is to be handed it (takes_run: no limit to drop the head for, nothing on disk)."""
    push = queue.messages.push
    cost = size = 0
    for i in range(first, end):
        message = messages[i]
        push((message, False, None))
        cost += message.cost
        size += message.body_size
    queue.published += end - first
    queue.ready_bytes += size
    queue.broker.flow.hold_many(end - first, cost)


def takes_run(queue, message, count, size, stored):
    """Whether count messages alike (message the first; size: their bodies and header tails)
    may go into queue as one run with the effect publishing them one by one has: an ordinary
    queue (not a priority queue's lanes) with no TTL or length limit to act on each message,
    and room in the board's budget for them all. stored: the journal takes each (journalled():
    the run stores them one after another, and a queue pages each as one by one). A durable
    queue's journal also takes a transient message once the queue pages (Queue.pages: its
    window in memory full): a run of transient ones is taken only where it keeps within the
    window."""
    if not (
        queue.__class__ is Queue
        and queue.message_ttl is None
        and message.ttl is None
        and queue.max_length is None
        and queue.max_length_bytes is None
        and not (queue.hard_max_messages and queue.messages.length + count >= queue.hard_max_messages)
        and not (queue.hard_max_bytes and queue.ready_bytes + size >= queue.hard_max_bytes)
    ):
        return False
    if stored:
        return True
    return not (
        queue.paged
        or (
            queue.journalled
            and queue.broker.journal is not None
            and (
                queue.messages.length + count >= queue.window_messages or queue.ready_bytes + size >= queue.window_bytes
            )
        )
    )
