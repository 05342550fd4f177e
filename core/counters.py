"""What the broker has done, counted where it happens, once, by protocol.

The counters are plain integers in a list per protocol: Broker.stats is AMQP 0-9-1's and the
broker's own (dead-lettering, the journal, the bridges' local sides), and each other front end
has its own (`of(broker, "mqtt")`, kept in Broker.stats_by). Whoever acts carries its list as
`stats`: a connection, and its channels, sessions and publishers. The core bumps them at its
dispatch points the same for every front end, in the list of whoever the message came from or
goes to: a publish routed or not (Broker.publish: the publisher's), a message delivered to a
consumer or taken by a get (core/queue.py, core/streams/stream.py, Broker.get: the consumer's
session's), a delivery settled (Broker.settle: the settler's); the front ends count what only
they see: a confirm sent, a message returned, connections and channels opened and closed. The
broker's totals are the lists' sums (core/snapshot.py). They only grow: a reader takes
differences for rates. Names follow RabbitMQ's where it has one (its
rabbitmq_global_messages_*_total series, by protocol).

    publisher.stats[counters.RECEIVED] += 1

A list indexed by these constants, not an object with named fields: the firmware build folds
the constants into numbers, so on a board the counters cost their list and no name. Their
names, and the snapshot every port renders, are core/snapshot.py's (loaded when asked for).
"""

RECEIVED = 0  # publishes from clients that reached the broker (routed or not)
RECEIVED_CONFIRM = 1  # ... of them from publishers in confirm mode
ROUTED = 2  # ... that went to at least one queue
UNROUTABLE = 3  # ... that went to none (returned to a mandatory publisher, or dropped)
RETURNED = 4  # unroutable ones given back to their publisher (basic.return)
CONFIRMED = 5  # publishes confirmed to their publisher (basic.ack)
DELIVERED_CONSUME_MANUAL_ACK = 6  # given to consumers that ack
DELIVERED_CONSUME_AUTO_ACK = 7  # given to consumers that do not (no-ack)
DELIVERED_GET_MANUAL_ACK = 8  # taken by basic.get, to be acked
DELIVERED_GET_AUTO_ACK = 9  # taken by basic.get with no-ack
GET_EMPTY = 10  # basic.get of an empty queue
REDELIVERIES = 11  # deliveries of a message a consumer was given before
ACKNOWLEDGED = 12  # deliveries settled as done (ack)
REQUEUED = 13  # deliveries given back to their queue (nack/reject with requeue, a closed channel)
REJECTED = 14  # deliveries refused without requeue (dead-lettered if the queue says so)
DEAD_LETTERED = 15  # messages republished to a dead-letter exchange (for any reason; by reason below)
CONNECTIONS_OPENED = 16
CONNECTIONS_CLOSED = 17
CHANNELS_OPENED = 18
CHANNELS_CLOSED = 19
JOURNAL_SYNCS = 20  # group commits made durable (an fsync each on CPython)
AUTH_ATTEMPTS = 21  # logins tried (any mechanism)
AUTH_ATTEMPTS_FAILED = 22  # ... refused
DEAD_LETTERED_EXPIRED = 23  # dead letters whose TTL ran out (the rest of DEAD_LETTERED were rejected)
DEAD_LETTERED_MAXLEN = 24  # ... dropped from the head of a full queue
COUNT = 25  # how many there are: Broker.stats = [0] * COUNT


def of(broker, label):
    """The counters of a front end other than 0-9-1 (its metrics label: "mqtt"), a list of its
    own, made with its first connection: 0-9-1's are Broker.stats (core/snapshot.py
    BROKER_LABEL), so a board serving only 0-9-1 keeps one list."""
    if broker.stats_by is None:
        broker.stats_by = {}
    found = broker.stats_by.get(label)
    if found is None:
        found = broker.stats_by[label] = [0] * COUNT
    return found
