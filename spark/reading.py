"""Reading one range of offsets of one stream, [start, end): what a Spark task does.

The same range always gives the same rows: the consumer attaches at `start` (RabbitMQ may
begin at the chunk holding it: what is below start is skipped), every record below `end` is
a row, and the read stops at the first record at or past end - 1. `end` never lies past a
record that exists (broker.ends), so that record comes. Nothing is taken from the stream:
an ack only moves the consumer's credit window on, so a task that fails and runs again, or
a batch replayed after a crash, reads the same records.

A link lost mid-read (the node of a cluster the task read from went down) does not fail the
task: the read goes on from the next record over a connection to the next broker of the `uri`
list (broker.Recovery says how long it keeps trying).
"""

from pyspark.sql.datasource import InputPartition

from hutch.client.protocol import AMQPError

from .broker import OFFSET_HEADER, Recovery, StreamError, probe, record_offset, wait_for
from .records import row


class OffsetRange(InputPartition):
    """One Spark input partition: stream, start (first offset read), end (first not read)."""

    def __init__(self, stream, start, end):
        super().__init__((stream, start, end))
        self.stream = stream
        self.start = start
        self.end = end

    def __repr__(self):
        return "OffsetRange(%r, %d, %d)" % (self.stream, self.start, self.end)


def read_range(options, part):
    """The rows of the records of part (an OffsetRange), in offset order."""
    start = part.start  # the next offset to give a row for
    recovery = Recovery(options)
    while start < part.end:
        client = recovery.connect()
        deliveries = _deliveries(client, options, OffsetRange(part.stream, start, part.end))
        try:
            for message in deliveries:
                offset = record_offset(message, part.stream)
                if offset >= part.end:
                    return
                if offset >= start:
                    yield row(part.stream, offset, message)
                    start = offset + 1
                    recovery.since = None  # (reading again: a later loss has its own timeoutMs)
                if offset >= part.end - 1:
                    return
        except (OSError, AMQPError) as e:
            if not recovery.again(e, "stream %r, reading from offset %d" % (part.stream, start)):
                raise
        finally:
            deliveries.close()  # cancels the consumer
            client.close()


def _deliveries(client, options, part):
    """The deliveries of a consumer attached at part.start, in order, acked as they go, until
    the caller stops (and closes this generator: the consumer is cancelled); a StreamError if
    retention removed records of the range (and failOnDataLoss) or none came within timeoutMs."""
    arrived = []
    tag = client.consume(part.stream, arrived.append, prefetch=options.prefetch, arguments={OFFSET_HEADER: part.start})
    ack_every = max(1, options.prefetch // 2)
    unacked = 0
    expected = part.start  # the offset the next record has at least
    reached = False  # whether a record at or past start came (RabbitMQ may begin below it)
    try:
        while True:
            if not wait_for(client, lambda: arrived, options.timeout_ms):
                raise StreamError(
                    "hutch source: stream %r: no record at or past offset %d came within timeoutMs (%d ms) "
                    "while reading [%d, %d)" % (part.stream, expected, options.timeout_ms, part.start, part.end)
                )
            batch = arrived[:]
            del arrived[:]
            for message in batch:
                offset = record_offset(message, part.stream)
                if not reached and offset >= part.start:
                    reached = True
                    if offset > part.start and options.fail_on_data_loss:
                        _check_retention(client, options, part)
                expected = offset + 1
                unacked += 1
                if unacked >= ack_every:  # acks are credit: one for several deliveries is enough
                    client.ack(message.delivery_tag, multiple=True)
                    unacked = 0
                yield message
    finally:
        if client.protocol.channel_open:  # not after the channel or connection failed: that error counts
            client.cancel(tag)


def _check_retention(client, options, part):
    """The first record given is past start: a gap in the offsets (a crash on hutch, a segment's
    start on RabbitMQ), or retention removed [start, first retained). The stream's first
    retained offset tells which (failOnDataLoss: without it, the read goes on either way)."""
    first = probe(client, part.stream, "first", options.timeout_ms)
    if first is not None and first > part.start:
        raise StreamError(data_lost(part.stream, part.start, first))


def data_lost(stream, needed, first):
    return (
        "hutch source: stream %r no longer holds offset %d, which this query still has to read: its first "
        "retained offset is %d (retention removed the rest). Set failOnDataLoss to false to skip to it, "
        "or keep more of the stream (x-max-length-bytes, x-max-age)" % (stream, needed, first)
    )
