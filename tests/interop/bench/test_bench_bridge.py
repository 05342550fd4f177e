"""`hutch bench --bridge N` as a user runs it, with a small N, against the run's RabbitMQ: every
row has its figure, every phase got all N messages upstream, and nothing is left behind."""

import json
import os
import subprocess

import pika
import pytest
from brokers import BIN

# with the other tests that use the run's RabbitMQ (conftest.py's rabbitmq fixture)
pytestmark = [pytest.mark.xdist_group("bench"), pytest.mark.timeout(180)]

N = 2000
ROWS = [
    "direct: pika -> RabbitMQ, confirms, window 1000",
    "direct: raw client -> RabbitMQ, confirms, window 1000",
    "live: 4 publishers -> edge hutch, confirms (its intake)",
    "live: forwarded by the bridge until RabbitMQ holds all",
    "  forwarded / pika",
    "  forwarded / raw client",
    "offline: publishers -> edge hutch, upstream away",
    "offline: edge RSS idle, before the backlog",
    "offline: edge RSS with all queued",
    "offline: edge RSS, most while it built and drained",
    "  most / idle",
    "drain: upstream back -> the bridge's connection",
    "drain: the backlog from the edge's disk to RabbitMQ",
    "  drain / pika",
    "  drain / raw client",
    "drain under --uplink-budget: body bytes",
    "  drain / the budget",
]


def bench(*args):
    return subprocess.run(
        [os.path.join(BIN, "hutch"), "bench"] + list(args), capture_output=True, text=True, timeout=150
    )


def test_bridge_rows_against_the_runs_rabbitmq(tmp_path, rabbitmq):
    out = tmp_path / "bridge.json"
    done = bench(
        "--bridge",
        str(N),
        "--rabbitmq",
        "%s:%d" % (rabbitmq.host, rabbitmq.port),
        "--json",
        str(out),
        "--uplink-budget",
        "50000",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    for row in ROWS:
        found = [line for line in lines if line.startswith(row + "  ")]
        assert found, "no row %r in:\n%s" % (row, done.stdout)
        assert float(found[0].split()[-1].replace(",", "")) >= 0, found[0]
    for phase in ("direct (pika): ", "direct: ", "live: ", "offline: "):
        assert phase + "RabbitMQ's queue held 2,000 of 2,000" in done.stdout, done.stdout
    assert "edge RSS while 2,000 messages wait for upstream, then drain to it:" in done.stdout
    result = json.loads(out.read_text())
    figures = result["figures"]
    for key in ("pika", "direct", "live", "drain", "full-rss", "idle-rss", "drain-bytes"):
        assert figures[key] > 0, figures
    assert figures["drain/budget"] <= 1.1, "the drain went past the [uplink] budget: %r" % figures
    queued = [row[2] for row in result["samples"]]
    assert max(queued) == N and queued[-1] == 0, "the samples go from the whole backlog to none"
    # the benchmark's queue was deleted from a RabbitMQ it did not start
    connection = pika.BlockingConnection(pika.URLParameters("amqp://guest:guest@127.0.0.1:%d/" % rabbitmq.port))
    try:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker):
            connection.channel().queue_declare("bench-bridge-upstream", passive=True)
    finally:
        connection.close()


def test_bridge_needs_a_rabbitmq_and_says_so_in_one_line():
    done = bench("--bridge", "10")
    assert done.returncode == 2 and done.stdout == "", done
    assert done.stderr == "hutch bench: --bridge forwards to RabbitMQ: add --start-rabbitmq or --rabbitmq HOST:PORT\n"
