"""Exactly once from the sensor's reading to the Parquet row, through real faults.

Sensors -> edge hutch -> bridge -> upstream stream queue -> `hutch pipeline` -> Parquet:

- 40 sensor clients (hutch.client, `Client(sensor_id=...)`: x-sensor-id and x-sensor-seq set
  by the client, the boot count from a file) under CPython, and 10 umqtt.robust sensors under
  the `micropython` command (their identity in the JSON payload, a boot counter in a file),
  each publishing readings with confirms (QoS 1), sending again what was not confirmed
  (the sensor client's republish; umqtt.robust's publish, under a new packet id), every reading
  written to the sensor's log before the next is sent (tests/sensor/numbered_sensors.py,
  numbered_umqtt.py);
- the edge takes them over AMQP and MQTT through TCP proxies, routes them (amq.topic,
  sensors.#) to a queue its bridge forwards to the upstream's stream queue through another
  proxy; upstream is a second hutch (hutch to hutch: exactly once already) or the run's
  RabbitMQ (at least once: the pipeline's dedup is what counts each reading once);
- `hutch pipeline` reads the stream while the faults happen, and once more at the end.

During the run, one after another while the sensors publish: their links muted after their
publishes (the confirms and PUBACKs lost) and then cut; the bridge's link cut, and muted
(upstream's confirms lost, what was in flight sent again) and cut; the edge
SIGKILLed and started again; the pipeline SIGKILLed (after a committed batch) and started
again; the upstream SIGKILLed and started again; the sensors' links muted and cut again; the
bridge's link black-holed for 3 s, then healed.
Then, once the sensors are done and the edge has forwarded everything, a reading far in the
future closes every window (the watermark is long: no reading is late), and the pipeline
runs to the end from its checkpoint. Every reading any sensor logged is counted in exactly one
window row: per sensor and window, the count equals the distinct readings logged (0 missing,
0 counted twice), and min and max agree. RabbitMQ's stream holds repeats (what the bridge
sent again); a hutch upstream's none.

The sensors publish a reading every HUTCH_E2E_PAUSE=0.5 s each until 2 s after the last fault;
with HUTCH_E2E_SECONDS=N the round of faults comes again and again for N seconds (a larger
run: the figures it prints go in the closing note). The test can fail:
HUTCH_E2E_DEDUP=off runs the edge with `[limits] max_sensors = 0` and the pipeline with
`--dedup none`, and the repeats the faults cause are counted twice.
"""

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pika
import pytest
from brokers import BIN, RunningBroker, free_port, pika_connection, sigkill, wait_until
from micropython_env import micropython
from paths import ROOT
from pipeline_support import Pipeline, committed_files, expected_windows, logged, publish_end, written_aggregates
from tcp_proxy import TcpProxy

pytestmark = [pytest.mark.timeout(900)]

SECONDS = float(os.environ.get("HUTCH_E2E_SECONDS", "0"))  # rounds of faults for at least this long
PAUSE = os.environ.get("HUTCH_E2E_PAUSE", "0.5")  # s between a sensor's readings
MOST = 100000  # readings per sensor at most (they stop when the test says)
AMQP_SENSORS, MQTT_SENSORS = 40, 10
T0 = 1714604400  # 2024-05-01T23:00:00Z: each sensor's n-th reading is stamped T0 + 10 n
END_TS = T0 + 3000 * 86400  # the reading that closes every window
GATEWAY = "edge"  # the edge's [server] name: its readings' x-hutch-gateway upstream
UMQTT = os.path.join(ROOT, "build", "umqtt")
SENSORS = os.path.join(ROOT, "tests", "sensor")
BRIDGE = {
    "name": "up",
    "queue": "edge-readings",
    "exchange": "",  # upstream's default exchange, to the stream by its name (routing_key)
    "prefetch": 50,
    "reconnect_delay": 0.1,
    "max_reconnect_delay": 0.5,
    "watchdog": 1.0,
}
URI_OPTIONS = "?heartbeat=1&connection_timeout=2000"
DEDUP = os.environ.get("HUTCH_E2E_DEDUP", "on") != "off"
# the pipeline's micro-batches while the faults happen: each costs Spark about a CPU-second, and
# the kill needs only one committed batch before it
TRIGGER = "processing=5s"


def toml(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"%s"' % value
    return repr(value)


class Edge:
    """The edge hutch: MQTT and AMQP, the up bridge to `upstream_port` (a proxy's)."""

    def __init__(self, tmp_path, upstream_port, stream):
        folder = tmp_path / "edge"
        folder.mkdir()
        self.mqtt_port = free_port()
        bridge = dict(
            BRIDGE, uri="amqp://guest:guest@127.0.0.1:%d/%s" % (upstream_port, URI_OPTIONS), routing_key=stream
        )
        config = folder / "hutch.toml"
        config.write_text(
            '[server]\nname = "%s"\nmqtt_port = %d\n\n' % (GATEWAY, self.mqtt_port)
            + ("" if DEDUP else "[limits]\nmax_sensors = 0\n\n")
            + "[[bridge]]\n"
            + "".join("%s = %s\n" % (k, toml(v)) for k, v in bridge.items())
        )
        self.broker = RunningBroker([os.path.join(BIN, "hutch"), "serve", "--config", str(config)], folder).start()
        connection = pika_connection(self.broker)
        channel = connection.channel()
        channel.queue_declare(BRIDGE["queue"], durable=True)
        channel.queue_bind(BRIDGE["queue"], "amq.topic", "sensors.#")
        connection.close()

    def status(self):
        try:
            with open(os.path.join(self.broker.data, "status.json")) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}

    def drained(self):
        """Everything the sensors gave the edge is upstream: its queue empty, the bridge's
        backlog and in-flight none, as a status written after now says."""
        since = time.time()
        wait_until(lambda: self.status().get("written_at", 0) > since, 30, what="a fresh status.json")
        status = self.status()
        bridge = status["bridges"][0]
        return bridge["state"] == "running" and bridge["backlog"] == 0 and bridge["in_flight"] == 0


class Upstream:
    """hutch, or the run's RabbitMQ: a stream queue, killed and started again."""

    def __init__(self, kind, tmp_path, rabbitmq=None):
        self.kind = kind
        self.stream = "readings-%s" % uuid.uuid4().hex[:8]
        if kind == "hutch":
            folder = tmp_path / "upstream"
            folder.mkdir()
            self.server = RunningBroker([os.path.join(BIN, "hutch"), "serve"], folder).start()
        else:
            self.server = rabbitmq
        self.port = self.server.port
        self.url = "amqp://guest:guest@127.0.0.1:%d/" % self.port
        connection = self.connection()
        connection.channel().queue_declare(self.stream, durable=True, arguments={"x-queue-type": "stream"})
        connection.close()

    def connection(self):
        return pika.BlockingConnection(pika.URLParameters(self.url))

    def kill_and_start(self):
        if self.kind == "hutch":
            sigkill(self.server)
            self.server.start()
        else:  # SIGKILL of its beam.smp: its queues are recovered at the start
            os.kill(self.server.pid, signal.SIGKILL)
            self.server.proc.wait(30)  # (the wrapper script follows its beam)
            self.server.log.close()
            self.server._launch()  # the same command, folder and ports
            self.server.start()

    def stop(self):
        if self.kind == "hutch":
            code = self.server.stop()
            assert not self.server.errors(), self.server.log()[-3000:]
            assert code == 0


def run_sensors(tmp_path, edge, amqp_proxy, mqtt_proxy, stop):
    """The two sensor processes, started (they stop once the file stop exists): (their Popens,
    the log files)."""
    folder = str(tmp_path / "sensors")
    os.makedirs(folder, exist_ok=True)
    amqp_log, mqtt_log = os.path.join(folder, "amqp.log"), os.path.join(folder, "mqtt.log")
    procs = [
        subprocess.Popen(
            [sys.executable, "-u", os.path.join(SENSORS, "numbered_sensors.py"), str(amqp_proxy.port), "a",
             str(AMQP_SENSORS), str(MOST), amqp_log, folder, stop, str(T0), PAUSE],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        ),
        subprocess.Popen(
            [micropython(), os.path.join(SENSORS, "numbered_umqtt.py"), UMQTT, str(mqtt_proxy.port), "m",
             str(MQTT_SENSORS), str(MOST), mqtt_log, folder, stop, str(T0), PAUSE],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        ),
    ]  # fmt: skip
    return procs, (amqp_log, mqtt_log)


def stream_repeats(upstream):
    """(records in the upstream stream, those whose x-sensor-id and x-sensor-seq came before):
    read from its first offset until it has nothing more for a second."""
    connection = upstream.connection()
    channel = connection.channel()
    channel.basic_qos(prefetch_count=1000)
    seen, records, again = {}, 0, 0
    for method, properties, _body in channel.consume(
        upstream.stream, arguments={"x-stream-offset": "first"}, inactivity_timeout=1
    ):
        if method is None:
            break
        records += 1
        headers = properties.headers or {}
        key = (headers.get("x-sensor-id"), headers.get("x-sensor-seq"))
        if key[1] is not None:
            bridged = (headers.get("x-hutch-origin"), headers.get("x-hutch-seq"))
            if key in seen:
                again += 1
                print("a repeat of %r at offset %s: bridged as %r, first %r at offset %s" % (
                    key, headers.get("x-stream-offset"), bridged, seen[key][0], seen[key][1]))  # fmt: skip
            else:
                seen[key] = (bridged, headers.get("x-stream-offset"))
        channel.basic_ack(method.delivery_tag)
    connection.close()
    return records, again


def mute_and_cut(proxies):
    """The sensors' publishes arrive; their confirms and PUBACKs are lost; then the links are cut."""
    for proxy in proxies:
        proxy.mute_replies()
    time.sleep(0.4)
    for proxy in proxies:
        proxy.heal()  # (drops the muted links: FIN)


def mute_while_publishing_and_cut(proxy):
    """The bridge's publishes arrive upstream while their confirms are lost, then the link is
    cut: what was in flight is sent again. Muted only once the bridge's link carries readings
    (it may still be coming back from the fault before), and cut only once more of them went
    through the muted link, so that there is always something in flight to send again."""

    def publishing(since):
        return lambda: proxy.forwarded > since + 2000  # (a few publishes, not heartbeats)

    wait_until(publishing(proxy.forwarded), 30, what="the bridge's link to carry readings")
    proxy.mute_replies()
    wait_until(publishing(proxy.forwarded), 30, what="readings through the muted link")
    proxy.heal()  # (drops the muted link: FIN)


def running(procs):
    return all(proc.poll() is None for proc in procs)


def sensor_to_parquet(tmp_path, upstream, request):
    edge = bridge_proxy = amqp_proxy = mqtt_proxy = pipeline = None
    procs = []
    try:
        bridge_proxy = TcpProxy(upstream.port).start()
        edge = Edge(tmp_path, bridge_proxy.port, upstream.stream)
        amqp_proxy = TcpProxy(edge.broker.port).start()
        mqtt_proxy = TcpProxy(edge.mqtt_port).start()
        sensor_proxies = (amqp_proxy, mqtt_proxy)
        output, checkpoint = str(tmp_path / "aggregates"), str(tmp_path / "checkpoint")
        request.getfixturevalue("spark_jvm")  # (conftest.py: the run's class archive, once made)
        pipeline = Pipeline(upstream, output, checkpoint, DEDUP).start("--trigger", TRIGGER)
        runs = [pipeline]
        wait_until(lambda: any("Spark started" in line for line in pipeline.lines), 120, what="Spark")
        stop = str(tmp_path / "stop")
        procs, logs = run_sensors(tmp_path, edge, amqp_proxy, mqtt_proxy, stop)
        started = time.monotonic()
        faults = []

        def fault(name, action):
            assert running(procs), "the sensors were done before: %s" % name
            action()
            faults.append(name)
            time.sleep(1.5)

        time.sleep(2)
        while True:  # a round of faults (again and again for HUTCH_E2E_SECONDS)
            fault("sensor links muted, then cut", lambda: mute_and_cut(sensor_proxies))
            fault("bridge link cut", bridge_proxy.cut)
            fault("bridge link's confirms lost, then cut", lambda: mute_while_publishing_and_cut(bridge_proxy))
            fault("edge SIGKILLed", lambda: (sigkill(edge.broker), edge.broker.start()))
            wait_until(pipeline.went_on, 120, what="a batch committed by this run of the pipeline")
            fault("pipeline SIGKILLed", pipeline.kill)
            pipeline = Pipeline(upstream, output, checkpoint, DEDUP).start("--trigger", TRIGGER)
            runs.append(pipeline)
            fault("upstream SIGKILLed", upstream.kill_and_start)
            fault("sensor links muted, then cut, again", lambda: mute_and_cut(sensor_proxies))
            fault(
                "bridge link black-holed 3 s", lambda: (bridge_proxy.black_hole(), time.sleep(3), bridge_proxy.heal())
            )
            if time.monotonic() - started >= SECONDS:
                break
        faults_took = time.monotonic() - started
        time.sleep(2)
        open(stop, "w").close()

        for proc in procs:
            out, _ = proc.communicate(timeout=600)
            assert proc.returncode == 0, out[-3000:]
        sensors_took = time.monotonic() - started
        readings = logged(logs)
        wait_until(edge.drained, 120, what="the edge's bridge to forward everything")
        publish_end(upstream.url, upstream.stream, GATEWAY, END_TS)
        pipeline.stop()  # (the one started after the kill: it may have failed with the upstream's restart)
        pipeline = Pipeline(upstream, output, checkpoint, DEDUP).start("--trigger", "available-now")
        runs.append(pipeline)
        assert pipeline.finish() == 0, "\n".join(pipeline.lines[-30:])
        records, repeated = stream_repeats(upstream)

        written, _ = written_aggregates(output)
        written.pop((GATEWAY, END_TS // 60 * 60, "~end"), None)  # (its window is still open: not written)
        expected = expected_windows(readings, GATEWAY)
        missing = sum(count for key, (count, _, _) in expected.items() if key not in written)
        counted = {key: row[0] for key, row in written.items()}
        twice = sum(max(0, counted[key] - expected.get(key, (0,))[0]) for key in counted)
        short = sum(max(0, expected[key][0] - counted.get(key, 0)) for key in expected)
        edge_dropped = edge.status().get("sensors", {}).get("duplicates_dropped")
        print(
            "%s: %d readings from %d sensors in %.0f s; %d rounds of faults in the first %.0f s (%s); the edge's last start "
            "dropped %s repeats; the stream holds %d records, %d of them repeats; %d window rows in %d Parquet "
            "files: missing %d, counted twice %d"
            % (
                upstream.kind, len(readings), AMQP_SENSORS + MQTT_SENSORS, sensors_took, len(faults) // 8, faults_took, ", ".join(faults[:8]),
                edge_dropped, records, repeated, len(written),
                len(committed_files(output)), short, twice,
            )
        )  # fmt: skip
        assert missing == short == twice == 0
        assert {key: row[0] for key, row in written.items()} == {key: row[0] for key, row in expected.items()}
        for key, (_count, low, high) in expected.items():
            assert written[key][1:3] == pytest.approx((low, high)), key
        assert len(faults) % 8 == 0, faults
        # what the bridge sent again after its confirms were lost: dropped by a hutch upstream
        # (core/dedup.py); in RabbitMQ's stream, for the pipeline to drop
        assert repeated == 0 if upstream.kind == "hutch" else repeated > 0, repeated
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        if pipeline is not None:
            pipeline.stop()
        for proxy in (amqp_proxy, mqtt_proxy, bridge_proxy):
            if proxy is not None:
                proxy.stop()
        if edge is not None:
            code = edge.broker.stop()
            assert not edge.broker.errors(), edge.broker.log()[-3000:]
            assert code == 0


@pytest.mark.xdist_group("spark")
def test_every_reading_counted_once_through_faults_toward_hutch(tmp_path, request):
    upstream = Upstream("hutch", tmp_path)
    try:
        sensor_to_parquet(tmp_path, upstream, request)
    finally:
        upstream.stop()


@pytest.mark.long  # tests/conftest.py: started early
def test_every_reading_counted_once_through_faults_toward_rabbitmq(tmp_path, rabbitmq, request):
    sensor_to_parquet(tmp_path, Upstream("rabbitmq", tmp_path, rabbitmq), request)
