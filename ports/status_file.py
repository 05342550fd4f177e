"""What a running broker holds, written to DATA/status.json for `hutch ctl status` to read.

CPython only (a board has no one to read it, and its flash no writes to spare): every
STATUS_EVERY_MS and once more at a clean stop, the broker's snapshot (core/snapshot.py: its
counters, connections, queues, streams, journal and bridges) as one JSON object, written to a
temporary file and renamed over the last one, so a reader never sees half of one.
"""

import json
import os
import time

from ..core import snapshot as broker_snapshot

STATUS_FILE = "status.json"
STATUS_EVERY_MS = 2000


def snapshot(broker, running=True):
    """The broker's snapshot (core/snapshot.py: its bridges too), with this process's: its PID,
    whether it still runs and when it was written. Its connections are counted per protocol, not
    listed (core/snapshot.py says what the list would cost): `hutch ctl list connections` asks
    the running broker for those, and a broker that has stopped has none."""
    out = broker_snapshot.snapshot(broker, each_connection=False)
    out["pid"] = os.getpid()
    out["running"] = running
    out["written_at"] = time.time()
    return out


def write(folder, broker, running=True):
    """status.json in folder, replaced whole."""
    path = os.path.join(folder, STATUS_FILE)
    # (json.dumps, not json.dump: dump encodes in Python, piece by piece; dumps in C, whole)
    text = json.dumps(snapshot(broker, running))
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


class StatusWriter:
    """Writes status.json every STATUS_EVERY_MS while the broker runs, and at its stop."""

    def __init__(self, folder, broker, log):
        self.folder, self.broker, self.log = folder, broker, log
        self.task = None
        self.failed = False

    def start(self):
        # (asyncio imported here: `hutch ctl status` reads this module's names, and importing
        # asyncio is most of what a hutch ctl command would cost to start)
        import asyncio

        self.task = asyncio.get_running_loop().create_task(self._run(asyncio.sleep))

    async def _run(self, sleep):
        while True:
            self._write(True)
            await sleep(STATUS_EVERY_MS / 1000)

    def _write(self, running):
        try:
            write(self.folder, self.broker, running)
            self.failed = False
        except OSError as e:
            if not self.failed:  # said once, not every two seconds
                self.log("warning", "cannot write %s: %s" % (STATUS_FILE, e))
            self.failed = True

    def stop(self):
        if self.task is not None:
            self.task.cancel()
        self._write(False)
