"""A URI list with a bad node in it, two hutch upstreams standing for two nodes: one whose URI has
the wrong password (it is said, with which node, and the other is used), and one that lacks the
queue the bridge sends to (the bridge says which node returns its messages and moves on; with
`declare`, the queue is made there). Nothing is lost either way.
"""

import os
import re

import pytest
from brokers import BIN, RunningBroker, wait_until
from test_bridge import consume_all, edge_with_bridge, publish_confirmed, upstream_queue

pytestmark = [pytest.mark.timeout(120)]


def upstreams(tmp_path):
    out = []
    for name in ("up1", "up2"):
        folder = tmp_path / name
        folder.mkdir()
        out.append(RunningBroker([os.path.join(BIN, "hutch"), "serve"], folder).start())
    return out


def uri(broker, password="guest"):
    return "amqp://guest:%s@127.0.0.1:%d/?connection_timeout=2000" % (password, broker.port)


def shown(broker):
    return "amqp://guest:***@127.0.0.1:%d/" % broker.port


def test_wrong_credentials_on_one_node_are_said_for_that_node_and_the_next_is_used(tmp_path):
    up1, up2 = upstreams(tmp_path)
    upstream_queue(up2.url, "central")
    edge = edge_with_bridge(
        tmp_path,
        {"name": "creds", "uri": [uri(up1, "wrong"), uri(up2)], "queue": "edge-out", "routing_key": "central"},
    )
    try:
        bodies = [b"c%03d" % i for i in range(200)]
        publish_confirmed(edge, "edge-out", bodies)
        assert [body for body, _h, _m in consume_all(up2.url, "central", len(bodies))] == bodies
        log = edge.log()
        assert re.search(re.escape(shown(up1)) + r"\S*: login refused: 403", log), log[-3000:]
        assert "bridge creds: running (upstream %s" % shown(up2) in log
    finally:
        edge.stop()
        up1.stop()
        up2.stop()


@pytest.mark.parametrize("declared", [False, True], ids=["without declare", "with declare"])
def test_a_node_without_the_queue_is_named_and_nothing_is_lost(tmp_path, declared):
    """up1 has the queue, up2 not. up1 stops: the bridge goes to up2, which cannot route what it
    is sent. Without `declare`, up2 returns each message (mandatory) until the bridge says up2
    returns them and leaves it; up1 comes back and has everything. With `declare`, the bridge
    declares the queue on up2 as it links, and what follows goes there."""
    up1, up2 = upstreams(tmp_path)
    upstream_queue(up1.url, "central")
    bridge = {
        "name": "gap",
        "uri": [uri(up1), uri(up2)],
        "queue": "edge-out",
        "routing_key": "central",
        "reconnect_delay": 0.2,
        "max_reconnect_delay": 0.5,
    }
    if declared:
        bridge["declare"] = {"queue": "central"}
    edge = edge_with_bridge(tmp_path, bridge)
    try:
        first = [b"f%03d" % i for i in range(100)]
        publish_confirmed(edge, "edge-out", first)
        assert [body for body, _h, _m in consume_all(up1.url, "central", len(first))] == first
        up1.stop()
        later = [b"l%03d" % i for i in range(50)]
        publish_confirmed(edge, "edge-out", later)
        if declared:
            got = consume_all(up2.url, "central", len(later))
        else:
            wait_until(
                lambda: re.search(
                    re.escape(shown(up2)) + r"\S*: upstream returned a message \d+ times \(312 NO_ROUTE", edge.log()
                ),
                60,
                what="the line naming the node that returns the messages",
            )
            up1.start()
            got = consume_all(up1.url, "central", len(later))
        assert sorted(body for body, _h, _m in got) == later
    finally:
        edge.stop()
        for broker in (up1, up2):
            if broker.proc.poll() is None:
                broker.stop()
