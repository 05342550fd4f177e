"""A URI list with a bad node in it, two hutch upstreams standing for two nodes: one whose URI has
the wrong password (it is said, with which node, and the other is used), and one that lacks the
queue the bridge sends to (the bridge says which node returns its messages and moves on; with
`declare`, the queue is made there). A node of another cluster in
the list is said when the bridge moves there. Nothing is lost either way.
"""

import os
import re

import pika
import pytest
from bridging import consume_all, edge_with_bridge, publish_confirmed, rabbitmq_url, upstream_count, upstream_queue
from brokers import BIN, RunningBroker, stop_all, wait_until

pytestmark = [pytest.mark.timeout(120)]


def upstreams(tmp_path, clusters=("hall", "hall")):
    """Two hutch upstreams, up1 and up2, each a cluster of one named as given ([server] name:
    the cluster_name its connection.start says, as a RabbitMQ cluster's nodes say theirs)."""
    out = []
    for name, cluster in zip(("up1", "up2"), clusters):
        folder = tmp_path / name
        folder.mkdir()
        config = folder / "hutch.toml"
        config.write_text('[server]\nname = "%s"\n' % cluster)
        command = [os.path.join(BIN, "hutch"), "serve", "--config", str(config)]
        out.append(RunningBroker(command, folder).start())
    return out


def arrived(url, queue, expected, earlier=()):
    """What came to queue upstream until each of expected had, in the order it came, checked:
    each of expected came, the first copies in order, and nothing else but copies of earlier
    ones (in flight when the node before stopped: their confirms lost, sent again)."""
    got = []
    while True:
        missing = [body for body in expected if body not in got]
        if not missing:
            break
        batch = [body for body, _h, _m in consume_all(url, queue, len(missing))]
        assert batch, "never came: %r" % missing[:5]
        got += batch
    first = []
    for body in got:
        if body not in first:
            first.append(body)
    assert [body for body in first if body in expected] == list(expected), got
    assert set(got) <= set(expected) | set(earlier), got
    return got


def first_node_then_stopped(edge, up1):
    """(first, later): 50 messages published at the edge and arrived on up1, in order; up1
    stopped; 50 more published (confirmed at the edge: the bridge has them to send)."""
    first = [b"first-%03d" % i for i in range(50)]
    publish_confirmed(edge, "edge-out", first)
    assert [body for body, _h, _m in consume_all(up1.url, "central", len(first))] == first
    up1.stop()
    later = [b"later-%03d" % i for i in range(50)]
    publish_confirmed(edge, "edge-out", later)
    return first, later


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
        assert "is in cluster" not in log  # (up1's refusal: no link ran there)
    finally:
        stop_all(edge, up1, up2)


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
        first, later = first_node_then_stopped(edge, up1)
        if declared:
            arrived(up2.url, "central", later, first)
        else:
            wait_until(
                lambda: re.search(
                    re.escape(shown(up2)) + r"\S*: upstream returned a message \d+ times \(312 NO_ROUTE", edge.log()
                ),
                60,
                what="the line naming the node that returns the messages",
            )
            up1.start()
            arrived(up1.url, "central", later, first)
    finally:
        stop_all(edge, up1, up2)  # (a stopped one: nothing to do)


@pytest.mark.parametrize("prefer_first", [False, True], ids=["one cluster's list", "prefer_first"])
def test_a_node_of_another_cluster_in_the_list_is_said_as_the_bridge_moves_there(tmp_path, prefer_first):
    """up1 is in cluster 'north', up2 in 'south'. up1 stops: the bridge moves to up2 and says that
    what it sends now is in another cluster's queues, unless prefer_first says the list is a
    primary and a standby elsewhere. Everything arrives, on whichever node it went to."""
    up1, up2 = upstreams(tmp_path, ("north", "south"))
    for broker in (up1, up2):
        upstream_queue(broker.url, "central")
    bridge = {"name": "far", "uri": [uri(up1), uri(up2)], "queue": "edge-out", "routing_key": "central"}
    bridge.update(reconnect_delay=0.2, max_reconnect_delay=0.5, prefer_first=prefer_first)
    edge = edge_with_bridge(tmp_path, bridge)
    try:
        first, later = first_node_then_stopped(edge, up1)
        arrived(up2.url, "central", later, first)
        said = "bridge far: %s" % shown(up2)
        line = [text for text in edge.log().splitlines() if "is in cluster" in text]
        if prefer_first:
            assert line == []
        else:
            assert len(line) == 1 and said in line[0], edge.log()[-3000:]
            assert "is in cluster 'south', not 'north' as the node before" in line[0]
    finally:
        stop_all(edge, up1, up2)  # (a stopped one: nothing to do)


def test_a_missing_quorum_queue_is_declared_as_one_and_a_declare_that_differs_is_said(tmp_path, rabbitmq):
    """Against RabbitMQ: the quorum queue the bridge sends to is missing; `declare` with its
    arguments makes it again, as a quorum queue, and everything arrives. A second bridge whose
    declare leaves the arguments out asks for a classic queue of that name: RabbitMQ's 406 is
    said, with the node, and what it was to send waits at its edge."""
    url = rabbitmq_url(rabbitmq)
    connection = pika.BlockingConnection(pika.URLParameters(url))
    connection.channel().queue_delete("central-quorum")
    connection.close()
    quorum = {"x-queue-type": "quorum"}
    bridge = {"name": "q", "uri": url, "queue": "edge-out", "routing_key": "central-quorum"}
    edge = edge_with_bridge(tmp_path, dict(bridge, declare={"queue": "central-quorum", "arguments": quorum}))
    other = None
    try:
        bodies = [b"q%03d" % i for i in range(100)]
        publish_confirmed(edge, "edge-out", bodies)
        wait_until(
            lambda: _exists(url, "central-quorum"), 30, what="the bridge's declare upstream"
        )  # (confirmed at the edge first)
        assert [body for body, _h, _m in consume_all(url, "central-quorum", len(bodies))] == bodies
        connection = pika.BlockingConnection(pika.URLParameters(url))
        connection.channel().queue_declare("central-quorum", durable=True, arguments=quorum)  # (406 unless quorum)
        connection.close()
        other = edge_with_bridge(tmp_path, dict(bridge, declare={"queue": "central-quorum"}), name="edge-2")
        publish_confirmed(other, "edge-out", bodies[:20])
        inequivalent = "bridge q: amqp://guest:***@127.0.0.1:%d/: upstream closed the channel: 406" % rabbitmq.port
        wait_until(lambda: inequivalent in other.log(), 30, what="the 406 said")
        assert "inequivalent arg 'x-queue-type'" in other.log()
        connection = pika.BlockingConnection(pika.URLParameters(other.url))
        waiting = connection.channel().queue_declare("edge-out", passive=True).method.message_count
        connection.close()
        assert waiting == 20  # (at the edge, nothing lost)
    finally:
        stop_all(edge, *([other] if other is not None else []))
        connection = pika.BlockingConnection(pika.URLParameters(url))
        connection.channel().queue_delete("central-quorum")
        connection.close()


def _exists(url, name):
    """Whether upstream has queue `name` (a passive declare answers, not a 404)."""
    try:
        upstream_count(url, name)
    except pika.exceptions.ChannelClosedByBroker:
        return False
    return True
