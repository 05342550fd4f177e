"""A bridge's alarms, before anything is lost: its backlog, the age of its oldest message and
the bytes it holds waiting, against the thresholds of its [[bridge]] table (`alarm_backlog`,
`alarm_age`, `alarm_bytes`; a class's too). Checked every second by the driver
(server/bridge.py) while the bridge runs, link or no link; a crossing is one warning line, and
so is the clearing, once each; the state is the snapshot's `alarm` (core/snapshot.py), so
`hutch_bridge_alarm` on /metrics and the status page show it.

Sans-IO and MicroPython-clean; loaded only by a bridge with a threshold.
"""

KEYS = ("alarm_backlog", "alarm_age", "alarm_bytes")


def has_thresholds(settings):
    for key in KEYS:
        if settings.get(key):
            return True
    return False


def figures(outbox, wall_ms):
    """(messages waiting, the oldest one's age in seconds or None, bytes waiting in the queue)."""
    oldest = None
    for entries in (
        [pair[1] for pair in outbox.in_flight[:1]],
        [pair[1] for pair in outbox.held[:1]],
        outbox.waiting[:1],
    ):
        if entries:
            oldest = entries[0][0].arrived
            break
    queue = outbox.queue
    if oldest is None and queue.messages.length:
        oldest = queue.messages.peek()[0].arrived
    age = None if not oldest else max(0, wall_ms - oldest) / 1000
    return outbox.backlog(), age, queue.ready_bytes + queue.paged_bytes


def check(machine, wall_ms):
    """The machine's alarm now: None, or what crossed its threshold (one line); a change is
    logged once (a warning when raised or changed, info when cleared)."""
    settings = machine.settings
    backlog, age, size = figures(machine.outbox, wall_ms)
    crossed = []
    if settings.get("alarm_backlog") and backlog >= settings["alarm_backlog"]:
        crossed.append("backlog %d messages (alarm_backlog %d)" % (backlog, settings["alarm_backlog"]))
    if settings.get("alarm_age") and age is not None and age >= settings["alarm_age"]:
        crossed.append("oldest message %d s old (alarm_age %s)" % (age, settings["alarm_age"]))
    if settings.get("alarm_bytes") and size >= settings["alarm_bytes"]:
        crossed.append("%d bytes waiting (alarm_bytes %d)" % (size, settings["alarm_bytes"]))
    alarm = "; ".join(crossed) or None
    was = machine.alarm
    if (alarm is None) != (was is None):
        if alarm is not None:
            machine.log("warning", "bridge %s: alarm: %s" % (machine.name, alarm))
        else:
            machine.log("info", "bridge %s: alarm cleared" % machine.name)
    machine.alarm = alarm
    return alarm
