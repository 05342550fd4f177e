"""The data folder's disk, watched: publishers are blocked while less than `disk_free_limit`
is free there (RabbitMQ's disk_free_limit; 50 MB by default on a host's profile), so that
the journal keeps room for what frees disk: consumers' acks, a bridge's confirms from
upstream, deleting and compacting segments. Without it a gateway whose backlog fills its SD
card during an outage can write nothing more, not even the acks that would empty it.

The "disk free" alarm (core/flow.py) is raised below the limit and cleared once a tenth more
than the limit is free. The disk is looked at every second, and every 100 ms while less than
four times the limit is free (a fast publisher writes megabytes in a second).

Started by server/startup.py when the limit is set (and by a reload that sets one); a board's
profile sets none (its journal_max_bytes keeps the journal within its flash), so a board loads
this module only when its config asks for a limit.
"""

import os

from .clock import sleep_ms

ALARM = "disk free"


def free_bytes(folder):
    """Bytes an unprivileged writer may still use on folder's filesystem."""
    found = os.statvfs(folder)
    return found[1] * found[4]  # f_frsize * f_bavail (the same places on CPython and MicroPython)


def check(flow, free, limit):
    """Raise or clear the alarm for free bytes against limit; while it is raised, its reason
    says what is free now (what `hutch ctl status` and the status page show)."""
    if ALARM not in flow.alarms:
        if free < limit:
            flow.set_alarm(ALARM, _reason(free, limit))
    elif free * 10 >= limit * 11:
        flow.set_alarm(ALARM, None, "%d bytes free for the data folder again" % free)
    else:
        flow.set_alarm(ALARM, _reason(free, limit))


def _reason(free, limit):
    return "low on disk: %d bytes free for the data folder, under disk_free_limit (%d)" % (free, limit)


class DiskWatch:
    """The watch of one data folder: free, the bytes last seen free (None before the first
    look), for /metrics (server/monitoring.py)."""

    def __init__(self, folder, limit, flow, log):
        self.folder = folder
        self.limit = limit  # (a reload may change it: the next look applies it)
        self.flow = flow
        self.log = log
        self.free = None
        self.stopped = False

    def stop(self):
        """No more looks (a reload removed the limit), and publishers not blocked for it."""
        self.stopped = True
        if ALARM in self.flow.alarms:
            self.flow.set_alarm(ALARM, None, "disk_free_limit removed")

    def figures(self):
        """The /metrics figures of the watch (server/monitoring.py process_figures)."""
        if self.free is None:
            return {}
        return {
            "disk_free_bytes": self.free,
            "disk_free_limit_bytes": self.limit,
            "disk_free_alarm": int(ALARM in self.flow.alarms),
        }

    async def run(self, stop):
        """Until stop (an asyncio.Event) is set, or stop()."""
        said = False
        while not stop.is_set() and not self.stopped:
            try:
                free = free_bytes(self.folder)
            except OSError as e:  # (the folder gone from under the broker: the journal says more)
                if not said:
                    said = True
                    self.log("warning", "cannot see the free space of %s: %s" % (self.folder, e))
                await sleep_ms(1000)
                continue
            said = False
            self.free = free
            check(self.flow, free, self.limit)
            await sleep_ms(100 if free < 4 * self.limit else 1000)


def start_watch(folder, limit, flow, stop, log):
    """A DiskWatch of folder, running until stop (an asyncio.Event) is set or it is stopped."""
    import asyncio

    watch = DiskWatch(folder, limit, flow, log)
    asyncio.create_task(watch.run(stop))
    return watch
