"""DATA/reserve: room the journal keeps on the disk for its own way out of a full one (CPython).

When another program fills the disk (a log file, a core dump), the journal cannot write a
record: not even the acknowledgements of the messages a bridge has sent upstream, nor the
SEGMENTS_GONE record that must be on disk before their segment files are deleted (the
journal's deletion rule: recovery must not take a deleted segment for a lost one). So the disk
never frees. The reserve is a file of RESERVE_BYTES made at start; the first write the disk
refuses for want of room deletes it, and the journal writes on into the room it gave: the
acknowledgements, the SEGMENTS_GONE records and the deletions they allow, which free the
segments' room. Meanwhile publishers are blocked (alarm "disk reserve": the room is for the way
out, not for new messages), until the reserve could be made again.
"""

import asyncio
import errno
import os

from .segments import sync_dir

RESERVE_BYTES = 1 << 20
RETRY_MS = 2000  # while it is missing, how often making it again is tried
ALARM = "disk reserve"


class Reserve:
    def __init__(self, folder, flow, log):
        self.path = folder + "/reserve"
        self.folder = folder
        self.flow = flow
        self.log = log
        self.present = False
        self.retrying = None  # the task that makes it again, while one runs

    def make(self):
        """The reserve file, whole and synced (kept if it is there already); False if the disk
        has no room for it now."""
        try:
            if os.stat(self.path).st_size == RESERVE_BYTES:
                self.present = True
                return True
        except OSError:
            pass  # not there yet
        new = self.path + ".new"
        try:
            with open(new, "wb") as f:
                os.posix_fallocate(f.fileno(), 0, RESERVE_BYTES)
                os.fsync(f.fileno())
            os.rename(new, self.path)
            sync_dir(self.folder)
        except OSError:
            try:
                os.remove(new)
            except OSError:
                pass
            return False
        self.present = True
        return True

    def guard(self, writer):
        """writer's writes (ports/storage.py JournalWriter: its write() says False, and keeps the
        error in failing, when the disk refuses) go through the reserve: a write refused for
        want of room releases it and is written again, at once, into its room. (An instance's
        own attribute: the board's JournalWriter holds nothing of this.)"""
        write = writer.write

        def through_reserve():
            if write():
                return True
            return self.release(writer.failing) and write()

        writer.write = through_reserve
        self.start()

    def start(self):
        if not self.make():
            self.log("warning", "journal: no room for %s (%d bytes): tried again later" % (self.path, RESERVE_BYTES))
            self._retry()

    def release(self, error):
        """A write the disk refused (error): if it was for want of room and the reserve is there,
        it goes, and True (the write is tried again at once); else False."""
        if getattr(error, "errno", None) != errno.ENOSPC or not self.present:
            return False
        try:
            os.remove(self.path)
            sync_dir(self.folder)
        except OSError:
            return False
        self.present = False
        self.log(
            "warning",
            "journal: the disk is full: its reserve (%d bytes) released, for the records that free "
            "segments; publishers blocked until it can be made again" % RESERVE_BYTES,
        )
        self.flow.set_alarm(ALARM, "disk: full; the journal's reserve is in use")
        self._retry()
        return True

    def _retry(self):
        if self.retrying is None:
            self.retrying = asyncio.create_task(self._again())

    async def _again(self):
        try:
            while not self.make():
                await asyncio.sleep(RETRY_MS / 1000)
        finally:
            self.retrying = None
        self.log("info", "journal: its reserve (%d bytes) made again" % RESERVE_BYTES)
        self.flow.set_alarm(ALARM, None, "the journal's reserve is made again")
