"""A broker on a real data folder for the portable durability tests (test_journal.py,
test_paging.py, test_dedup.py, ...): restarted by replaying its folder as `hutch serve` does,
killed by leaving what it wrote unsynced; and what the tests read back or damage of its journal.
Runs under MicroPython too."""

import os

from harness import opened
from scratch import remove_tree, scratch_folder

from hutch.core.broker import Broker
from hutch.core.limits import Limits
from hutch.ports.recovery import recover

PERSISTENT = {"delivery-mode": 2}
TRANSIENT = {"delivery-mode": 1}


class Node:
    """A broker on a data folder, with what it logged."""

    def __init__(self, folder, segment_bytes=1 << 20, max_bytes=1 << 30, limits=None):
        self.logs = []
        self.broker = Broker(limits or Limits(), log=self._log)
        self.writer = recover(folder, self.broker, segment_bytes, max_bytes, self.broker.log)

    def _log(self, level, text, exc=None):
        self.logs.append((level, text))

    def client(self):
        return opened(self.broker)

    def stop(self):
        """A clean stop: everything written and synced, the file closed."""
        self.writer.commit()
        self.writer.files.close()

    def crash(self):
        """A killed process: what was written stays, nothing more is synced or closed."""
        self.writer.write()


def taken_bodies(client, queue, count=1000):
    out = []
    for _ in range(count):
        events = client.get(1, queue, True)
        if events[0].name == "basic.get-empty":
            return out
        out.append((events[0].body, events[0].args[1]))
    return out


def segment_names(folder):
    return sorted(n for n in os.listdir(folder + "/journal") if n.endswith(".seg"))


def in_folder(test):
    def run():
        folder = scratch_folder()
        try:
            test(folder)
        finally:
            remove_tree(folder)

    return run


def damage_segment(folder, name, change):
    path = folder + "/journal/" + name
    with open(path, "rb") as f:
        data = f.read()
    data = change(data)
    if data is None:
        os.remove(path)
        return
    with open(path, "wb") as f:
        f.write(data)


def recovery_report(folder):
    with open(folder + "/recovery.txt") as f:
        return f.read()
