"""A bridge URI whose host name has several addresses (a DNS name with one A record a node, as a
cluster behind one name is often published): the bridge tries each address of the name before
the URI list's next URI, as RabbitMQ's own clients and Mosquitto's bridge do with a name's
addresses. The name lives in /etc/hosts for the test's time (the resolver returns its lines in
file order): the first address black-holes connections (a node powered off: a listener whose
backlog is full drops each SYN, so a connect hangs until the URI's connection_timeout), the
second is a hutch. asyncio alone tries a name's addresses in turn only when one refuses; the
bridge's own loop gives each address its connection_timeout.
"""

import contextlib
import os
import re
import socket
import subprocess

import pytest
from bridging import consume_all, edge_with_bridge, publish_confirmed, upstream_queue
from brokers import BIN, RunningBroker, free_port

pytestmark = [pytest.mark.timeout(120)]

NAME = "hutch-twins.test"
DOWN, UP = "127.0.0.2", "127.0.0.3"  # loopback addresses: all of 127/8 answers on Linux


@contextlib.contextmanager
def hosts_entries(lines):
    """lines appended to /etc/hosts while the block runs (the file as it was afterwards)."""
    with open("/etc/hosts") as f:
        before = f.read()
    try:
        with open("/etc/hosts", "w") as f:
            f.write(before + ("" if before.endswith("\n") else "\n") + "".join(line + "\n" for line in lines))
        yield
    finally:
        with open("/etc/hosts", "w") as f:
            f.write(before)


@contextlib.contextmanager
def black_hole(host, port):
    """A listener at host:port whose backlog one held connection fills: connects to it hang."""
    listener = socket.socket()
    listener.bind((host, port))
    listener.listen(0)
    held = socket.create_connection((host, port), timeout=5)
    try:
        yield
    finally:
        held.close()
        listener.close()


def test_each_address_of_a_uri_s_host_is_tried_before_the_next_uri(tmp_path):
    up_folder = tmp_path / "up"
    up_folder.mkdir()
    upstream = RunningBroker([os.path.join(BIN, "hutch"), "serve"], up_folder, host=UP).start()
    never = free_port()  # the list's second URI: never needed while the name has a working address
    with hosts_entries(["%s %s" % (DOWN, NAME), "%s %s" % (UP, NAME)]), black_hole(DOWN, upstream.port):
        edge = edge_with_bridge(
            tmp_path,
            {
                "name": "twins",
                "uri": [
                    "amqp://guest:guest@%s:%d/?connection_timeout=1000" % (NAME, upstream.port),
                    "amqp://guest:guest@127.0.0.1:%d/" % never,
                ],
                "queue": "edge-out",
                "routing_key": "central",
                "reconnect_delay": 0.2,
            },
        )
        try:
            upstream_queue(upstream.url, "central")
            bodies = [b"t%04d" % i for i in range(300)]
            publish_confirmed(edge, "edge-out", bodies)
            got = consume_all(upstream.url, "central", len(bodies))
            assert [body for body, _h, _m in got] == bodies
            log = edge.log()
            assert re.search(
                r"bridge twins: %s at %s: timed out connecting; trying its next address, %s"
                % (re.escape(NAME), re.escape(DOWN), re.escape(UP)),
                log,
            ), log[-3000:]
            assert ":%d" % never not in log, "the second URI was tried:\n" + log[-3000:]
            shown = subprocess.run(
                [os.path.join(BIN, "hutch"), "ctl", "bridges", "--data", edge.data], capture_output=True, text=True
            )
            assert "%s:%d" % (NAME, upstream.port) in shown.stdout, shown.stdout
        finally:
            edge.stop()
            upstream.stop()
