"""A bridge into a RabbitMQ cluster: three Debian rabbitmq-server nodes on this machine
(bench/brokers.py RabbitMQCluster), a quorum queue upstream, the bridge's URI list naming the
three nodes. Under a steady load (pika publishing into the edge with confirms, persistent, as
test_bridge_soak.py's Publisher does), faults of the cluster's own:

- the node the bridge is connected to SIGKILLed (and started again), twice;
- that node hung (SIGSTOP, longer than the heartbeat and the watchdog, then SIGCONT): the bridge
  leaves it within heartbeat + watchdog, and the node rejoins the cluster.

Each time: every message the edge confirmed is upstream once or more, the first copies in
publishing order, and the duplicates at most the bridge's window (its prefetch) per fault: a
quorum queue confirms a publish once a majority has it, and the bridge removes its copy only
then, sending again on the next node what was unconfirmed. The figures (confirmed, upstream,
duplicates, seconds to fail over) are printed.

HUTCH_CLUSTER_ROUNDS=N runs each scenario's faults N times over under the same load: 1 in
`make test`, 10 in `make soak`.
"""

import os
import signal
import time
import urllib.parse

import pika
import pytest
from bridge_soak import BRIDGE, PREFETCH, RUNNING, UPSTREAM_QUEUE, URI_OPTIONS, Publisher, Soak, seeded
from bridging import edge_with_bridge
from brokers import free_port, wait_until

ROUNDS = int(os.environ.get("HUTCH_CLUSTER_ROUNDS", "1"))
pytestmark = [pytest.mark.soak, pytest.mark.xdist_group("cluster"), pytest.mark.timeout(300 * ROUNDS)]


@pytest.fixture(scope="module")
def cluster(rabbitmq_cluster):
    """The run's three nodes (conftest.py), with the quorum queue UPSTREAM_QUEUE (its three
    replicas)."""
    connection = pika.BlockingConnection(pika.URLParameters(node_url(rabbitmq_cluster, 0)))
    connection.channel().queue_declare(UPSTREAM_QUEUE, durable=True, arguments={"x-queue-type": "quorum"})
    connection.close()
    return rabbitmq_cluster


def node_url(cluster, i):
    return "amqp://guest:guest@127.0.0.1:%d/" % cluster.nodes[i].port


def connected(edge, cluster):
    """The index of the node the bridge is on (its upstream URI's port), once it runs."""
    import json
    import subprocess

    from brokers import BIN

    done = subprocess.run(
        [os.path.join(BIN, "hutch"), "ctl", "bridges", "--json", "--data", edge.data], capture_output=True, text=True
    )
    (bridge,) = json.loads(done.stdout)["bridges"]
    if bridge["state"] != "running":
        return None
    port = urllib.parse.urlsplit(bridge["upstream"].replace("***", "x")).port
    ports = [getattr(node, "mqtt_port" if bridge["upstream"].startswith("mqtt") else "port") for node in cluster.nodes]
    return ports.index(port)


def mqtt_url(cluster, i):
    return "mqtt://guest:guest@127.0.0.1:%d" % cluster.nodes[i].mqtt_port


def cluster_edge(tmp_path, cluster, metrics=None, order=(0, 1, 2), url=node_url, **more):
    """The edge, its bridge's URIs the nodes in that order (url: node_url, or mqtt_url)."""
    uris = ["%s%s" % (url(cluster, i), URI_OPTIONS) for i in order]
    return edge_with_bridge(tmp_path, dict(BRIDGE, uri=uris, **more), metrics_port=metrics)


def leader(cluster):
    """The index of the node the quorum queue's leader is on."""
    import json

    (queue,) = [q for q in json.loads(cluster.ctl("list_queues", "name", "leader", "--formatter", "json"))
                if q["name"] == UPSTREAM_QUEUE]  # fmt: skip
    return [node.node for node in cluster.nodes].index(queue["leader"])


def on_connected(fault, edge, cluster, soak):
    """The fault, as Soak runs it: on the node the bridge is on now."""
    return lambda: fault(connected(edge, cluster), soak)


def soaked(tmp_path, cluster, faults, metrics=False, url=node_url, **more):
    """The edge bridging into the cluster under load (more: keys of its [[bridge]]); faults
    ([(kind, function of the connected node's index and the Soak)]) one after another; what came
    upstream checked, and said: (the Soak, what came upstream in the order it came)."""
    seed, chooser = seeded()
    connection = pika.BlockingConnection(pika.URLParameters(node_url(cluster, 0)))
    connection.channel().queue_purge(UPSTREAM_QUEUE)  # (what a test before left there)
    # (a named cluster: every node says this name, and the bridge warns of none on its way)
    assert connection._impl.server_properties["cluster_name"] == "hutch-cluster"
    connection.close()
    port = free_port() if metrics else None
    edge = cluster_edge(tmp_path, cluster, port, url=url, **more)
    publisher = Publisher(edge, BRIDGE["queue"])
    soak = Soak(edge, None, publisher, node_url(cluster, 0), chooser)
    soak.metrics = port
    soak.kinds = {kind: on_connected(fault, edge, cluster, soak) for kind, fault in faults}
    try:
        publisher.start()
        wait_until(lambda: soak.count(RUNNING), what="the bridge running")
        soak.run([kind for kind, _ in faults] * ROUNDS)
        received = soak.collect()
    finally:
        publisher.stopping.set()
        edge.stop()
    first, by_kind, most = soak.duplicates(received)
    soak.check_order(received, first)
    assert set(publisher.confirmed) <= set(received)
    assert most[0] <= PREFETCH, "more duplicates after one fault than the window: %r (seed %d)" % (most, seed)
    assert not edge.errors(), edge.log()[-3000:]
    assert "is in cluster" not in edge.log()  # (the nodes say one cluster_name: no warning)
    print(
        "cluster, seed %d: faults %s; %d published, %d confirmed, %d upstream, %d duplicates (by kind %s; at most "
        "%d after one fault, window %d); seconds until the bridge ran again %s"
        % (seed, [kind for kind, _ in faults], publisher.next, len(publisher.confirmed), len(received),
           len(received) - len(first), by_kind, most[0], PREFETCH, [round(t, 1) for _, _, t in soak.timeline])
    )  # fmt: skip
    return soak, received


def running_nodes(cluster):
    import json

    return len(json.loads(cluster.ctl("cluster_status", "--formatter", "json"))["running_nodes"])


def killing(cluster, failed_over):
    """A fault (Soak's): SIGKILL the node the bridge is on; once it runs on another, the node is
    started again (the next fault finds three nodes). failed_over: the seconds, appended."""

    def kill(i, soak):
        node = cluster.nodes[i]
        running = soak.count(RUNNING)
        at = time.monotonic()
        os.kill(node.pid, signal.SIGKILL)
        wait_until(lambda: soak.count(RUNNING) > running, 60, what="the bridge on another node", interval=0.05)
        failed_over.append(round(time.monotonic() - at, 1))
        node.relaunch()

    return kill


def test_the_node_the_bridge_is_on_sigkilled_twice_loses_nothing(tmp_path, cluster):
    failed_over = []
    kill = killing(cluster, failed_over)
    soaked(tmp_path, cluster, [("first node kill", kill), ("second node kill", kill)])
    print("seconds from each kill to the bridge running on another node: %s" % failed_over)
    assert running_nodes(cluster) == 3


@pytest.fixture
def mqtt_plugin(cluster):
    """RabbitMQ's MQTT plugin started on each node for one test, and stopped after it. The nodes
    boot without it: a 3.10 node booting with it asks the plugin's Ra cluster (of client ids)
    for its members, which cannot answer while a majority is down, and the boot fails after
    100 s (the two-nodes-down test brings two nodes back one after the other)."""
    for i in range(len(cluster.nodes)):
        cluster.ctl("eval", "application:ensure_all_started(rabbitmq_mqtt).", node=i)
    yield
    for i in range(len(cluster.nodes)):
        cluster.ctl("eval", "application:stop(rabbitmq_mqtt).", node=i)


def test_an_mqtt_uri_list_into_the_nodes_mqtt_plugin_loses_nothing_when_the_node_is_killed(
    tmp_path, cluster, mqtt_plugin
):
    """The bridge publishes QoS 1 to RabbitMQ's MQTT plugin on the three nodes (topic soak-in:
    amq.topic, bound to the quorum queue). RabbitMQ's PUBACK comes once the quorum queue has
    the message; the bridge's own disk queue is its session: what had no PUBACK when the node
    went is published again on the next node."""
    connection = pika.BlockingConnection(pika.URLParameters(node_url(cluster, 0)))
    connection.channel().queue_bind(UPSTREAM_QUEUE, "amq.topic", UPSTREAM_QUEUE)
    connection.close()
    failed_over = []
    soaked(tmp_path, cluster, [("mqtt node kill", killing(cluster, failed_over))], url=mqtt_url)
    print("MQTT: seconds from the kill to the bridge running on another node: %s" % failed_over)


def test_a_hung_node_is_left_within_heartbeat_and_watchdog_and_rejoins(tmp_path, cluster):
    left = {}

    def hang(i, soak):
        """SIGSTOP: the node accepts (its kernel's backlog) and answers nothing, until the bridge
        runs on another node and two seconds more; then SIGCONT."""
        node = cluster.nodes[i]
        running = soak.count(RUNNING)
        at = time.monotonic()
        os.kill(node.pid, signal.SIGSTOP)
        try:
            wait_until(lambda: soak.count(RUNNING) > running, 60, what="the bridge on another node", interval=0.05)
            left["seconds"] = time.monotonic() - at
            time.sleep(2)
        finally:
            os.kill(node.pid, signal.SIGCONT)

    soaked(tmp_path, cluster, [("hung node", hang)])
    # heartbeat 1 s, the watchdog 1 s, the handshake's connection_timeout 2 s: left within seconds
    assert left["seconds"] < 10, "the bridge left the hung node after %.1f s" % left["seconds"]
    print("the bridge left the hung node after %.1f s" % left["seconds"])
    wait_until(lambda: running_nodes(cluster) == 3, 60, what="the hung node back in the cluster", interval=1)


def test_without_a_majority_nothing_is_confirmed_nothing_leaves_the_edge_and_it_says_so(tmp_path, cluster):
    """Two of the three nodes down: the one left takes publishes and confirms none (its quorum
    queue has no majority). The edge keeps every message (nothing confirmed, nothing removed),
    and says the bridge is unconfirmed: `hutch ctl bridges`, /metrics. One node back, and the
    backlog drains."""
    import json
    import subprocess

    from brokers import BIN
    from scrapes import get, series

    said = {}

    def two_down(i, soak):
        down = [n for n in range(3) if n != i][:1] + [i]  # the bridge's node among them
        for n in down:
            os.kill(cluster.nodes[n].pid, signal.SIGKILL)
        for n in down:
            cluster.nodes[n].proc.wait(30)

        def shown():
            done = subprocess.run([os.path.join(BIN, "hutch"), "ctl", "bridges", "--data", soak.edge.data],
                                  capture_output=True, text=True)  # fmt: skip
            return done.stdout if "no confirms from any node" in done.stdout else None

        said["ctl"] = wait_until(shown, 60, what="the bridge unconfirmed", interval=0.5)
        scraped = series(get("http://127.0.0.1:%d/metrics" % soak.metrics)[2])
        said["metric"] = scraped[("hutch_bridge_state", '{bridge="soak",state="unconfirmed"}')]
        done = subprocess.run([os.path.join(BIN, "hutch"), "ctl", "bridges", "--json", "--data", soak.edge.data],
                              capture_output=True, text=True)  # fmt: skip
        said["backlog"] = json.loads(done.stdout)["bridges"][0]["backlog"]
        for n in down:  # one node back: a majority, and the backlog drains; then the other
            cluster.nodes[n].relaunch()

    soaked(tmp_path, cluster, [("two nodes down", two_down)], metrics=True)
    print("without a majority: %s; backlog kept at the edge: %d" % (said["ctl"].splitlines()[1:], said["backlog"]))
    assert said["metric"] == 1 and said["backlog"] > 0


def test_prefer_first_moves_back_once_the_first_node_answers_and_a_hung_one_never_takes_the_link_down(
    tmp_path, cluster
):
    """prefer_first: the first node hung (SIGSTOP), the bridge goes on on the second; its probes
    of the first (a second connection) get no answer for 6 s, and the working link goes on,
    confirms and all (mosquitto#3293 drops it); SIGCONT, and the next probe's answer moves the
    bridge back, once what it had in flight is confirmed."""
    said = {}

    # the first URI a node the queue's leader is not on: while it hangs, the others confirm
    first = (leader(cluster) + 1) % 3
    order = (first, (first + 1) % 3, (first + 2) % 3)

    def hang_then_back(i, soak):
        assert i == first, "the bridge starts on the first URI's node"
        node = cluster.nodes[first]
        running = soak.count(RUNNING)
        os.kill(node.pid, signal.SIGSTOP)
        try:
            wait_until(lambda: soak.count(RUNNING) > running, 60, what="the bridge on the second node", interval=0.05)
            on_second = soak.count(RUNNING)
            confirmed = len(soak.publisher.confirmed)
            time.sleep(6)  # probes of the hung node meanwhile, each unanswered
            said["links while hung"] = soak.count(RUNNING) - on_second
            said["confirms while hung"] = len(soak.publisher.confirmed) - confirmed
        finally:
            os.kill(node.pid, signal.SIGCONT)
            said["log at the resume"] = len(soak.edge.log())
        at = time.monotonic()
        wait_until(lambda: "moved back from" in soak.edge.log(), 60, what="the bridge back on the first node")
        said["moved back after"] = round(time.monotonic() - at, 1)

    faults = [("hung first node, then back", hang_then_back)]
    soak, received = soaked(tmp_path, cluster, faults, order=order, prefer_first=True)
    print("prefer_first: %s" % said)
    assert said["links while hung"] == 0, "a probe that gets no answer never takes the working link down"
    assert said["confirms while hung"] > 500, said
    log = soak.edge.log()
    # one failover while the node hung; its return may stall the cluster's confirms past the
    # watchdog once more (a full run's load did so: a failover to the third node at the
    # SIGCONT), and the bridge moves back once
    before = log[: said.pop("log at the resume")]
    assert before.count("failed over from") == 1 and log.count("moved back from") == 1, log[-3000:]
    wait_until(lambda: running_nodes(cluster) == 3, 60, what="the first node back in the cluster", interval=1)


def confirm_stall(metrics, seconds):
    """The longest time, within the next `seconds`, in which upstream confirmed nothing to the
    bridge (its hutch_bridge_forwarded_total on the edge's /metrics, read every 50 ms)."""
    from scrapes import get

    def forwarded():
        text = get("http://127.0.0.1:%d/metrics" % metrics)[2]
        return [line for line in text.splitlines() if line.startswith("hutch_bridge_forwarded_total{")][0]

    longest, last, count = 0.0, time.monotonic(), forwarded()
    ends = last + seconds
    while time.monotonic() < ends:
        time.sleep(0.05)
        now, seen = time.monotonic(), forwarded()
        if seen != count:
            count, last = seen, now
        longest = max(longest, now - last)
    return longest


def test_the_quorum_leader_sigkilled_while_the_bridge_is_on_another_node_pauses_confirms_for_the_election(
    tmp_path, cluster
):
    said = {}
    # the bridge on a node the leader is not on: its first URI
    first = (leader(cluster) + 1) % 3
    order = (first, (first + 1) % 3, (first + 2) % 3)

    def kill_the_leader(i, soak):
        was = leader(cluster)
        assert i != was, "the bridge is on another node than the leader"
        os.kill(cluster.nodes[was].pid, signal.SIGKILL)
        said["confirms paused for s"] = round(confirm_stall(soak.metrics, 8), 1)
        said["links"] = soak.count(RUNNING)
        cluster.nodes[was].relaunch()
        said["new leader"] = leader(cluster) != was
        return True  # (the bridge's link stays up through it)

    soak, _ = soaked(tmp_path, cluster, [("leader kill", kill_the_leader)], metrics=True, order=order)
    print("leader killed: %s" % said)
    assert said["links"] == 1, "the bridge stayed on its node"
    assert said["new leader"] and running_nodes(cluster) == 3


def test_a_rolling_restart_of_the_three_nodes_loses_nothing(tmp_path, cluster):
    """stop_app and start_app on each node in turn, as an upgrade does: the bridge's node closes
    its connections (320 CONNECTION_FORCED), and the bridge goes on on another."""

    def rolling(i, soak):
        for node in range(3):
            cluster.ctl("stop_app", node=node)
            cluster.ctl("start_app", node=node)
            wait_until(lambda: running_nodes(cluster) == 3, 60, what="the node back", interval=0.5)

    soak, _ = soaked(tmp_path, cluster, [("rolling restart", rolling)])
    assert soak.edge.log().count("failed over from") >= 1
