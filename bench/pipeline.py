"""`hutch bench --spark N`: Spark reading a hutch stream, beside Spark's built-in rate source.

One `hutch serve` (C scanner) and one local[*] Spark session (hutch.spark.pipeline's, as
`hutch pipeline` starts it), both started here and stopped at the end. N small JSON readings
({"sensor": ..., "ts": ..., "value": ...}, about 60 bytes; four publishers with confirms, one
sensor each: tools/loadgen.fill) go into one stream first, then four queries run, one after
the other, each into its own sink:

1. the `hutch` source alone into Spark's no-op sink (format "noop": every row is made and
   dropped), Trigger.AvailableNow in batches of N/4 (maxOffsetsPerTrigger), each batch read
   by as many tasks as Spark has cores (maxRecordsPerPartition);
2. end to end: the same batches through `hutch pipeline`'s job (JSON parsed, event-time
   windows per sensor, the Parquet file sink with its checkpoint);
3. steady-state batch latency: the same job over the stream's last 21 batches of 1,000
   readings (a gateway's trickle, not a backlog): the median and the 95th percentile of the
   batch durations Spark reports, the first batch left out;
4. the ceiling on this machine: Spark's rate source (its fixed-batch form, `rate-micro-batch`,
   so that every batch has N/4 rows, as the hutch source's) into the same no-op sink.

Rows per second are a query's rows over the sum of its batches' durations (Spark's own
progress reports), the first batch left out where there are others: it carries the Python
workers' start and code generation, which a long-running query pays once. Figures only:
nothing is asserted. On a machine others share, the load average is printed with them.
"""

import json
import os
import shutil
import statistics
import sys
import tempfile
import time

from . import loadgen
from .brokers import BenchError, Hutch

STREAM = "bench-spark-readings"
PUBLISHERS = 4
LATENCY_BATCH = 1000  # readings per batch of the latency run
LATENCY_BATCHES = 20  # batches measured, after the first
QUERY_TIMEOUT = 1800  # seconds for one query at most

# key, what it measures, unit
ROWS = (
    ("publish", "publish N readings into the stream (4 publishers, confirms)", "msg/s"),
    ("source", "hutch source -> noop sink, local[*]", "rows/s"),
    ("parquet", "hutch source -> hutch pipeline's windows -> Parquet", "rows/s"),
    ("latency-p50", "batch latency, 1,000 readings per batch, median", "s"),
    ("latency-p95", "batch latency, 1,000 readings per batch, p95", "s"),
    ("rate", "Spark's rate source (rate-micro-batch) -> noop sink", "rows/s"),
    ("ratio", "hutch source / rate source", ""),
)


def readings():
    """One reading per publisher (sensor), as `hutch pipeline` takes them."""
    return [
        json.dumps({"sensor": "sensor-%d" % i, "ts": "2024-05-01T12:00:0%dZ" % i, "value": 21.5 + i}).encode()
        for i in range(PUBLISHERS)
    ]


def run(args, log):
    """Publish, run the four queries, print the table (and --json FILE). 0, or 2 with one line."""
    from hutch.spark import preflight  # no pyspark: says what is missing before anything starts
    from hutch.spark.command import spark_output_to

    try:
        preflight.pyspark()
        preflight.java()
    except preflight.PreflightError as e:
        raise BenchError("--spark: %s" % e)
    n = args.spark
    if n < PUBLISHERS:
        raise BenchError("--spark N needs N of %d or more" % PUBLISHERS)
    load = os.getloadavg()
    workdir = tempfile.mkdtemp(prefix="hutch-bench-spark-")
    hutch = spark = None
    figures = {}
    terminal = sys.stderr
    try:
        hutch = Hutch("c", workdir).start()
        log("hutch on %s:%d; publishing %d readings into %s" % (hutch.host, hutch.port, n, STREAM))
        published = loadgen.fill(
            hutch.host,
            hutch.port,
            STREAM,
            n,
            publishers=PUBLISHERS,
            arguments={"x-queue-type": "stream"},
            bodies=readings(),
        )
        figures["publish"] = published["msgs_per_s"]
        from hutch.spark import pipeline  # pyspark: only now

        # the JVM's and the Python workers' output into a file, as `hutch pipeline` does
        terminal = spark_output_to(os.path.join(workdir, "spark.log"), sys.stderr)
        log = _to(terminal)
        log("starting Spark (local[*])")
        spark = pipeline.start_session("local[*]", app_name="hutch-bench")
        measure(spark, hutch, n, workdir, figures, log)
    finally:
        if spark is not None:
            pipeline.stop_session(spark)
        if hutch is not None:
            hutch.stop()
        if terminal is not sys.stderr:
            os.dup2(terminal.fileno(), 2)  # stderr is the terminal's again
            terminal.close()
        shutil.rmtree(workdir, ignore_errors=True)
    print(table(figures, n, load))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"count": n, "load_average": load, "figures": figures}, f, indent=1)
    return 0


def _to(stream):
    def log(line):
        stream.write(line + "\n")
        stream.flush()

    return log


def measure(spark, hutch, n, workdir, figures, log):
    from hutch.spark import pipeline

    cores = spark.sparkContext.defaultParallelism
    batch = max(1, n // 4)
    source = {
        "uri": "amqp://guest:guest@%s:%d/" % (hutch.host, hutch.port),
        "streams": STREAM,
        "maxOffsetsPerTrigger": str(batch),
        "maxRecordsPerPartition": str(max(1, -(-batch // cores))),
    }

    log("1/4 hutch source -> noop, batches of %d" % batch)
    records = pipeline.records(spark, source)
    query = records.writeStream.format("noop").trigger(availableNow=True)
    query = query.option("checkpointLocation", os.path.join(workdir, "noop-checkpoint")).start()
    figures["source"] = rows_per_second(finish(query))

    log("2/4 hutch source -> pipeline -> Parquet, batches of %d" % batch)
    query = start_pipeline(spark, source, workdir, "parquet")
    figures["parquet"] = rows_per_second(finish(query))

    first = max(0, n - LATENCY_BATCH * (LATENCY_BATCHES + 1))
    log("3/4 batch latency: offsets %d to %d in batches of %d" % (first, n, LATENCY_BATCH))
    trickle = dict(source, maxOffsetsPerTrigger=str(LATENCY_BATCH), startingOffsets=json.dumps({STREAM: first}))
    durations = [
        p["batchDuration"] / 1000.0 for p in steady(finish(start_pipeline(spark, trickle, workdir, "latency")))
    ]
    figures["latency-p50"] = round(statistics.median(durations), 3)
    figures["latency-p95"] = round(percentile(durations, 95), 3)

    log("4/4 rate-micro-batch -> noop, batches of %d" % batch)
    rate = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", batch).load()
    query = rate.writeStream.format("noop").option("checkpointLocation", os.path.join(workdir, "rate-checkpoint"))
    query = query.start()
    figures["rate"] = rows_per_second(finish(query, batches=5))


def start_pipeline(spark, source, workdir, name):
    """`hutch pipeline`'s query (its default schema, window and watermark) into Parquet, Trigger.AvailableNow."""
    from hutch.spark import pipeline, settings

    schema = pipeline.reading_schema(settings.DEFAULT_SCHEMA)
    aggregates = pipeline.aggregates(
        pipeline.readings(pipeline.records(spark, source), schema), "1 minute", "10 minutes"
    )
    folder = os.path.join(workdir, name)
    return pipeline.start_query(
        aggregates, os.path.join(folder, "out"), os.path.join(folder, "checkpoint"), "parquet", ("available-now", None)
    )


def finish(query, batches=None):
    """The progress reports (dicts) of query's batches with data, once it ended (AvailableNow),
    or once `batches` of them ran (then it is stopped). BenchError if it failed or took too long."""
    deadline = time.monotonic() + QUERY_TIMEOUT
    try:
        while not query.awaitTermination(0.5):
            if batches is not None and len(with_data(query)) >= batches:
                break
            if time.monotonic() > deadline:
                raise BenchError("a Spark query did not end within %d s" % QUERY_TIMEOUT)
    finally:
        query.stop()
    if query.exception() is not None:
        raise BenchError("a Spark query failed: %s" % str(query.exception()).splitlines()[0])
    return with_data(query)


def with_data(query):
    return [p for p in (json.loads(report.json) for report in query.recentProgress) if p["numInputRows"] > 0]


def steady(progress):
    """The batches after the first (all of them if there is only one)."""
    return progress[1:] or progress


def rows_per_second(progress):
    batches = steady(progress)
    seconds = sum(p["batchDuration"] for p in batches) / 1000.0
    return round(sum(p["numInputRows"] for p in batches) / seconds) if seconds else None


def percentile(values, q):
    """The q-th percentile, nearest rank."""
    ordered = sorted(values)
    return ordered[max(0, -(-len(ordered) * q // 100) - 1)]


def table(figures, n, load):
    if figures.get("source") and figures.get("rate"):
        figures["ratio"] = round(figures["source"] / figures["rate"], 3)
    rows = [("measure (N = {:,})".format(n), "unit", "figure")]
    for key, what, unit in ROWS:
        value = figures.get(key)
        rows.append((what, unit, "-" if value is None else "{:,}".format(value)))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = ["  ".join((row[0].ljust(widths[0]), row[1].ljust(widths[1]), row[2].rjust(widths[2]))) for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    lines.append("load average at the start: %.2f %.2f %.2f (1, 5, 15 min)" % load)
    return "\n".join(lines)
