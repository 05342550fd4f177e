"""The storage port: writing the journal's segment files (ports/segments.py) with group commit.

    DATA/recovery.txt              what the last start found and did (`hutch ctl status`)

Reading them back at start is ports/recovery.py's job.

Making writes durable (what a confirm promises):
- CPython: os.fsync on the segment file, in a worker thread, so the broker keeps
  serving while the disk works. Everything that arrives meanwhile shares the next
  fsync: one flush per batch of publishes, not per message (group commit).
- MicroPython has no os.fsync. There a file's flush() is the sync the filesystem
  offers: on LittleFS (ESP32, RP2040) it commits the file to flash (lfs_file_sync),
  on the unix port it calls fsync. It runs in the event loop, between reads.
Records reach the operating system (write + flush) as soon as the writer task runs, one
turn of the event loop after they were made; with no confirm waiting they are synced at
least every SYNC_EVERY_MS.
"""

import asyncio

from .clock import Clock
from .segments import MICROPYTHON

SYNC_EVERY_MS = 1000  # with no confirm waiting, records are synced at least this often


class JournalWriter:
    """Writes what the journal has, syncs when a confirm waits (or every SYNC_EVERY_MS), and
    tells the broker what is durable. One asyncio task; fsync in a thread on CPython."""

    def __init__(self, journal, files, broker, log):
        self.journal = journal
        self.files = files
        self.broker = broker
        self.log = log
        self.written = 0  # journal seq written to the files
        self.clock = Clock()
        self.last_sync = self.clock.now_ms()
        self.failing = None  # the last write error, while writes fail
        self.stopping = False
        self._pending = None  # what take() gave, until it is written
        self._written_chunks = 0  # ... and how many of its chunks are (a retry goes on from there)
        self.stream_files = []  # streams' segment files written since the last sync (ports/streams.py)
        self.stream_store = None  # their folders (ports/streams.py), once a stream is opened
        self.event = None
        self.tasks = []
        self.unchecked = []  # see check_later
        self.repair = None
        journal.wake = self.kick
        journal.read = self.read

    def read(self, segment, position, size):
        """The journal's reader (page-ins): what it still holds goes to the files first."""
        journal = self.journal
        if journal.chunks or journal.marks:
            self.write()
        # no more than the segment holds: MicroPython's read(n) takes n bytes of heap first
        size = min(size, journal.sizes.get(segment, 0) - position)
        if size <= 0:
            return b""
        return self.files.read(segment, position, size)

    def check_later(self, repair, unchecked):
        """(ports/recovery.py) Sealed segments (segment, summary start, data CRC) whose data is
        checked once the broker serves, and the Repair that quarantines one that fails
        (ports/verify.py; CPython only)."""
        self.repair = repair
        self.unchecked = unchecked

    def open_stream(self, name, meta):
        """Broker.open_stream: the files of stream `name` (ports/streams.py, loaded the first time:
        a broker without streams does not hold that code)."""
        if self.stream_store is None:
            from .streams import StreamStore

            self.stream_store = StreamStore(self.files.folder, self.log)
        return self.stream_store.open(name, meta)

    def start(self):
        self.event = asyncio.Event()
        self.commit()  # the new segment's snapshot, on disk before any client: then idle means idle
        self.tasks = [asyncio.create_task(self._run())]
        if self.unchecked:
            from .verify import verify_sealed  # pyright: ignore[reportMissingImports] (host only)

            check = verify_sealed(self, self.repair, self.unchecked, self.files.folder)
            self.tasks.append(asyncio.create_task(check))
            self.unchecked = []

    def kick(self):
        if self.event is not None:
            self.event.set()

    async def _run(self):
        while not self.stopping:
            await self.event.wait()
            self.event.clear()
            if not self.write():
                continue
            broker = self.broker
            if self.written > self.journal.synced and (
                broker.journal_waiters
                or (broker.stream_syncs and _streams_waiting(broker))
                or self.clock.now_ms() - self.last_sync >= SYNC_EVERY_MS
            ):
                await self.sync()

    def write(self):
        """Everything the journal has, to the files; False if the disk refused (retried)."""
        journal = self.journal
        try:
            pending = self._pending
            if self.failing is None or pending is None:  # else retry what failed
                pending = self._pending = journal.take()
            chunks, deletions, seq = pending
            for i in range(self._written_chunks, len(chunks)):
                chunk = chunks[i]
                segment = chunk[0]
                if type(segment) is not int:  # a stream's segment file (Journal.append_to)
                    segment.append(chunk[1])
                    if segment not in self.stream_files:
                        self.stream_files.append(segment)
                elif len(chunk) > 2:
                    self.files.append_summary(segment, chunk[1])
                else:
                    self.files.append(segment, chunk[1], None)
                self._written_chunks = i + 1
            for segment in deletions:
                self.files.remove(segment)
        except OSError as e:
            # Disk full or failing: nothing is confirmed; keep the records, block publishers,
            # and try again. (A partly written chunk is cut as a torn tail at the next start.)
            if self.failing is None:
                self.log("error", "journal: cannot write: %s; publishers blocked, retrying" % (e,))
                self.broker.flow.set_alarm("disk failure", "disk: journal cannot write: %s" % (e,))
            self.failing = e
            return False
        if self.failing is not None:
            self.failing = None
            self.log("info", "journal: writing again")
            self.broker.flow.set_alarm("disk failure", None, "journal writes again")
        self._pending = None
        self._written_chunks = 0
        self.written = seq
        return True

    async def sync(self):
        seq = self.written
        files, new_file = self.files.take_unsynced()
        streams = self.stream_files
        self.stream_files = []
        if MICROPYTHON:
            self._sync(files, new_file, streams)
        else:
            # CPython only (named so for the board's type check: MicroPython's asyncio has no threads)
            loop = getattr(asyncio, "get_running_loop")()
            await loop.run_in_executor(None, self._sync, files, new_file, streams)
        self.files.synced(files)
        self.last_sync = self.clock.now_ms()
        self.broker.journal_synced(seq)

    def _sync(self, files, new_file, streams):
        self.files.sync(files, new_file)
        for segment_file in streams:
            segment_file.sync()

    def commit(self):
        """Write and sync everything now, in this call (a clean stop; the core tests)."""
        if self.write():
            files, new_file = self.files.take_unsynced()
            streams = self.stream_files
            self.stream_files = []
            self._sync(files, new_file, streams)
            self.files.synced(files)
            self.last_sync = self.clock.now_ms()
            self.broker.journal_synced(self.written)

    async def stop(self):
        """Write and sync what is left (a clean shutdown loses nothing), then close."""
        self.stopping = True
        for task in self.tasks:
            task.cancel()
        self.commit()
        for stream in self.broker.streams:
            stream.close()  # each notes its next offset, exactly: no gap at the next start
        self.files.close()
        self.journal.wake = None


def _streams_waiting(broker):
    """A stream has records its consumers wait for, or a deletion to finish: sync for them now."""
    for stream in broker.stream_syncs:
        if stream.consumers or stream.deleted:
            return True
    return False
