"""The Spark job behind `hutch pipeline`: sensor readings from stream queues, aggregated per
gateway, sensor and event-time window, written as Parquet (or Delta) partitioned by date.

    records (the `hutch` source) -> JSON body parsed -> ts as a timestamp, the gateway
      -> per gateway (spark/windows.py, in applyInPandasWithState): repeats dropped, windows
         closed on the gateway's own progress (final rows), late readings as correction rows
      -> file sink, append mode

Exactly once: the source reads the same records for the same offset range every time, the
checkpoint holds the offsets and each gateway's state, and the file sink's commit log
(`_spark_metadata`) lists only the files of committed batches. A batch replayed after a
crash writes the same rows again into new files; only one set of them is ever listed. Each
reading is in exactly one row (its window's final row, or one correction row), so the merged
figures (spark/merged.py) count it once however late it came.

command.py checks everything it can before this module is imported (it imports pyspark).
"""

import os
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType, _parse_datatype_string

from . import register

# Stateful streaming keeps one state store per shuffle partition; Spark's default, 200, makes
# every micro-batch of a small edge stream slow. Fixed in the checkpoint by the first run.
SHUFFLE_PARTITIONS = 2
# A plain number or a decimal one, maybe signed or with an exponent: epoch seconds
EPOCH_SECONDS = r"^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$"
LOG4J2_PROPERTIES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")


def start_session(master, delta=False, app_name="hutch-pipeline"):
    """A SparkSession on master, quiet: the JVM logs errors only (log4j2.properties), no
    progress bars, no UI. A local master runs on 127.0.0.1 with this Python's workers.
    delta: with Delta Lake's extension and catalog, and its jars as delta-spark's
    configure_spark_with_delta_pip adds them (fetched from Maven Central on first use)."""
    local = master.startswith("local")
    if local:
        # the workers import hutch.spark: they must be this interpreter, not PATH's python3
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))
        .config("spark.sql.session.timeZone", "UTC")
        # Parquet's standard timestamps (UTC instants in microseconds), not Spark's old INT96:
        # what pandas, pyarrow and DuckDB read as they are
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        .config("spark.driver.extraJavaOptions", "-Dlog4j2.configurationFile=file:" + LOG4J2_PROPERTIES)
    )
    if local:
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    if delta:
        from delta import configure_spark_with_delta_pip

        builder = configure_spark_with_delta_pip(
            builder.config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension").config(
                "spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"
            )
        )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def stop_session(spark):
    """Stop Spark and the JVM PySpark started for it (by its PID: none is left behind)."""
    from pyspark import SparkContext

    jvm = getattr(SparkContext._gateway, "proc", None)
    spark.stop()
    if SparkContext._gateway is not None:
        SparkContext._gateway.shutdown()
    if jvm is not None and jvm.poll() is None:
        jvm.terminate()
        try:
            jvm.wait(30)
        except Exception:
            jvm.kill()


def reading_schema(ddl):
    """The --schema as Spark parses it, with ts read as text (the JSON's text, whether a string
    or a number): readings() turns it into a timestamp, ISO-8601 or epoch seconds. Raises
    Spark's parse error for a schema it cannot read."""
    # PySpark's own DDL parser (private, but the one spark.read.schema(str) uses): the JVM's
    schema = _parse_datatype_string(ddl)
    if not isinstance(schema, StructType):
        raise ValueError('--schema must be fields such as "sensor STRING, ts TIMESTAMP, value DOUBLE", not %r' % ddl)
    return StructType([StructField(f.name, StringType(), True) if f.name == "ts" else f for f in schema.fields])


def readings(records, schema):
    """The readings of the records' JSON bodies: every field of schema, ts a timestamp, with the
    gateway, the reading's identity and its record (reading_id()). A body that is not JSON, or
    lacks a sensor, a ts that parses, or a value, is left out."""
    body = F.from_json(F.col("body").cast("string"), schema)
    columns = [body.alias("r")] + reading_id()
    return _stamped(records.select(*columns).select("r.*", *READING_ID, *RECORD, "gateway"))


def readings_at(records, fields):
    """The readings of records whose sensor, ts and value are where --fields says (settings.fields:
    a JSON path into the body, a word of the routing key, a header), as readings() gives them:
    sensor a string, ts a timestamp, value a double; a record without one of them is left out."""
    body = F.col("body").cast("string")
    columns = []
    for name in ("sensor", "ts", "value"):
        kind, where = fields[name]
        if kind == "json":
            column = F.get_json_object(body, where)
        elif kind == "routing_key":
            column = F.get(F.split(F.col("routing_key"), "[.]"), where)  # (null past the last word)
        else:
            column = F.col("headers")[where]
        columns.append((column.try_cast("double") if name == "value" else column).alias(name))
    return _stamped(records.select(*(columns + reading_id())))


def _stamped(parsed):
    """Readings with ts (the JSON's text) as a timestamp, ISO-8601 or epoch seconds, and only
    those with a sensor, a ts that parses and a value."""
    ts_text = F.trim(F.col("ts"))
    ts = F.when(ts_text.rlike(EPOCH_SECONDS), F.timestamp_seconds(ts_text.try_cast("decimal(24,6)"))).otherwise(
        F.try_to_timestamp(ts_text)
    )
    parsed = parsed.withColumn("ts", ts)
    return parsed.where(F.col("sensor").isNotNull() & F.col("ts").isNotNull() & F.col("value").isNotNull())


# A reading's identity (docs/exactly-once.md): its sensor's x-sensor-id and x-sensor-seq headers
# (null where it has none: never a repeat), and the record it came in (its stream and offset: the
# order a batch's readings are taken in, the same every time it is read)
READING_ID = ("_hutch_sensor", "_hutch_seq")
RECORD = ("stream", "offset")
# The gateway a reading comes from (docs/pipeline.md, Many gateways): the header its first
# gateway's bridge or device stamped, x-hutch-gateway; else the body's "gateway"; else the node
# an older gateway's bridge names in x-hutch-origin (NODE/BRIDGE/...); else "" (a sensor that
# publishes straight to the broker the pipeline reads)
GATEWAY_HEADER = "x-hutch-gateway"


def reading_id():
    """The identity and record columns, and the gateway's, from a record's headers and body."""
    headers = F.col("headers")
    origin_node = F.split(headers["x-hutch-origin"], "/").getItem(0)
    gateway = F.coalesce(
        headers[GATEWAY_HEADER],
        F.get_json_object(F.col("body").cast("string"), "$.gateway"),
        F.when(origin_node != "", origin_node),
        F.lit(""),
    )
    return [
        headers["x-sensor-id"].alias(READING_ID[0]),
        headers["x-sensor-seq"].alias(READING_ID[1]),
        F.col("stream"),
        F.col("offset"),
        gateway.alias("gateway"),
    ]


# What the pipeline writes: a row per gateway, sensor and window, `final` when the gateway's
# progress closed the window, `correction` for readings that came after (spark/windows.py)
OUTPUT = (
    "gateway STRING, sensor STRING, window_start TIMESTAMP, window_end TIMESTAMP, kind STRING, count LONG, "
    "sum DOUBLE, min DOUBLE, max DOUBLE, mean DOUBLE, last DOUBLE, last_ts TIMESTAMP"
)
# A gateway's state: its progress (µs), its open windows (JSON), its sensors' repeats (bytes)
STATE = "progress LONG, windows STRING, seen BINARY"


def aggregates(readings_df, window, watermark, dedup=True):
    """Per gateway, sensor and tumbling event-time window: count, sum, min, max, mean, and last
    (the value of the latest ts, with that ts), its kind, the window's start and end, and the
    date (UTC) of its start, the partition column. Each gateway's readings go through its own
    state (spark/windows.py): its windows close on its own progress, a reading for a window it
    closed is a correction row, and (dedup) a reading whose identity it sent before is dropped.
    No Spark watermark: nothing is dropped as late."""
    from .settings import seconds

    window_us = int(seconds(window) * 1000000)
    delay_us = int(seconds(watermark) * 1000000)
    columns = ["gateway", "sensor", "ts", "value", READING_ID[0], READING_ID[1], RECORD[0], RECORD[1]]
    windowed = (
        readings_df.select(*columns)
        .withColumn("value", F.col("value").cast("double"))
        .groupBy("gateway")
        .applyInPandasWithState(per_gateway(window_us, delay_us, dedup), OUTPUT, STATE, "append", "NoTimeout")
    )
    return windowed.withColumn("date", F.to_date(F.col("window_start")))


def per_gateway(window_us, delay_us, dedup):
    """The function applyInPandasWithState calls with a gateway's readings of a batch: its rows,
    as spark/windows.py Gateway.batch makes them, as one pandas DataFrame."""

    def run(key, frames, state):
        import pandas

        from .windows import Gateway

        gateway = Gateway.restored(state.get, dedup) if state.exists else Gateway(dedup)
        readings = []
        for frame in frames:
            ts = frame["ts"].astype("int64") // 1000  # (ns to µs)
            readings.extend(
                zip(
                    frame["sensor"],
                    ts.tolist(),
                    frame["value"].tolist(),
                    _nones(frame[READING_ID[0]]),
                    _nones(frame[READING_ID[1]]),
                    frame[RECORD[0]],
                    frame[RECORD[1]].tolist(),
                )
            )
        rows = gateway.batch(readings, window_us, delay_us)
        state.update(gateway.state())
        name = key[0]
        yield pandas.DataFrame(
            {
                "gateway": [name] * len(rows),
                "sensor": [row[1] for row in rows],
                "window_start": pandas.to_datetime([row[2] for row in rows], unit="us"),
                "window_end": pandas.to_datetime([row[2] + window_us for row in rows], unit="us"),
                "kind": [row[0] for row in rows],
                "count": [row[3] for row in rows],
                "sum": [float(row[4]) for row in rows],
                "min": [float(row[5]) for row in rows],
                "max": [float(row[6]) for row in rows],
                "mean": [row[4] / row[3] for row in rows],
                "last": [float(row[8]) for row in rows],
                "last_ts": pandas.to_datetime([row[7] for row in rows], unit="us"),
            }
        )

    return run


def _nones(column):
    """A pandas column's values with its missing ones (None, NaN) as None."""
    return [None if value is None or value != value else value for value in column.tolist()]


def records(spark, source_options):
    reader = spark.readStream.format("hutch")
    for key, value in source_options.items():
        reader = reader.option(key, value)
    return reader.load()


def start_query(df, output, checkpoint, output_format, trigger):
    """The streaming write: append mode (each window once, final), partitioned by date."""
    writer = (
        df.writeStream.format(output_format)
        .outputMode("append")
        .partitionBy("date")
        .option("path", output)
        .option("checkpointLocation", checkpoint)
        .queryName("hutch-pipeline")
    )
    kind, interval = trigger
    if kind == "available-now":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=interval)
    return writer.start()
