"""Talking to the broker for the source: a connection (with failover over the `uri` list),
and where a stream begins and ends, asked the way the README's "Finding a stream's ends"
describes, which works against hutch and RabbitMQ alike.

Everything goes through hutch's own client (hutch.client.simple): one protocol
implementation per side.
"""

import logging
import time

from hutch.client.protocol import AMQPError, ChannelClosed, ConnectionClosed
from hutch.client.simple import Client

OFFSET_HEADER = "x-stream-offset"
log = logging.getLogger("hutch.spark")
# Big frames: a reader on a host moves many records; the client's default (4096) suits boards.
FRAME_MAX = 131072


class StreamError(Exception):
    """What the source cannot do with a stream: missing, not a stream, data lost..."""


def connect(options, first=0):
    """A connected Client to the first broker of options.brokers that takes us, from the one
    numbered first on (round the list); the errors of all of them if none does."""
    failures = []
    brokers = options.brokers
    for i in range(len(brokers)):
        broker = brokers[(first + i) % len(brokers)]
        client = Client(
            broker.host,
            broker.port,
            broker.user,
            broker.password,
            broker.vhost,
            heartbeat=30,
            frame_max=FRAME_MAX,
            timeout_ms=options.timeout_ms,
            name="hutch.spark",
        )
        try:
            client.connect()
            return client
        except (OSError, AMQPError) as e:
            failures.append("%r: %s" % (broker, e))
    raise StreamError("hutch source: cannot connect to any broker: " + "; ".join(failures))


class Recovery:
    """A link lost (a cluster's node went down) or a stream that has no replica on the node yet
    (RabbitMQ's 406 while the stream elects a new writer, for a second or two): tried again on
    the next broker of the list each time, RETRY_PAUSE_S apart, until timeoutMs has passed
    since the first of them. Anything else is not tried again."""

    RETRY_PAUSE_S = 0.5

    def __init__(self, options):
        self.options = options
        self.tries = 0
        self.since = None

    def connect(self):
        return connect(self.options, self.tries)

    def again(self, error, where):
        """Whether to try again after error (the caller re-raises it otherwise); pauses first."""
        lost = isinstance(error, (OSError, ConnectionClosed))
        electing = isinstance(error, ChannelClosed) and error.code == 406 and "replica" in error.text
        if not (lost or electing):
            return False
        now = time.monotonic()
        if self.since is None:
            self.since = now
        if now - self.since > self.options.timeout_ms / 1000:
            return False
        self.tries += 1
        log.warning("hutch source: %s: %s; trying again on the next broker", where, error)
        time.sleep(self.RETRY_PAUSE_S)
        return True


def record_offset(message, stream):
    """The offset a stream's delivery carries. A delivery without one is not from a stream
    queue (a classic queue ignores x-stream-offset and delivers what it holds): a StreamError
    that says so, not a KeyError in a Spark task."""
    offset = (message.properties.get("headers") or {}).get(OFFSET_HEADER)
    if offset is None:
        raise StreamError(
            "hutch source: %r is not a stream queue (x-queue-type stream): its deliveries have no %s header"
            % (stream, OFFSET_HEADER)
        )
    return offset


def probe(client, stream, position, wait_ms):
    """The offset of the first record a consumer attached at position (x-stream-offset: "first",
    "last", a number) is given, or None if none came within wait_ms. The consumer is cancelled."""
    got = []
    tag = client.consume(stream, got.append, prefetch=1, arguments={OFFSET_HEADER: position})
    try:
        wait_for(client, lambda: got, wait_ms)
    finally:
        client.cancel(tag)
    # nothing is acked: a stream has nothing to take away, and the consumer is gone
    return record_offset(got[0], stream) if got else None


def wait_for(client, condition, timeout_ms):
    """Handle deliveries until condition() holds (True) or timeout_ms passed (False). The
    deliveries may be another consumer's on the same connection."""
    deadline = time.monotonic() + timeout_ms / 1000
    while not condition():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        client.wait_msg(max(1, int(left * 1000)))
    return True


def message_count(client, stream):
    """A passive queue.declare's message count (exact on hutch, lagging metrics on RabbitMQ);
    a StreamError if there is no such queue."""
    try:
        return client.declare_queue(stream, passive=True)[1]
    except ChannelClosed as e:
        if e.code == 404:
            raise StreamError("hutch source: there is no stream %r on the broker (%s)" % (stream, e.text))
        raise


def ends(client, stream, options):
    """(first retained offset, next offset) of a stream, or None while it is empty.

    hutch's passive declare counts exactly and at once: 0 means empty. RabbitMQ's count lags
    by seconds, so there a 0 only means "look": a consumer at "first" waits at most
    probeTimeoutMs for a record. The next offset is the last record's + 1 ("last" on hutch is
    the last record; on RabbitMQ the first of the last chunk, so a chunk of several records
    is seen whole only once the next one comes): never beyond a record that exists, so a
    read up to it always sees its last record come."""
    count = message_count(client, stream)
    exact = client.protocol.server_product == "hutch"
    if count == 0 and exact:
        return None
    first = probe(client, stream, "first", options.timeout_ms if count else options.probe_timeout_ms)
    if first is None:
        if count:  # the broker said there are records, then none came
            raise StreamError("hutch source: stream %r has records but none came within timeoutMs" % stream)
        return None
    last = probe(client, stream, "last", options.timeout_ms)
    if last is None:
        raise StreamError("hutch source: stream %r gave no last record within timeoutMs" % stream)
    return first, max(first, last + 1)


def all_ends(options):
    """ends() of every stream of the options, over one connection (asked again as Recovery says)."""
    recovery = Recovery(options)
    while True:
        client = recovery.connect()
        try:
            return dict((stream, ends(client, stream, options)) for stream in options.streams)
        except (OSError, AMQPError) as e:
            if not recovery.again(e, "asking where the streams end"):
                raise
        finally:
            client.close()
