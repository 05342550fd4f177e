"""A bridge's alarms, before anything is lost: its backlog, the age of its oldest message and
the bytes it holds waiting, against the thresholds of its [[bridge]] table (`alarm_backlog`,
`alarm_age`, `alarm_bytes`; a class's too). Checked every second by the driver
(server/bridges/driver.py) while the bridge runs, link or no link; a crossing is one warning line, and
so is the clearing, once each; the state is the snapshot's `alarm` (core/snapshot.py), so
`hutch_bridge_alarm` on /metrics and the status page show it. The same check says what a
class dropped by its time-to-live or disk budget, once a burst (`say_drops`).

Sans-IO and MicroPython-clean; loaded only by a bridge with a threshold or a class that drops.
"""


def figures(outbox, wall_ms):
    """(messages waiting, the oldest one's age in seconds or None, bytes waiting in the queue)."""
    oldest = outbox.oldest_arrival()
    age = None if not oldest else max(0, wall_ms - oldest) / 1000
    queue = outbox.queue
    return outbox.backlog(), age, queue.ready_bytes + queue.paged_bytes


def check(machine, wall_ms):
    """The alarm of each class of an up machine now (each None, or what crossed its threshold:
    one line); a change is logged once (a warning when raised or changed, info when cleared).
    The machine's alarm: its first class's."""
    settings = machine.settings
    for one in machine.classes:
        backlog, age, size = figures(one.outbox, wall_ms)
        crossed = []
        if settings.get("alarm_backlog") and backlog >= settings["alarm_backlog"]:
            crossed.append("backlog %d messages (alarm_backlog %d)" % (backlog, settings["alarm_backlog"]))
        if settings.get("alarm_age") and age is not None and age >= settings["alarm_age"]:
            crossed.append("oldest message %d s old (alarm_age %s)" % (age, settings["alarm_age"]))
        if settings.get("alarm_bytes") and size >= settings["alarm_bytes"]:
            crossed.append("%d bytes waiting (alarm_bytes %d)" % (size, settings["alarm_bytes"]))
        alarm = "; ".join(crossed) or None
        was = one.alarm
        if (alarm is None) != (was is None):
            if alarm is not None:
                machine.log("warning", "bridge %s: alarm: %s" % (one.name, alarm))
            else:
                machine.log("info", "bridge %s: alarm cleared" % one.name)
        one.alarm = alarm
    return machine.classes[0].alarm


def say_drops(machine):
    """A class whose queue dropped messages (expired, or the oldest over its max_bytes) says so
    once a burst, with how many and why: when a check finds no new drop after some."""
    for one in machine.classes:
        dropped = one.outbox.queue.dropped
        count = 0
        if dropped == one.dropping and dropped != one.dropped_seen:
            count = dropped - one.dropped_seen
            one.dropped_seen = dropped
        one.dropping = dropped
        if count:
            settings = one.settings
            why = []
            if settings["ttl"]:
                why.append("older than its ttl of %s s" % _whole(settings["ttl"]))
            if settings["max_bytes"]:
                why.append("the oldest over its max_bytes of %s" % _whole(settings["max_bytes"]))
            machine.log("warning", "bridge %s: dropped %d messages (%s)" % (one.name, count, " or ".join(why)))


def _whole(number):
    return "{:,}".format(int(number))
