"""`hutch bench --bridge N`: an up bridge ([[bridge]] in `hutch serve`) forwarding to RabbitMQ.

Three phases, one after the other, against the same RabbitMQ (--start-rabbitmq, or
--rabbitmq HOST:PORT), each with N persistent 100-byte messages into the same durable
RabbitMQ queue (emptied before each):

1. direct: one publisher with confirms (window 1000) straight into RabbitMQ's queue, until
   the last confirm: what RabbitMQ accepts from a client. Two publishers, one after the
   other: pika's fastest path (what the issue compares with: a SelectConnection keeping
   1000 publishes unconfirmed; BlockingConnection waits for each confirm, and without
   confirms is slower still), and the load generator's raw client (bench/loadgen.py), which
   sends pre-encoded frames and counts confirms without parsing much: faster than any pika
   path, the highest a single connection gets here. The bridge's rates are given over both;
2. live: an edge hutch whose bridge forwards its local queue to RabbitMQ while publishers
   (4 connections with confirms, window 1000 each: the edge's intake must not be what is
   measured) fill that queue; from the first publish until RabbitMQ's queue holds N
   (passive queue.declare, polled): the bridge's forwarding rate, over direct's;
3. offline: a new edge whose bridge points at a gate (bench/gate.py) that refuses
   connections, as a broker that is down does; the N are published into the edge while its
   resident memory is sampled; then the gate opens (relaying to RabbitMQ) and the drain of
   the backlog from the edge's disk is timed, from the moment the bridge's connection came
   until RabbitMQ's queue holds N, memory still sampled. The drain rate, over direct's.

With --uplink-budget BYTES the offline phase's edge has an [uplink] max_byte_rate of BYTES: the
drain is paced by the gateway's budget, and its rows say how near to it (body bytes a second).

RabbitMQ's queue is a classic queue in lazy mode, in every phase (as --backlog uses: with a
million messages in the default mode RabbitMQ 3.10 takes gigabytes). The edge runs with its
defaults but for the bridge's retry delay, at most a second, so that the drain starts
within a second of upstream coming back; its disk budget is raised only when N needs it.
"""

import csv
import json
import os
import shutil
import tempfile
import time

from ..boards import unix
from ..core.bridge.machine import DEFAULT_PREFETCH
from ..core.limits import Limits
from . import loadgen
from .brokers import BenchError, External, Hutch, RabbitMQ, failed, rss_kb
from .gate import Gate

SIZE = 100  # bytes per message body
WINDOW = 1000  # unconfirmed publishes per publishing connection
PUBLISHERS = 4  # connections publishing into the edge at once
UPSTREAM_QUEUE = "bench-bridge-upstream"
EDGE_QUEUE = "bench-bridge-outbox"
BRIDGE = "bench"
RABBITMQ_ARGUMENTS = {"x-queue-mode": "lazy"}
TIMEOUT = 4 * 3600  # seconds for one phase at most
POLL = 0.02  # seconds between two looks at RabbitMQ's queue depth
RSS_EVERY = 1.0  # seconds between two samples of the edge's memory while it drains
JOURNAL_PER_MESSAGE = 512  # bytes of journal one queued message may take, with room to spare

# row key, what it measures, unit, the target
ROWS = (
    ("pika", "direct: pika -> RabbitMQ, confirms, window %d" % WINDOW, "msg/s", ""),
    ("direct", "direct: raw client -> RabbitMQ, confirms, window %d" % WINDOW, "msg/s", ""),
    ("live-intake", "live: %d publishers -> edge hutch, confirms (its intake)" % PUBLISHERS, "msg/s", ""),
    ("live", "live: forwarded by the bridge until RabbitMQ holds all", "msg/s", ""),
    ("live/pika", "  forwarded / pika", "x", ">= 1.00"),
    ("live/direct", "  forwarded / raw client", "x", ""),
    ("offline-intake", "offline: publishers -> edge hutch, upstream away", "msg/s", ""),
    ("idle-rss", "offline: edge RSS idle, before the backlog", "MB", ""),
    ("full-rss", "offline: edge RSS with all queued", "MB", ""),
    ("max-rss", "offline: edge RSS, most while it built and drained", "MB", ""),
    ("max/idle", "  most / idle", "x", "flat"),
    ("reconnect", "drain: upstream back -> the bridge's connection", "s", ""),
    ("drain", "drain: the backlog from the edge's disk to RabbitMQ", "msg/s", ""),
    ("drain/pika", "  drain / pika", "x", ">= 0.90"),
    ("drain/direct", "  drain / raw client", "x", ""),
    ("drain-bytes", "drain under --uplink-budget: body bytes", "B/s", ""),
    ("drain/budget", "  drain / the budget", "x", "<= 1.10"),
)


class Samples:
    """The edge's resident memory against the messages queued at it: (phase, seconds, queued,
    RSS MB), taken while the backlog builds (loadgen.fill's progress calls, twice a second)
    and while it drains (queued: what RabbitMQ does not hold yet)."""

    def __init__(self, pid, log):
        self.pid, self.log = pid, log
        self.rows = []
        self.started = time.perf_counter()

    def take(self, phase, queued):
        rss = round(rss_kb(self.pid) / 1024, 1)
        self.rows.append((phase, round(time.perf_counter() - self.started, 2), queued, rss))
        return rss

    def progress(self, confirmed, _seconds):
        """loadgen.fill's callback."""
        self.take("fill", confirmed)

    def curve(self, n):
        """The samples at each tenth of the fill and of the drain: [(phase, seconds, queued, rss)]."""
        picked = []
        for phase, marks in (("fill", range(0, 11)), ("drain", range(10, -1, -1))):
            rows = [row for row in self.rows if row[0] == phase]
            for tenth in marks:
                mark = n * tenth // 10
                # the first sample at or past the mark (building: queued grows; draining: it falls)
                found = [row for row in rows if (row[2] >= mark if phase == "fill" else row[2] <= mark)]
                if found and found[0] not in picked:
                    picked.append(found[0])
        return picked


def edge_config(folder, n, uri, uplink_budget=None):
    """The edge's config (JSON, as `hutch serve --config` reads it): the bridge, and budgets
    raised where n needs more than the defaults (what is measured is forwarding, not a
    refusal); uplink_budget: the gateway's [uplink] max_byte_rate, or None."""
    needed = n + WINDOW * PUBLISHERS
    server, limits = {}, {}
    if unix.STORAGE["max_bytes"] < needed * JOURNAL_PER_MESSAGE:
        server["journal_max_bytes"] = needed * JOURNAL_PER_MESSAGE
    for key, value in (
        ("queue_max_messages", needed),
        ("total_max_messages", needed),
        ("queue_max_bytes", needed * SIZE * 2),
        ("total_max_bytes", needed * SIZE * 2),
    ):
        if getattr(Limits, key) < value:
            limits[key] = value
    bridge = {
        "name": BRIDGE,
        "uri": uri,
        "queue": EDGE_QUEUE,
        "routing_key": UPSTREAM_QUEUE,
        "reconnect_delay": 0.2,
        "max_reconnect_delay": 1.0,
    }
    config = {"server": server, "limits": limits, "bridge": [bridge]}
    if uplink_budget:
        config["uplink"] = {"max_byte_rate": uplink_budget}
    path = os.path.join(folder, "edge.json")
    with open(path, "w") as f:
        json.dump(config, f)
    return path


def held(phase, n):
    """The note a phase ends with: RabbitMQ got all n."""
    return "%s: RabbitMQ's queue held %s of %s" % (phase, "{:,}".format(n), "{:,}".format(n))


def amqp_uri(host, port):
    return "amqp://guest:guest@%s:%d/" % (host, port)


class Upstream:
    """RabbitMQ's queue the messages go to: emptied, and counted."""

    def __init__(self, broker):
        self.broker = broker
        self.conn = None

    def reset(self):
        """The queue, new and empty (a deleted queue's messages are gone at once, however many)."""
        self.close()
        self.conn = loadgen.Connection(self.broker.host, self.broker.port, loadgen.SILENCE)
        self.conn.call(loadgen.spec.QUEUE_DELETE, (0, UPSTREAM_QUEUE, False, False, False))
        self.conn.declare_queue(UPSTREAM_QUEUE, durable=True, arguments=RABBITMQ_ARGUMENTS)

    def count(self):
        return self.conn.declare_queue(UPSTREAM_QUEUE, durable=True, arguments=RABBITMQ_ARGUMENTS, passive=True)[1]

    def wait_for(self, n, deadline, each=None):
        """Poll until the queue holds n: the time it was seen (time.perf_counter()). each(count) is
        called at every look."""
        while True:
            held = self.count()
            now = time.perf_counter()
            if each is not None:
                each(held)
            if held >= n:
                if held > n:
                    raise loadgen.LoadError("RabbitMQ's queue holds %d messages, %d were sent" % (held, n))
                return now
            if time.monotonic() > deadline:
                raise loadgen.LoadError("RabbitMQ's queue holds %d of %d messages in time" % (held, n))
            time.sleep(POLL)

    def delete(self):
        """Nothing left behind (a RabbitMQ someone else runs keeps what it is given)."""
        if self.conn is None:
            self.conn = loadgen.Connection(self.broker.host, self.broker.port, 60)
        self.conn.call(loadgen.spec.QUEUE_DELETE, (0, UPSTREAM_QUEUE, False, False, False))
        self.close()

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def direct(upstream, n, figures, log):
    log("direct: %s messages into RabbitMQ" % "{:,}".format(n))
    upstream.reset()
    broker = upstream.broker
    result = loadgen.confirms(
        broker.host,
        broker.port,
        n,
        size=SIZE,
        window=WINDOW,
        timeout=TIMEOUT,
        persistent=True,
        queue=UPSTREAM_QUEUE,
        keep=True,
        arguments=RABBITMQ_ARGUMENTS,
    )
    upstream.wait_for(n, time.monotonic() + 60)  # all confirmed: all there
    figures["direct"] = result["msgs_per_s"]
    return held("direct", n)


def pika_direct(upstream, n, figures, log):
    """Pika's fastest path into RabbitMQ: a SelectConnection in confirm mode, publishing
    whenever fewer than WINDOW are unconfirmed, until the last confirm."""
    try:
        import pika  # only here: the rest of `hutch bench` needs no client library
    except ImportError:
        raise BenchError("--bridge compares with pika, which is not installed: pip install pika") from None

    log("direct: %s messages into RabbitMQ with pika" % "{:,}".format(n))
    upstream.reset()
    broker = upstream.broker
    body = b"x" * SIZE
    persistent = pika.BasicProperties(delivery_mode=2)
    state = {"sent": 0, "confirmed": 0, "nacked": 0, "started": None, "ended": None}
    channel = []

    def publish():
        while state["sent"] < n and state["sent"] - state["confirmed"] < WINDOW:
            channel[0].basic_publish("", UPSTREAM_QUEUE, body, persistent)
            state["sent"] += 1

    def on_confirm(frame):
        method = frame.method
        if isinstance(method, pika.spec.Basic.Nack):
            state["nacked"] += 1
        state["confirmed"] = method.delivery_tag if method.multiple else state["confirmed"] + 1
        if state["confirmed"] >= n:
            state["ended"] = time.perf_counter()
            connection.close()
        else:
            publish()

    def on_select_ok(_frame):
        state["started"] = time.perf_counter()
        publish()

    def on_channel(opened):
        channel.append(opened)
        opened.confirm_delivery(on_confirm, callback=on_select_ok)

    parameters = pika.ConnectionParameters(broker.host, broker.port, heartbeat=0)
    connection = pika.SelectConnection(parameters, on_open_callback=lambda c: c.channel(on_open_callback=on_channel))
    connection.add_on_open_error_callback(lambda _c, e: connection.ioloop.stop())
    connection.add_on_close_callback(lambda _c, _e: connection.ioloop.stop())
    connection.ioloop.call_later(TIMEOUT, connection.close)
    connection.ioloop.start()
    if state["ended"] is None or state["nacked"]:
        raise loadgen.LoadError(
            "pika: %d of %d publishes confirmed, %d nacked" % (state["confirmed"], n, state["nacked"])
        )
    upstream.wait_for(n, time.monotonic() + 60)
    figures["pika"] = round(n / (state["ended"] - state["started"]))
    return held("direct (pika)", n)


def live(upstream, n, workdir, figures, edges, log):
    log("live: %s messages through an edge hutch's bridge" % "{:,}".format(n))
    upstream.reset()
    folder = tempfile.mkdtemp(prefix="edge-live-", dir=workdir)
    broker = upstream.broker
    edge = Hutch("c", None, folder, config=edge_config(folder, n, amqp_uri(broker.host, broker.port)))
    edges.append(("edge live", edge))
    edge.start()
    started = time.perf_counter()
    intake = loadgen.fill(edge.host, edge.port, EDGE_QUEUE, n, SIZE, PUBLISHERS, WINDOW, TIMEOUT)
    arrived = upstream.wait_for(n, time.monotonic() + TIMEOUT)
    figures["live-intake"] = intake["msgs_per_s"]
    figures["live"] = round(n / (arrived - started))
    edge.stop()
    return held("live", n)


def offline(upstream, n, workdir, figures, edges, log, uplink_budget=None):
    log("offline: %s messages queued at an edge hutch while upstream is away, then drained" % "{:,}".format(n))
    upstream.reset()
    folder = tempfile.mkdtemp(prefix="edge-offline-", dir=workdir)
    broker = upstream.broker
    gate = Gate((broker.host, broker.port))
    try:
        config = edge_config(folder, n, amqp_uri("127.0.0.1", gate.port), uplink_budget)
        edge = Hutch("c", None, folder, config=config)
        edges.append(("edge offline", edge))
        edge.start()
        samples = Samples(edge.pid, log)
        time.sleep(1)  # the idle broker, settled
        figures["idle-rss"] = samples.take("fill", 0)
        intake = loadgen.fill(
            edge.host, edge.port, EDGE_QUEUE, n, SIZE, PUBLISHERS, WINDOW, TIMEOUT, progress=samples.progress
        )
        figures["offline-intake"] = intake["msgs_per_s"]
        time.sleep(1)  # as settled as the idle figure
        figures["full-rss"] = samples.take("fill", n)
        if upstream.count():
            raise loadgen.LoadError("RabbitMQ got messages while the gate was shut")
        log("offline: %s queued at the edge, RSS %s MB; upstream comes back" % ("{:,}".format(n), figures["full-rss"]))
        opened = time.perf_counter()
        gate.open()
        last = [0.0]

        def each(held):
            now = time.perf_counter()
            if now - last[0] >= RSS_EVERY:
                last[0] = now
                samples.take("drain", n - held)

        arrived = upstream.wait_for(n, time.monotonic() + TIMEOUT, each)
        samples.take("drain", 0)
        figures["reconnect"] = round(gate.accepted_at - opened, 2)
        figures["drain"] = round(n / (arrived - gate.accepted_at))
        if uplink_budget:
            figures["drain-bytes"] = round(n * SIZE / (arrived - gate.accepted_at))
            figures["drain/budget"] = round(figures["drain-bytes"] / uplink_budget, 2)
        figures["max-rss"] = max(row[3] for row in samples.rows)
        figures["max/idle"] = round(figures["max-rss"] / figures["idle-rss"], 2)
        edge.stop()
    finally:
        gate.close()
    if gate.accepted != 1:
        log("offline: the bridge connected %d times through the gate" % gate.accepted)
    return samples, held("offline", n) + " after the drain"


def cell(value):
    if value is None:
        return "-"
    return "{:,}".format(value) if isinstance(value, int) else str(value)


def table(figures, n):
    head = ["bridge: %s persistent 100-byte messages to RabbitMQ" % "{:,}".format(n), "unit", "target", "figure"]
    rows = [head] + [[what, unit, target, cell(figures.get(key))] for key, what, unit, target in ROWS]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(widths[i]) if i < 3 else c.rjust(widths[i]) for i, c in enumerate(row)) for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def curve_table(samples, n):
    lines = ["edge RSS while %s messages wait for upstream, then drain to it:" % "{:,}".format(n)]
    lines.append("  %-6s %9s %14s %9s" % ("phase", "seconds", "queued at edge", "RSS MB"))
    for phase, seconds, queued, rss in samples.curve(n):
        lines.append("  %-6s %9.1f %14s %9.1f" % (phase, seconds, "{:,}".format(queued), rss))
    return "\n".join(lines)


def write_csv(path, samples):
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["phase", "seconds", "queued", "rss_mb"])
        out.writerows(samples.rows)


def run(args, log):
    """The whole --bridge run: the table, the RSS curve, notes; an exit code."""
    n = args.bridge
    if n < 1:
        raise BenchError("--bridge wants a number of messages, at least 1")
    if not (args.rabbitmq or args.start_rabbitmq):
        raise BenchError("--bridge forwards to RabbitMQ: add --start-rabbitmq or --rabbitmq HOST:PORT")
    workdir = tempfile.mkdtemp(prefix="hutch-bench-bridge-")
    figures, notes, edges = {}, [], []
    broker = upstream = samples = None
    try:
        broker = RabbitMQ(workdir) if args.start_rabbitmq else External(args.rabbitmq, args.rabbitmq_pid)
        broker.start()
        upstream = Upstream(broker)
        notes.append(pika_direct(upstream, n, figures, log))
        notes.append(direct(upstream, n, figures, log))
        notes.append(live(upstream, n, workdir, figures, edges, log))
        samples, note = offline(upstream, n, workdir, figures, edges, log, args.uplink_budget)
        notes.append(note)
    except (BenchError, loadgen.LoadError, OSError) as e:
        return failed(e, edges)
    finally:
        for _name, edge in edges:
            edge.stop()
        if upstream is not None:
            try:
                upstream.delete()
            except (OSError, loadgen.LoadError):
                pass  # unreachable: said above
        if broker is not None:
            broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    for over, under in (("live", "pika"), ("live", "direct"), ("drain", "pika"), ("drain", "direct")):
        figures["%s/%s" % (over, under)] = round(figures[over] / figures[under], 2)
    print(table(figures, n))
    print("")
    print(curve_table(samples, n))
    print("")
    print(
        "Direct publishers: pika's fastest path (SelectConnection, confirms, window %d), as the issue "
        "compares with; and bench/loadgen.py's raw client (pre-encoded frames), faster than any pika "
        "path: the most one connection gets from RabbitMQ here. The bridge's messages cost RabbitMQ "
        "more than the direct ones (mandatory, three headers)." % WINDOW
    )
    print(
        "The bridge: prefetch %d (its default), one upstream connection; upstream away = a port that "
        "refuses connections, then a relay (os.splice) to RabbitMQ. RabbitMQ's queue: classic, lazy." % DEFAULT_PREFETCH
    )
    for note in notes:
        print(note)
    if args.csv:
        write_csv(args.csv, samples)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"bridge": n, "figures": figures, "samples": samples.rows, "notes": notes}, f, indent=1)
    return 0
