"""hutch.spark: a PySpark data source, `hutch`, reading stream queues by offset.

    import hutch.spark
    hutch.spark.register(spark)
    df = (spark.readStream.format("hutch")
          .option("uri", "amqp://guest:guest@127.0.0.1:5672/")
          .option("streams", "readings")
          .load())

It reads hutch's stream queues and RabbitMQ's over AMQP 0-9-1 with hutch's own client, and
needs PySpark 4 (the spark extra: `pip install '.[spark]'` in hutch's checkout). CPython only: neither the broker nor a board
ever imports it (the `hutch` command only for `hutch pipeline`). The README's "Spark: reading streams with PySpark" has the options, the
schema and what is replayable. One module per job:

- options.py: the options, checked (one clear error per mistake);
- broker.py: connecting (with failover) and finding a stream's ends;
- records.py: the schema, and a delivery as a row;
- reading.py: reading one range of offsets, on an executor;
- planning.py: offsets, batch ends, partitions, on the driver;
- source.py: the pyspark.sql.datasource classes tying them together;
- pause.py: the exactly-once test's one fault-injection point (off unless set).

`hutch pipeline` (the standard sensor aggregation as a command; README "`hutch pipeline`"):

- command.py: its command line, the order of the checks, exit codes, the progress loop;
- settings.py: durations, trigger and schema checked without pyspark;
- checkpoint.py: the options a checkpoint was made with, checked when it is used again;
- preflight.py: pyspark, Java, delta-spark, the broker and the streams, before Spark starts;
- pipeline.py: the Spark job (session, parsing, windows, the file sink);
- progress.py: a batch's progress line;
- plot.py: `hutch plot`, a picture of its output (pyarrow and matplotlib, no Spark).
"""


def register(spark):
    """Register the `hutch` format with a SparkSession."""
    from .source import HutchDataSource

    spark.dataSource.register(HutchDataSource)
