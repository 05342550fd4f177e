"""`hutch pipeline`: the standard sensor pipeline as a command. Reads readings (JSON bodies)
from stream queues, aggregates them per sensor per event-time window, and writes the
aggregates as Parquet partitioned by date; exactly once, restartable from its checkpoint.

    hutch pipeline --uri amqp://guest:guest@gateway/ --streams readings \\
        --output /data/aggregates --checkpoint /data/aggregates-checkpoint

tools/cli.py hands `hutch pipeline ...` here (main(argv)). In order, each step failing with
one line on stderr:

1. the options (settings.py, the source's Options), and that they are those the checkpoint
   was made with (checkpoint.py): exit 2;
2. pyspark, Java, delta-spark, the broker, the streams (preflight.py): exit 1, in about a
   second, before Spark's 10 s start;
3. Spark: the job (pipeline.py, imported only now: it imports pyspark) runs with the JVM's
   output in a log file; one progress line per batch on stdout (progress.py). A failure of
   the query is its first line (the source's own message where it is one of ours), exit 1.

SIGINT and SIGTERM stop the query between batches' steps (Spark's query.stop()) and exit 0:
the checkpoint is consistent at any point, and a restart goes on from it.
"""

import argparse
import json
import os
import re
import signal
import sys
import time

from . import checkpoint, preflight, progress, settings
from .options import Options
from .written import batch_rows

EXIT_FAILURE = 1
EXIT_USAGE = 2
# How often the command looks at the query's progress (and at a stop request)
POLL_SECONDS = 0.5


class UsageError(Exception):
    """A bad command line: exit 2."""


class JobFailed(Exception):
    """The Spark query failed: exit 1."""


class _Parser(argparse.ArgumentParser):
    """argparse, with a mistake as one line (not the usage block) and exit code 2."""

    def error(self, message):
        raise UsageError(message)


def make_parser():
    p = _Parser(
        prog="hutch pipeline",
        description="aggregate sensor readings from stream queues per gateway, sensor and event-time window "
        "(count, sum, min, max, mean, last) into Parquet partitioned by date, every reading once however late, "
        "with Spark",
    )
    p.add_argument(
        "--uri", required=True, help="amqp://user:password@host:port/vhost; several, comma-separated: failover"
    )
    p.add_argument("--streams", required=True, help="stream queue names, comma-separated")
    p.add_argument("--output", required=True, metavar="DIR", help="where the aggregates go (read it with Spark)")
    p.add_argument("--checkpoint", required=True, metavar="DIR", help="Spark's checkpoint: where the query is")
    p.add_argument(
        "--starting-offsets",
        default="earliest",
        help='earliest, latest or JSON {"stream": offset} (only for a new checkpoint; default earliest)',
    )
    p.add_argument("--max-offsets-per-trigger", type=_positive, metavar="N", help="at most N records per batch")
    p.add_argument("--schema", help="the readings' JSON fields as Spark DDL (default %r)" % settings.DEFAULT_SCHEMA)
    p.add_argument("--schema-file", metavar="FILE", help="the same, read from a file")
    p.add_argument(
        "--fields",
        metavar="sensor=WHERE,ts=WHERE,value=WHERE",
        help="where each field is, when the JSON is not flat (instead of --schema): a JSON path "
        "(SHT3X.Temperature), routing_key[N] (the routing key's Nth word) or header:NAME",
    )
    p.add_argument("--window", default="1 minute", help='the windows\' length (default "1 minute")')
    p.add_argument(
        "--watermark",
        default="10 minutes",
        help="how long after a window's end, in its gateway's readings' time, its row is written; later "
        'readings for it are correction rows (default "10 minutes")',
    )
    p.add_argument(
        "--dedup",
        choices=("sensor", "none"),
        default="sensor",
        help="sensor: count a reading whose x-sensor-id and x-sensor-seq its gateway sent before once "
        "(default); none: count every record",
    )
    p.add_argument(
        "--trigger",
        default="processing=10s",
        help="processing=DURATION: a batch every DURATION, until stopped (default processing=10s); "
        "available-now (or once): what the streams hold now, then stop",
    )
    p.add_argument("--format", default="parquet", choices=("parquet", "delta"), help="the output's format")
    p.add_argument("--master", default="local[*]", help="Spark master URL (default local[*]: Spark in this process)")
    p.add_argument("--log", metavar="FILE", help="Spark's own output (default CHECKPOINT/pipeline.log)")
    return p


def _positive(text):
    try:
        number = int(text)
    except ValueError:
        number = 0
    if number <= 0:
        raise argparse.ArgumentTypeError("must be a whole number above 0, not %r" % text)
    return number


class Job:
    """The command line, checked: everything the Spark job needs."""

    def __init__(self, args):
        self.output = os.path.abspath(args.output)
        self.checkpoint = os.path.abspath(args.checkpoint)
        self.log = os.path.abspath(args.log or os.path.join(self.checkpoint, "pipeline.log"))
        self.master = args.master
        self.format = args.format
        self.window = settings.duration("--window", args.window)
        self.watermark = settings.duration("--watermark", args.watermark)
        self.trigger = settings.trigger(args.trigger)
        self.dedup = args.dedup
        if args.fields is not None and (args.schema is not None or args.schema_file is not None):
            raise settings.SettingError("give --fields or --schema, not both")
        self.fields = settings.fields(args.fields) if args.fields is not None else None
        self.fields_text = (
            ",".join("%s=%s" % (name, _spelled(self.fields[name])) for name in settings.FIELDS) if self.fields else ""
        )
        self.schema = settings.check_schema(_schema_text(args)) if self.fields is None else ""
        self.source_options = {
            "uri": args.uri,
            "streams": args.streams,
            "startingOffsets": args.starting_offsets,
        }
        if args.max_offsets_per_trigger:
            self.source_options["maxOffsetsPerTrigger"] = str(args.max_offsets_per_trigger)
        try:
            self.streams = Options(self.source_options).streams
        except ValueError as e:
            raise settings.SettingError(_cli_words(str(e)))


def _spelled(field):
    """A --fields place as the command line spells it (what the checkpoint keeps)."""
    kind, where = field
    return where[2:] if kind == "json" else "routing_key[%d]" % where if kind == "routing_key" else "header:" + where


def _schema_text(args):
    if args.schema is not None and args.schema_file is not None:
        raise settings.SettingError("give --schema or --schema-file, not both")
    if args.schema_file is None:
        return settings.DEFAULT_SCHEMA if args.schema is None else args.schema
    try:
        with open(args.schema_file) as f:
            return f.read()
    except OSError as e:
        raise settings.SettingError("--schema-file: %s" % e)


def _cli_words(message):
    """The source's message in the command's words: its option names are the command's."""
    message = message.replace("hutch source: ", "")
    for option, flag in (
        ("startingOffsets", "--starting-offsets"),
        ("maxOffsetsPerTrigger", "--max-offsets-per-trigger"),
        ("the option 'uri'", "--uri"),
        ("the option 'streams'", "--streams"),
        ("uri ", "--uri "),
        ("streams ", "--streams "),
    ):
        message = message.replace(option, flag)
    return message


def main(argv=None, out=None, err=None):
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        job = Job(make_parser().parse_args(argv))
        checkpoint.check(job)
    except (UsageError, settings.SettingError, checkpoint.CheckpointMismatch) as e:
        return _fail(err, EXIT_USAGE, str(e))
    try:
        preflight.pyspark()
        preflight.java()
        if job.format == "delta":
            preflight.delta()
        preflight.streams(job.source_options)
    except preflight.PreflightError as e:
        return _fail(err, EXIT_FAILURE, str(e))
    return run(job, out, err)


def _fail(err, code, message):
    err.write("hutch pipeline: %s\n" % message)
    err.flush()
    return code


def run(job, out, err):
    """Start Spark, run the query until it ends (available-now) or is stopped, printing a line
    per batch; stop Spark. Spark's output goes to job.log from here on."""
    try:
        os.makedirs(job.checkpoint, exist_ok=True)
        checkpoint.remember(job)
        log_start = os.path.getsize(job.log) if os.path.exists(job.log) else 0
        terminal = spark_output_to(job.log, err)
    except OSError as e:
        return _fail(err, EXIT_FAILURE, "cannot write to the checkpoint or Spark's log: %s" % e)
    stop = _stop_on_signals()
    from . import pipeline  # pyspark: only now, after the checks

    spark = None
    try:
        out.write(
            "hutch pipeline: %s -> %s (%s windows, watermark %s, trigger %s; Spark's log: %s)\n"
            % (",".join(job.streams), job.output, job.window, job.watermark, _trigger_words(job.trigger), job.log)
        )
        out.write("hutch pipeline: starting Spark (%s)...\n" % job.master)
        out.flush()
        started = time.monotonic()
        spark = pipeline.start_session(job.master, delta=job.format == "delta")
        out.write("hutch pipeline: Spark started in %.0f s\n" % (time.monotonic() - started))
        out.flush()
        dedup = job.dedup == "sensor"
        records = pipeline.records(spark, job.source_options)
        if job.fields is not None:
            readings = pipeline.readings_at(records, job.fields)
        else:
            try:
                schema = pipeline.reading_schema(job.schema)
            except Exception as e:
                return _fail(terminal, EXIT_USAGE, "--schema: %s" % first_line(e))
            readings = pipeline.readings(records, schema)
        query = pipeline.start_query(
            pipeline.aggregates(readings, job.window, job.watermark, dedup),
            job.output,
            job.checkpoint,
            job.format,
            job.trigger,
        )
        watch(query, out, stop, job)
        return 0
    except JobFailed as e:
        return _fail(terminal, EXIT_FAILURE, "%s (details: %s)" % (e, job.log))
    except Exception as e:  # Spark's own failures (starting the JVM, planning): one line
        return _fail(
            terminal, EXIT_FAILURE, "%s (details: %s)" % (_unresolved(job, log_start) or first_line(e), job.log)
        )
    finally:
        if spark is not None:
            pipeline.stop_session(spark)


def watch(query, out, stop, job=None):
    """Print each batch's progress line as it comes (and, for a batch that read rows and wrote
    none, why), until the query ends or stop is asked for (then stop it). A failed query:
    JobFailed with its first line."""
    from pyspark.errors import StreamingQueryException

    printed = -1
    closed = False  # whether a batch has written a window's row yet
    while True:
        try:
            finished = query.awaitTermination(POLL_SECONDS)
            failure = None
        except StreamingQueryException as e:
            finished, failure = True, e
        for report in query.recentProgress:
            report = json.loads(report.json)
            if report["batchId"] > printed:
                printed = report["batchId"]
                written = None
                if job is not None and job.format == "parquet":
                    written = batch_rows(job.output, report["batchId"])
                out.write(progress.line(report, written) + "\n")
                why = progress.waiting(report, written, job.watermark, closed) if job is not None else None
                closed = closed or bool(written and sum(written.values()))
                if why is not None:
                    out.write("hutch pipeline: %s\n" % why)
                out.flush()
        if failure is not None:
            raise JobFailed(first_line(failure))
        if finished:
            return
        if stop:
            query.stop()
            out.write("hutch pipeline: stopped (%s); a restart goes on from the checkpoint\n" % stop[0])
            out.flush()
            return


def first_line(error):
    """One line of a Spark error: the source's own message where there is one, else the first
    line of the error without Java's stack."""
    text = str(error)
    # the last: a Python traceback shows the source line that raised it before the message
    ours = re.findall(r"hutch source: [^\n]*", text)
    if ours:
        return _cli_words(ours[-1])
    for raw in text.splitlines():
        raw = raw.strip()
        if raw:
            return raw[:500]
    return type(error).__name__


def _unresolved(job, since):
    """Why the JVM did not start, when the reason is a package Spark could not fetch (it fetches
    spark.jars.packages, as delta-spark asks for Delta Lake's jars, from Maven Central and
    spark-packages as it starts, and exits if it cannot): one line naming it. None if what
    this run wrote to the log (from byte `since` on) says nothing of the kind."""
    try:
        with open(job.log, "rb") as f:
            f.seek(since)
            found = re.findall(r"unresolved dependency: ([^\s\]]+)", f.read().decode(errors="replace"))
    except OSError:
        return None
    if not found:
        return None
    package = found[-1].rstrip(":")
    if job.format == "delta":
        return (
            "--format delta needs Delta Lake's jars (%s), which Spark could not fetch from Maven Central or "
            "spark-packages as it started (no network to them, or no such version): put them in Spark's jars "
            "folder, or use --format parquet" % package
        )
    return (
        "Spark could not fetch the package %s (spark.jars.packages) from Maven Central or spark-packages as it "
        "started (no network to them, or no such version)" % package
    )


def _trigger_words(trigger):
    kind, interval = trigger
    return kind if interval is None else "every %s" % interval


def spark_output_to(log, err):
    """From here on file descriptor 2 (the JVM's and the Python workers' stderr, which they
    inherit) goes to the log file, so the terminal gets no Java chatter; the returned stream
    is the terminal's stderr, for the command's own one-line errors."""
    err.flush()
    terminal = os.fdopen(os.dup(2), "w")
    with open(log, "ab") as f:
        os.dup2(f.fileno(), 2)
    f = None
    return terminal


def _stop_on_signals():
    """A list that gets the signal's name when SIGINT or SIGTERM comes: watch() stops the query."""
    asked = []

    def handler(number, frame):
        asked.append(signal.Signals(number).name)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, handler)
    return asked
