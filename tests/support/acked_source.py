"""The old way, for the exactly-once test to fail with: a source that acks on receipt.

What Spark's RabbitMQ receivers did: take messages from a queue with auto-ack (basic.get
no_ack), so a message is gone from the broker the moment it is read. Its "offsets" are only
counts of messages taken from each queue: a batch Spark replays after a crash reads whatever
the queues hold then, not what it read the first time. test_pipeline_exactly_once.py runs
`hutch pipeline` with it through the same kills as the real source, and the comparison with
Python's aggregates must find the difference.

Test-only: it is not part of hutch. `python -c "import acked_source; acked_source.main()"
pipeline-args...` (with this folder on PYTHONPATH, for Spark's workers too) is `hutch
pipeline` with this source registered as `hutch`, in place of the real one.
"""

import sys

from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow

from hutch.spark.broker import connect, message_count
from hutch.spark.options import Options
from hutch.spark.pause import pause_at
from hutch.spark.planning import spread
from hutch.spark.reading import OffsetRange
from hutch.spark.records import SCHEMA, row


class AckOnReceiveSource(DataSource):
    @classmethod
    def name(cls):
        return "hutch"

    def schema(self):
        return SCHEMA

    def streamReader(self, schema):
        return AckOnReceiveReader(Options(self.options))


class AckOnReceiveReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets {queue: messages taken so far}: a count, not a place in the queue."""

    def __init__(self, options):
        self.options = options

    def initialOffset(self):
        return dict((queue, 0) for queue in self.options.streams)

    def getDefaultReadLimit(self):
        if self.options.max_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_per_trigger)

    def prepareForTriggerAvailableNow(self):
        pass  # what the queues hold, until they are empty

    def latestOffset(self, start=None, limit=None):
        """start plus what each queue holds now (within the read limit, shared as the real
        source shares it)."""
        client = connect(self.options)
        try:
            waiting = dict((queue, message_count(client, queue)) for queue in self.options.streams)
        finally:
            client.close()
        if isinstance(limit, ReadMaxRows):
            waiting = spread(waiting, limit.max_rows)
        return dict((queue, start[queue] + waiting[queue]) for queue in waiting)

    def partitions(self, start, end):
        return [OffsetRange(queue, start[queue], end[queue]) for queue in sorted(end) if end[queue] > start[queue]]

    def read(self, partition):
        """Take up to end - start messages, each acked as it comes (no_ack): whatever the queue
        holds now, numbered from start."""
        client = connect(self.options)
        try:
            for number in range(partition.start, partition.end):
                message = client.get(partition.stream, no_ack=True)
                if message is None:
                    break
                yield row(partition.stream, number, message)
        finally:
            client.close()

    def commit(self, end):
        pause_at("commit", end)  # the same fault-injection point as the real source's


def main():
    """`hutch pipeline` (sys.argv[1:]) with this source in place of the real one."""
    from hutch.spark import command, pipeline, preflight

    pipeline.register = lambda spark: spark.dataSource.register(AckOnReceiveSource)
    preflight.streams = lambda source_options: None  # they are classic queues: not streams
    sys.exit(command.main(sys.argv[1:]))
