"""A fleet into one dataset: three gateways (greenhouse, pump-house, barn), each named, each with
a sensor publishing numbered readings over AMQP and a Modbus meter polled as a [[device]]
(greenhouse's and pump-house's both called meter-1, their sensors both s-1), bridge their
readings into one stream on the run's RabbitMQ, read by `hutch pipeline` throughout. The
pump-house's uplink is cut for five times the watermark while the others go on; once its
backlog flows, the pipeline is SIGKILLed and started again from its checkpoint.

Afterwards every reading in the stream is in Parquet once, per (gateway, sensor, window): none
missing, none twice, none merged across gateways (the two meter-1s are two series). Every
reading a sensor had confirmed is in the stream. docs/pipeline.md's two snippets that read the
merged figures (Spark's and pandas') print the same figures from the output.
"""

import os
import re
import subprocess
import sys
import time

import pika
import pytest
from brokers import BIN, RunningBroker, free_port, stop_all, wait_until
from modbus_support import ModbusDevices, device_table
from pipeline_support import (
    Pipeline,
    Sensor,
    committed_files,
    counted_in_parquet,
    drained,
    publish_end,
    stream_readings,
    written_aggregates,
    written_rows,
)
from snippets import snippets
from tcp_proxy import TcpProxy

pytestmark = [pytest.mark.xdist_group("spark"), pytest.mark.timeout(600)]

GATEWAYS = (("greenhouse", "meter-1"), ("pump-house", "meter-1"), ("barn", "meter-2"))
WINDOW, WATERMARK = 2, 3  # seconds: event time is the wall clock's
CUT = 5 * WATERMARK  # the pump-house's uplink is cut this long


def gateway_config(name, meter, meter_port, uplink_port, stream):
    return (
        '[server]\nname = "%s"\n' % name
        + device_table(meter, "modbus+tcp://127.0.0.1:%d" % meter_port, 1, 0.5)
        + '\n[[bridge]]\nname = "up"\nuri = "amqp://guest:guest@127.0.0.1:%d/?heartbeat=1&connection_timeout=2000"\n'
        'source_exchange = "amq.topic"\nbinding_key = "sensors.#"\nexchange = ""\nrouting_key = "%s"\n'
        "reconnect_delay = 0.1\nmax_reconnect_delay = 0.5\nwatchdog = 1.0\n" % (uplink_port, stream)
    )


def test_three_gateways_into_one_stream_every_reading_once_through_an_outage_and_a_kill(tmp_path, rabbitmq, request):
    stream = "fleet-%d" % os.getpid()
    url = "amqp://guest:guest@127.0.0.1:%d/" % rabbitmq.port
    connection = pika.BlockingConnection(pika.URLParameters(url))
    connection.channel().queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    connection.close()
    running, sensors, gateways, proxies = [], [], {}, {}
    pipeline = None
    try:
        for name, meter in GATEWAYS:
            folder = tmp_path / name
            folder.mkdir()
            devices = ModbusDevices(free_port(), [1])
            running.append(devices)
            proxies[name] = TcpProxy(rabbitmq.port).start()
            running.append(proxies[name])
            config = folder / "hutch.toml"
            config.write_text(gateway_config(name, meter, devices.port, proxies[name].port, stream))
            gateways[name] = RunningBroker([os.path.join(BIN, "hutch"), "serve", "--config", str(config)], folder)
            gateways[name].start()
            running.insert(0, gateways[name])
        request.getfixturevalue("spark_jvm")  # (conftest.py: the run's class archive, once made)
        output, checkpoint = str(tmp_path / "aggregates"), str(tmp_path / "checkpoint")
        upstream = type("Upstream", (), {"url": url, "stream": stream})

        def started(trigger, *more):
            windows = ("%d seconds" % WINDOW, "%d seconds" % WATERMARK)
            return Pipeline(upstream, output, checkpoint, True, *windows).start("--trigger", trigger, *more)

        # batches of 100 records at most: the pump house's backlog takes several
        pipeline = started("processing=1s", "--max-offsets-per-trigger", "100")
        wait_until(lambda: any("Spark started" in line for line in pipeline.lines), 120, what="Spark")
        sensors = [Sensor(gateways[name]) for name, _ in GATEWAYS]
        time.sleep(4)
        proxies["pump-house"].down()  # the pump house's uplink is cut; the others go on
        time.sleep(CUT)
        proxies["pump-house"].heal()
        healed = len(pipeline.lines)
        # its backlog flows: once a batch after it is still behind the streams' end, the pipeline
        # is killed, and goes on from its checkpoint
        behind = re.compile(r"^batch \d+: .*, lag [1-9]\d* offsets$")
        wait_until(
            lambda: any(behind.match(line) for line in pipeline.lines[healed:]), 120, what="a batch mid-backfill"
        )
        pipeline.kill()
        pipeline = started("processing=1s", "--max-offsets-per-trigger", "100")
        time.sleep(4)
        for sensor in sensors:
            sensor.stop()
        for devices in running:
            if isinstance(devices, ModbusDevices):
                devices.stop()
        for gateway in gateways.values():
            wait_until(lambda: drained(gateway), 60, what="%s's bridge to forward everything" % gateway.data)  # noqa: B023
        for name, _ in GATEWAYS:  # a reading a day ahead from each gateway: every window before it closes
            publish_end(url, stream, name, time.time() + 86400)
        pipeline.stop()
        pipeline = started("available-now")
        assert pipeline.finish() == 0, "\n".join(pipeline.lines[-30:])
    finally:
        for sensor in sensors:
            sensor.stop()
        if pipeline is not None:
            pipeline.stop()
        stop_all(*running)
    readings, records = stream_readings(url, stream)
    for (gateway, _meter), sensor in zip(GATEWAYS, sensors):  # every confirmed reading went upstream
        got = {seq for (g, s, seq) in readings if (g, s) == (gateway, "s-1")}
        assert set(sensor.confirmed) <= got, (gateway, sorted(set(sensor.confirmed) - got)[:10])
    expected, counted, missing, twice = counted_in_parquet(readings, output, WINDOW)
    rows = [row for row in written_rows(output, WINDOW) if row["sensor"] != "~end"]
    corrections = [row for row in rows if row["kind"] == "correction"]
    per_gateway = {
        gateway: sum(1 for key in readings if key[0] == gateway and key[1] != "~end") for gateway, _ in GATEWAYS
    }
    print(
        "readings upstream per gateway %s (%d records in the stream, repeats included); %d rows in %d Parquet files, "
        "%d of them corrections holding %d readings; missing %d, counted twice %d"
        % (per_gateway, records, len(rows), len(committed_files(output)), len(corrections),
           sum(row["count"] for row in corrections), missing, twice)
    )  # fmt: skip
    assert missing == twice == 0 and counted == expected
    # two gateways' meter-1 and s-1 are two series each, counted apart
    series = {(gateway, sensor) for gateway, _, sensor in counted}
    for gateway in ("greenhouse", "pump-house"):
        assert {(gateway, "meter-1.moisture"), (gateway, "s-1")} <= series, series
    assert ("barn", "meter-2.temp") in series
    outage = [key for key in counted if key[0] == "pump-house"]
    assert len(outage) > len(expected) // 6, "the pump house's readings of the outage are there"
    written, _ = written_aggregates(output, WINDOW)
    check_the_docs_snippets(output, written, tmp_path)
    # hutch plot: a line per gateway and sensor, the two meter-1s apart
    drawn = subprocess.run(
        [os.path.join(BIN, "hutch"), "plot", "--output", output, "--png", str(tmp_path / "fleet.png")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    lines = len({(gateway, sensor) for gateway, _, sensor in written})
    assert drawn.returncode == 0 and " of %d sensors of 3 gateways (" % lines in drawn.stdout, drawn


def check_the_docs_snippets(output, written, tmp_path):
    """docs/pipeline.md's snippets that read the merged figures, run in a folder where the output
    is `aggregates`, print each window's count and mean as the merged rows have them."""
    folder = tmp_path / "reader"
    folder.mkdir()
    os.symlink(output, folder / "aggregates")
    expected = sorted(
        "%s %s %s %d %s" % (gateway, sensor, _iso(start), count, round(mean, 3))
        for (gateway, start, sensor), (count, _low, _high, mean, _last) in written.items()
    )
    blocks = [code for language, code, _ in snippets("docs/pipeline.md") if language == "python"]
    assert len(blocks) == 2 and "spark.read.parquet" in blocks[0] and "committed_files" in blocks[1]
    for code in blocks:
        done = subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        printed = sorted(re.sub(r"\+00:00\b", "", line) for line in done.stdout.splitlines())
        assert printed == expected, (code[:40], printed[:5], expected[:5])


def _iso(seconds):
    import datetime

    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).replace(tzinfo=None).isoformat()
