"""`hutch bench --recovery N`: how long hutch takes to start again with N queued persistent messages.

For each hutch (C, and pure Python unless --no-pure): N persistent 16-byte messages are
published with confirms (window 1000) to a durable queue, the broker is stopped (SIGTERM),
its journal measured on disk, and it is started again on the same data folder. The time
is what the broker itself logs for the replay ("journal: recovered ... in T ms"); the
restart's wall time until it accepts connections and its resident memory are shown too.
"""

import os
import re
import time

from . import loadgen

RECOVERED = re.compile(
    r"journal: recovered (\d+) messages in (\d+) queues from (\d+) segments \((\d+) bytes\) in (\d+) ms"
)
QUEUE = "bench-recovery"


def journal_bytes(folder):
    journal = os.path.join(folder, "data", "journal")
    return sum(os.path.getsize(os.path.join(journal, name)) for name in os.listdir(journal))


def measure(make_hutch, count, log, timeout=3600):
    """make_hutch(folder) -> a started Hutch on that folder (None: a new one). A dict of figures."""
    hutch = make_hutch(None)
    try:
        log("  %s: publishing %d persistent messages" % (hutch.kind, count))
        rate = loadgen.confirms(
            hutch.host, hutch.port, count, timeout=timeout, persistent=True, queue=QUEUE, keep=True
        )["msgs_per_s"]
    finally:
        hutch.stop()
    on_disk = journal_bytes(hutch.folder)
    started = time.perf_counter()
    again = make_hutch(hutch.folder)
    try:
        wall = time.perf_counter() - started
        with open(os.path.join(hutch.folder, "broker.log")) as f:
            found = RECOVERED.findall(f.read())
        if not found:
            raise loadgen.LoadError("hutch (%s) did not log its recovery" % hutch.kind)
        messages, _queues, segments, _bytes, ms = (int(v) for v in found[-1])
        rss = 0
        with open("/proc/%d/status" % again.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
    finally:
        again.stop()
    return {
        "messages": messages,
        "segments": segments,
        "recovery_ms": ms,
        "restart_s": round(wall, 2),
        "journal_bytes": on_disk,
        "bytes_per_message": round(on_disk / count, 1),
        "publish_per_s": round(rate),
        "rss_mb_after": round(rss / 1024, 1),
    }


def report(kind, figures):
    return (
        "hutch %s: %d persistent messages (%d msg/s with confirms) -> journal %d bytes in %d segments, "
        "%.1f bytes per message; restart: replay %d ms (logged), %.2f s until it accepts connections, "
        "%.1f MB resident after"
        % (
            kind,
            figures["messages"],
            figures["publish_per_s"],
            figures["journal_bytes"],
            figures["segments"],
            figures["bytes_per_message"],
            figures["recovery_ms"],
            figures["restart_s"],
            figures["rss_mb_after"],
        )
    )
