"""`hutch bench --backlog N`: hutch and RabbitMQ holding a backlog of N persistent messages.

Each broker runs alone, one after the other (a backlog of millions in one would not leave the
other room):

1. persistent confirms (100-byte, window 1000) on an empty broker, started for them alone;
2. a broker started fresh on an empty data folder: its resident memory idle; the backlog, N
   persistent 100-byte messages into one durable queue published by several connections at
   once with confirms (loadgen.fill), its resident memory printed as it grows; when
   min(N, 1,000,000) are queued, the persistent confirms again, into another queue, with that
   backlog behind them;
3. its resident memory and data folder with the N queued (before those confirms when N is
   at most 1,000,000); then it is stopped and started again on the same data: the wall time
   from starting the process to a successful AMQP handshake, and its resident memory after;
4. min(N, 1,000,000) of the backlog drained from disk by one consumer acking every 100.

RabbitMQ runs once per classic queue storage version asked for (--rabbitmq-queue-version):
neither is best at everything on 3.10 (see RABBITMQ_ARGUMENTS), so the ratio column compares
hutch with the better of them, row by row. The esp32 row comes from bench/board_backlog.py.
"""

import csv
import json
import os
import shutil
import statistics
import tempfile
import time

from ..boards import unix
from . import board_backlog, loadgen
from .brokers import BenchError, External, Hutch, RabbitMQ, rss_kb
from .recovery import RECOVERED

SIZE = 100  # bytes per message body
PUBLISHERS = 4  # connections building the backlog at once
WINDOW = 1000  # unconfirmed publishes per connection
HEAD = 1000000  # the backlog behind the confirms, and what is drained, at most
QUEUE = "bench-backlog"
CONFIRMS_QUEUE = "bench-backlog-confirms"
TIMEOUT = 4 * 3600  # seconds for one phase of one broker, at most
STOP_TIMEOUT = 600  # seconds a broker holding the backlog may take to stop cleanly before it is killed
LINE_EVERY = 10  # seconds: a progress line at least this often, and at every tenth of N

# RabbitMQ's queues: durable classic queues in lazy mode, which write messages to disk as they
# arrive instead of keeping them in memory until memory runs short: what RabbitMQ 3.10 offers
# for a backlog (in the default mode 200,000 messages took 800 MB here, lazy 180 MB).
# x-queue-version picks the classic queue's storage: 1 (3.10's default) or 2 (CQv2, new in
# 3.10). Measured here on 3.10.8 with 1,000,000 queued: both hold them in ~175 MB and restart
# in ~4 s; CQv2 builds the backlog faster (42,000 msg/s against 31,000) and confirms twice as
# fast, but drains it after a restart 3.5x slower (17,000 msg/s against 59,000).
RABBITMQ_ARGUMENTS = {"x-queue-mode": "lazy"}
RABBITMQ_VERSIONS = {"1": (1,), "2": (2,), "both": (1, 2)}

# What one queued message may take in the journal (~170 bytes for 100 bytes), with room to
# spare: the disk budget hutch runs with is raised to hold the backlog. Its memory budgets are
# not: a durable queue keeps only a window in memory (core/store/paging.py), its backlog on disk.
JOURNAL_PER_MESSAGE = 512

# row key: what it measures ({n}, {head}, {board}: message counts), unit, whether more is
# better (None: a ratio of one broker's own figures), the target
ROWS = (
    ("fill", "publishing the backlog, %d connections with confirms" % PUBLISHERS, "msg/s", True, ""),
    ("idle-rss", "resident memory, idle broker before the backlog", "MB", False, ""),
    ("backlog-rss", "resident memory with {n} queued", "MB", False, "<= 64 MB"),
    ("backlog/idle", "  with the backlog / idle", "x", None, "<= 1.5"),
    ("disk", "data folder with {n} queued", "MB", False, ""),
    ("restart", "restart with {n} queued, until a handshake succeeds", "s", False, "<= 2 s"),
    ("restart-rss", "resident memory after the restart", "MB", False, ""),
    ("drain", "draining {head} from disk, one consumer acking every 100", "msg/s", True, ">= 2x RabbitMQ"),
    ("confirms-empty", "persistent confirms 100 B, window 1000, empty broker", "msg/s", True, ""),
    ("confirms-backlog", "  the same with {head} queued in another queue", "msg/s", True, ""),
    ("backlog/empty", "  with the backlog / empty", "x", None, ">= 0.90"),
    # (4 KiB with 640 KiB segments, before the esp32 profile kept them at 16 KiB so that draining
    # the backlog fits a board: docs/boards.md; 220 segments' bookkeeping take 20 KiB here)
    ("esp32", "esp32 profile, 64-bit unix port: heap with {board} queued - with none", "KiB", False, "<= 24 KiB"),
)


class Target:
    """One broker of the run: the key of its column and its title; fresh(workdir) starts it on
    a new data folder in workdir, again(previous) on the data of a stopped one (None: it cannot
    be restarted from here); the arguments its queues are declared with; data(broker), its data
    folder."""

    def __init__(self, key, title, fresh, again, arguments=None, data=None):
        self.key, self.title, self.fresh, self.again = key, title, fresh, again
        self.arguments, self.data = arguments, data


def targets(args, config):
    """The brokers to measure: hutch (C scanner), then RabbitMQ once per queue version asked for."""
    plan = [
        Target(
            "hutch",
            "hutch",
            lambda folder: Hutch("c", folder, config=config),
            lambda previous: Hutch("c", None, previous.folder, config=config),
            data=lambda broker: os.path.join(broker.folder, "data"),
        )
    ]
    for version in RABBITMQ_VERSIONS[args.rabbitmq_queue_version] if (args.rabbitmq or args.start_rabbitmq) else ():
        arguments = dict(RABBITMQ_ARGUMENTS, **({"x-queue-version": 2} if version == 2 else {}))
        key, title = "rabbitmq-v%d" % version, "RabbitMQ CQv%d lazy" % version
        if args.start_rabbitmq:
            plan.append(
                Target(
                    key,
                    title,
                    RabbitMQ,
                    lambda previous: RabbitMQ(None, previous),
                    arguments,
                    lambda broker: os.path.join(broker.home, "mnesia"),
                )
            )
        else:
            plan.append(Target(key, title, lambda folder: External(args.rabbitmq, args.rabbitmq_pid), None, arguments))
    return plan


def hutch_config(folder, n, extra):
    """A config file for hutch whose disk budget holds the backlog (n messages, and `extra` more
    for a moment in another queue): what is measured is what holding it costs, not a refusal.
    The default budget is raised only if it is smaller. (path, {budget: the value it was raised to})."""
    needed = n + extra + 1000
    raised = {}
    server = {}
    if unix.STORAGE["max_bytes"] < needed * JOURNAL_PER_MESSAGE:  # `hutch serve`'s default disk budget
        server["journal_max_bytes"] = raised["journal_max_bytes"] = needed * JOURNAL_PER_MESSAGE
    path = os.path.join(folder, "hutch-backlog.json")
    with open(path, "w") as f:
        json.dump({"server": server}, f)
    return path, raised


def settled_rss_mb(pid, timeout=10.0):
    """Resident memory once it stops moving (a broker that just took a load may still free or
    page out): read every half second until two reads differ by under 1%, at most `timeout`."""
    if pid is None:
        return None
    time.sleep(1)
    last = rss_kb(pid)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = rss_kb(pid)
        if abs(now - last) * 100 < last:
            return round(now / 1024, 1)
        last = now
    return round(last / 1024, 1)


def folder_mb(path):
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass  # a file the broker removed meanwhile
    return round(total / 1e6, 1)


class Progress:
    """loadgen.fill's progress callback, over the fills that build one backlog: keeps a sample
    (seconds, queued, RSS MB) at each call, about twice a second, and prints a line at every
    tenth of N and at least every LINE_EVERY seconds: queued so far, RSS, and the publish rate
    since the line before."""

    def __init__(self, name, pid, total, show):
        self.name, self.pid, self.total, self.show = name, pid, total, show
        self.base = 0  # queued by the fills before the current one
        self.started = time.perf_counter()
        self.samples = []
        self.last_line = (0.0, 0)  # (seconds, queued) at the last line
        self.tenths = 0  # tenths of N shown so far
        self.samples.append((0.0, 0, self.rss()))

    def rss(self):
        try:
            return round(rss_kb(self.pid) / 1024, 1) if self.pid is not None else None
        except (OSError, BenchError):
            return None  # the broker is gone: the fill says why

    def __call__(self, confirmed, _seconds):
        seconds = time.perf_counter() - self.started
        queued = self.base + confirmed
        rss = self.rss()
        self.samples.append((round(seconds, 2), queued, rss))
        tenths = queued * 10 // self.total
        if queued != self.last_line[1] and (tenths > self.tenths or seconds - self.last_line[0] >= LINE_EVERY):
            self.tenths = tenths
            then, before = self.last_line
            rate = (queued - before) / (seconds - then) if seconds > then else 0
            self.show(
                "  %-18s %7.1f s %12s queued   RSS %8s MB   %8s msg/s"
                % (self.name, seconds, "{:,}".format(queued), "-" if rss is None else rss, "{:,}".format(round(rate)))
            )
            self.last_line = (seconds, queued)

    def fill_done(self, confirmed):
        """Between fills (the confirms run meanwhile): the next rate leaves the pause out."""
        self.base += confirmed
        self.last_line = (time.perf_counter() - self.started, self.base)


def count(broker, arguments):
    """The messages in the backlog queue (a passive declare)."""
    conn = loadgen.Connection(broker.host, broker.port, 60)
    try:
        return conn.declare_queue(QUEUE, durable=True, arguments=arguments, passive=True)[1]
    finally:
        conn.close()


def delete_queues(broker):
    """The queues of this benchmark, gone (deleting one that is not there succeeds)."""
    conn = loadgen.Connection(broker.host, broker.port, 60)
    try:
        for queue in (QUEUE, CONFIRMS_QUEUE):
            conn.call(loadgen.spec.QUEUE_DELETE, (0, queue, False, False, False))
    finally:
        conn.close()


def confirm_rate(broker, messages, repeat, arguments, log, what):
    """The median msg/s of `repeat` rounds of persistent confirms into CONFIRMS_QUEUE (deleted
    after each round)."""
    rates = []
    for round_number in range(repeat):
        log("  persistent confirms, %s, round %d" % (what, round_number + 1))
        result = loadgen.confirms(
            broker.host,
            broker.port,
            messages,
            size=SIZE,
            timeout=TIMEOUT,
            persistent=True,
            queue=CONFIRMS_QUEUE,
            arguments=arguments,
        )
        rates.append(result["msgs_per_s"])
    return round(statistics.median(rates))


def build_backlog(target, broker, n, confirms, repeat, figures, progress, log):
    """The backlog of n in QUEUE, with the confirms measured behind the first HEAD of it; the
    broker's memory and data once all n are in (before those confirms when n <= HEAD, so that
    what they leave behind does not count)."""
    head = min(n, HEAD)
    building = 0.0
    for part in (head, n - head):
        if part:
            started = time.perf_counter()
            loadgen.fill(
                broker.host, broker.port, QUEUE, part, SIZE, PUBLISHERS, WINDOW, TIMEOUT, target.arguments, progress
            )
            building += time.perf_counter() - started
            progress.fill_done(part)
        if progress.base == n and "backlog-rss" not in figures:
            queued = count(broker, target.arguments)
            if queued != n:
                raise loadgen.LoadError("%d publishes were confirmed, but the queue holds %d messages" % (n, queued))
            figures["backlog-rss"] = settled_rss_mb(broker.pid)
            if target.data is not None:
                figures["disk"] = folder_mb(target.data(broker))
        if "confirms-backlog" not in figures:
            what = "%s queued" % "{:,}".format(head)
            figures["confirms-backlog"] = confirm_rate(broker, confirms, repeat, target.arguments, log, what)
    figures["fill"] = round(n / building)


def measure(target, folder, n, confirms, repeat, show, log):
    """Every figure of one broker: ({row key: value}, its RSS samples, notes, whether it failed).
    The confirms on an empty broker run on one started for them alone: the broker that takes
    the backlog starts with nothing behind it but its idle memory."""
    figures, notes, failed = {}, [], False
    progress = None
    broker = target.fresh(folder)
    try:
        broker.start()
        if target.again is None:
            delete_queues(broker)  # what an earlier run left in a broker someone else runs
        figures["confirms-empty"] = confirm_rate(broker, confirms, repeat, target.arguments, log, "empty broker")
        broker.stop()
        broker = target.fresh(folder)
        broker.start()
        figures["idle-rss"] = settled_rss_mb(broker.pid)
        show("%s: a backlog of %s persistent 100-byte messages" % (target.title, "{:,}".format(n)))
        progress = Progress(target.title, broker.pid, n, show)
        build_backlog(target, broker, n, confirms, repeat, figures, progress, log)
        if target.again is not None:
            log("  restart with %d queued" % n)
            broker.stop(STOP_TIMEOUT)
            started = time.perf_counter()
            broker = target.again(broker)
            broker.start(TIMEOUT)
            figures["restart"] = round(time.perf_counter() - started, 2)
            figures["restart-rss"] = settled_rss_mb(broker.pid)
            notes += replay_note(target, broker)
            queued = count(broker, target.arguments)
            if queued != n:
                raise loadgen.LoadError("%d messages were queued before the restart, %d after" % (n, queued))
        else:
            notes.append("%s was started elsewhere: not restarted" % target.title)
        head = min(n, HEAD)
        log("  draining %d" % head)
        figures["drain"] = loadgen.drain(broker.host, broker.port, QUEUE, head, SIZE, timeout=TIMEOUT)["msgs_per_s"]
    except (BenchError, loadgen.LoadError, OSError) as e:
        notes.append("%s failed: %s (its missing figures are shown as -)" % (target.title, e))
        failed = True
    finally:
        if target.again is None:
            try:
                delete_queues(broker)  # leave nothing behind in a broker someone else runs
            except (OSError, loadgen.LoadError):
                pass  # unreachable: the note above says why
        broker.stop(STOP_TIMEOUT)
    if isinstance(broker, RabbitMQ) and figures.get("disk") is not None:
        notes.append("%s: %s" % (target.title, rabbitmq_storage(broker)))
    for name, over, under in (
        ("backlog/idle", "backlog-rss", "idle-rss"),
        ("backlog/empty", "confirms-backlog", "confirms-empty"),
    ):
        if figures.get(over) and figures.get(under):
            figures[name] = round(figures[over] / figures[under], 2)
    return figures, (progress.samples if progress else []), notes, failed


def replay_note(target, broker):
    """What hutch logs of its replay: how much of the restart it was."""
    if not isinstance(broker, Hutch):
        return []
    with open(os.path.join(broker.folder, "broker.log"), errors="replace") as f:
        found = RECOVERED.findall(f.read())
    if not found:
        return []
    messages, _queues, segments, size, ms = found[-1]
    return [
        "%s logged its replay at the restart: %s messages from %s segments (%s bytes) in %s ms"
        % (target.title, "{:,}".format(int(messages)), segments, "{:,}".format(int(size)), "{:,}".format(int(ms)))
    ]


def rabbitmq_storage(broker):
    """Which classic queue storage the backlog queue really used, from the files in its folder:
    version 1 keeps an index of *.idx segments, version 2 *.qi and *.qs files."""
    kinds = set()
    for root, _dirs, files in os.walk(os.path.join(broker.home, "mnesia")):
        if ".queue_name" in files:
            with open(os.path.join(root, ".queue_name"), errors="replace") as f:
                if QUEUE not in f.read().split():
                    continue
            for name in files:
                if name.endswith(".idx"):
                    kinds.add("version 1 (*.idx index segments)")
                elif name.endswith(".qi"):
                    kinds.add("version 2 (*.qi index, *.qs store)")
    return "its backlog queue's folder shows classic queue storage %s" % (" and ".join(sorted(kinds)) or "unknown")


def cell(value):
    if value is None:
        return "-"
    return "{:,}".format(value) if isinstance(value, int) else str(value)


def best(values, higher):
    values = [v for v in values if v]
    if not values:
        return None
    return max(values) if higher else min(values)


def table(results, n, board):
    """One row per figure: what, unit, the issue's target, one column per broker (results: a list
    of (Target, figures), hutch first), and hutch over the better RabbitMQ of the row."""
    hutch = results[0][1]
    rabbits = [figures for target, figures in results if target.key.startswith("rabbitmq")]
    head = ["backlog of %s persistent 100-byte messages" % "{:,}".format(n), "unit", "target"]
    head += [target.title for target, _figures in results] + (["hutch/RabbitMQ"] if rabbits else [])
    counts = {"n": "{:,}".format(n), "head": "{:,}".format(min(n, HEAD)), "board": "{:,}".format(board or 0)}
    rows = [head]
    for key, what, unit, higher, target in ROWS:
        if key == "esp32" and not board:
            continue
        line = [what.format(**counts), unit, target] + [cell(figures.get(key)) for _target, figures in results]
        if rabbits:
            ours, theirs = hutch.get(key), best([figures.get(key) for figures in rabbits], higher)
            line.append("%.2f" % (ours / theirs) if higher is not None and ours and theirs else "-")
        rows.append(line)
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(widths[i]) if i < 3 else c.rjust(widths[i]) for i, c in enumerate(row)) for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def write_csv(path, samples):
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["broker", "seconds", "queued", "rss_mb"])
        for title, rows in samples.items():
            for seconds, queued, rss in rows:
                out.writerow([title, seconds, queued, "" if rss is None else rss])


def plot(path, samples, n):
    """RSS against messages queued, one line per broker (matplotlib: checked for at start)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(8, 4.5))
    for title, rows in samples.items():
        points = [(queued, rss) for _seconds, queued, rss in rows if rss is not None]
        axes.plot([q for q, _ in points], [r for _, r in points], label=title)
    axes.set_xlabel("persistent 100-byte messages queued")
    axes.set_ylabel("resident memory (MB)")
    axes.set_ylim(bottom=0)
    axes.set_title("Resident memory while a backlog of %s builds" % "{:,}".format(n))
    axes.legend()
    figure.savefig(path, dpi=100)


def can_plot():
    try:
        import matplotlib  # noqa: F401 (only whether it is there)
    except ImportError:
        return False
    return True


def run(args, log):
    """The whole --backlog run: the table, notes, and the files asked for; an exit code."""
    n = args.backlog
    if n < 1:
        raise BenchError("--backlog wants a number of messages, at least 1")
    if args.plot and not can_plot():
        raise BenchError("--plot needs matplotlib, which is not installed (--csv FILE writes the samples without it)")

    def show(line):
        print(line, flush=True)

    workdir = tempfile.mkdtemp(prefix="hutch-bench-backlog-")
    results, samples, notes, failures = [], {}, [], 0
    confirms = max(1, min(n, args.count // 4))
    try:
        config, raised = hutch_config(workdir, n, confirms)
        for target in targets(args, config):
            folder = tempfile.mkdtemp(prefix=target.key + "-", dir=workdir)
            figures, samples[target.title], more, failed = measure(target, folder, n, confirms, args.repeat, show, log)
            results.append((target, figures))
            notes += more
            failures += failed
            shutil.rmtree(folder, ignore_errors=True)  # a backlog of millions takes gigabytes
        if args.board_backlog:
            board = board_backlog.measure(args.board_backlog, workdir, log)
            results[0][1]["esp32"] = board["difference_kib"]
            notes.append(board["note"])
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    show(table(results, n, args.board_backlog))
    show("")
    show(
        "Persistent confirms: %s messages a round, median of %d rounds. The ratio column is hutch over the "
        "better RabbitMQ of the row." % ("{:,}".format(confirms), args.repeat)
    )
    if raised:
        budgets = ", ".join("%s = %s" % (k, "{:,}".format(v)) for k, v in sorted(raised.items()))
        show("hutch ran with budgets raised to hold the backlog: %s." % budgets)
    for note in notes:
        show(note)
    if args.csv:
        write_csv(args.csv, samples)
    if args.plot:
        plot(args.plot, samples, n)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "backlog": n,
                    "confirms": confirms,
                    "results": {target.title: figures for target, figures in results},
                    "raised": raised,
                    "samples": samples,
                    "notes": notes,
                },
                f,
                indent=1,
            )
    return 2 if failures else 0
