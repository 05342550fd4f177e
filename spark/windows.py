"""Each gateway's windows, as `hutch pipeline` keeps them (spark/pipeline.py runs this per gateway
in Spark's applyInPandasWithState): its own event-time progress, its open windows, the repeats
of its sensors' readings; what a micro-batch of its readings writes.

Why per gateway: Spark's watermark is one per query. With a fleet on one stream, the gateways
that stayed online move it on, and a gateway back from an outage sends a backlog that is all
behind it: Spark dropped it as late (8 of 76 readings kept). Here each gateway's progress is the
latest `ts` it sent, and nothing is dropped:

- a reading for a window the gateway has not closed goes into the window, which is written
  once, as a `final` row, when the gateway's progress passes its end by the delay (--watermark):
  how soon a window's first figures are written;
- a reading for a window already written (a gateway's own late reading: a sensor that buffered,
  a device polled across a restart) goes into a `correction` row of that window, written with
  the batch it came in: one per window per batch;
- a reading whose identity (x-sensor-id, x-sensor-seq) the gateway sent before is a repeat,
  dropped (core/dedup.py's rule: a sensor's number further behind than its window is a count
  that started over, so new).

So each reading is in exactly one row, whatever its lateness, and the merged figures of a
window (its rows grouped by gateway, sensor and window: counts and sums summed, min of mins,
max of maxes, the last of the latest) count each once (spark/merged.py).

A batch's rows are a function of the gateway's state and the batch's readings only: they are
sorted first (by identity, ts, stream and offset), so a batch replayed after a crash, whose
rows may come in another order, writes the same rows (the file sink keeps one copy).

No pyspark here: Spark's Python workers run it on pandas, the tests in plain Python.
"""

import json
import struct

from hutch.core.dedup import Dedup, reading_key, sequence

KINDS = ("final", "correction")
# sensors whose repeats a gateway keeps track of (the oldest heard from first forgotten): bounded
# by sensors, never by time, so a backlog of days is deduplicated as one of minutes
MOST_SENSORS = 100000


class Gateway:
    """One gateway's state: progress (the latest ts it sent, µs; None before any), open windows
    {(sensor, window start µs): [count, sum, min, max, last ts µs, last value]}, and its dedup
    (None with --dedup none)."""

    def __init__(self, dedup=True):
        self.progress = None
        self.open = {}
        self.dedup = Dedup(most=MOST_SENSORS, sensors=True) if dedup else None
        self.repeats = 0  # readings dropped as repeats by the last batch

    # ------------------------------------------------------------ as Spark keeps it

    def state(self):
        """(progress, open windows as JSON, dedup as bytes): applyInPandasWithState's state row."""
        windows = [[sensor, start] + figures for (sensor, start), figures in sorted(self.open.items())]
        seen = b""
        if self.dedup is not None:
            seen = b"".join(struct.pack(">I", len(p)) + p for p in self.dedup.state_records())
        return (self.progress, json.dumps(windows), seen)

    @classmethod
    def restored(cls, state, dedup=True):
        gateway = cls(dedup)
        progress, windows, seen = state
        gateway.progress = progress
        gateway.open = {(one[0], one[1]): one[2:] for one in json.loads(windows)}
        if gateway.dedup is not None and seen:
            pos = 0
            while pos < len(seen):
                (size,) = struct.unpack_from(">I", seen, pos)
                gateway.dedup.restore(seen[pos + 4 : pos + 4 + size])
                pos += 4 + size
        return gateway

    # ------------------------------------------------------------ a batch

    def batch(self, readings, window_us, delay_us):
        """The rows a micro-batch of this gateway's readings writes: readings are (sensor, ts µs,
        value, sensor id or None, sensor seq or None, stream, offset); rows are (kind, sensor,
        window start µs, count, sum, min, max, last ts µs, last value), finals first, each kind
        in (sensor, window) order."""
        self.repeats = 0
        ordered = sorted(readings, key=_order)
        closed_before = None if self.progress is None else self.progress - delay_us
        corrections = {}
        latest = self.progress
        for sensor, ts, value, sensor_id, seq, _stream, _offset in ordered:
            if self._repeat(sensor_id, seq):
                continue
            start = ts // window_us * window_us
            late = closed_before is not None and start + window_us <= closed_before
            windows = corrections if late else self.open
            figures = windows.get((sensor, start))
            if figures is None:
                windows[(sensor, start)] = [1, value, value, value, ts, value]
            else:
                figures[0] += 1
                figures[1] += value
                figures[2] = min(figures[2], value)
                figures[3] = max(figures[3], value)
                if ts > figures[4]:  # (a tie keeps the first, in the batch's order)
                    figures[4], figures[5] = ts, value
            latest = ts if latest is None or ts > latest else latest
        self.progress = latest
        out = []
        if latest is not None:
            closing = latest - delay_us
            for key in sorted(key for key in self.open if key[1] + window_us <= closing):
                out.append(("final",) + key + tuple(self.open.pop(key)))
        for key in sorted(corrections):
            out.append(("correction",) + key + tuple(corrections[key]))
        return out

    def _repeat(self, sensor_id, seq):
        """Whether a reading of that identity was taken before (then dropped); else it is taken."""
        dedup = self.dedup
        if dedup is None or sensor_id is None:
            return False
        key = reading_key(sensor_id, sequence(seq))
        if key is None:
            return False
        if dedup.seen(*key) and not dedup.behind(*key):
            self.repeats += 1
            return True
        if dedup.behind(*key):  # its count started over (a reflash): new, its window starts again
            dedup.forget(key[0])
        dedup.take(*key)
        return False


def _order(reading):
    sensor, ts, value, sensor_id, seq, stream, offset = reading
    number = sequence(seq) if seq is not None else None
    return (
        sensor_id is None,
        sensor_id or "",
        -1 if number is None else number,
        ts,
        stream or "",
        offset if offset is not None else -1,
        sensor,
    )
