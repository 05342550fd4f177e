"""`hutch bench --cluster N`: an up bridge into a three-node RabbitMQ cluster (bench/brokers.py
RabbitMQCluster, started here), a quorum queue upstream, N persistent 100-byte messages a phase.

1. direct: bench/loadgen.py's raw client publishing straight into the quorum queue on the first
   node, with confirms (window 1000): what the cluster takes from one client;
2. live: an edge hutch whose bridge lists the three nodes; one numbered publisher fills the
   edge's queue while the bridge forwards, and the clock runs until the quorum queue holds N;
3. node kill: the same on a new edge; once a third of the N is upstream, the node the bridge is
   connected to is SIGKILLed (and started again afterwards: it rejoins). The seconds until the
   bridge runs on another node (its `hutch_bridge_failovers_total` moving), the longest time
   nothing new reached the queue, and, once every message is consumed upstream, how many were
   lost (none may be), sent twice, and came out of order;
4. leader kill: the quorum queue's leader's node SIGKILLed while the bridge is on another node
   (its URI listed last): the confirms' pause while the queue elects a leader, the same counts.

The edge's bridge runs with `heartbeat=5`, `connection_timeout=5000` and its defaults otherwise
(prefetch 1000: the most a fail-over may send twice).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

from . import loadgen
from .brokers import BenchError, Hutch, RabbitMQCluster, failed

SIZE = 100  # bytes per message body
WINDOW = 1000  # unconfirmed publishes at most, direct and into the edge
QUEUE = "bench-cluster-upstream"
EDGE_QUEUE = "bench-cluster-outbox"
BRIDGE = "bench"
QUORUM = {"x-queue-type": "quorum"}
URI_OPTIONS = "?heartbeat=5&connection_timeout=5000"
TIMEOUT = 1800  # seconds for one phase at most
POLL = 0.02  # seconds between two looks at the queue's depth and the edge's metrics
PHASES = {"kill": "node kill", "leader": "leader kill"}  # the fault phases' row keys: their names

ROWS = (
    ("direct", "direct: raw client -> the quorum queue, confirms, window %d" % WINDOW, "msg/s"),
    ("live", "bridge: forwarded until the quorum queue holds all", "msg/s"),
    ("live/direct", "  bridge / direct", "x"),
    ("kill-failover", "node kill: the bridge's node SIGKILLed -> it runs on another", "s"),
    ("kill-pause", "  longest time nothing new reached the queue", "s"),
    ("kill-lost", "  lost", "msgs"),
    ("kill-twice", "  sent twice (at most the prefetch, %d)" % 1000, "msgs"),
    ("kill-disorder", "  first copies out of order", "msgs"),
    ("leader-pause", "leader kill: longest time nothing new reached the queue", "s"),
    ("leader-lost", "  lost", "msgs"),
    ("leader-twice", "  sent twice", "msgs"),
    ("leader-disorder", "  first copies out of order", "msgs"),
)


class NumberedPublisher(loadgen.ConfirmedPublisher):
    """Publishes whose bodies start with their number (8 digits), 0, 1, 2... in order."""

    def __init__(self, conn, queue):
        super().__init__(conn, queue, SIZE, persistent=True)
        self.queue = queue
        self.number = 0

    def frames(self, count):
        out = []
        for number in range(self.number, self.number + count):
            body = (b"%08d" % number).ljust(SIZE, b".")
            out.append(loadgen.publish_frames("", self.queue, body, self.conn.frame_max, persistent=True))
        self.number += count
        return b"".join(out)


def publish_numbered(host, port, n):
    """n numbered messages into the edge's queue, confirmed (a thread runs this)."""
    conn = loadgen.Connection(host, port, 60)
    try:
        conn.declare_queue(EDGE_QUEUE, durable=True)
        publisher = NumberedPublisher(conn, EDGE_QUEUE)
        publisher.run(n, WINDOW, time.monotonic() + TIMEOUT)
        if publisher.nacked:
            raise loadgen.LoadError("the edge refused %d publishes" % publisher.nacked)
    finally:
        conn.close()


class Depth:
    """The quorum queue's depth, asked of a node that is up (another one when it goes)."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.conn = None
        self.avoid = None  # the index of a node about to be killed

    def count(self):
        for _attempt in range(len(self.cluster.nodes) * 2):
            if self.conn is None:
                self.conn = self._connect()
            try:
                return self.conn.declare_queue(QUEUE, durable=True, arguments=QUORUM, passive=True)[1]
            except (OSError, loadgen.LoadError):
                self.close()
        raise loadgen.LoadError("no node of the cluster answers a passive declare of %s" % QUEUE)

    def _connect(self):
        for i, node in enumerate(self.cluster.nodes):
            if i == self.avoid:
                continue
            try:
                return loadgen.Connection(node.host, node.port, 10)
            except (OSError, loadgen.LoadError):
                continue
        raise loadgen.LoadError("no node of the cluster takes a connection")

    def reset(self):
        """The queue, new and empty."""
        self.count_conn().call(loadgen.spec.QUEUE_DELETE, (0, QUEUE, False, False, False))
        self.conn.declare_queue(QUEUE, durable=True, arguments=QUORUM)

    def count_conn(self):
        if self.conn is None:
            self.conn = self._connect()
        return self.conn

    def close(self):
        if self.conn is not None:
            try:
                self.conn.sock.close()
            except OSError:
                pass
            self.conn = None


def failovers(edge):
    """The edge's hutch_bridge_failovers_total for the bridge."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % edge.metrics_port, timeout=5) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith('hutch_bridge_failovers_total{bridge="%s"}' % BRIDGE):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def connected_node(edge, cluster):
    """The index of the node the edge's bridge is on (`hutch ctl bridges --json`)."""
    done = subprocess.run(
        [sys.executable, "-m", "hutch.tools.cli", "ctl", "bridges", "--json", "--data", os.path.join(edge.folder, "data")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    (bridge,) = json.loads(done.stdout)["bridges"]
    port = int(bridge["upstream"].rsplit(":", 1)[1].split("/")[0])
    return [node.port for node in cluster.nodes].index(port)


def leader_node(cluster):
    """The index of the node the quorum queue's leader is on."""
    listed = json.loads(cluster.ctl("list_queues", "name", "leader", "--formatter", "json"))
    (queue,) = [q for q in listed if q["name"] == QUEUE]
    return [node.node for node in cluster.nodes].index(queue["leader"])


def edge_for(cluster, workdir, order, edges):
    folder = tempfile.mkdtemp(prefix="edge-", dir=workdir)
    uris = ["amqp://guest:guest@127.0.0.1:%d/%s" % (cluster.nodes[i].port, URI_OPTIONS) for i in order]
    bridge = {"name": BRIDGE, "uri": uris, "queue": EDGE_QUEUE, "routing_key": QUEUE, "reconnect_delay": 0.2}
    path = os.path.join(folder, "edge.json")
    with open(path, "w") as f:
        json.dump({"bridge": [bridge]}, f)
    edge = Hutch("c", None, folder, config=path)
    edges.append(("edge", edge))
    return edge.start()


class Watch:
    """The queue's depth, looked at every POLL until it holds n: the longest time it did not
    grow, and when the edge's fail-over counter first moved (after mark())."""

    def __init__(self, depth, edge):
        self.depth, self.edge = depth, edge
        self.longest = 0.0
        self.marked = self.moved = None

    def until(self, n, fault_at=None, fault=None):
        """Poll until the queue holds n; fault() is called once it holds fault_at."""
        deadline = time.monotonic() + TIMEOUT
        last_grew, held = time.perf_counter(), 0
        base = failovers(self.edge)
        while True:
            now_held = self.depth.count()
            now = time.perf_counter()
            if now_held > held:
                self.longest = max(self.longest, now - last_grew)
                last_grew, held = now, now_held
            if fault is not None and held >= fault_at:
                fault()
                fault = None
                self.marked = time.perf_counter()
            if self.marked is not None and self.moved is None and failovers(self.edge) > base:
                self.moved = time.perf_counter()
            if held >= n:
                return now
            if time.monotonic() > deadline:
                raise loadgen.LoadError("the quorum queue holds %d of %d messages in time" % (held, n))
            time.sleep(POLL)


def upstream_numbers(cluster, avoid, n):
    """Every message in the quorum queue, consumed (pika, on a node other than avoid): the numbers
    its bodies start with, in the order they came."""
    import pika

    node = cluster.nodes[(avoid + 1) % len(cluster.nodes)] if avoid is not None else cluster.nodes[0]
    connection = pika.BlockingConnection(pika.URLParameters("amqp://guest:guest@127.0.0.1:%d/" % node.port))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=1000)
    numbers = []
    for method, _properties, body in channel.consume(QUEUE, inactivity_timeout=5):
        if method is None:
            break
        numbers.append(int(body[:8]))
        if len(numbers) % 500 == 0:
            channel.basic_ack(method.delivery_tag, multiple=True)
    channel.cancel()  # (the unacked tail goes back: the queue is deleted next anyway)
    connection.close()
    if len(numbers) < n:
        raise loadgen.LoadError("consumed %d messages from the quorum queue, %d were sent" % (len(numbers), n))
    return numbers


def counted(numbers, n, figures, key):
    """Lost, twice and out of order, from what came upstream."""
    seen, disorder, highest = set(), 0, -1
    for number in numbers:
        if number in seen:
            continue
        seen.add(number)
        if number < highest:
            disorder += 1
        highest = max(highest, number)
    figures[key + "-lost"] = len(set(range(n)) - seen)
    figures[key + "-twice"] = len(numbers) - len(seen)
    figures[key + "-disorder"] = disorder


def direct(cluster, depth, n, figures, log):
    log("direct: %s messages into the quorum queue" % "{:,}".format(n))
    depth.reset()
    node = cluster.nodes[0]
    result = loadgen.confirms(node.host, node.port, n, size=SIZE, window=WINDOW, persistent=True, queue=QUEUE,
                              arguments=QUORUM, timeout=TIMEOUT)  # fmt: skip
    figures["direct"] = result["msgs_per_s"]


def live(cluster, depth, n, workdir, figures, edges, log):
    log("live: %s messages through the bridge" % "{:,}".format(n))
    depth.reset()
    edge = edge_for(cluster, workdir, (0, 1, 2), edges)
    started = time.perf_counter()
    publishing = _publishing(edge, n)
    arrived = Watch(depth, edge).until(n)
    _joined(publishing)
    figures["live"] = round(n / (arrived - started))
    edge.stop()


def node_kill(cluster, depth, n, workdir, figures, edges, log, key, victim_of):
    """A fault phase: victim_of(edge) names the node to SIGKILL once a third is upstream. Its
    note: the bridge's fail-overs, each with why the link before it ended (its log's words)."""
    depth.reset()
    order = (0, 1, 2)
    if key == "leader":
        leader = leader_node(cluster)
        order = tuple(i for i in range(3) if i != leader) + (leader,)
    edge = edge_for(cluster, workdir, order, edges)
    publishing = _publishing(edge, n)
    watch = Watch(depth, edge)
    killed = []

    def fault():
        victim = victim_of(edge)
        depth.avoid = victim
        depth.close()
        log("%s: SIGKILL %s" % (PHASES[key], cluster.nodes[victim].node))
        os.kill(cluster.nodes[victim].pid, signal.SIGKILL)
        killed.append(victim)

    watch.until(n, fault_at=n // 3, fault=fault)
    _joined(publishing)
    if key == "kill":
        if watch.moved is None:
            raise loadgen.LoadError("the bridge never counted a fail-over")
        figures["kill-failover"] = round(watch.moved - watch.marked, 2)
    figures[key + "-pause"] = round(watch.longest, 2)
    counted(upstream_numbers(cluster, killed[0], n), n, figures, key)
    edge.stop()
    note = "%s: %d fail-overs%s" % (PHASES[key], len(ended(edge)), "".join("; it ended: " + why for why in ended(edge)))
    log("%s: %s started again" % (PHASES[key], cluster.nodes[killed[0]].node))
    cluster.nodes[killed[0]].relaunch()
    depth.avoid = None
    return note


def ended(edge):
    """Why each link the edge's bridge failed over from ended, from its log."""
    with open(os.path.join(edge.folder, "broker.log")) as f:
        return [line.rsplit("(it ended: ", 1)[1].rstrip(")\n") for line in f if " failed over from " in line]


def _publishing(edge, n):
    import threading

    errors = []

    def run():
        try:
            publish_numbered(edge.host, edge.port, n)
        except (OSError, loadgen.LoadError) as e:
            errors.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.errors = errors
    thread.start()
    return thread


def _joined(publishing):
    publishing.join()
    if publishing.errors:
        raise publishing.errors[0]


def table(figures, n):
    lines = ["%s messages of %d B a phase, three RabbitMQ nodes, one quorum queue" % ("{:,}".format(n), SIZE), ""]
    width = max(len(what) for _key, what, _unit in ROWS)
    lines.append("%-*s  %10s  %s" % (width, "", "figure", "unit"))
    for key, what, unit in ROWS:
        value = figures.get(key)
        shown = "-" if value is None else ("{:,}".format(value) if isinstance(value, int) else "%.2f" % value)
        lines.append("%-*s  %10s  %s" % (width, what, shown, unit))
    return "\n".join(lines)


def run(args, log):
    """The whole --cluster run: its table; an exit code."""
    n = args.cluster
    if n < 3:
        raise BenchError("--cluster wants a number of messages, at least 3")
    workdir = tempfile.mkdtemp(prefix="hutch-bench-cluster-")
    figures, edges = {}, []
    cluster = depth = None
    try:
        log("starting three RabbitMQ nodes as one cluster")
        cluster = RabbitMQCluster(workdir).start()
        depth = Depth(cluster)
        direct(cluster, depth, n, figures, log)
        live(cluster, depth, n, workdir, figures, edges, log)
        log("node kill: %s messages, the bridge's node SIGKILLed a third of the way" % "{:,}".format(n))
        notes = [
            node_kill(cluster, depth, n, workdir, figures, edges, log, "kill", lambda e: connected_node(e, cluster))
        ]
        log("leader kill: %s messages, the quorum leader's node SIGKILLed a third of the way" % "{:,}".format(n))
        notes.append(
            node_kill(cluster, depth, n, workdir, figures, edges, log, "leader", lambda e: leader_node(cluster))
        )
    except (BenchError, loadgen.LoadError, OSError) as e:
        return failed(e, edges)
    finally:
        for _name, edge in edges:
            if edge.proc.poll() is None:
                edge.stop()
        if depth is not None:
            depth.close()
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    figures["live/direct"] = round(figures["live"] / figures["direct"], 2)
    print(table(figures, n))
    print("")
    for note in notes:
        print(note)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cluster": n, "figures": figures, "notes": notes}, f, indent=1)
    return 0
