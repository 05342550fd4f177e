"""A gateway's name ([server] name, `--name`): shown by `hutch ctl status`, the status page and
`/metrics` (hutch_build_info), carried upstream by a bridge (x-hutch-gateway on what it
forwards without one, and its connection's name, `hutch bridge NAME/BRIDGE`), changed by a
reload; the host's name by default; a name a header, a routing key or a Parquet partition
cannot carry refused in one line at start and at reload."""

import os
import socket
import subprocess

import pika
import pytest
from brokers import BIN, RunningBroker, free_port, stop_all, wait_until
from scrapes import get, series

HUTCH = os.path.join(BIN, "hutch")


def ctl(broker, *command):
    done = subprocess.run([HUTCH, "ctl", *command, "--data", broker.data], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def publish(broker, queue, bodies_and_headers):
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
    channel = connection.channel()
    channel.confirm_delivery()
    for body, headers in bodies_and_headers:
        channel.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2, headers=headers))
    connection.close()


def taken(broker, queue, count):
    """(body, x-hutch-gateway) of count messages taken from the queue, in order."""
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
    channel = connection.channel()
    got = []

    def more():
        method, props, body = channel.basic_get(queue, auto_ack=True)
        if method is not None:
            got.append((body, (props.headers or {}).get("x-hutch-gateway")))
        return len(got) >= count

    wait_until(more, 30, what="%d messages in %s" % (count, queue), interval=0.05)
    connection.close()
    return got


def test_the_name_is_shown_carried_upstream_by_a_bridge_and_changed_by_a_reload(tmp_path):
    (tmp_path / "up").mkdir()
    (tmp_path / "edge").mkdir()
    upstream = RunningBroker([HUTCH, "serve"], tmp_path / "up").start()
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", upstream.port))
    connection.channel().queue_declare("up", durable=True)  # (before anything is forwarded to it)
    connection.close()
    metrics = free_port()
    config = tmp_path / "edge" / "hutch.toml"
    text = (
        '[server]\nname = "%s"\n[metrics]\nport = %d\n[[bridge]]\nname = "uplink"\n'
        'uri = "amqp://guest:guest@127.0.0.1:%d/"\nqueue = "readings"\nexchange = ""\nrouting_key = "up"\n'
    )
    config.write_text(text % ("pump-house", metrics, upstream.port))
    edge = RunningBroker([HUTCH, "serve", "--config", str(config)], tmp_path / "edge").start()
    try:
        publish(edge, "readings", [(b"own", None), (b"relayed", {"x-hutch-gateway": "greenhouse"})])
        assert taken(upstream, "up", 2) == [(b"own", "pump-house"), (b"relayed", "greenhouse")]
        listed = ctl(upstream, "list", "connections", "user_provided_name")
        assert "hutch bridge pump-house/uplink" in listed, listed
        assert "gateway: pump-house\n" in ctl(edge, "status")
        scraped = series(get("http://127.0.0.1:%d/metrics" % metrics)[2])
        assert [labels for (name, labels) in scraped if name == "hutch_build_info"] == [
            '{gateway="pump-house",version="0.1.0"}'
        ], scraped
        # renamed by a reload: what is forwarded from then on carries the new name
        config.write_text(text % ("pump-house-2", metrics, upstream.port))
        said = ctl(edge, "reload")
        assert "name: pump-house-2 (was pump-house)" in said, said
        publish(edge, "readings", [(b"after", None)])
        assert taken(upstream, "up", 1) == [(b"after", "pump-house-2")]
        # a name no header, partition or label can carry: the reload is refused, the name kept
        config.write_text(text % ("pump house", metrics, upstream.port))
        refused = subprocess.run([HUTCH, "ctl", "reload", "--data", edge.data], capture_output=True, text=True)
        assert refused.returncode != 0 and "reload refused" in refused.stdout + refused.stderr, refused
        assert "[server] name must be 1 to 64 letters, digits, '-' or '_'" in refused.stdout + refused.stderr
        assert "gateway: pump-house-2\n" in ctl(edge, "status")
    finally:
        stop_all(edge, upstream)
    assert [line for line in edge.errors() if "reload refused" not in line] == [] and not upstream.errors()


def test_without_a_name_the_gateway_is_named_after_its_host(tmp_path):
    broker = RunningBroker([HUTCH, "serve"], tmp_path).start()
    try:
        expected = "".join(c if c.isalnum() or c in "-_" else "-" for c in socket.gethostname().split(".")[0])
        assert "gateway: %s\n" % expected in ctl(broker, "status")
        assert ", gateway %s, data folder " % expected in broker.log()
    finally:
        broker.stop()


@pytest.mark.parametrize("name", ["", "x" * 65, "pump house", "site/7", "meter.1", "gewächshaus", 7])
def test_a_name_that_cannot_name_a_gateway_is_one_line_and_exit_2(tmp_path, name):
    config = tmp_path / "hutch.toml"
    config.write_text("[server]\nname = %s\n" % ('"%s"' % name if isinstance(name, str) else name))
    done = subprocess.run(
        [HUTCH, "serve", "--config", str(config), "--data", str(tmp_path / "data"), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "[server] name must be 1 to 64 letters, digits, '-' or '_'" in lines[0], lines
    assert not os.path.exists(tmp_path / "data"), "a start refused leaves no data folder"
