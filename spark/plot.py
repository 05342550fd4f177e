"""`hutch plot`: a picture of what `hutch pipeline` wrote, one line per gateway and sensor over time.

    hutch plot --output /data/aggregates --png aggregates.png

It reads the part files the Parquet sink's commit log lists (`DIR/_spark_metadata`: a
crashed batch may have left files in no commit, which a glob would count twice), merges each
window's final and correction rows (spark/merged.py), and draws each gateway's sensor's mean
per window as a line in a band from its min to its max, the windows'
starts on the time axis (UTC). `--value` draws another column instead (min, max, last,
count), without the band.

No Spark: pyarrow reads the files (pyspark[sql] brings it) and matplotlib draws them (the
`plot` extra: `pip install '.[plot]'` in hutch's checkout). A mistake is one line on stderr: exit 2 for the
command line, 1 for what is missing or unreadable.
"""

import argparse
import datetime
import os
import sys

from .merged import merged
from .written import NotAnOutput, committed_files

VALUES = ("mean", "min", "max", "last", "count")


class PlotError(Exception):
    """What is missing or unreadable: exit 1."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise SystemExit(_fail(2, message))


def make_parser():
    p = _Parser(prog="hutch plot", description="draw the aggregates `hutch pipeline` wrote, per sensor over time")
    p.add_argument("--output", required=True, metavar="DIR", help="the pipeline's --output")
    p.add_argument("--png", required=True, metavar="FILE", help="the picture to write")
    p.add_argument("--value", default="mean", choices=VALUES, help="what to draw (default mean, with a min-max band)")
    p.add_argument("--title", help="the picture's title (default: the output folder's name, the value and the dates)")
    p.add_argument("--unit", default="", help="the readings' unit, for the value axis (°C, %%, hPa...)")
    return p


def main(argv=None):
    args = make_parser().parse_args(argv)
    try:
        windows = read_aggregates(args.output)
        if not windows:
            raise PlotError("%s holds no committed aggregates yet" % args.output)
        starts = [row["window_start"] for row in windows]
        span = "%s to %s UTC" % (_minute(min(starts)), _minute(max(starts)))
        title = args.title or "%s: %s per window, %s" % (
            os.path.basename(os.path.abspath(args.output)),
            args.value,
            span,
        )
        sensors = draw(windows, args.png, args.value, title, args.unit)
    except PlotError as e:
        return _fail(1, str(e))
    gateways = len(set(row["gateway"] for row in windows))
    print(
        "hutch plot: %d windows of %d sensors of %d gateway%s (%d aggregates), %s -> %s"
        % (len(set(starts)), sensors, gateways, "" if gateways == 1 else "s", len(windows), span, args.png)
    )
    return 0


def _fail(code, message):
    sys.stderr.write("hutch plot: %s\n" % message)
    sys.stderr.flush()
    return code


def read_aggregates(output):
    """Every committed aggregate, its final and correction rows merged (spark/merged.py), as
    dicts, in window order."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise PlotError("reading Parquet needs pyarrow: pip install '.[plot]' in hutch's checkout")
    rows = []
    try:
        files = committed_files(output)
    except NotAnOutput as e:
        raise PlotError(str(e))
    for path in files:
        try:
            rows.extend(pq.read_table(path).to_pylist())
        except OSError as e:
            raise PlotError("cannot read %s: %s" % (path, e))
    return merged(rows)


def draw(windows, png, value, title, unit=""):
    """One line per gateway and sensor (with the min-max band for the mean) to png, each named
    GATEWAY/SENSOR (the sensor alone when no window names a gateway); the number of lines."""
    try:
        import matplotlib
    except ImportError:
        raise PlotError("drawing needs matplotlib: pip install '.[plot]' in hutch's checkout")
    matplotlib.use("Agg")  # no display: a file
    from matplotlib import dates, pyplot

    named = any(row["gateway"] for row in windows)
    by_sensor = {}
    for row in windows:
        label = "%s/%s" % (row["gateway"], row["sensor"]) if named else str(row["sensor"])
        by_sensor.setdefault(label, []).append(row)
    figure, axes = pyplot.subplots(figsize=(9, 4.5), dpi=100)
    for sensor in sorted(by_sensor, key=str):
        rows = by_sensor[sensor]
        starts = [_utc(row["window_start"]) for row in rows]
        (line,) = axes.plot(starts, [row[value] for row in rows], marker=".", linewidth=1.2, label=str(sensor))
        if value == "mean":
            low, high = [row["min"] for row in rows], [row["max"] for row in rows]
            axes.fill_between(starts, low, high, color=line.get_color(), alpha=0.15, linewidth=0)
    length = windows[0]["window_end"] - windows[0]["window_start"]
    axes.set_title(title, fontsize=10)
    first, last = _utc(windows[0]["window_start"]), _utc(windows[-1]["window_start"])
    days = first.date() != last.date()
    axes.set_xlabel(
        "window start, UTC%s; windows of %s" % ("" if days else " " + first.strftime("%Y-%m-%d"), _length(length))
    )
    axes.set_ylabel(value + (" (%s)" % unit if unit else "") + (", band: min to max" if value == "mean" else ""))
    axes.xaxis.set_major_formatter(dates.DateFormatter("%m-%d %H:%M" if days else "%H:%M", tz=datetime.timezone.utc))
    axes.grid(True, alpha=0.3)
    axes.legend(title="gateway/sensor" if named else "sensor", fontsize=8, loc="best")
    figure.tight_layout()
    try:
        figure.savefig(png)
    except OSError as e:
        raise PlotError("cannot write %s: %s" % (png, e))
    finally:
        pyplot.close(figure)
    return len(by_sensor)


def _utc(moment):
    """pyarrow gives the UTC timestamps with their zone, or naive ones meaning UTC."""
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.timezone.utc)


def _minute(moment):
    return _utc(moment).strftime("%Y-%m-%d %H:%M")


def _length(delta):
    seconds = int(delta.total_seconds())
    for unit, size in (("hour", 3600), ("minute", 60)):
        if seconds % size == 0:
            count = seconds // size
            return "%d %s%s" % (count, unit, "" if count == 1 else "s")
    return "%d seconds" % seconds
