"""One line per micro-batch, made from Spark's StreamingQueryProgress (query.recentProgress,
as a dict) and the rows the batch wrote (spark/written.py batch_rows):

    batch 3: 1200 rows in, 24 rows out (20 final, 4 correction), 1.42 s, lag 0 offsets

rows in: records read from the streams; rows out: the rows the batch committed to the output,
final rows (windows their gateway's progress closed) and correction rows (readings for windows
written before), "?" where they cannot be counted (Delta's output); lag: how far the batch's
end is behind the streams' ends (the source's reportLatestOffset) in offsets, all streams
together ("?" where Spark did not report it).
"""

import json


def line(progress, written=None):
    """written: {kind: rows} the batch wrote, or None when not known."""
    parts = ["batch %d: %d rows in" % (progress["batchId"], progress.get("numInputRows") or 0)]
    if written is None:
        parts.append("? rows out")
    else:
        out = "%d rows out" % sum(written.values())
        kinds = ["%d %s" % (written[kind], kind) for kind in ("final", "correction") if written.get(kind)]
        if kinds and written.get("correction"):
            out += " (%s)" % ", ".join(kinds)
        parts.append(out)
    parts.append("%.2f s" % (progress.get("batchDuration", 0) / 1000.0))
    parts.append("lag %s offsets" % _known(lag(progress)))
    return ", ".join(parts)


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


def waiting(progress, written, watermark, closed_before=False):
    """When a batch read rows and wrote none, a line that says why: a window's row is written once
    its gateway's readings reach its end plus the delay (--watermark). closed_before: an earlier
    batch of this run wrote a row (then the line does not say that none has). None for any
    other batch."""
    if not progress.get("numInputRows") or written is None or sum(written.values()):
        return None
    if closed_before:
        return (
            "this batch's windows are still open: each is written once its gateway sends a reading stamped %s after its end (--watermark)"
            % watermark
        )
    return (
        "no window has closed yet: each is written once its gateway sends a reading stamped %s after its end (--watermark)"
        % watermark
    )
