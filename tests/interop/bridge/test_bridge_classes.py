"""A bridge's classes of messages (server/bridges/config.py classes): after an outage the class of
the higher priority goes first; a class's time-to-live drops what waited too long, its disk
budget refuses new messages or drops the oldest, and `hutch ctl bridges` shows each class's
backlog, age, bytes and drops."""

import json
import os
import subprocess

import pika
import pytest
from bridging import consume_every, edge_with_bridge, upstream_queue
from brokers import BIN, RunningBroker, wait_until

pytestmark = [pytest.mark.timeout(180)]


def publish(edge, key, bodies):
    """bodies to amq.topic with key, confirmed: how many the edge refused (nacked)."""
    connection = pika.BlockingConnection(pika.URLParameters(edge.url))
    channel = connection.channel()
    channel.confirm_delivery()
    refused = 0
    for body in bodies:
        try:
            channel.basic_publish("amq.topic", key, body, pika.BasicProperties(delivery_mode=2))
        except pika.exceptions.NackError:
            refused += 1
    connection.close()
    return refused


def bridges(edge):
    done = subprocess.run(
        [os.path.join(BIN, "hutch"), "ctl", "bridges", "--json", "--data", edge.data], capture_output=True, text=True
    )
    return {b["name"]: b for b in json.loads(done.stdout)["bridges"]}


def test_after_an_outage_alarms_go_first_stale_and_over_budget_messages_are_dropped_and_counted(tmp_path):
    up_folder = tmp_path / "up"
    up_folder.mkdir()
    upstream = RunningBroker([os.path.join(BIN, "hutch"), "serve"], up_folder).start()
    upstream_queue(upstream.url, "central")  # (durable: there when it comes back)
    upstream.stop()  # the outage
    edge = edge_with_bridge(
        tmp_path,
        {
            "name": "cloud",
            "uri": "amqp://guest:guest@127.0.0.1:%d/?heartbeat=1&connection_timeout=1000" % upstream.port,
            "source_exchange": "amq.topic",
            "exchange": "",
            "routing_key": "central",
            # backoffs of up to 2 s: the classes' links come back at different moments, the
            # telemetry's often before the alarms' (which it then waits for)
            "reconnect_delay": 0.5,
            "max_reconnect_delay": 2.0,
            "classes": [
                # (the telemetry's bridge first: it starts, and so comes back, first)
                {
                    "name": "telemetry",
                    "binding_key": "sensors.#",
                    "priority": 1,
                    "max_bytes": 10000,
                    "when_full": "drop-oldest",
                },  # fmt: skip
                {"name": "debug", "binding_key": "debug.#", "ttl": 1},
                {"name": "alarms", "binding_key": "alarms.#", "priority": 9, "max_bytes": 2000},
            ],
        },
    )
    try:
        telemetry = [b"t%03d" % i + b"." * 96 for i in range(300)]  # 100 bytes each: the newest 100 fit
        alarms = [b"a%03d" % i + b"." * 46 for i in range(50)]  # 50 bytes each: 40 fit, 10 refused
        assert publish(edge, "sensors.greenhouse.temp", telemetry) == 0
        assert publish(edge, "alarms.door", alarms) == 10
        assert publish(edge, "debug.trace", [b"d%03d" % i for i in range(50)]) == 0
        wait_until(lambda: bridges(edge)["cloud.debug"]["dropped"] == 50, 30, what="the debug class's expiry")
        shown = bridges(edge)
        upstream.start()
        got = [body for body, _h, _m in consume_every(upstream.url, "central", alarms[:40] + telemetry[200:])]
        text = subprocess.run(
            [os.path.join(BIN, "hutch"), "ctl", "bridges", "--data", edge.data], capture_output=True, text=True
        ).stdout
        assert not edge.errors(), edge.log()[-3000:]
    finally:
        edge.stop()
        if upstream.proc.poll() is None:
            upstream.stop()
    print(text)
    assert (shown["cloud.telemetry"]["dropped"], shown["cloud.telemetry"]["backlog"]) == (200, 100), shown
    assert (shown["cloud.alarms"]["refused"], shown["cloud.alarms"]["backlog"]) == (10, 40), shown
    assert shown["cloud.alarms"]["priority"] == 9 and shown["cloud.debug"]["ttl_s"] == 1
    assert shown["cloud.telemetry"]["bytes"] == 10000 and shown["cloud.telemetry"]["max_bytes"] == 10000
    assert got == alarms[:40] + telemetry[200:], "not every alarm first, then the telemetry that fit, in order"
    assert "priority 9; ttl none; 0 bytes waiting of 2,000; dropped 0 (expired or over its budget), refused 10" in text


def test_an_alarm_is_raised_and_cleared_once_each_and_shown_on_metrics(tmp_path):
    """alarm_backlog and alarm_age (core/bridge/alarms.py): crossed while upstream is away, one
    warning line and hutch_bridge_alarm 1; cleared once upstream took the backlog, one line and 0."""
    import urllib.request

    from bridging import toml
    from brokers import free_port

    up_folder = tmp_path / "up"
    up_folder.mkdir()
    upstream = RunningBroker([os.path.join(BIN, "hutch"), "serve"], up_folder).start()
    upstream_queue(upstream.url, "central")
    upstream.stop()  # away
    folder = tmp_path / "edge"
    folder.mkdir()
    bridge = {"name": "cloud", "uri": "amqp://guest:guest@127.0.0.1:%d/?connection_timeout=1000" % upstream.port,
              "queue": "out", "routing_key": "central", "reconnect_delay": 0.2, "max_reconnect_delay": 0.5,
              "alarm_backlog": 50, "alarm_age": 2}  # fmt: skip
    config = folder / "hutch.toml"
    config.write_text("[[bridge]]\n" + "".join("%s = %s\n" % (k, toml(v)) for k, v in bridge.items()))
    port = free_port()
    command = [os.path.join(BIN, "hutch"), "serve", "--config", str(config), "--metrics-port", str(port)]
    edge = RunningBroker(command, folder).start()

    def alarm():
        text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read().decode()
        return [line for line in text.splitlines() if line.startswith('hutch_bridge_alarm{bridge="cloud"}')]

    try:
        connection = pika.BlockingConnection(pika.URLParameters(edge.url))
        channel = connection.channel()
        channel.confirm_delivery()
        for i in range(60):
            channel.basic_publish("", "out", b"m%d" % i, pika.BasicProperties(delivery_mode=2))
        connection.close()
        wait_until(lambda: "bridge cloud: alarm:" in edge.log(), 30, what=edge.log)
        assert alarm() == ['hutch_bridge_alarm{bridge="cloud"} 1'], alarm()
        shown = bridges(edge)["cloud"]["alarm"]
        upstream.start()
        wait_until(lambda: "bridge cloud: alarm cleared" in edge.log(), 30, what=edge.log)
        assert alarm() == ['hutch_bridge_alarm{bridge="cloud"} 0'], alarm()
        log = edge.log()
    finally:
        edge.stop()
        upstream.stop()
    assert shown.startswith("backlog 60 messages (alarm_backlog 50)"), shown
    raised = [line for line in log.splitlines() if "bridge cloud: alarm" in line]
    assert len(raised) == 2, raised  # once raised (its reasons may grow: not said again), once cleared
