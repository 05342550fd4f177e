"""The Spark job behind `hutch pipeline`: sensor readings from stream queues, aggregated per
sensor per event-time window, written once per window as Parquet (or Delta) partitioned by
date.

    records (the `hutch` source) -> JSON body parsed -> ts as a timestamp -> watermark
      -> per (window, sensor): count, min, max, mean, last -> file sink, append mode

Exactly once: the source reads the same records for the same offset range every time, the
checkpoint holds the offsets and the windows' state, and the file sink's commit log
(`_spark_metadata`) lists only the files of committed batches. A batch replayed after a
crash writes the same windows again into new files; only one set of them is ever listed.
Append mode with a watermark writes each window once, when the watermark passes its end.

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


def readings(records, schema, dedup=True):
    """The readings of the records' JSON bodies: every field of schema, ts a timestamp. A body
    that is not JSON, or lacks a sensor, a ts that parses, or a value, is left out. dedup: with
    the reading's identity (READING_ID's columns) for aggregates() to drop repeats by."""
    body = F.from_json(F.col("body").cast("string"), schema)
    columns = [body.alias("r")]
    if dedup:
        columns += reading_id()
    return _stamped(records.select(*columns).select("r.*", *(READING_ID if dedup else ())))


def readings_at(records, fields, dedup=True):
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
    if dedup:
        columns += reading_id()
    return _stamped(records.select(*columns))


def _stamped(parsed):
    """Readings with ts (the JSON's text) as a timestamp, ISO-8601 or epoch seconds, and only
    those with a sensor, a ts that parses and a value."""
    ts_text = F.trim(F.col("ts"))
    ts = F.when(ts_text.rlike(EPOCH_SECONDS), F.timestamp_seconds(ts_text.try_cast("decimal(24,6)"))).otherwise(
        F.try_to_timestamp(ts_text)
    )
    parsed = parsed.withColumn("ts", ts)
    return parsed.where(F.col("sensor").isNotNull() & F.col("ts").isNotNull() & F.col("value").isNotNull())


# A reading's identity (docs/exactly-once.md): its sensor's x-sensor-id and x-sensor-seq headers;
# for a record without them, its stream and offset (which no other record has: never a repeat)
READING_ID = ("_hutch_sensor", "_hutch_seq")


def reading_id():
    """The columns READING_ID names, from a record's headers, stream and offset."""
    headers = F.col("headers")
    sensor, seq = headers["x-sensor-id"], headers["x-sensor-seq"]
    numbered = sensor.isNotNull() & seq.isNotNull()
    return [
        F.when(numbered, F.concat(F.lit("s:"), sensor))
        .otherwise(F.concat(F.lit("o:"), F.col("stream")))
        .alias(READING_ID[0]),
        F.when(numbered, seq).otherwise(F.col("offset").cast("string")).alias(READING_ID[1]),
    ]


def aggregates(readings_df, window, watermark, dedup=True):
    """Per sensor per tumbling event-time window: count, min, max, mean, and last (the value of
    the latest ts in the window), with the window's start and end and the date (UTC) of its
    start, the partition column. dedup: a reading whose identity came before is dropped first
    (Spark keeps each identity while the watermark has not passed its reading's ts by the
    watermark's delay: docs/pipeline.md)."""
    watermarked = readings_df.withWatermark("ts", watermark)
    if dedup:
        watermarked = watermarked.dropDuplicatesWithinWatermark(list(READING_ID))
    windowed = watermarked.groupBy(F.window("ts", window).alias("window"), F.col("sensor")).agg(
        F.count(F.lit(1)).alias("count"),
        F.min("value").alias("min"),
        F.max("value").alias("max"),
        F.avg("value").alias("mean"),
        F.max_by("value", "ts").alias("last"),
    )
    return windowed.select(
        F.col("window.start").alias("window_start"),
        F.col("window.end").alias("window_end"),
        F.col("sensor").cast("string").alias("sensor"),
        "count",
        F.col("min").cast("double").alias("min"),
        F.col("max").cast("double").alias("max"),
        "mean",
        F.col("last").cast("double").alias("last"),
        F.to_date(F.col("window.start")).alias("date"),
    )


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
