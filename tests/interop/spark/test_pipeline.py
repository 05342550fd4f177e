"""`hutch pipeline` as an operator runs it: the venv's `hutch` in a subprocess (its own local
Spark, in its own process group), against a real `hutch serve`, readings published with pika.

The aggregates it writes are read back from the Parquet files the sink's commit log
(`_spark_metadata`) lists, and compared with aggregates computed here in plain Python from
what was published: late and out-of-order readings, repeats, two streams, two gateways, a
restart from the checkpoint with new data in capped batches whose late readings are
correction rows. Every mistake an operator can make before Spark
starts is one line on stderr, the right exit code, within a second or two.

Two full Spark runs in all (about 40 s each on a 2-core machine); the rest takes seconds.
"""

import json
import os
import subprocess
import sys

import pytest
from brokers import RunningBroker, pika_connection
from pipeline_support import (
    HUTCH,
    T0,
    assert_same,
    batch_lines,
    bodies,
    declare,
    expected_aggregates,
    first_run_readings,
    fresh,
    pipeline_args,
    publish,
    run_pipeline,
    written_aggregates,
    written_rows,
)


@pytest.fixture(scope="module")
def hutch(tmp_path_factory):
    running = RunningBroker([HUTCH, "serve"], tmp_path_factory.mktemp("hutch")).start()
    yield running
    code = running.stop()
    assert not running.errors(), "broker logged errors:\n" + running.log()[-5000:]
    assert code == 0


# ---------------------------------------------------------------- the readings


def second_run_readings():
    """Twenty readings for stream a, read in two batches of ten (--max-offsets-per-trigger 10),
    from the gateway of stream a's first readings (its progress: 00:03:20, windows closed up to
    00:01:00). First batch: one far too late (23:58:10, its window written: a correction), one
    late (00:01:40: its window still open), then time moves on to 00:06:00 (closing up to
    00:04:00). Second batch: one late again (00:00:30, its window written in the first run: a
    correction), one out of order (00:04:30, open), up to 00:07:05."""
    first = [("s0", T0 + 190, 500.0), ("s1", T0 + 400, 41.5)]
    first += [("s%d" % (i % 3), T0 + 425 + i * 10, 10.0 + i) for i in range(8)]  # 00:02:05 .. 00:03:15
    first[-1] = ("s0", T0 + 660, 66.0)  # 00:06:00
    second = [("s1", T0 + 330, 700.0), ("s2", T0 + 570, 45.0)]
    second += [("s%d" % (i % 3), T0 + 600 + i * 7, 20.0 + i) for i in range(7)]  # 00:05:00 ..
    second.append(("s2", T0 + 725, 77.0))  # 00:07:05
    return first, second


def bridged(readings, first_seq):
    """Headers of readings come through the gateway "edge"'s bridge, each numbered by its sensor
    (x-sensor-id, x-sensor-seq): the bridge's own numbers too (all new: this broker takes them
    all, as a hop that is only at least once delivers them). An older gateway's bridge stamps
    no x-hutch-gateway: the pipeline takes the node its x-hutch-origin names."""
    return [
        {"x-sensor-id": sensor, "x-sensor-seq": n, "x-hutch-origin": "edge/up", "x-hutch-seq": n}
        for n, (sensor, _, _) in enumerate(readings, first_seq)
    ]


@pytest.mark.xdist_group("spark")  # conftest.py: the Spark jobs of a run, one after another
@pytest.mark.timeout(600)
def test_aggregates_equal_python_s_and_late_readings_after_a_restart_are_correction_rows(hutch, tmp_path):
    a, b = fresh("readings-a"), fresh("readings-b")
    declare(hutch, a, b)
    first = first_run_readings()
    # stream a's readings from the gateway "edge", three of them twice: counted once. Stream
    # b's are a sensor's straight to this broker: no gateway, no numbers
    numbered = bridged(first["a"], 1)
    twice = [dict(headers, **{"x-hutch-seq": 1000 + n}) for n, headers in enumerate(numbered[3:6])]
    publish(hutch, a, bodies(first["a"]) + bodies(first["a"])[3:6], numbered + twice)
    publish(hutch, b, bodies(first["b"], 1) + [b"not json", b'{"sensor": "s2", "ts": "2024-05-01T23:59:00Z"}'])
    output, checkpoint = str(tmp_path / "aggregates"), str(tmp_path / "checkpoint")
    # failover: the first broker is not there
    command = pipeline_args("amqp://guest:guest@127.0.0.1:1/,%s" % hutch.url, "%s,%s" % (a, b), output, checkpoint)

    code, out, err, seconds = run_pipeline(*command)
    print("first run: %.1f s\n%s" % (seconds, "\n".join(out)))
    assert (code, err) == (0, []), (code, err, out)
    readings = [("edge",) + one for one in first["a"]] + [("",) + one for one in first["b"]]
    expected = expected_aggregates(readings)
    written, dates = written_aggregates(output)
    assert_same(written, expected)
    assert {gateway for gateway, _, _ in written} == {"edge", ""}
    assert dates == {"2024-05-01", "2024-05-02"}
    # one batch: every record (the repeats and the bad two included); each window its gateway's
    # readings closed written once, final
    assert batch_lines(out) == [(0, len(readings) + 3 + 2, len(expected), 0, 0)]
    before = written_rows(output)

    # new readings from edge, late ones among them; a restart from the same checkpoint in
    # capped batches
    second_a, second_b = second_run_readings()
    publish(hutch, a, bodies(second_a + second_b), bridged(second_a + second_b, 100))
    code, out, err, seconds = run_pipeline(*command, "--max-offsets-per-trigger", "10")
    print("second run: %.1f s\n%s" % (seconds, "\n".join(out)))
    assert (code, err) == (0, []), (code, err, out)
    readings += [("edge",) + one for one in second_a + second_b]
    expected_now = expected_aggregates(readings)
    written_now, _ = written_aggregates(output)  # (a window's final row once: checked as it reads)
    assert_same(written_now, expected_now)
    # the readings that came after their windows were written count: in correction rows
    assert written_now["edge", T0 + 180, "s0"][0] == expected[("edge", T0 + 180, "s0")][0] + 1
    assert 500.0 == written_now["edge", T0 + 180, "s0"][2]
    rows = written_rows(output)
    assert all(row in rows for row in before), "what was written stays as it was: rows are only added"
    corrections = [row for row in rows if row["kind"] == "correction"]
    assert sorted((row["start"], row["sensor"], row["count"]) for row in corrections) == [
        (T0 + 180, "s0", 1), (T0 + 300, "s1", 1)
    ], corrections  # fmt: skip
    batches = batch_lines(out)
    assert [batch for batch, _, _, _, _ in batches] == [1, 2]
    assert [(rows_in, lag) for _, rows_in, _, _, lag in batches] == [(10, 10), (10, 0)]
    assert [corrected for _, _, _, corrected, _ in batches] == [1, 1]
    assert sum(rows_out for _, _, rows_out, _, _ in batches) == len(rows) - len(before)


@pytest.mark.xdist_group("spark")
@pytest.mark.timeout(300)
def test_trigger_once_reads_what_is_there_and_the_checkpoint_refuses_other_options(hutch, tmp_path):
    """--trigger once: every record there is, then exit 0 (as available-now). The checkpoint
    it leaves is then refused, in one line and before Spark starts, to a run with other
    streams, another window or another output: Spark's checkpoint would take them without a
    word (the source reads an added stream from its start, the state is the old windows')."""
    a, b = fresh("once-a"), fresh("once-b")
    declare(hutch, a, b)
    readings = first_run_readings()
    everything = readings["a"] + readings["b"]
    publish(hutch, a, bodies(everything))
    output, checkpoint = str(tmp_path / "aggregates"), str(tmp_path / "checkpoint")
    common = ["--uri", hutch.url, "--checkpoint", checkpoint, "--window", "1 minute", "--watermark", "2 minutes"]
    code, out, err, _ = run_pipeline(*common, "--streams", a, "--output", output, "--trigger", "once")
    assert (code, err) == (0, []), (code, err, out)
    assert "trigger available-now" in out[0]
    assert out[1].startswith("hutch pipeline: starting Spark (") and out[2].startswith(
        "hutch pipeline: Spark started in "
    )
    expected = expected_aggregates([("",) + one for one in everything])
    assert batch_lines(out) == [(0, len(everything), len(expected), 0, 0)]
    assert_same(written_aggregates(output)[0], expected)
    plot_of(output, tmp_path / "aggregates.png", len(expected))  # (expected: a row per window and sensor)

    for changed, made_with, given in (
        (["--streams", "%s,%s" % (a, b), "--output", output], "--streams %s" % a, "--streams %s,%s" % (a, b)),
        (["--streams", a, "--output", output + "-2"], "--output %s" % output, "--output %s-2" % output),
    ):
        # without Java: had the command got past its checkpoint, it would have said that Java is
        # missing (the preflight comes next, and Spark only after it)
        code, out, err, _ = run_pipeline(*common, *changed, "--trigger", "once", env=_without_java(), timeout=60)
        assert (code, out, len(err)) == (2, [], 1), (code, out, err)
        assert err[0].startswith(
            "hutch pipeline: --checkpoint %s was made with %s; this run gives %s. " % (checkpoint, made_with, given)
        ), err
    code, out, err, _ = run_pipeline(
        *common[:-4],
        "--window",
        "5 minutes",
        "--watermark",
        "2 minutes",
        "--streams",
        a,
        "--output",
        output,
        timeout=30,
    )
    assert code == 2 and "was made with --window 1 minute; this run gives --window 5 minutes" in err[0], err
    assert_same(written_aggregates(output)[0], expected)  # nothing was written by the refused runs


def plot_of(output, png, rows):
    """`hutch plot` of a pipeline's output: a PNG of its committed windows, said in one line:
    how many windows (not rows: a row per window and sensor) of how many sensors."""
    done = subprocess.run(
        [HUTCH, "plot", "--output", output, "--png", str(png)], capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stderr) == (0, ""), done
    written = written_aggregates(output)[0]
    windows, sensors = len({start for _, start, _ in written}), len({sensor for _, _, sensor in written})
    assert windows * sensors == rows
    assert done.stdout.startswith(
        "hutch plot: %d windows of %d sensors of 1 gateway (%d aggregates), " % (windows, sensors, rows)
    ), done.stdout
    with open(png, "rb") as f:
        picture = f.read()
    assert picture.startswith(b"\x89PNG\r\n\x1a\n") and len(picture) > 10000, len(picture)


def test_plot_says_what_it_cannot_draw_in_one_line(tmp_path):
    done = subprocess.run([HUTCH, "plot", "--output", str(tmp_path), "--png", str(tmp_path / "x.png")],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done
    assert done.stderr.startswith("hutch plot: %s is not the output of hutch pipeline (no _spark_metadata" % tmp_path)
    done = subprocess.run([HUTCH, "plot", "--output", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (2, "hutch plot: the following arguments are required: --png\n")
    assert not os.path.exists(tmp_path / "x.png")


# ---------------------------------------------------------------- mistakes: one line, the right code, fast


def _args(hutch, streams="readings", *more):
    return [
        "--uri",
        hutch.url,
        "--streams",
        streams,
        "--output",
        "/nonexistent/o",
        "--checkpoint",
        "/nonexistent/c",
    ] + list(more)


def _without_java():
    """This environment with no java on PATH and no JAVA_HOME (`hutch` runs by its full path)."""
    env = dict(os.environ, PATH="/nonexistent")
    env.pop("JAVA_HOME", None)
    return env


MISTAKES = [
    (
        lambda h: ["--streams", "s", "--output", "o", "--checkpoint", "c"],
        None,
        2,
        "the following arguments are required: --uri",
    ),
    (lambda h: _args(h, "s", "--colour", "red"), None, 2, "unrecognized arguments: --colour red"),
    (lambda h: _args(h, "s", "--window", "soon"), None, 2, '--window must be a duration such as "1 minute"'),
    (lambda h: _args(h, "s", "--trigger", "often"), None, 2, "--trigger must be once, available-now or processing="),
    (
        lambda h: _args(h, "s", "--starting-offsets", "banana"),
        None,
        2,
        '--starting-offsets must be "earliest", "latest"',
    ),
    (lambda h: _args(h, "s", "--max-offsets-per-trigger", "0"), None, 2, "must be a whole number above 0, not '0'"),
    (lambda h: _args(h, "s", "--schema", "sensor STRING, ts TIMESTAMP"), None, 2, "--schema has no field 'value'"),
    (
        lambda h: _args(h, "s", "--schema", "sensor STRING, ts TIMESTAMP, value STRING"),
        None,
        2,
        "--schema: value is STRING",
    ),
    (lambda h: _args(h, "s", "--schema", "sensor STRING,, value DOUBLE"), None, 2, "has an empty field"),
    (lambda h: _args(h, "s", "--schema-file", "/nonexistent/schema.ddl"), None, 2, "--schema-file: [Errno 2]"),
    (lambda h: _args(h, "s", "--fields", "sensor=routing_key[1],ts=Time"), None, 2, "--fields says nothing of value"),
    (
        lambda h: _args(h, "s", "--fields", "sensor=a b,ts=T,value=V"),
        None,
        2,
        "--fields: sensor=a b is not a JSON path",
    ),
    (
        lambda h: _args(h, "s", "--fields", "sensor=s,ts=t,value=v", "--schema", "sensor STRING"),
        None,
        2,
        "give --fields or --schema, not both",
    ),
    (lambda h: _args(h, "s", "--format", "csv"), None, 2, "argument --format: invalid choice: 'csv'"),
    (lambda h: _args(h, "s", "--dedup", "maybe"), None, 2, "argument --dedup: invalid choice: 'maybe'"),
    (
        lambda h: ["--uri", "amqp://guest:guest@127.0.0.1:1/"] + _args(h, "s")[2:],
        None,
        1,
        "cannot connect to any broker: amqp://guest@127.0.0.1:1/%2F: [Errno 111]",
    ),
    (lambda h: _args(h, "no-such-stream"), None, 1, "there is no stream 'no-such-stream' on the broker"),
    (lambda h: _args(h, "s"), _without_java, 1, "Java 17 or later is needed to run Spark, and there is none on PATH"),
    (
        lambda h: _args(h, "s", "--format", "delta"),
        None,
        1,
        "--format delta needs delta-spark: pip install delta-spark",
    ),
    (
        lambda h: _args(h, "s," + classic(h, "plain-queue")),
        None,
        1,
        "queue 'plain-queue' is not a stream queue (x-queue-type stream), and only a stream can be read by offset: "
        "the broker refused to take it for one (PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue "
        "'plain-queue'",
    ),
]


def test_a_checkpoint_of_an_earlier_query_is_refused_and_so_is_one_made_with_another_dedup(tmp_path):
    """A checkpoint of the query before windows were kept per gateway holds state this query
    cannot read; one made with --dedup none has no repeats to go on with. Each said in one line."""
    from types import SimpleNamespace

    from hutch.spark import checkpoint

    job = SimpleNamespace(
        checkpoint=str(tmp_path), streams=["s"], output="/o", window="1 minute", watermark="10 minutes",
        schema="sensor STRING, ts TIMESTAMP, value DOUBLE", format="parquet", dedup="sensor", fields_text="",
    )  # fmt: skip
    made_with = checkpoint.options_of(job)
    earlier = dict(made_with)
    del earlier["query"]
    del earlier["--dedup"]  # (nor --dedup or --fields: a checkpoint of then is one without)
    os.makedirs(os.path.join(str(tmp_path), "commits"))
    with open(os.path.join(str(tmp_path), "commits", "0"), "w") as f:
        f.write("v1\n")
    for written, said in (
        (earlier, "was made by an earlier hutch pipeline, whose query kept one watermark for every gateway"),
        (dict(made_with, **{"--dedup": "none"}), "was made with --dedup none; this run gives --dedup sensor"),
    ):
        with open(os.path.join(str(tmp_path), checkpoint.FILE), "w") as f:
            json.dump(written, f)
        with pytest.raises(checkpoint.CheckpointMismatch) as refused:
            checkpoint.check(job)
        assert said in str(refused.value)
    job.dedup = "none"
    checkpoint.check(job)


def classic(broker, name, durable=True, arguments=None):
    """A classic queue (not a stream) with a message in it: its name."""
    connection = pika_connection(broker)
    channel = connection.channel()
    channel.queue_declare(name, durable=durable, arguments=arguments)
    channel.basic_publish("", name, b'{"sensor": "s0", "ts": 0, "value": 1}')
    connection.close()
    return name


@pytest.mark.parametrize("make_args, make_env, code, message", MISTAKES, ids=[m[3][:40] for m in MISTAKES])
def test_a_mistake_is_one_line_and_its_exit_code_before_spark_starts(hutch, make_args, make_env, code, message):
    declare(hutch, "s")
    """No Spark started: its checkpoint, /nonexistent/c, cannot be made, so a command that went
    on to start Spark would have said that instead (spark/command.py's run makes it first)."""
    got, out, err, _ = run_pipeline(*make_args(hutch), env=make_env() if make_env else None, timeout=60)
    assert (got, len(err), out) == (code, 1, []), (got, err, out)
    assert err[0].startswith("hutch pipeline: ") and message in err[0], err


@pytest.mark.parametrize("kind", ["hutch", "rabbitmq"])
def test_the_preflight_takes_only_stream_queues_and_leaves_them_as_they_were(request, kind):
    """Any queue that is not a stream is refused, whatever it differs in (type, durability, an
    argument a stream cannot have); a stream is taken, with retention arguments too. The
    check declares each queue again as a stream: nothing of theirs changes (a stream's
    records, a classic queue's message, nobody consumes them)."""
    from hutch.spark.preflight import PreflightError, streams

    broker = request.getfixturevalue(kind)
    uri = "amqp://guest:guest@%s:%d/" % (broker.host, broker.port)
    plain, transient, capped = fresh("plain"), fresh("transient"), fresh("capped")
    classic(broker, plain)
    classic(broker, transient, durable=False)
    classic(broker, capped, arguments={"x-max-length": 5})
    stream, retained = fresh("stream"), fresh("retained")
    declare(broker, stream)
    connection = pika_connection(broker)
    channel = connection.channel()
    channel.queue_declare(retained, durable=True, arguments={"x-queue-type": "stream", "x-max-length-bytes": 10**6})
    connection.close()
    publish(broker, retained, [b"r0", b"r1"])

    streams({"uri": uri, "streams": "%s,%s" % (stream, retained)})  # no error
    for name, differs in ((plain, "x-queue-type"), (transient, "durable"), (capped, "x-max-length")):
        with pytest.raises(PreflightError) as refused:
            streams({"uri": uri, "streams": "%s,%s" % (stream, name)})
        assert str(refused.value).startswith("queue %r is not a stream queue" % name)
        assert "inequivalent arg '%s'" % differs in str(refused.value)
    connection = pika_connection(broker)
    channel = connection.channel()
    for name in (plain, transient, capped):
        assert channel.queue_declare(name, passive=True).method.message_count == 1
    for name in (plain, transient, capped):
        channel.queue_delete(name)
    connection.close()


@pytest.mark.xdist_group("spark")
@pytest.mark.timeout(300)
def test_a_package_spark_cannot_fetch_is_one_line_not_the_gateway_s_error(hutch, tmp_path):
    """Spark fetches spark.jars.packages (delta-spark's way of getting Delta Lake's jars) as the
    JVM starts, and exits if it cannot; PySpark then says only JAVA_GATEWAY_EXITED. The command
    names the package it could not fetch. (A package that does not exist: no network is needed
    for it to fail, and with one it fails the same way.)"""
    declare(hutch, "s")
    submit = "--packages org.example.hutch:no-such-package:0.0.1 --conf spark.jars.ivy=%s pyspark-shell"
    env = dict(os.environ, PYSPARK_SUBMIT_ARGS=submit % (tmp_path / "ivy"))  # Ivy's cache: not the home's
    code, out, err, _ = run_pipeline(
        *_args(hutch, "s")[:4], "--output", str(tmp_path / "o"), "--checkpoint", str(tmp_path / "c"),
        "--trigger", "once", env=env, timeout=240,
    )  # fmt: skip
    assert (code, len(err)) == (1, 1), (code, err, out)
    assert err[0].startswith(
        "hutch pipeline: Spark could not fetch the package org.example.hutch#no-such-package;0.0.1 "
        "(spark.jars.packages) from Maven Central or spark-packages as it started"
    ), err


def test_java_older_than_17_is_named():
    from hutch.spark.preflight import java_major

    assert java_major('openjdk version "17.0.15" 2025-04-15') == 17
    assert java_major('openjdk version "21" 2023-09-19') == 21
    assert java_major('java version "1.8.0_392"') == 8
    assert java_major("no java here") is None


def test_other_commands_load_neither_the_spark_parts_nor_pyspark():
    """`hutch serve` (and every command but pipeline) runs without hutch.spark and pyspark."""
    probe = (
        "import sys; sys.argv = ['hutch', 'serve']; import hutch.tools.cli; "
        "print(sorted(m for m in sys.modules if m.startswith(('pyspark', 'hutch.spark', 'py4j'))))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]", done.stdout
    listing = subprocess.run([HUTCH, "--help"], capture_output=True, text=True, timeout=60, check=True).stdout
    assert "pipeline" in listing
    help_text = subprocess.run([HUTCH, "pipeline", "--help"], capture_output=True, text=True, timeout=60, check=True)
    assert "--max-offsets-per-trigger" in help_text.stdout and "--watermark" in help_text.stdout


def test_the_progress_line_of_a_batch():
    from hutch.spark.progress import line

    report = {
        "batchId": 7,
        "numInputRows": 120,
        "batchDuration": 1420,
        "sink": {"numOutputRows": -1},
        "sources": [{"endOffset": '{"a": 100, "b": 7}', "latestOffset": '{"a": 130, "b": 7}'}],
    }
    written = {"final": 6, "correction": 2}
    assert line(report, written) == "batch 7: 120 rows in, 8 rows out (6 final, 2 correction), 1.42 s, lag 30 offsets"
    assert line(report, {"final": 6}) == "batch 7: 120 rows in, 6 rows out, 1.42 s, lag 30 offsets"
    report["sources"][0]["latestOffset"] = None
    assert line(report, None) == "batch 7: 120 rows in, ? rows out, 1.42 s, lag ? offsets"  # (Delta's: not counted)


def test_a_batch_that_wrote_nothing_says_when_its_windows_close():
    from hutch.spark.progress import waiting

    report = {"batchId": 0, "numInputRows": 1080, "sink": {"numOutputRows": -1}}
    assert waiting(report, {}, "5 minutes") == (
        "no window has closed yet: each is written once its gateway sends a reading stamped 5 minutes after its "
        "end (--watermark)"
    )
    assert waiting(report, {}, "5 minutes", closed_before=True).startswith("this batch's windows are still open: "), (
        "after a batch that closed a window, it does not say none has"
    )
    assert waiting(report, {"final": 3}, "5 minutes") is None  # it wrote some: nothing to explain
    report["numInputRows"] = 0  # nothing read: nothing to explain either
    assert waiting(report, {}, "5 minutes") is None


def test_an_empty_batch_wrote_0_rows():
    from hutch.spark.progress import line

    report = {"batchId": 4, "numInputRows": 0, "sink": {"numOutputRows": -1}, "batchDuration": 20}
    assert line(report, {}).startswith("batch 4: 0 rows in, 0 rows out, 0.02 s"), line(report, {})


def test_a_failure_of_the_source_is_its_message_not_the_line_that_raised_it():
    from hutch.spark.command import first_line

    spark_error = (
        "[STREAM_FAILED] Query [id = 1] terminated with exception: PythonException:\n"
        "Traceback (most recent call last):\n"
        '  File "broker.py", line 108, in ends\n'
        '    raise StreamError("hutch source: stream %r gave no last record within timeoutMs" % stream)\n'
        "hutch.spark.broker.StreamError: hutch source: stream 'a' gave no last record within timeoutMs\n"
        "\tat org.apache.spark.api.python.BasePythonRunner...\n"
    )
    assert first_line(Exception(spark_error)) == "stream 'a' gave no last record within timeoutMs"
