"""The esp32 row of `hutch bench --backlog`: a board broker's heap with a backlog, and without.

MicroPython's unix port runs the broker as a board does, as tests/interop/boards/test_board_memory.py
runs it: hutch's code in a ROMFS image mapped like flash (emulator/unixboard.py), `-X
heapsize=200k`, `--board esp32`. It gets a data folder for its journal, and a disk budget that
holds the backlog (the profile's 256 KiB holds about 1,500 persistent 100-byte messages): a
board's backlog is meant to be bounded by its storage, not its heap. (200k: the profile keeps
its segments at 16 KiB whatever the budget, so 20,000 messages are 220 segments, whose
bookkeeping takes 20 KiB of this 64-bit port's heap, and publishing them with a window of 100
ran out of memory at 160k. On a 32-bit board they take 10.7 KiB: `hutch bench --board wasm32`.)

The heap figure is the broker's own, from its stats line (live heap after a collection, every
second), with no client connected: once with the durable queue declared and empty, once with
the backlog in it. The backlog is published by one connection with confirms (a window of 100).
A broker that refuses part of it (basic.nack: a queue or memory budget is full) is not an
error here: the note says how many messages it took and why it refused the rest, and the row
shows a figure only if it took them all.

The note then gives the same steps with no connection in play (bench/board_backlog_core.py:
the same broker, in one MicroPython process, fed through Broker.publish). A served broker's
figure now and then also counts a finished connection that a stale word in the interpreter
keeps alive (1.5-1.9 KiB on this port, in a third to a half of the readings, with a backlog
or without: MicroPython's collector takes any word that looks like a pointer for one, and
which word it finds changes from run to run); these figures hold only the queue, its backlog
and the code they load, and come out the same every run.
"""

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time

from ..boards import esp32
from . import loadgen
from .brokers import BenchError, free_port, stop_process, wait_for_amqp

HEAP = "200k"
SIZE = 100
WINDOW = 100
QUEUE = "bench-board-backlog"
JOURNAL_PER_MESSAGE = 512  # journal bytes a 100-byte message may take, with room to spare
FIRST = 1000  # queued at the first look past the window
TIMEOUT = 900  # seconds for the whole backlog, at most
STATS = re.compile(r"stats: (\d+) connections, (\d+) queued messages .*heap live (\d+)")


def write_config(folder, journal_max_bytes):
    """The board's config file, its disk budget raised to hold the backlog; its path."""
    config = os.path.join(folder, "board.json")  # JSON: MicroPython has no TOML parser
    with open(config, "w") as f:
        json.dump({"server": {"journal_max_bytes": journal_max_bytes}}, f)
    return config


class Board:
    """The board broker: `python -m hutch.emulator.unixboard ... -m hutch.server.serve --board esp32`."""

    def __init__(self, folder, romfs, journal_max_bytes):
        self.host, self.port = "127.0.0.1", free_port()
        config = write_config(folder, journal_max_bytes)
        command = [sys.executable, "-m", "hutch.emulator.unixboard", "--romfs", romfs, "-X", "heapsize=" + HEAP]
        command += ["-m", "hutch.server.serve", "--board", "esp32", "--stats-interval", "1", "--config", config]
        command += ["--bind", self.host, "--port", str(self.port), "--data", os.path.join(folder, "data")]
        self.log_path = os.path.join(folder, "board.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT)

    def start(self):
        wait_for_amqp(self.host, self.port, self.proc, "the esp32 board broker", 60)
        return self

    def text(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stats(self):
        """(connections, queued, heap live) of each whole stats line logged so far."""
        lines = self.text().split("\n")[:-1]  # not a line still being written
        return [tuple(int(v) for v in m.groups()) for m in map(STATS.search, lines) if m]

    def heap_idle(self, timeout=30):
        """Live heap from the first stats line logged from now on with no client connected."""
        seen = len(self.stats())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for connections, _queued, live in self.stats()[seen:]:
                if connections == 0:
                    return live
            if self.proc.poll() is not None:
                raise BenchError("the esp32 board broker exited with code %s" % self.proc.returncode)
            time.sleep(0.2)  # the polling interval; a stats line comes every second
        raise BenchError("the esp32 board broker logged no stats line without clients within %ds" % timeout)

    def refusal(self):
        """The reason the broker last gave for blocking publishers, if it logged one."""
        reasons = re.findall(r"publishers blocked: (.*)", self.text())
        return reasons[-1].strip() if reasons else None

    def stop(self):
        stop_process(self.proc)  # SIGINT: MicroPython's clean stop (it has no signal module)
        self.log.close()


def publish(board, count):
    """The backlog: (messages queued, publishes nacked)."""
    conn = loadgen.Connection(board.host, board.port, 60)
    try:
        conn.declare_queue(QUEUE, durable=True)
        publisher = loadgen.ConfirmedPublisher(conn, QUEUE, SIZE, persistent=True)
        publisher.run(count, WINDOW, time.monotonic() + TIMEOUT)
        queued = conn.declare_queue(QUEUE, durable=True, passive=True)[1]
    finally:
        conn.close()
    return queued, publisher.nacked


def measure_core(workdir, romfs, journal_max_bytes, counts):
    """bench/board_backlog_core.py's figures: [heap live with none queued, then with each of
    counts queued], or an error's text."""
    folder = os.path.join(workdir, "core")
    os.makedirs(folder)
    shutil.copy(os.path.join(os.path.dirname(os.path.abspath(__file__)), "board_backlog_core.py"), folder)
    config = write_config(folder, journal_max_bytes)
    command = [sys.executable, "-m", "hutch.emulator.unixboard", "--romfs", romfs, "-X", "heapsize=" + HEAP]
    command += ["-m", "board_backlog_core", os.path.join(folder, "data"), config] + [str(n) for n in counts]
    try:
        done = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return "no figures within %ds" % TIMEOUT
    found = re.search(r"^heap ([\d ]+)$", done.stdout, re.M)
    if done.returncode or not found:
        return "failed: %s" % ((done.stderr or done.stdout).strip().splitlines() or ["no output"])[-1]
    return [int(n) for n in found.group(1).split()]


def measure(count, workdir, log):
    """{"difference_kib": heap with the backlog minus without (None unless all of it was queued),
    "note": what happened, in a sentence}."""
    from ..firmware import build

    log("esp32 board: building the firmware bundle")
    with contextlib.redirect_stdout(io.StringIO()):  # mpremote prints the image's tree
        romfs = build.build(os.path.join(workdir, "firmware"))["romfs"]
    journal = max(256 * 1024, count * JOURNAL_PER_MESSAGE)
    board = Board(workdir, romfs, journal)
    what = "esp32 profile on the 64-bit unix port (-X heapsize=%s, journal budget %s bytes)" % (
        HEAP,
        "{:,}".format(journal),
    )
    try:
        board.start()
        conn = loadgen.Connection(board.host, board.port, 60)
        conn.declare_queue(QUEUE, durable=True)
        conn.close()
        none = board.heap_idle()
        # the window first (what a consumer is about to get, in memory by design), then the rest:
        # the heap the backlog on flash costs is the difference between these two
        window = min(count, esp32.LIMITS["queue_window_messages"])
        publish(board, window)
        with_window = board.heap_idle()
        # then a first thousand (paging and compaction are loaded, the backlog is on flash),
        # and the rest: what the heap does as the backlog grows twentyfold
        first = min(count, FIRST)
        log("esp32 board: publishing %d persistent messages" % count)
        publish(board, first - window)
        with_first = board.heap_idle()
        queued, nacked = publish(board, count - first)
        loaded = board.heap_idle()
    except (BenchError, loadgen.LoadError, OSError) as e:
        tail = board.text().strip().splitlines()[-1:] or ["(nothing logged)"]
        return {"difference_kib": None, "note": "%s: failed: %s; its log ends: %s" % (what, e, tail[0])}
    finally:
        board.stop()
    figures = (
        "heap live %s bytes with none queued; %s with the window's %d in memory (%+.1f KiB); %s with %s"
        " (%+.1f KiB); %s with %s (%+.1f KiB over none, %+.1f KiB over %s)"
        % (
            "{:,}".format(none),
            "{:,}".format(with_window),
            window,
            (with_window - none) / 1024,
            "{:,}".format(with_first),
            "{:,}".format(first),
            (with_first - none) / 1024,
            "{:,}".format(loaded),
            "{:,}".format(queued),
            (loaded - none) / 1024,
            (loaded - with_first) / 1024,
            "{:,}".format(first),
        )
    )
    log("esp32 board: the same steps with no connection in play")
    core = measure_core(workdir, romfs, journal, [window, first, count])
    if isinstance(core, list):
        figures += (
            "; with no connection in play: %s bytes with none, %+.1f KiB with the window, %+.1f with %s, %+.1f with %s"
            % (
                "{:,}".format(core[0]),
                (core[1] - core[0]) / 1024,
                (core[2] - core[0]) / 1024,
                "{:,}".format(first),
                (core[3] - core[0]) / 1024,
                "{:,}".format(count),
            )
        )
    else:
        figures += "; with no connection in play: %s" % core
    if queued == count:
        return {"difference_kib": round((loaded - none) / 1024, 1), "note": "%s: %s." % (what, figures)}
    reason = board.refusal()
    if reason:
        why = "the broker logged 'publishers blocked: %s'" % reason
    else:  # no alarm: the one other refusal a plain durable queue makes is its budget
        why = (
            "no alarm logged, so the queue's budget was full: the profile's queue_max_messages %d, queue_max_bytes %s"
            % (
                esp32.LIMITS["queue_max_messages"],
                "{:,}".format(esp32.LIMITS["queue_max_bytes"]),
            )
        )
    return {
        "difference_kib": None,
        "note": "%s: held only %s of %s messages (basic.nack for %s publishes; %s); %s."
        % (what, "{:,}".format(queued), "{:,}".format(count), "{:,}".format(nacked), why, figures),
    }
