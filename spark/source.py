"""The `hutch` data source for PySpark 4 (pyspark.sql.datasource): batch reads of stream
queues and a replayable streaming source.

Which process runs what (PySpark's Python data source runtime): the DataSource and the
stream reader's offset methods run in a Python worker of the driver, one per query; the
readers are pickled to the executors, where read() runs in a fresh copy for each task. So
the readers hold only the checked Options, and every broker connection is opened by the
call that needs it and closed before it returns.
"""

import logging

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader

from . import planning
from .broker import all_ends
from .options import EARLIEST, LATEST, Options
from .pause import pause_at
from .reading import read_range
from .records import SCHEMA, arrow_batches

try:  # Spark 4.2+: admission control (maxOffsetsPerTrigger) and Trigger.AvailableNow
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # Spark 4.0 and 4.1 call latestOffset() without arguments
    ReadAllAvailable = ReadMaxRows = None
    SupportsTriggerAvailableNow = object

log = logging.getLogger("hutch.spark")


class HutchDataSource(DataSource):
    """spark.read / spark.readStream .format("hutch"): the records of hutch (or RabbitMQ)
    stream queues, with their offsets."""

    @classmethod
    def name(cls):
        return "hutch"

    def schema(self):
        return SCHEMA

    def reader(self, schema):
        return HutchBatchReader(Options(self.options))

    def streamReader(self, schema):
        options = Options(self.options)
        if "endingoffsets" in (key.lower() for key in self.options):
            raise ValueError("hutch source: endingOffsets is for batch queries (spark.read); a stream goes on")
        return HutchStreamReader(options)


class HutchBatchReader(DataSourceReader):
    """startingOffsets (default earliest) to endingOffsets (default latest), both resolved when
    the query is planned."""

    def __init__(self, options):
        if options.starting == LATEST or isinstance(options.starting, dict) and LATEST in options.starting.values():
            raise ValueError("hutch source: startingOffsets latest makes a batch query read nothing (as Kafka's)")
        if options.ending == EARLIEST or isinstance(options.ending, dict) and EARLIEST in options.ending.values():
            raise ValueError("hutch source: endingOffsets earliest makes a batch query read nothing (as Kafka's)")
        self.options = options

    def partitions(self):
        options = self.options
        ends = all_ends(options)
        start = planning.resolve(options.starting, options.streams, ends)
        end = planning.resolve(options.ending, options.streams, ends)
        planning.check_ending(end, ends)
        return planning.partitions(start, end, ends, options.fail_on_data_loss, options.per_partition)

    def read(self, partition):
        return arrow_batches(read_range(self.options, partition))


class HutchStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are {stream: next offset to read}; a batch reads [start, end) of each stream."""

    def __init__(self, options):
        self.options = options
        self._available_now = None  # Trigger.AvailableNow's target: the ends when the query began
        self._latest = None  # the streams' next offsets at the last latestOffset(), uncapped

    def initialOffset(self):
        """startingOffsets (default earliest) as numbers, asked of the broker now. Spark asks
        again when it replays the first batch: "earliest" and "latest" then mean the stream's
        ends at that moment (retention or publishers may have moved them); JSON offsets are
        the same every time."""
        options = self.options
        return planning.resolve(options.starting, options.streams, all_ends(options))

    def getDefaultReadLimit(self):
        if self.options.max_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_per_trigger)

    def latestOffset(self, start=None, limit=None):
        """Every stream's next offset, within Spark's read limit (maxOffsetsPerTrigger, spread
        over the streams by planning.spread). Spark 4.0 and 4.1 give no start: there the
        batch takes everything there is."""
        if start is None and self.options.max_per_trigger is not None:
            raise ValueError("hutch source: maxOffsetsPerTrigger needs Spark 4.2 or later (admission control)")
        cap = None
        if ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
            cap = limit.max_rows
        elif limit is not None and not isinstance(limit, ReadAllAvailable):
            raise ValueError("hutch source: Spark asked for a read limit it does not support: %r" % (limit,))
        ends = all_ends(self.options)
        self._latest = planning.resolve(LATEST, self.options.streams, ends)
        if start is None:  # Spark 4.0/4.1: no start, no limit: the streams' next offsets
            start = self._latest
        return planning.latest(start, ends, cap, self._available_now)

    def reportLatestOffset(self):
        """Spark 4.2+: the streams' next offsets as the last latestOffset() saw them, whatever
        a read limit or AvailableNow's target left for later: a query's progress shows them as
        the source's latestOffset, so its lag behind the streams can be told (`hutch pipeline`'s
        progress lines). None before the first latestOffset()."""
        return self._latest

    def prepareForTriggerAvailableNow(self):
        """Trigger.AvailableNow: read up to the ends the streams have now, no further."""
        ends = all_ends(self.options)
        self._available_now = planning.resolve(LATEST, self.options.streams, ends)

    def partitions(self, start, end):
        ends = all_ends(self.options)
        return planning.partitions(start, end, ends, self.options.fail_on_data_loss, self.options.per_partition)

    def read(self, partition):
        return arrow_batches(read_range(self.options, partition))

    def commit(self, end):
        """Spark has every batch up to end in its sink. Nothing to do: the checkpoint is the
        only record of where the query is, the broker keeps nothing per reader."""
        pause_at("commit", end)  # off unless a test asks (pause.py)
        log.debug("hutch source: committed %r", end)
