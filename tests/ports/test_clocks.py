"""Which clock each timer of the broker reads: durations on the monotonic clock, moments on the
wall clock. A Raspberry Pi without a real-time clock boots in the past and NTP sets it (a jump
of a year is common); what measures a duration on the wall clock then waits a year or not at
all. tests/interop/system/test_clock_jumps.py lives through such jumps; this test keeps the list
below true: every place in the broker's code that reads a clock is in it, with the clock it
reads and what for, and nothing is in it that no longer reads one.

Read from the source: calls of time.time, time.monotonic, time.localtime, time.gmtime,
ticks_ms and the ports' Clock (now_ms: monotonic; wall_seconds: wall), and the core's reads of
the broker's wall clock (`wall_seconds`, and `wall_offset`, which turns the monotonic clock into
the wall clock's moments).
"""

import ast
import os

from paths import ROOT

PACKAGES = ("core", "ports", "server", "mqtt", "amqp091", "amqp10", "codec", "devices", "fleet")
CALLS = {"time", "monotonic", "localtime", "gmtime", "ticks_ms", "ticks_diff", "now_ms", "wall_seconds"}
WALL_READS = {"wall_seconds", "wall_offset"}

MONOTONIC = "monotonic"
WALL = "wall"

# (module, function): (clock, what it times)
TIMERS = {
    ("ports/clock.py", "__init__"): (
        MONOTONIC,
        "the ports' ms clock: ticks_ms on a board, accumulated so it never wraps",
    ),
    ("ports/clock.py", "now_ms"): (MONOTONIC, "the ports' ms clock: time.monotonic on CPython, ticks on a board"),
    ("ports/clock.py", "wall_seconds"): (WALL, "the wall clock, read once a tick (Broker.tick sees it jump)"),
    ("ports/log.py", "log"): (WALL, "a log line's timestamp"),
    ("ports/control_request.py", "connected"): (MONOTONIC, "`hutch ctl`'s wait for a full control socket backlog"),
    ("ports/recovery.py", "recover"): (MONOTONIC, "how long recovery took"),
    ("ports/recovery.py", "_recover"): (MONOTONIC, "how long recovery took"),
    ("ports/serial.py", "start"): (MONOTONIC, "a serial link's idle time"),
    ("ports/serial.py", "_pump"): (MONOTONIC, "a serial link's idle time"),
    ("ports/status_file.py", "snapshot"): (WALL, "status.json's written_at: a moment `hutch ctl status` shows"),
    ("server/host.py", "say_an_unset_clock"): (WALL, "a start before 2024: the clock not set yet, said"),
    ("ports/storage.py", "__init__"): (MONOTONIC, "the journal's sync interval"),
    ("ports/storage.py", "_run"): (MONOTONIC, "the journal's sync interval"),
    ("ports/storage.py", "commit"): (MONOTONIC, "group commit timing"),
    ("ports/storage.py", "sync"): (MONOTONIC, "fsync durations"),
    ("ports/streams.py", "__init__"): (MONOTONIC, "a stream's file sync interval"),
    ("ports/streams.py", "reserve"): (MONOTONIC, "a stream's file sync interval"),
    ("server/runtime.py", "_tick_loop"): (MONOTONIC, "the broker's tick: now_ms, and the wall clock beside it"),
    ("server/runtime.py", "shutdown"): (MONOTONIC, "the grace period at a stop"),
    ("server/frontends.py", "open"): (MONOTONIC, "the pre-login timeout"),
    ("server/frontends.py", "first_octets"): (MONOTONIC, "the pre-login timeout"),
    ("server/frontends.py", "lost"): (MONOTONIC, "a connection's lifetime, for the log"),
    ("server/bridges/driver.py", "run"): (
        MONOTONIC,
        "backoff and window waits (a wall clock jump ends a window's wait)",
    ),
    ("server/bridges/driver.py", "_link"): (MONOTONIC, "connection_timeout, heartbeats"),
    ("server/bridges/driver.py", "_tick_loop"): (MONOTONIC, "the watchdog, heartbeats"),
    ("server/bridges/driver.py", "save_offset"): (MONOTONIC, "how often a stream source's offset is written"),
    ("server/bridges/driver.py", "send"): (MONOTONIC, "the budget's token bucket"),
    ("server/bridges/driver.py", "stop"): (MONOTONIC, "the drain at a stop"),
    ("server/bridges/driver.py", "day_seconds"): (WALL, "the [uplink]'s windows: a time of day"),
    ("server/bridges/driver.py", "_watch"): (WALL, "the backlog's age: now against the oldest message's arrival stamp"),
    ("server/bridges/probe.py", "_probing"): (MONOTONIC, "prefer_first's probe interval"),
    ("server/bridges/setup.py", "set_uplink"): (MONOTONIC, "the [uplink] budget's bucket"),
    ("server/devices/polling.py", "_run"): (MONOTONIC, "the poll interval"),
    ("server/devices/polling.py", "_poll"): (WALL, "a reading's timestamp (and its poll's duration, monotonic)"),
    ("server/devices/polling.py", "add"): (WALL, "poll numbers when the kept one cannot be read: past all given"),
    ("server/devices/polling.py", "publish"): (WALL, "a reading's AMQP timestamp"),
    ("server/devices/commands.py", "_reply"): (WALL, "a command reply's AMQP timestamp"),
    ("server/devices/rtu_master.py", "_answer"): (MONOTONIC, "an RTU answer's timeout"),
    ("server/fleet/agent.py", "__init__"): (MONOTONIC, "the uptime's start"),
    ("server/fleet/agent.py", "_confirmed"): (MONOTONIC, "confirm_within"),
    ("server/fleet/agent.py", "status"): (WALL, "the status document's time (its uptime: monotonic)"),
    ("server/fleet/agent.py", "_checked"): (WALL, "a document's expiry: a moment"),
    ("server/monitoring.py", "handle"): (WALL, "the overview's at_ms: a moment"),
    ("amqp10/sas.py", "epoch_seconds"): (WALL, "a SAS token's expiry: a moment"),
    ("devices/device.py", "iso"): (WALL, "a reading's ISO time"),
    ("core/broker.py", "tick"): (WALL, "the wall clock's offset from the monotonic one: a jump is seen here"),
    ("core/broker.py", "publish"): (WALL, "a message's arrival stamp (its age; its TTL after a restart)"),
    ("core/runs.py", "publish_run"): (WALL, "a stream record's timestamp"),
    ("core/runs.py", "publish_to_queues"): (WALL, "a message's arrival stamp"),
    ("core/deadletter.py", "dead_letter"): (WALL, "x-death's time"),
    ("core/snapshot.py", "snapshot"): (WALL, "ages: now against arrival stamps (which move with a jump)"),
    ("core/store/paging.py", "enqueue"): (WALL, "a paged-in message's TTL from its arrival stamp"),
    ("core/streams/stream.py", "append"): (WALL, "a stream record's timestamp"),
    ("core/streams/stream.py", "check_consumer"): (WALL, "x-stream-offset as a time"),
    ("core/streams/stream.py", "retain"): (WALL, "x-max-age: records older than a moment"),
}


def clock_reads():
    """{(module, function): {what it reads}} over the broker's packages."""
    found = {}
    for package in PACKAGES:
        for parent, _, files in os.walk(os.path.join(ROOT, package)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(parent, name)
                    with open(path) as f:
                        tree = ast.parse(f.read())
                    _visit(tree, "<module>", os.path.relpath(path, ROOT), found)
    return found


def _visit(node, function, module, found):
    for child in ast.iter_child_nodes(node):
        inside = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
        read = None
        if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute):
            attr, base = child.func.attr, child.func.value
            if attr in CALLS and not (attr == "time" and not (isinstance(base, ast.Name) and base.id == "time")):
                read = attr
        elif isinstance(child, ast.Call) and isinstance(child.func, ast.Name) and child.func.id in CALLS - {"time"}:
            read = child.func.id
        elif isinstance(child, ast.Attribute) and child.attr in WALL_READS and isinstance(child.ctx, ast.Load):
            read = child.attr
        if read is not None:
            found.setdefault((module, inside), set()).add(read)
        _visit(child, inside, module, found)


def test_every_clock_read_of_the_broker_is_listed_with_its_clock():
    found = clock_reads()
    unlisted = sorted(set(found) - set(TIMERS))
    assert not unlisted, "clock reads not in TIMERS (say which clock and what for): %s" % [
        (key, sorted(found[key])) for key in unlisted
    ]
    stale = sorted(set(TIMERS) - set(found))
    assert not stale, "TIMERS lists places that read no clock now: %s" % stale


def test_durations_read_the_monotonic_clock():
    """A place listed as monotonic reads no wall clock, except runtime's tick, which hands the
    wall clock to the broker beside its monotonic one (Broker.tick sees jumps there)."""
    found = clock_reads()
    wall = {"time", "localtime", "gmtime", "wall_seconds", "wall_offset"}
    for key, (clock, what) in TIMERS.items():
        if clock == MONOTONIC and key[0] != "server/runtime.py":
            assert not found[key] & wall, "%s %s is a duration (%s) but reads %s" % (key[0], key[1], what, found[key] & wall)  # fmt: skip
