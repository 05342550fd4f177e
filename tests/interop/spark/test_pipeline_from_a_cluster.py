"""A gateway's readings into a RabbitMQ stream replicated on three nodes (the run's cluster,
conftest.py rabbitmq_cluster), read by `hutch pipeline` with the three nodes as its `--uri`
list. The pipeline reads from the first node (its driver and its tasks alike); the bridge
forwards to the second. A backlog of BACKLOG readings is read in batches of BATCH while a
sensor publishes ten a second; once a Spark task is reading from the first node (a Python
worker of the executor holds a connection to its port: /proc), that node is SIGKILLed. The
pipeline goes on by itself over the next node (no restart), the task reading on from the
record it had reached. Afterwards every reading confirmed at the gateway is in the stream, and
every reading of the stream is in Parquet once, in its window: none missing, none twice.
"""

import json
import os
import signal
import time

import pika
import pytest
from brokers import BIN, RunningBroker, stop_all, wait_until
from pipeline_support import (
    Pipeline,
    Sensor,
    committed_files,
    counted_in_parquet,
    descendants,
    drained,
    is_executor_worker,
    publish_end,
    stream_readings,
)
from windowed import publish_windowed

pytestmark = [pytest.mark.xdist_group("cluster"), pytest.mark.timeout(600)]

WINDOW, WATERMARK = 2, 3  # seconds: event time is the wall clock's
OPTIONS = "?heartbeat=1&connection_timeout=2000"
BACKLOG, BATCH = 20000, 4000  # readings waiting when the pipeline starts; most read a batch


def backlog(edge):
    """BACKLOG readings of sensor s-0 into the gateway, numbered, confirmed: {seq: ts}."""
    now = round(time.time(), 3)
    messages = []
    for seq in range(1, BACKLOG + 1):
        body = json.dumps({"sensor": "s-0", "ts": now, "value": float(seq % 50)}).encode()
        headers = {"x-sensor-id": "s-0", "x-sensor-seq": seq}
        messages.append(("sensors.s-0", body, pika.BasicProperties(delivery_mode=2, headers=headers)))
    publish_windowed(edge.url, messages, exchange="amq.topic", window=1000)
    return dict.fromkeys(range(1, BACKLOG + 1), now)


def reading_from(port, pipeline):
    """Whether a Spark task (a Python worker of the executor) holds a connection to port."""
    inodes = set()
    with open("/proc/net/tcp") as f:
        for line in f.read().splitlines()[1:]:
            fields = line.split()
            if int(fields[2].split(":")[1], 16) == port and fields[3] == "01":  # ESTABLISHED
                inodes.add("socket:[%s]" % fields[9])
    for pid in descendants(pipeline.proc.pid):
        if not is_executor_worker(pid):
            continue
        try:
            if any(os.readlink("/proc/%d/fd/%s" % (pid, fd)) in inodes for fd in os.listdir("/proc/%d/fd" % pid)):
                return True
        except OSError:
            continue
    return False


def node_url(cluster, i):
    return "amqp://guest:guest@127.0.0.1:%d/" % cluster.nodes[i].port


def edge_config(cluster, stream):
    uris = ", ".join('"%s%s"' % (node_url(cluster, i), OPTIONS) for i in (1, 2, 0))
    return (
        '[server]\nname = "barn"\n'
        '[[bridge]]\nname = "up"\nuri = [%s]\n'
        % uris
        + 'source_exchange = "amq.topic"\nbinding_key = "sensors.#"\nexchange = ""\nrouting_key = "%s"\n' % stream
        + "reconnect_delay = 0.1\nmax_reconnect_delay = 0.5\nwatchdog = 1.0\n"
    )


def test_the_pipeline_reads_on_when_its_node_is_killed_and_writes_every_reading_once(tmp_path, rabbitmq_cluster):
    cluster = rabbitmq_cluster
    stream = "cluster-readings-%d" % os.getpid()
    connection = pika.BlockingConnection(pika.URLParameters(node_url(cluster, 0)))
    connection.channel().queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    connection.close()
    folder = tmp_path / "barn"
    folder.mkdir()
    (folder / "hutch.toml").write_text(edge_config(cluster, stream))
    edge = RunningBroker([os.path.join(BIN, "hutch"), "serve", "--config", str(folder / "hutch.toml")], folder)
    output, checkpoint = str(tmp_path / "aggregates"), str(tmp_path / "checkpoint")
    upstream = type("Upstream", (), {"url": ",".join(node_url(cluster, i) for i in range(3)), "stream": stream})
    windows = ("%d seconds" % WINDOW, "%d seconds" % WATERMARK)
    sensor = pipeline = None
    killed = cluster.nodes[0]
    try:
        edge.start()
        burst = backlog(edge)
        sensor = Sensor(edge)
        pipeline = Pipeline(upstream, output, checkpoint, True, *windows)
        pipeline.start("--trigger", "processing=1s", "--max-offsets-per-trigger", str(BATCH))
        wait_until(lambda: pipeline.commits() >= 1, 180, what="a first batch")
        wait_until(lambda: reading_from(killed.port, pipeline), 60, what="a task reading from the first node",
                   interval=0.005)  # fmt: skip
        at_kill = pipeline.commits()
        os.kill(killed.pid, signal.SIGKILL)
        killed.proc.wait(30)
        wait_until(
            lambda: pipeline.commits() >= at_kill + 3 or pipeline.proc.poll() is not None,
            120,
            what="three batches more, read from the other nodes",
        )
        assert pipeline.proc.poll() is None, "the pipeline ended when its node went:\n" + "\n".join(
            pipeline.lines[-30:]
        )
        sensor.stop()
        wait_until(lambda: drained(edge), 60, what="the bridge to forward everything")
        publish_end(node_url(cluster, 1), stream, "barn", time.time() + 86400)  # every window closes
        pipeline.stop()
        pipeline = Pipeline(upstream, output, checkpoint, True, *windows).start("--trigger", "available-now")
        assert pipeline.finish() == 0, "\n".join(pipeline.lines[-30:])
    finally:
        if sensor is not None:
            sensor.stop()
        if pipeline is not None:
            pipeline.stop()
        stop_all(edge)
        if killed.proc.poll() is not None:
            killed.relaunch()  # (the next test of the group finds three nodes)
    readings, records = stream_readings(node_url(cluster, 1), stream)
    for name, confirmed in (("s-0", burst), ("s-1", sensor.confirmed)):
        got = {seq for (gateway, sensor_id, seq) in readings if (gateway, sensor_id) == ("barn", name)}
        assert set(confirmed) <= got, (name, sorted(set(confirmed) - got)[:10])
    with open(os.path.join(checkpoint, "pipeline.log")) as f:  # (Spark's log: the tasks' warnings)
        said = [line.strip() for line in f if "trying again on the next broker" in line]
    expected, counted, missing, twice = counted_in_parquet(readings, output, WINDOW)
    print(
        "%d readings confirmed, %d in the stream (%d records), %d windows in %d Parquet files; batches before the "
        "kill %d; missing %d, counted twice %d; the source said: %s"
        % (len(burst) + len(sensor.confirmed), len(readings), records, len(counted), len(committed_files(output)),
           at_kill, missing, twice, said)
    )  # fmt: skip
    assert missing == twice == 0 and counted == expected
    assert any(", reading from offset " in line for line in said), "the kill fell on no task's read: %s" % said
