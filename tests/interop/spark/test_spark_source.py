"""The `hutch` PySpark data source (hutch.spark) against `hutch serve` and the run's RabbitMQ.

One Spark session for the run (conftest.py's `spark`) and one hutch broker for this module;
streams are declared and published to with pika, as any publisher would. What Spark reads
is compared with what was published: batch reads, streaming reads (Trigger.AvailableNow
into Parquet with a checkpoint, a processing-time trigger into the memory sink), every
option, several streams, batches capped by maxOffsetsPerTrigger, a restart from the
checkpoint, retention removing offsets the checkpoint still needs, and the same data read
from RabbitMQ's streams.
"""

import json
import os
import re
import uuid

import pika
import pytest
from brokers import BIN, RunningBroker, pika_connection, wait_until
from pyspark.sql import functions as F

from hutch.client.simple import Client
from hutch.spark.broker import StreamError, all_ends
from hutch.spark.options import MAX_RECORDS_PER_PARTITION, Options
from hutch.spark.planning import PlanningError, partitions, spread
from hutch.spark.reading import OffsetRange, read_range
from hutch.spark.source import HutchStreamReader

# One Spark session per run, on the worker that runs the RabbitMQ tests (conftest.py).
pytestmark = [pytest.mark.xdist_group("spark-session"), pytest.mark.timeout(300)]

STREAM = {"x-queue-type": "stream"}


@pytest.fixture(scope="module")
def hutch(tmp_path_factory):
    """One `hutch serve` for the module: every test declares streams of its own."""
    running = RunningBroker([os.path.join(BIN, "hutch"), "serve"], tmp_path_factory.mktemp("hutch")).start()
    running.kind = "hutch"
    yield running
    code = running.stop()
    assert not running.errors(), "broker logged errors:\n" + running.log()[-5000:]
    assert code == 0


def uri(target):
    return "amqp://guest:guest@%s:%d/" % (target.host, target.port)


def fresh(prefix="spark"):
    """A stream name no other test (nor a previous run on the run's RabbitMQ) uses."""
    return "%s-%s" % (prefix, uuid.uuid4().hex[:10])


def declare(target, name, arguments=None):
    connection = pika_connection(target)
    connection.channel().queue_declare(name, durable=True, arguments=dict(STREAM, **(arguments or {})))
    connection.close()
    return name


def publish(target, name, count, first=0, exchange="", size=0):
    """count messages m<first>..., with confirms, one at a time (RabbitMQ: a chunk each), each
    with headers of several AMQP types and some properties."""
    connection = pika_connection(target)
    channel = connection.channel()
    channel.confirm_delivery()
    for i in range(first, first + count):
        properties = pika.BasicProperties(
            content_type="text/plain",
            message_id="id-%d" % i,
            timestamp=1700000000 + i,
            delivery_mode=2,
            headers={"n": i, "text": "t%d" % i, "flag": i % 2 == 0, "nested": {"k": [1, "a"]}},
        )
        body = b"m%d" % i + b"." * size
        channel.basic_publish(exchange, name if not exchange else "rk-%d" % (i % 3), body, properties)
    connection.close()


def source(spark, target, streams, stream=False, **options):
    reader = spark.readStream if stream else spark.read
    reader = reader.format("hutch").option("uri", uri(target)).option("streams", ",".join(streams))
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def offsets_and_bodies(rows):
    return [
        (r["stream"], r["offset"], bytes(r["body"])) for r in sorted(rows, key=lambda r: (r["stream"], r["offset"]))
    ]


def expected(stream, start, stop, first_offset=0):
    return [(stream, first_offset + i - start, b"m%d" % i) for i in range(start, stop)]


@pytest.fixture(scope="module")
def registered(spark):
    import hutch.spark

    hutch.spark.register(spark)
    return spark


# ---------------------------------------------------------------- batch reads


def bound_stream(target, name):
    """A stream bound to the direct exchange spark-x with the routing keys publish() uses."""
    declare(target, name)
    connection = pika_connection(target)
    channel = connection.channel()
    channel.exchange_declare("spark-x", "direct")
    for key in ("rk-0", "rk-1", "rk-2"):
        channel.queue_bind(name, "spark-x", key)
    connection.close()
    return name


def test_a_batch_read_gives_every_record_in_the_fixed_schema(registered, hutch):
    name = bound_stream(hutch, fresh())
    publish(hutch, name, 6, exchange="spark-x")
    df = source(registered, hutch, [name])
    assert df.schema.simpleString() == (
        "struct<stream:string,offset:bigint,timestamp:timestamp,routing_key:string,exchange:string,"
        "headers:map<string,string>,properties:map<string,string>,body:binary>"
    )
    rows = sorted(df.collect(), key=lambda r: r["offset"])
    assert offsets_and_bodies(rows) == expected(name, 0, 6)
    row = rows[4]
    assert (row["exchange"], row["routing_key"]) == ("spark-x", "rk-1")
    assert row["timestamp"].timestamp() == 1700000004  # the publisher's timestamp property
    assert row["headers"] == {"n": "4", "text": "t4", "flag": "true", "nested": '{"k": [1, "a"]}'}
    assert row["properties"] == {
        "content_type": "text/plain",
        "message_id": "id-4",
        "timestamp": "1700000004",
        "delivery_mode": "2",
    }


def test_a_batch_read_of_several_streams_between_json_offsets(registered, hutch):
    a, b = declare(hutch, fresh("a")), declare(hutch, fresh("b"))
    publish(hutch, a, 10)
    publish(hutch, b, 4)
    df = source(
        registered,
        hutch,
        [a, b],
        startingOffsets=json.dumps({a: 3, b: -2}),
        endingOffsets=json.dumps({a: 7, b: -1}),
    )
    assert offsets_and_bodies(df.collect()) == expected(a, 3, 7, 3) + expected(b, 0, 4)
    # reading again gives the same rows: nothing was taken from the streams
    assert offsets_and_bodies(df.collect()) == expected(a, 3, 7, 3) + expected(b, 0, 4)
    # an empty stream reads as nothing
    empty = declare(hutch, fresh("empty"))
    assert source(registered, hutch, [empty, b]).count() == 4


def test_mistakes_are_one_clear_error_through_spark(registered, hutch):
    name = declare(hutch, fresh())
    publish(hutch, name, 2)
    cases = [
        ({"startingOffsets": "banana"}, 'startingOffsets must be "earliest", "latest" or JSON'),
        ({"maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger must be a whole number above 0"),
        ({"startingOffsets": "latest"}, "startingOffsets latest makes a batch query read nothing"),
        ({"endingOffsets": json.dumps({name: 50})}, "endingOffsets gives 50 for stream %r, past its end" % name),
    ]
    for options, message in cases:
        with pytest.raises(Exception) as caught:
            source(registered, hutch, [name], **options).collect()
        assert message in str(caught.value), (options, str(caught.value)[:2000])
    with pytest.raises(Exception) as caught:
        source(registered, hutch, ["no-such-stream"]).collect()
    assert "there is no stream 'no-such-stream' on the broker" in str(caught.value)
    with pytest.raises(Exception) as caught:
        source(registered, hutch, [name], stream=True, endingOffsets="latest").writeStream.format("memory").queryName(
            "never"
        ).start().awaitTermination(60)
    assert "endingOffsets is for batch queries" in str(caught.value)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"streams": "s"}, "the option 'uri' is required"),
        ({"uri": "amqp://h/", "streams": " "}, "the option 'streams' is required"),
        ({"uri": "http://h/", "streams": "s"}, "uri 'http://h/' is not amqp://"),
        ({"uri": "amqp://h:99999/", "streams": "s"}, "uri 'amqp://h:99999/' has a bad port"),
        ({"uri": "amqp://h/", "streams": "s,,t"}, "streams 's,,t' has an empty name"),
        ({"uri": "amqp://h/", "streams": "s,s"}, "streams names 's' twice"),
        ({"uri": "amqp://h/", "streams": "s", "colour": "red"}, "unknown option 'colour'"),
        ({"uri": "amqp://h/", "streams": "s", "startingOffsets": '{"t": 1}'}, "names 't', which is not one of"),
        ({"uri": "amqp://h/", "streams": "s,t", "startingOffsets": '{"s": 1}'}, "does not give an offset for t"),
        ({"uri": "amqp://h/", "streams": "s", "endingOffsets": '{"s": -3}'}, "an offset is an integer, -2 or above"),
        ({"uri": "amqp://h/", "streams": "s", "endingOffsets": '{"s": "1"}'}, "an offset is an integer"),
        ({"uri": "amqp://h/", "streams": "s", "failOnDataLoss": "maybe"}, "failOnDataLoss must be true or false"),
        ({"uri": "amqp://h/", "streams": "s", "prefetch": "x"}, "prefetch must be a whole number above 0"),
    ],
)
def test_each_bad_option_says_what_is_wrong(options, message):
    with pytest.raises(ValueError) as caught:
        Options(options)
    assert message in str(caught.value)


def test_options_take_failover_uris_vhosts_and_spark_s_any_case():
    options = Options(
        {
            "URI": "amqp://u:p%40ss@h1:5673/v%2Fh, amqp://h2",
            "STREAMS": "a, b",
            "startingoffsets": '{"a": 5, "b": -1}',
            "FailOnDataLoss": "FALSE",
        }
    )
    first, second = options.brokers
    assert (first.host, first.port, first.user, first.password, first.vhost) == ("h1", 5673, "u", "p@ss", "v/h")
    assert (second.host, second.port, second.user, second.vhost) == ("h2", 5672, "guest", "/")
    assert "p@ss" not in repr(first)
    assert options.streams == ["a", "b"] and options.starting == {"a": 5, "b": "latest"}
    assert options.fail_on_data_loss is False and options.ending == "latest" and options.max_per_trigger is None


def test_the_first_broker_that_answers_is_used(hutch):
    name = declare(hutch, fresh())
    publish(hutch, name, 3)
    with_dead_first = "amqp://guest:guest@127.0.0.1:1/," + uri(hutch)
    assert all_ends(Options({"uri": with_dead_first, "streams": name})) == {name: (0, 3)}
    with pytest.raises(StreamError) as caught:
        all_ends(Options({"uri": "amqp://guest:guest@127.0.0.1:1/", "streams": name}))
    assert "cannot connect to any broker: amqp://guest@127.0.0.1:1/%2F:" in str(caught.value)


# ---------------------------------------------------------------- planning


def test_a_capped_batch_shares_offsets_fairly_and_in_the_same_way_every_time():
    assert spread({"a": 100, "b": 100}, 10) == {"a": 5, "b": 5}
    assert spread({"a": 100, "b": 2}, 10) == {"a": 8, "b": 2}  # what b does not need goes to a
    assert spread({"a": 1000, "b": 1, "c": 0}, 3) == {"a": 2, "b": 1, "c": 0}  # no stream starved
    assert spread({"a": 3, "b": 3, "c": 3}, 4) == {"a": 2, "b": 1, "c": 1}
    assert spread({"a": 4, "b": 5}, 100) == {"a": 4, "b": 5}


def test_a_range_retention_passed_is_an_error_or_skipped():
    ends = {"s": (40, 90), "t": (0, 10)}
    with pytest.raises(PlanningError) as caught:
        partitions({"s": 30, "t": 0}, {"s": 60, "t": 10}, ends, True)
    assert "stream 's' no longer holds offset 30" in str(caught.value) and "first retained offset is 40" in str(
        caught.value
    )
    parts = partitions({"s": 30, "t": 10}, {"s": 60, "t": 10}, ends, False)
    assert [(p.stream, p.start, p.end) for p in parts] == [("s", 40, 60)]


def test_a_big_range_of_one_stream_is_split_into_several_partitions():
    """A backlog is read by several tasks: pieces of at most maxRecordsPerPartition offsets,
    of nearly equal size, the same pieces for the same range; small ranges stay whole."""

    def ranges(start, end, ends, per_partition):
        return [(p.stream, p.start, p.end) for p in partitions(start, end, ends, True, per_partition)]

    ends = {"s": (0, 1000000), "t": (0, 30)}
    million = ranges({"s": 0, "t": 0}, {"s": 1000000, "t": 30}, ends, MAX_RECORDS_PER_PARTITION)
    assert len(million) == 1000000 // MAX_RECORDS_PER_PARTITION + 1 and million[-1] == ("t", 0, 30)
    assert million[0] == ("s", 0, MAX_RECORDS_PER_PARTITION)
    assert all(a[2] == b[1] for a, b in zip(million[:-2], million[1:-1]))  # no gap, no overlap
    assert ranges({"s": 5}, {"s": 28}, ends, 10) == [("s", 5, 13), ("s", 13, 21), ("s", 21, 28)]
    assert ranges({"s": 5}, {"s": 15}, ends, 10) == [("s", 5, 15)]
    assert ranges({"s": 5}, {"s": 28}, ends, None) == [("s", 5, 28)]
    assert Options({"uri": "amqp://h/", "streams": "s"}).per_partition == MAX_RECORDS_PER_PARTITION


def test_a_split_range_is_read_by_several_tasks_and_gives_every_record_once(registered, hutch):
    name = declare(hutch, fresh())
    publish(hutch, name, 25)
    df = source(registered, hutch, [name], maxRecordsPerPartition=10)
    tasks = (
        df.groupBy(F.spark_partition_id().alias("task"))
        .agg(F.min("offset").alias("first"), F.max("offset").alias("last"), F.count("*").alias("n"))
        .collect()
    )
    assert sorted((t["first"], t["last"], t["n"]) for t in tasks) == [(0, 8, 9), (9, 16, 8), (17, 24, 8)]
    assert offsets_and_bodies(df.collect()) == expected(name, 0, 25)


def test_a_queue_that_is_not_a_stream_is_said_to_be_one_not_a_key_error(hutch):
    """A classic queue ignores x-stream-offset and delivers what it holds: the source names
    the queue and what it is not, where it asks for its ends and where a task reads it."""
    name = fresh("classic")
    connection = pika_connection(hutch)
    channel = connection.channel()
    channel.queue_declare(name, durable=True)
    channel.basic_publish("", name, b"not a record")
    connection.close()
    options = Options({"uri": uri(hutch), "streams": name})
    message = (
        "hutch source: %r is not a stream queue (x-queue-type stream): its deliveries have no x-stream-offset" % name
    )
    with pytest.raises(StreamError, match=re.escape(message)):
        all_ends(options)
    with pytest.raises(StreamError, match=re.escape(message)):
        list(read_range(options, OffsetRange(name, 0, 1)))


def test_spark_4_0_and_4_1_ask_for_the_latest_offsets_without_a_start(hutch):
    """Those releases call latestOffset() with no arguments (no admission control)."""
    name = declare(hutch, fresh())
    publish(hutch, name, 5)
    reader = HutchStreamReader(Options({"uri": uri(hutch), "streams": name}))
    assert reader.latestOffset() == {name: 5}
    capped = HutchStreamReader(Options({"uri": uri(hutch), "streams": name, "maxOffsetsPerTrigger": "2"}))
    with pytest.raises(ValueError, match="maxOffsetsPerTrigger needs Spark 4.2 or later"):
        capped.latestOffset()


# ---------------------------------------------------------------- streaming


def run_available_now(df, out, checkpoint):
    """Write df to Parquet at out with Trigger.AvailableNow; the number of input rows of each
    batch that ran, and the end offsets of each."""
    query = df.writeStream.format("parquet").option("checkpointLocation", checkpoint).trigger(availableNow=True)
    query = query.start(out)
    query.awaitTermination(240)
    assert not query.isActive, "the query did not end"
    if query.exception() is not None:
        raise query.exception()
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    return [p["numInputRows"] for p in progress], [json.loads(p["sources"][0]["endOffset"]) for p in progress]


def test_available_now_in_capped_batches_then_a_restart_reads_only_what_is_new(registered, hutch, tmp_path):
    a, b = declare(hutch, fresh("a")), declare(hutch, fresh("b"))
    publish(hutch, a, 25)
    publish(hutch, b, 5)
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    df = source(registered, hutch, [a, b], stream=True, maxOffsetsPerTrigger=10)
    sizes, ends = run_available_now(df, out, checkpoint)
    # equal shares of 10 while b has some; then a alone
    assert sizes == [10, 10, 10], sizes
    assert ends == [{a: 5, b: 5}, {a: 15, b: 5}, {a: 25, b: 5}]
    assert offsets_and_bodies(registered.read.parquet(out).collect()) == expected(a, 0, 25) + expected(b, 0, 5)
    publish(hutch, a, 7, first=25)
    sizes, ends = run_available_now(df, out, checkpoint)
    assert sizes == [7] and ends == [{a: 32, b: 5}]
    assert offsets_and_bodies(registered.read.parquet(out).collect()) == expected(a, 0, 32) + expected(b, 0, 5)


def test_a_processing_time_query_from_latest_reads_what_comes_after_it_started(registered, hutch):
    name = declare(hutch, fresh())
    publish(hutch, name, 3)  # before the query: startingOffsets latest leaves these out
    table = "live_" + name.replace("-", "_")
    df = source(registered, hutch, [name], stream=True, startingOffsets="latest")
    query = df.writeStream.format("memory").queryName(table).trigger(processingTime="500 milliseconds").start()
    try:
        wait_until(lambda: query.lastProgress is not None, 120, "the query's first trigger")
        publish(hutch, name, 4, first=3)

        def arrived():
            return offsets_and_bodies(registered.sql("select * from %s" % table).collect())

        assert wait_until(lambda: len(arrived()) >= 4 and arrived(), 60, "the new records") == [
            (name, i, b"m%d" % i) for i in range(3, 7)
        ]
    finally:
        query.stop()


def retained(target, name, count, size=1000, beyond=20):
    """Publish count messages of size bytes to a stream with small segments and a small byte
    limit, and wait until retention removed its oldest records, up to past offset beyond."""
    publish(target, name, count, first=0, size=size)
    wait_until(lambda: first_retained(target, name) > beyond, 15, "retention to drop the oldest segments")
    # Retention runs at the broker's ticks (200 ms apart): one that came during the publishes
    # may have dropped only part of what the next drops (seen under load: 72, then 80). Wait
    # until the first retained offset stays put from one look to the next, two ticks apart.
    looks = []

    def settled():
        looks.append(first_retained(target, name))
        return len(looks) > 1 and looks[-1] == looks[-2]

    wait_until(settled, 15, "retention to settle", interval=0.5)


def first_retained(target, name):
    return all_ends(Options({"uri": uri(target), "streams": name}))[name][0]


def test_retention_past_the_checkpoint_fails_the_query_or_is_skipped(registered, hutch, tmp_path):
    name = declare(hutch, fresh(), {"x-stream-max-segment-size-bytes": 10000, "x-max-length-bytes": 30000})
    publish(hutch, name, 5)
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    sizes, _ = run_available_now(source(registered, hutch, [name], stream=True), out, checkpoint)
    assert sizes == [5]
    retained(hutch, name, 101, beyond=5)  # offsets 5..105
    with pytest.raises(Exception) as caught:
        run_available_now(source(registered, hutch, [name], stream=True), out, checkpoint)
    first = first_retained(hutch, name)  # settled: nothing was published since
    message = str(caught.value)
    assert "stream %r no longer holds offset 5" % name in message, message[:3000]
    assert "its first retained offset is %d" % first in message, message[:3000]
    sizes, ends = run_available_now(
        source(registered, hutch, [name], stream=True, failOnDataLoss="false"), out, checkpoint
    )
    assert sum(sizes) == 106 - first and ends[-1] == {name: 106}
    rows = offsets_and_bodies(registered.read.parquet(out).collect())
    assert [offset for _, offset, _ in rows] == list(range(5)) + list(range(first, 106))


def test_a_task_reading_a_range_retention_passed_fails_or_skips(hutch):
    """Retention can also pass a range between planning and the task that reads it: read()
    sees the first record come past its start, and asks the stream where it begins."""
    name = declare(hutch, fresh(), {"x-stream-max-segment-size-bytes": 10000, "x-max-length-bytes": 30000})
    retained(hutch, name, 100)
    first = first_retained(hutch, name)
    options = Options({"uri": uri(hutch), "streams": name})
    with pytest.raises(StreamError, match="no longer holds offset 10, .* first retained offset is %d" % first):
        list(read_range(options, OffsetRange(name, 10, 90)))
    lenient = Options({"uri": uri(hutch), "streams": name, "failOnDataLoss": "false"})
    assert [r[1] for r in read_range(lenient, OffsetRange(name, 10, 90))] == list(range(first, 90))
    # a range within what is retained: exactly it, whatever the consumer is given around it
    assert [r[1] for r in read_range(options, OffsetRange(name, 95, 98))] == [95, 96, 97]


# ---------------------------------------------------------------- RabbitMQ


def test_rabbitmq_streams_read_as_hutch_streams(registered, hutch, rabbitmq, tmp_path):
    """The same publishes (through an exchange, with headers and properties) into a hutch
    stream and a RabbitMQ stream give the same rows, batch and streaming: every column but
    the stream's name, offsets included (both number a new stream's records 0, 1, 2... when
    each is a chunk of its own, as here). One difference, RabbitMQ's: it drops a header whose
    value is a table or an array (it keeps a stream's messages as AMQP 1.0, whose
    application properties hold only simple values)."""
    rows = {}
    for target in (hutch, rabbitmq):
        name = bound_stream(target, fresh(target.kind))
        publish(target, name, 12, exchange="spark-x")
        batch = source(registered, target, [name]).collect()
        streamed, _ = run_available_now(
            source(registered, target, [name], stream=True, maxOffsetsPerTrigger=5),
            str(tmp_path / target.kind),
            str(tmp_path / (target.kind + "-checkpoint")),
        )
        assert streamed == [5, 5, 2], (target.kind, streamed)
        again = registered.read.parquet(str(tmp_path / target.kind)).collect()
        rows[target.kind] = found = [
            sorted((r.asDict() for r in got), key=lambda r: r["offset"]) for got in (batch, again)
        ]
        assert found[0] == found[1], target.kind  # the batch read and the streamed one agree
        for r in found[0]:
            r.pop("stream")
    assert len(rows["hutch"][0]) == 12
    for mine, theirs in zip(rows["hutch"][0], rows["rabbitmq"][0]):
        assert mine["headers"].pop("nested") == '{"k": [1, "a"]}' and "nested" not in theirs["headers"]
        assert mine == theirs


def test_hutch_client_reads_the_servers_name(hutch, rabbitmq):
    """What broker.ends relies on: hutch names itself, RabbitMQ too."""
    names = []
    for target in (hutch, rabbitmq):
        client = Client(target.host, target.port)
        client.connect()
        names.append(client.protocol.server_product)
        client.close()
    assert names == ["hutch", "RabbitMQ"]


def test_readings_whose_json_is_not_flat_are_found_where_fields_says(spark):
    """hutch pipeline --fields: Tasmota's telemetry (tele/DEVICE/SENSOR, its values nested under
    the sensor's name, the device named only by the topic) read as readings: the sensor from the
    routing key's second word, ts and value by JSON paths; a record without them left out."""
    from hutch.spark.pipeline import readings_at
    from hutch.spark.records import SCHEMA
    from hutch.spark.settings import fields

    tasmota = b'{"Time": "2024-05-01T06:00:10", "SHT3X": {"Temperature": 23.4, "Humidity": 51.2}, "TempUnit": "C"}'
    rows = [
        ("s", 0, None, "tele.greenhouse-1.SENSOR", "amq.topic", {}, {}, tasmota),
        (
            "s",
            1,
            None,
            "tele.greenhouse-1.STATE",
            "amq.topic",
            {},
            {},
            b'{"Time": "2024-05-01T06:00:10", "Uptime": "1T"}',
        ),
        ("s", 2, None, "tele", "amq.topic", {}, {}, tasmota),  # (no second word: no sensor)
    ]
    records = spark.createDataFrame(rows, SCHEMA)
    found = readings_at(records, fields("sensor=routing_key[1], ts=Time, value=SHT3X.Temperature"))
    got = [(r["sensor"], r["ts"].isoformat(), r["value"]) for r in found.collect()]
    assert got == [("greenhouse-1", "2024-05-01T06:00:10", 23.4)], got
    by_header = readings_at(records, fields("sensor=header:device,ts=Time,value=SHT3X.Humidity"))
    assert by_header.count() == 0, "no device header: no sensor"
