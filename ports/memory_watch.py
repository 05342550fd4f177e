"""The broker's memory, watched on a host (RabbitMQ's vm_memory_high_watermark): publishers are
blocked while the process's resident memory is above `memory_high_watermark`, and let go once
it is under 90 % of it, so that a backlog growing in memory ends in blocked publishers, not in
the kernel's OOM killer. Blocked means what every alarm means (core/flow.py): AMQP 0-9-1's
connection.blocked, MQTT's publishes held, AMQP 1.0's credit withheld; consumers' acks go on.

The watermark is bytes, or a fraction of the memory there is: the cgroup's limit where one is
set (a container's, a systemd unit's MemoryMax), else the machine's (RabbitMQ reads the
cgroup's limit too). The process is looked at ten times a second: a fast publisher brings in
hundreds of megabytes a second on a host, and a look costs microseconds. CPython on Linux: a board's heap is watched by ports/heap.py.
"""

import os

from ..core.store.squeeze import squeeze
from .clock import sleep_ms

ALARM = "memory"  # (RabbitMQ's alarm, and /metrics' rabbitmq_alarms_memory_used_watermark)
CGROUP_ROOT = "/sys/fs/cgroup"
LOOK_MS = 100
NO_LIMIT = 1 << 60  # (cgroup v1 says "no limit" with a number near 2 ** 63)


def resident_bytes():
    """The process's resident memory, in bytes (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def cgroup_limit(cgroups="/proc/self/cgroup", root=CGROUP_ROOT):
    """(bytes, the file that says so): the smallest memory limit set on the process's cgroup or
    one above it (cgroup v2's memory.max, v1's memory.limit_in_bytes), or None."""
    try:
        with open(cgroups) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    found = None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # v2: one tree
            folder, name = root, "memory.max"
        elif "memory" in controllers.split(","):  # v1: the memory controller's tree
            folder, name = os.path.join(root, "memory"), "memory.limit_in_bytes"
        else:
            continue
        parts = [part for part in path.split("/") if part]
        for depth in range(len(parts), -1, -1):  # (the process's cgroup, then each above it)
            limit_file = os.path.join(folder, *parts[:depth], name)
            try:
                with open(limit_file) as f:
                    text = f.read().strip()
            except OSError:
                continue
            if text.isdigit() and int(text) < NO_LIMIT and (found is None or int(text) < found[0]):
                found = (int(text), limit_file)
    return found


def available_bytes():
    """(bytes, what they are): the cgroup's memory limit where one is set, else the machine's."""
    found = cgroup_limit()
    if found is not None:
        return found[0], "the cgroup's limit (%s)" % found[1]
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "the machine's memory"


def limit_of(watermark):
    """(the watermark in bytes, how it was worked out) of a setting: bytes, or a fraction."""
    if isinstance(watermark, float):
        available, what = available_bytes()
        return int(available * watermark), "%g of %s, %d bytes" % (watermark, what, available)
    return watermark, "memory_high_watermark"


def check(flow, used, limit, log):
    """Raise or clear the alarm for used bytes against limit, each way said in one line."""
    if ALARM not in flow.alarms:
        if used > limit:
            paged = squeeze(flow.broker, True)  # (the durable queues' windows: to disk)
            log("warning", "memory: resident %d bytes, above memory_high_watermark (%d): publishers blocked, %d messages of durable queues paged to disk" % (used, limit, paged))  # fmt: skip
            flow.set_alarm(ALARM, _reason(used, limit))
    elif used * 10 < limit * 9:
        squeeze(flow.broker, False)
        log("info", "memory: resident %d bytes, under 90 %% of memory_high_watermark (%d): publishers let go" % (used, limit))  # fmt: skip
        flow.set_alarm(ALARM, None, "resident memory %d bytes, under 90 %% of memory_high_watermark" % used)
    else:
        flow.set_alarm(ALARM, _reason(used, limit))


def _reason(used, limit):
    return "low on memory: resident %d bytes, above memory_high_watermark (%d)" % (used, limit)


class MemoryWatch:
    def __init__(self, watermark, flow, log):
        self.limit, self.worked_out = limit_of(watermark)
        self.flow = flow
        self.log = log
        self.used = None
        self.stopped = False

    def stop(self):
        self.stopped = True
        if ALARM in self.flow.alarms:
            squeeze(self.flow.broker, False)
            self.flow.set_alarm(ALARM, None, "memory_high_watermark removed")

    def figures(self):
        """The /metrics figures of the watch (server/monitoring.py process_figures)."""
        return {} if self.used is None else {"resident_memory_limit_bytes": self.limit}

    async def run(self, stop):
        while not stop.is_set() and not self.stopped:
            self.used = resident_bytes()
            check(self.flow, self.used, self.limit, self.log)
            await sleep_ms(LOOK_MS)


def start_watch(watermark, flow, stop, log):
    """A MemoryWatch, running until stop (an asyncio.Event) is set or it is stopped."""
    import asyncio

    watch = MemoryWatch(watermark, flow, log)
    log("info", "memory_high_watermark: %d bytes (%s)" % (watch.limit, watch.worked_out))
    asyncio.create_task(watch.run(stop))
    return watch
