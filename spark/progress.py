"""One line per micro-batch, made from Spark's StreamingQueryProgress (query.recentProgress,
as a dict):

    batch 3: 1200 rows in, 24 rows out, 3 repeats, 1 late, 1.42 s, lag 0 offsets, watermark 2024-05-02T00:04:00Z

rows in: records read from the streams; rows out: aggregate rows the batch wrote (the windows
the watermark closed); repeats: readings dropped because their sensor and number came before
(left out when 0); late: what Spark dropped as behind the watermark (it counts per window
and sensor of a batch's partition, not per reading; left out when 0); lag: how far the
batch's end is behind the streams' ends (the source's reportLatestOffset) in offsets, all
streams together ("?" where Spark did not report it); watermark: the event time below which
windows are closed, as this batch used it (left out before the first reading).
"""

import datetime
import json


def line(progress):
    parts = [
        "batch %d: %d rows in" % (progress["batchId"], progress.get("numInputRows") or 0),
        "%s rows out" % _known(rows_out(progress)),
    ]
    repeats = repeated_rows(progress)
    if repeats:
        parts.append("%d repeats" % repeats)
    late = late_rows(progress)
    if late:
        parts.append("%d late" % late)
    parts.append("%.2f s" % (progress.get("batchDuration", 0) / 1000.0))
    parts.append("lag %s offsets" % _known(lag(progress)))
    mark = watermark(progress)
    if mark:
        parts.append("watermark %s" % mark)
    return ", ".join(parts)


def watermark(progress):
    """The batch's watermark as ISO-8601 UTC to the second, None while it is still 0 (no reading yet)."""
    mark = (progress.get("eventTime") or {}).get("watermark")
    if not mark or mark.startswith("1970-01-01T00:00:00"):
        return None
    return mark[:19] + "Z"


def rows_out(progress):
    """Rows the batch wrote. The file sink does not count them (numOutputRows -1); in append
    mode a window's row is written when the watermark removes it from the aggregation's
    state, so the state's removed rows are the rows written. None if neither is there."""
    count = (progress.get("sink") or {}).get("numOutputRows")
    if count is not None and count >= 0:
        return count
    operators = _aggregations(progress)
    if not operators:
        return 0 if not progress.get("numInputRows") else None  # (an empty batch runs no operator)
    return sum(op.get("numRowsRemoved") or 0 for op in operators)


# Spark's name for the state of a dropDuplicatesWithinWatermark (spark/pipeline.py aggregates)
DEDUP_OPERATOR = "dedupeWithinWatermark"


def _aggregations(progress):
    """The batch's aggregation state operators (not the dedup's)."""
    return [op for op in progress.get("stateOperators") or [] if op.get("operatorName") != DEDUP_OPERATOR]


def repeated_rows(progress):
    """Readings the dedup dropped in the batch (their sensor and number came before)."""
    return sum(
        (op.get("customMetrics") or {}).get("numDroppedDuplicateRows") or 0
        for op in progress.get("stateOperators") or []
        if op.get("operatorName") == DEDUP_OPERATOR
    )


def late_rows(progress):
    return sum(op.get("numRowsDroppedByWatermark") or 0 for op in progress.get("stateOperators") or [])


def lag(progress):
    """Offsets between each source's end offset and the streams' latest, summed; None if unknown."""
    total = 0
    for source in progress.get("sources") or []:
        end, latest = _offsets(source.get("endOffset")), _offsets(source.get("latestOffset"))
        if end is None or latest is None:
            return None
        total += sum(max(0, latest[stream] - end.get(stream, 0)) for stream in latest)
    return total


def _offsets(value):
    """A source offset as Spark reports it (a JSON string, or already a dict), or None."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return value if isinstance(value, dict) else None


def _known(value):
    return "?" if value is None else str(value)


def waiting(progress, window_s, watermark_s, closed_before=False):
    """When a batch read rows and wrote none, a line that says why: every window it touched is
    still open, and the first of them closes once a reading stamped past its end plus the
    watermark's delay arrives (a window's row is written when the watermark passes its end).
    closed_before: an earlier batch wrote a window's row (then the line does not say that
    none has closed). None for any other batch."""
    if not progress.get("numInputRows") or rows_out(progress) != 0:
        return None
    first = _instant((progress.get("eventTime") or {}).get("min"))
    if first is None or window_s <= 0:
        return None
    open_rows = sum(op.get("numRowsTotal") or 0 for op in _aggregations(progress))
    stamp = first.timestamp()
    end = datetime.datetime.fromtimestamp(stamp - stamp % window_s + window_s, datetime.timezone.utc)
    closes = end + datetime.timedelta(seconds=watermark_s)
    if closed_before:
        return (
            "this batch's windows are still open (%d aggregate rows): the first, ending %s, is written once a reading stamped after %s arrives (its end + --watermark)"
            % (
                open_rows,
                _iso(end),
                _iso(closes),
            )
        )
    return (
        "no window has closed yet (%d aggregate rows open): the first, ending %s, is written once a reading stamped after %s arrives (its end + --watermark)"
        % (
            open_rows,
            _iso(end),
            _iso(closes),
        )
    )


def _instant(text):
    """An event time as Spark reports it ("2024-05-01T12:00:03.000Z"), or None."""
    if not text:
        return None
    try:
        return datetime.datetime.strptime(text[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc)
    except ValueError:
        return None


def _iso(moment):
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
