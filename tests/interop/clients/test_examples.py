"""The scripts and configs of examples/, which the docs include, run as the docs say to run them.

Each script runs as a user runs it (`python examples/NAME.py URL ...`, this virtualenv's
Python) against a real `hutch serve` (conftest.py's broker), and must exit 0 and print what
it did. The two gateway configs are loaded by `hutch serve --config` as they are, with one
change: the upstream address in the bridge's `uri` becomes the test's upstream (a second
hutch, or the run's RabbitMQ), whose ports are free ones, not 5673 or rabbitmq.example.com.
"""

import json
import os
import re
import shlex
import subprocess
import sys
import time

import pika
import pytest
from brokers import BIN, RunningBroker, pika_connection, wait_until
from paths import ROOT

EXAMPLES = os.path.join(ROOT, "examples")

pytestmark = pytest.mark.timeout(180)


def run_example(name, *args, timeout=120):
    """Run examples/NAME with this virtualenv's Python from the checkout's top; its stdout."""
    proc = subprocess.run(
        [sys.executable, os.path.join("examples", name), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, "%s exited with %s:\n%s\n%s" % (name, proc.returncode, proc.stdout, proc.stderr)
    return proc.stdout


def test_pika_publisher_with_confirms_and_consumer(broker):
    out = run_example("pika_confirms.py", broker.url, "20")
    assert "published 20 messages, each confirmed" in out
    assert "consumed 20 messages: reading 0 ... reading 19" in out


def test_aio_pika_rpc_over_direct_reply_to(broker):
    out = run_example("aio_pika_rpc.py", broker.url, "4")
    assert "3 squared is 9 (reply 3)" in out
    assert "4 requests answered over amq.rabbitmq.reply-to" in out


def test_celery_app_runs_a_worker_and_gets_results(broker):
    out = run_example("celery_app.py", broker.url)
    assert "add(2, 3) = 5" in out
    assert "word_count(...) = 5" in out
    assert "sum of add(i, i) for i < 10 = 90" in out
    assert "worker stopped" in out


def stream_records(broker, stream, count):
    """The first `count` records of a stream, as (properties, reading) pairs, read with pika."""
    connection = pika_connection(broker)
    channel = connection.channel()
    channel.basic_qos(prefetch_count=100)
    records = []
    for method, properties, body in channel.consume(stream, arguments={"x-stream-offset": "first"}):
        records.append((properties, json.loads(body)))
        channel.basic_ack(method.delivery_tag)
        if len(records) == count:
            break
    connection.close()
    return records


def test_sensor_simulator_backdated_into_a_stream(broker):
    out = run_example("sensor_simulator.py", "--url", broker.url, "--stream", "--duration", "300")
    assert (
        "published 90 readings of 3 sensors, ts 2024-05-01T06:00:00Z to 2024-05-01T06:04:50Z, to readings, "
        "every one confirmed" in out
    )
    records = stream_records(broker, "readings", 90)
    properties, first = records[0]
    assert properties.delivery_mode == 2 and properties.content_type == "application/json"
    assert first["sensor"] == "greenhouse-1" and first["ts"] == "2024-05-01T06:00:00Z"
    assert {r["sensor"] for _, r in records} == {"greenhouse-1", "greenhouse-2", "cold-store"}
    assert all(isinstance(r["value"], float) for _, r in records)


def test_sensor_simulator_live(broker):
    before = time.time()
    out = run_example("sensor_simulator.py", "--url", broker.url, "--live", "--duration", "2", "--interval", "1")
    assert "published 6 readings of 3 sensors" in out
    connection = pika_connection(broker)
    declared = connection.channel().queue_declare("readings", durable=True, passive=True)
    assert declared.method.message_count == 6
    connection.close()
    ts = re.findall(r"^(\S+): 3 readings published$", out, re.M)
    assert len(ts) == 2
    assert all(time.gmtime(before - 1) <= time.strptime(t, "%Y-%m-%dT%H:%M:%SZ") for t in ts)


def config_with_upstream(name, tmp_path, uri):
    """examples/NAME with the bridge's uri replaced by the test upstream's; the file's path."""
    with open(os.path.join(EXAMPLES, name)) as f:
        text = f.read()
    changed, count = re.subn(r'^uri = \["[^"]*"\]', 'uri = ["%s"]' % uri, text, flags=re.M)
    assert count == 1, "one bridge uri in %s" % name
    path = tmp_path / name
    path.write_text(changed)
    return str(path)


def readme_sensor_snippet():
    with open(os.path.join(ROOT, "README.md")) as f:
        return re.search(r"## From a sensor\n.*?```python\n(.*?)```", f.read(), re.S).group(1)


def start_gateway(config, tmp_path):
    gateway_dir = tmp_path / "gateway"
    gateway_dir.mkdir()
    return RunningBroker([os.path.join(BIN, "hutch"), "serve", "--config", config], gateway_dir).start()


def test_gateway_toml_forwards_the_sensors_readings_to_an_upstream_hutch(broker, tmp_path):
    """broker is upstream, with the stream `readings` hutch pipeline reads; the gateway runs
    examples/gateway.toml; the sensors log in with the password whose hash the file holds."""
    # upstream's stream, declared as docs/pipeline.md does it
    url = "amqp://guest:guest@127.0.0.1:%d/" % broker.port
    assert "declared readings (a stream); published nothing" in run_example(
        "sensor_simulator.py", "--url", url, "--stream", "--duration", "0"
    )
    config = config_with_upstream("gateway.toml", tmp_path, "amqp://guest:guest@127.0.0.1:%d/" % broker.port)
    gateway = start_gateway(config, tmp_path)
    try:
        url = "amqp://sensor:greenhouse@127.0.0.1:%d/" % gateway.port
        out = run_example("sensor_simulator.py", "--url", url, "--duration", "600")
        assert "published 180 readings of 3 sensors" in out
        # and the README's sensor, with the gateway's port and the sensors' user for guest's
        snippet = readme_sensor_snippet().replace("5672", str(gateway.port))
        snippet = snippet.replace('user="guest", password="guest"', 'user="sensor", password="greenhouse"')
        proc = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0 and proc.stdout == "True\n", proc.stdout + proc.stderr

        def upstream_count():
            c = pika_connection(broker)
            count = c.channel().queue_declare("readings", durable=True, passive=True).method.message_count
            c.close()
            return count == 181

        wait_until(upstream_count, 30, what="the 181 readings in the upstream stream")
        # with a [users] table only the users listed exist: no guest on the gateway
        refused = pika.ConnectionParameters(
            "127.0.0.1", gateway.port, credentials=pika.PlainCredentials("guest", "guest")
        )
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            pika.BlockingConnection(refused)
    finally:
        assert gateway.stop() == 0
    assert not gateway.errors(), gateway.log()[-3000:]
    assert [r["sensor"] for _, r in stream_records(broker, "readings", 3)] == [
        "greenhouse-1",
        "greenhouse-2",
        "cold-store",
    ]


def test_rabbitmq_upstream_toml_forwards_to_a_rabbitmq_stream(rabbitmq, tmp_path):
    """The run's RabbitMQ gets the user and permissions the file's comments give (the same
    rabbitmqctl commands) and the stream (declared with pika: this RabbitMQ runs without the
    management plugin rabbitmqadmin needs); the gateway logs in upstream as that user."""
    with open(os.path.join(EXAMPLES, "rabbitmq-upstream.toml")) as f:
        commands = [line.strip()[2:].strip() for line in f if line.startswith("#   rabbitmqctl ")]
    assert len(commands) == 2
    for command in commands:
        argv = shlex.split(command)
        proc = subprocess.run([rabbitmq.CTL] + argv[1:], env=rabbitmq.env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, (command, proc.stdout, proc.stderr)
    params = pika.ConnectionParameters(
        rabbitmq.host, rabbitmq.port, credentials=pika.PlainCredentials("guest", "guest")
    )
    connection = pika.BlockingConnection(params)
    connection.channel().queue_declare("readings", durable=True, arguments={"x-queue-type": "stream"})
    connection.close()
    uri = "amqp://edge:edge-secret@127.0.0.1:%d/%%2F?heartbeat=30&connection_timeout=10000" % rabbitmq.port
    gateway = start_gateway(config_with_upstream("rabbitmq-upstream.toml", tmp_path, uri), tmp_path)
    try:
        url = "amqp://sensor:greenhouse@127.0.0.1:%d/" % gateway.port
        assert "published 90 readings" in run_example("sensor_simulator.py", "--url", url, "--duration", "300")
        connection = pika.BlockingConnection(params)
        channel = connection.channel()
        channel.basic_qos(prefetch_count=100)
        readings = []
        for method, _properties, body in channel.consume(
            "readings", arguments={"x-stream-offset": "first"}, inactivity_timeout=30
        ):
            assert method is not None, "only %d of 90 readings reached RabbitMQ" % len(readings)
            readings.append(json.loads(body))
            channel.basic_ack(method.delivery_tag)
            if len(readings) == 90:
                break
        channel.cancel()
        channel.queue_delete("readings")
        connection.close()
    finally:
        assert gateway.stop() == 0
    assert not gateway.errors(), gateway.log()[-3000:]
    assert readings[0] == {"sensor": "greenhouse-1", "ts": "2024-05-01T06:00:00Z", "value": readings[0]["value"]}
    subprocess.run([rabbitmq.CTL, "delete_user", "edge"], env=rabbitmq.env, capture_output=True, timeout=60)


def test_kombu_queue(broker):
    out = run_example("kombu_queue.py", broker.url.rstrip("/") + "//")
    assert "published 3 readings to exchange sensors, confirmed" in out
    assert out.count("got {'sensor': 'greenhouse-1'") == 3


def test_amqplib_publisher_and_consumer(broker):
    """node runs the example with the amqplib that `make test` installs into tests/node."""
    env = dict(os.environ, NODE_PATH=os.path.join(ROOT, "tests", "node", "node_modules"))
    proc = subprocess.run(
        ["node", os.path.join("examples", "amqplib_publish.js"), broker.url],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "published 5 messages, each confirmed" in proc.stdout
    assert "consumed 5 messages" in proc.stdout
