"""Planning on the driver: offsets as numbers, how far a batch goes, and its partitions.

An offset, for the source, is a dict {stream name: next offset to read}: JSON in Spark's
checkpoint. These functions take the streams' ends as the broker gave them (broker.ends:
(first retained, next), or None while a stream is empty) and decide; they do no I/O.
"""

from .options import EARLIEST, LATEST, per_stream
from .reading import OffsetRange, data_lost


class PlanningError(Exception):
    """An offset the source cannot use (past a stream's end, data lost...)."""


def resolve(offsets, streams, ends):
    """{stream: offset} for an offsets option (keywords or numbers) at the ends given.
    An empty stream's earliest and latest are both 0: the offset its first record will have
    (on hutch, unless a crash lost every record it ever had: then it starts later)."""
    resolved = {}
    for stream, offset in per_stream(offsets, streams).items():
        first, next_ = ends[stream] or (0, 0)
        if offset == EARLIEST:
            resolved[stream] = first
        elif offset == LATEST:
            resolved[stream] = next_
        else:
            resolved[stream] = offset
    return resolved


def check_ending(ending, ends):
    """endingOffsets given as numbers must not lie past what a stream holds: nothing would come."""
    for stream, offset in ending.items():
        next_ = (ends[stream] or (0, 0))[1]
        if offset > next_:
            raise PlanningError(
                "hutch source: endingOffsets gives %d for stream %r, past its end: its next offset is %d"
                % (offset, stream, next_)
            )


def latest(start, ends, limit=None, target=None):
    """Where the next batch ends: every stream's next offset, never below start, never past
    target (Trigger.AvailableNow's), and all streams together at most `limit` offsets past
    start (spread()). A stream not in start (added to `streams` since the checkpoint) starts
    at its first retained offset: its first batch is empty, the next reads from there."""
    end = {}
    for stream, stream_ends in ends.items():
        next_ = stream_ends[1] if stream_ends else 0
        if stream not in start:
            end[stream] = stream_ends[0] if stream_ends else 0
            continue
        if target is not None and stream in target:
            next_ = min(next_, target[stream])
        end[stream] = max(start[stream], next_)
    if limit is not None:
        backlogs = dict((stream, end[stream] - start[stream]) for stream in end if stream in start)
        for stream, n in spread(backlogs, limit).items():
            end[stream] = start[stream] + n
    return end


def spread(backlogs, limit):
    """How many offsets of each stream's backlog a batch of at most `limit` takes: every stream
    with a backlog an equal share, what a stream does not need shared among the others
    (max-min fairness: a small stream is never starved by a big one). In name order, so the
    same backlogs always give the same batch."""
    take = dict((stream, 0) for stream in backlogs)
    waiting = sorted(stream for stream in backlogs if backlogs[stream] > 0)
    left = limit
    while left > 0 and waiting:
        share = max(1, left // len(waiting))
        for stream in list(waiting):
            n = min(share, backlogs[stream] - take[stream], left)
            take[stream] += n
            left -= n
            if take[stream] == backlogs[stream]:
                waiting.remove(stream)
            if left == 0:
                break
    return take


def partitions(start, end, ends, fail_on_data_loss, per_partition=None):
    """The OffsetRanges to read [start, end) of every stream with something to read: one per
    stream, cut into ranges of at most per_partition offsets (maxRecordsPerPartition) so that
    a backlog is read by several tasks at once, not one. Where retention removed part of a
    range (the stream's first retained offset is past the start): an error, or with
    failOnDataLoss false the range from what is there."""
    parts = []
    for stream in sorted(end):
        begin = start.get(stream, end[stream])
        if begin >= end[stream]:
            continue
        first = ends[stream][0] if ends.get(stream) else None
        if first is not None and first > begin:
            if fail_on_data_loss:
                raise PlanningError(data_lost(stream, begin, first))
            begin = min(first, end[stream])
            if begin == end[stream]:
                continue
        parts.extend(split(stream, begin, end[stream], per_partition))
    return parts


def split(stream, begin, end, per_partition):
    """[begin, end) of stream as OffsetRanges of at most per_partition offsets, all of nearly
    the same size (a remainder is spread over them, not left as a small last one); one range
    if per_partition is None. The same range always gives the same pieces: a replayed batch
    plans the same tasks."""
    if per_partition is None or end - begin <= per_partition:
        return [OffsetRange(stream, begin, end)]
    count = -(-(end - begin) // per_partition)  # ceiling
    size, extra = divmod(end - begin, count)
    pieces = []
    for i in range(count):
        length = size + (1 if i < extra else 0)
        pieces.append(OffsetRange(stream, begin, begin + length))
        begin += length
    return pieces
