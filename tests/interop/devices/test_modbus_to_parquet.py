"""Modbus devices to Parquet rows, exactly once through a gateway's bad day.

An edge hutch polls three devices (examples/modbus_device.py: each read's values say
which read of its device it is): an energy meter over Modbus TCP, and two soil probes on one
RS-485 line (a socat pty pair), where a third unit answers with a bad CRC and a fourth with
random octets (garbage, no frame at all). The edge's up
bridge forwards the readings through a TCP proxy to an upstream hutch's stream queue.

For HUTCH_MODBUS_SECONDS (40 in `make test`, 600 in `make soak`) while they are polled:

- the uplink is cut (the proxy refuses and resets every link) for HUTCH_MODBUS_CUT seconds
  (10 in `make test`, 60 in `make soak`), from a fifth of the run;
- the edge is SIGKILLed and started again at a third of the run and at two thirds;
- the meter stops answering (its server killed) from half the run for a tenth of it, then
  answers again.

Then the devices are stopped, the edge forwards what it holds, and `hutch pipeline` (its
trigger available-now) reads the stream into per-minute Parquet rows. Checked:

- the stream holds each (device, register, poll) once, each poll's values its own read's
  and in the order of the polls (modbus_support.check_polls): what the edge polled before a
  kill and had not journaled is gone, never repeated;
- the Parquet rows count each reading of the stream once per window, with its min and max;
- the meter's outage: its status messages down then up, `hutch_device_polls_total
  {device="meter",result="gone"}` on /metrics while it was down, and the probes polled on
  time meanwhile;
- the garbled unit and the one that answers garbage: down, each failed poll counted, the probes
  on the same line polled all the same, and nothing in the edge's log at error level.
"""

import json
import os
import subprocess
import time
import urllib.request

import pika
import pytest
from brokers import BIN, RunningBroker, free_port, hutch_serve, sigkill, status, stop_all, wait_until
from modbus_support import ModbusDevices, PtyPair, check_polls, device_table, drain, epoch, polls_by_device
from pipeline_support import Pipeline, publish_end, written_aggregates
from tcp_proxy import TcpProxy

pytestmark = [pytest.mark.soak, pytest.mark.timeout(900)]

SECONDS = float(os.environ.get("HUTCH_MODBUS_SECONDS", "40"))
CUT = float(os.environ.get("HUTCH_MODBUS_CUT", "10"))
INTERVAL = 0.5  # seconds between a device's polls
END_TS = "2099-01-01T00:00:00.000Z"  # the reading that closes every window


def edge_config(metrics_port, meter_port, line, uplink_port, stream):
    rtu = "modbus+rtu://%s?baudrate=19200" % line
    return (
        "[metrics]\nport = %d\n" % metrics_port
        # (the meter's reads get 2 s: on a loaded machine a few 0.3 s timeouts in a row would
        # put it in a backoff of seconds before it is stopped, and its outage would show late)
        + device_table("meter", "modbus+tcp://127.0.0.1:%d" % meter_port, 1, INTERVAL, timeout=2.0)
        + device_table("soil-1", rtu, 1, INTERVAL)
        + device_table("soil-2", rtu, 2, INTERVAL)
        + device_table("noisy", rtu, 3, INTERVAL)
        + device_table("static", rtu, 4, INTERVAL)
        + """
[[bridge]]
name = "up"
queue = "edge-readings"
uri = "amqp://guest:guest@127.0.0.1:%d/?heartbeat=1&connection_timeout=2000"
exchange = ""
routing_key = "%s"
reconnect_delay = 0.1
max_reconnect_delay = 0.5
"""
        % (uplink_port, stream)
    )


def declare(broker, queue, keys, arguments=None):
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
    channel = connection.channel()
    channel.queue_declare(queue, durable=True, arguments=arguments)
    for key in keys:
        channel.queue_bind(queue, "amq.topic", key)
    connection.close()


def drained(edge):
    """The edge's bridge running, with nothing left to forward, as a status written after now says."""
    since = time.time()
    wait_until(lambda: status(edge).get("written_at", 0) > since, 30, what="a fresh status.json")
    bridge = status(edge)["bridges"][0]
    return bridge["state"] == "running" and bridge["backlog"] == 0 and bridge["in_flight"] == 0


def metric(port, name, labels):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith(name + "{") and all('%s="%s"' % pair in line for pair in labels.items()):
                return float(line.rsplit(" ", 1)[1])
    return None


def stream_records(upstream, stream):
    """[(headers, body)] of every record of the stream, from its first offset."""
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", upstream.port))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=1000)
    records = []
    for method, properties, body in channel.consume(
        stream, arguments={"x-stream-offset": "first"}, inactivity_timeout=3
    ):
        if method is None:
            break
        records.append((properties.headers or {}, json.loads(body)))
        channel.basic_ack(method.delivery_tag)
    connection.close()
    return records


@pytest.mark.long  # tests/conftest.py: started early
def test_polled_readings_reach_parquet_once_each_through_kills_a_cut_uplink_and_a_device_gone(tmp_path, request):
    (tmp_path / "upstream").mkdir()
    (tmp_path / "edge").mkdir()
    stream = "readings"
    upstream = RunningBroker([os.path.join(BIN, "hutch"), "serve"], tmp_path / "upstream").start()
    line = PtyPair(tmp_path)
    meter_port = free_port()
    meter = ModbusDevices(meter_port, [1])
    probes = ModbusDevices(None, [1, 2, "garbled=3", "noise=4"], line=line.ends[0])
    uplink = TcpProxy(upstream.port).start()
    metrics_port = free_port()
    edge = hutch_serve(tmp_path / "edge", edge_config(metrics_port, meter_port, line.ends[1], uplink.port, stream))
    running = [meter, probes, uplink, line, upstream]
    try:
        declare(upstream, stream, (), {"x-queue-type": "stream"})
        edge.start()
        running.insert(0, edge)
        declare(edge, "edge-readings", ["sensors.#"])
        declare(edge, "statuses", ["status.#"])
        started = time.monotonic()

        def at(fraction):
            time.sleep(max(0.0, started + fraction * SECONDS - time.monotonic()))

        at(0.2)
        uplink.down()
        time.sleep(CUT)
        uplink.heal()
        at(1 / 3)
        sigkill(edge)
        edge.start()
        at(0.5)
        meter.stop()
        outage = time.time()
        wait_until(lambda: (metric(metrics_port, "hutch_device_polls_total", {"device": "meter", "result": "gone"}) or 0) > 0,
                   30, what="the meter's failed polls on /metrics")  # fmt: skip
        at(0.6)
        back = time.time()
        meter = ModbusDevices(meter_port, [1])
        running.append(meter)
        at(2 / 3)
        sigkill(edge)
        edge.start()
        at(1.0)
        for devices in (meter, probes):
            devices.stop()
        wait_until(lambda: drained(edge), 120, what="the edge's bridge to forward everything")
        ctl = json.loads(
            subprocess.run(
                [os.path.join(BIN, "hutch"), "ctl", "devices", "--data", edge.data, "--json"],
                capture_output=True, text=True, timeout=30,
            ).stdout
        )  # fmt: skip
        assert not edge.errors(), edge.errors()
        statuses = [body for _key, _headers, body in drain(edge, "statuses")]
        records = stream_records(upstream, stream)
        (gateway,) = {body["gateway"] for _, body in records}  # (the edge's: its host's name)
        publish_end(upstream.url, stream, gateway, END_TS)
        # the pipeline: every reading of the stream once in its window's row
        request.getfixturevalue("spark_jvm")  # (conftest.py: the run's class archive, once made)
        output, checkpoint = str(tmp_path / "aggregates"), str(tmp_path / "checkpoint")
        upstream.stream = stream  # (what Pipeline reads, with upstream.url)
        pipeline = Pipeline(upstream, output, checkpoint).start("--trigger", "available-now")
        try:
            assert pipeline.finish() == 0, "\n".join(pipeline.lines[-30:])
        finally:
            pipeline.stop()
    finally:
        stop_all(*running)

    readings = records
    keys = [(headers["x-sensor-id"], headers["x-sensor-seq"]) for headers, _ in readings]
    assert len(keys) == len(set(keys)), "a reading twice in the stream"
    sensor_headers = [
        {key: headers[key] for key in ("x-sensor-id", "x-sensor-seq", "x-hutch-gateway")} for headers, _ in readings
    ]
    polls, _ = polls_by_device(
        [("sensors.%s" % body["device"], headers, body) for headers, (_, body) in zip(sensor_headers, readings)]
    )  # (the bridge's own headers left out)
    # (the meter's server started again after its outage counts its reads from 1 again)
    meter = polls["meter"]
    before = {n: poll for n, poll in meter.items() if epoch(poll["moisture"]["ts"]) < outage}
    check_polls(dict(polls, meter=before, **{"meter, again": {n: p for n, p in meter.items() if n not in before}}))
    assert sorted(polls) == ["meter", "soil-1", "soil-2"], sorted(polls)
    # the probes polled on time while the meter was gone: 0.5 s apart, a little more by the line
    during = [n for n, poll in polls["soil-1"].items() if outage < epoch(poll["moisture"]["ts"]) < back]
    assert len(during) >= 0.7 * (back - outage) / INTERVAL, (len(during), back - outage)
    meter_states = [s["state"] for s in statuses if s["device"] == "meter"]
    assert "down" in meter_states and meter_states[meter_states.index("down") + 1 :][:1] == ["up"], meter_states
    counted = {d["name"]: d["polls"] for d in ctl["devices"]}
    assert counted["noisy"]["error"] >= 1 and counted["noisy"]["ok"] == 0, counted
    static = counted["static"]
    assert static["ok"] == 0 and static["error"] + static["timeout"] >= 1, counted

    written, _ = written_aggregates(output)
    expected = {}
    for _headers, body in readings:
        expected.setdefault((gateway, int(epoch(body["ts"])) // 60 * 60, body["sensor"]), []).append(body["value"])
    got = {key: row[:3] for key, row in written.items() if key[2] != "~end"}
    assert got == {
        key: (len(values), pytest.approx(min(values)), pytest.approx(max(values))) for key, values in expected.items()
    }
    print(
        "%d s: %d readings of %d polls (meter %d, soil-1 %d, soil-2 %d) in %d Parquet window rows, none missing or "
        "twice; noisy: %d errors; static: %d errors, %d timeouts"
        % (
            SECONDS, len(readings), sum(len(p) for p in polls.values()), len(polls["meter"]), len(polls["soil-1"]),
            len(polls["soil-2"]), len(got), counted["noisy"]["error"], static["error"], static["timeout"],
        )
    )  # fmt: skip
