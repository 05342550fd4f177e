"""The stream queues' files (core/streams/stream.py says what they mean), in the data folder:

    DATA/streams/<name as hex>/        one folder per stream (a name longer than 100 bytes: its
                                       first 100 as hex, "-", and the CRC-32 of all of it)
        stream.meta                    a record: the stream's name and arguments (hutch ctl reads it)
        reserved                       a record: offsets below this may have been handed out
        00000000000000000000.seg ...   segments: runs of records (core/streams/streamlog.py), each file
                                       named by the offset of its first record
    DATA/streams/<hex>.gone-N/         a deleted stream, until its deletion is durable
    DATA/quarantine/stream-<hex>/      a stream's segments found corrupt at start, as they were

Writing goes through the journal's writer (ports/storage.py JournalWriter): a SegmentFile
is a chunk target of the journal (core/store/journal.py append_to), appended to and synced in
the same group commit as the journal's own segments.

Offsets never go back, even after a power cut: before a record past the current
reservation is written, `reserved` is rewritten (a new file renamed over the old one) and
synced; at start, offsets continue from the reservation, or from the last record if that
is higher. A clean stop writes the exact next offset, so only a crash leaves a gap: at
most one reservation, about a second of records at the rate they came (1,024 at least).

Opening a stream reads its newest segment (torn tail cut, damage quarantined as the
journal's are: ports/repair.py Repair) and the first record of each older one (its
timestamp): the cost of a restart does not grow with the number of records.

Loaded on first use (ports/storage.py JournalWriter.open_stream): a broker without streams does not
hold this module.
"""

import os
import struct
from binascii import crc32

from ..codec.wire import decode_table, shortstr
from ..core.store.records import CORRUPT, HEADER_SIZE, TORN, encode_record, scan_records
from ..core.streams.streamlog import PREFIX, offset_and_time, scan
from .clock import Clock
from .files import replace_file, sync_dir, sync_file
from .segments import MICROPYTHON, SEGMENT_SUFFIX, exists, make_dir

META = 1  # stream.meta's record: name shortstr, arguments table
RESERVED = 2  # reserved's record: the offset (8 bytes)
MIN_BLOCK = 1024
MAX_BLOCK = 1 << 20
NEW_SEGMENT_MS = 60000  # a newest segment begun less than this before the last record: a commit may span it (load)
GONE = ".gone-"


def folder_name(name):
    """The folder of the stream called name (bytes)."""
    if len(name) <= 100:
        return _hex(name)
    return "%s-%08x" % (_hex(name[:100]), crc32(name) & 0xFFFFFFFF)


def _hex(raw):
    return "".join("%02x" % b for b in raw)


def read_meta(folder):
    """(name, arguments) from a stream folder's stream.meta, or None."""
    try:
        with open(folder + "/stream.meta", "rb") as f:
            records = scan_records(f.read())[0]
    except OSError:
        return None
    if not records or records[0][0] != META:
        return None
    payload = records[0][1]
    n = payload[0]
    return bytes(payload[1 : 1 + n]), decode_table(payload, 1 + n, len(payload))[0]


def remove_tree(path):
    try:
        mode = os.stat(path)[0]
    except OSError:
        return
    if mode & 0x4000:  # a directory
        for name in os.listdir(path):
            remove_tree(path + "/" + name)
        os.rmdir(path)
    else:
        os.remove(path)


class StreamStore:
    """DATA/streams/: opens each stream's folder, and at the end of a start removes the folders
    of streams that are gone."""

    def __init__(self, folder, log):
        self.folder = folder
        self.dir = folder + "/streams"
        self.log = log
        self.report = []  # what opening streams at start cut or set aside (recovery.txt)
        self.opened = []

    def open(self, name, meta):
        """The files of stream `name` (made if new; meta: its arguments as a table, for
        stream.meta). Reads what is there (see the module's docstring)."""
        make_dir(self.folder)
        make_dir(self.dir)
        folder = self.dir + "/" + folder_name(name)
        if not exists(folder) and not self._restore(folder, name):
            os.mkdir(folder)
            with open(folder + "/stream.meta", "wb") as f:
                f.write(encode_record(META, shortstr(name) + meta))
                sync_file(f)
            sync_dir(self.dir)
        log = StreamLog(self, name, folder)
        log.load()
        self.opened.append(folder)
        return log

    def _restore(self, folder, name):
        """A stream the journal still declares, whose deletion did not become durable before a
        crash: its folder, set aside, comes back (its offsets must not start again at 0)."""
        base = folder.rsplit("/", 1)[1] + GONE
        found = [entry for entry in os.listdir(self.dir) if entry.startswith(base)]
        if not found:
            return False
        found.sort(key=lambda entry: int(entry[len(base) :]) if entry[len(base) :].isdigit() else -1)
        os.rename(self.dir + "/" + found[-1], folder)
        sync_dir(self.dir)
        self.report.append("stream '%s': its deletion was not durable before the stop: kept" % _text(name))
        return True

    def finish(self):
        """After the journal's replay: folders of streams it does not declare (deleted ones whose
        files were still there) are removed. Returns the report lines."""
        try:
            entries = os.listdir(self.dir)
        except OSError:
            return self.report
        for entry in entries:
            path = self.dir + "/" + entry
            if path in self.opened:
                continue
            if GONE not in entry:
                meta = read_meta(path)
                self.report.append(
                    "stream folder %s: no such stream any more (%s): removed"
                    % (entry, "'%s'" % _text(meta[0]) if meta else "no stream.meta")
                )
            remove_tree(path)
        return self.report


def _text(raw):
    try:
        return raw.decode()
    except UnicodeError:
        return repr(raw)


class StreamLog:
    """One stream's folder: what core/streams/stream.py appends to, reads from, and drops."""

    def __init__(self, store, name, folder):
        self.store = store
        self.name = name
        self.dir = folder
        self.quarantine_dir = "%s/quarantine/stream-%s" % (store.folder, folder.rsplit("/", 1)[1])
        self.segments = []  # [[first offset, first timestamp ms, bytes]] found at start, oldest first
        self.next = 0
        self.last = -1  # the newest record's offset found at start (below next after a crash: a gap)
        self.last_ms = 0
        self.reserved = 0  # durable: no record at or past it was ever written
        self.wanted = 0  # asked for by the core: made durable before the record that needs it
        self.block = MIN_BLOCK
        self.clock = Clock()
        self.reserved_at = self.clock.now_ms() - 2000  # the first reservation: the smallest block
        self.writes = 0  # appends made (core/streams/stream.py tells write batches apart by it)
        self.current = None  # the SegmentFile being appended to
        self.destroyed = False
        self.gone = None  # the folder it was set aside as, once deleted
        # After a crash, the newest segment's records as read at start (bytes), until the replay
        # has taken the identities they carry (core/replay.py: a crash may have come between
        # these records and the journal's record of their numbers); else None.
        self.tail = None

    def path(self, first):
        return "%s/%020d%s" % (self.dir, first, SEGMENT_SUFFIX)

    def sync_file(self, f):  # (for ports/repair.py Repair)
        sync_file(f)

    # ------------------------------------------------------------ at start

    def numbers(self):
        out = []
        for entry in os.listdir(self.dir):
            if entry.endswith(SEGMENT_SUFFIX) and entry[: -len(SEGMENT_SUFFIX)].isdigit():
                out.append(int(entry[: -len(SEGMENT_SUFFIX)]))
        out.sort()
        return out

    def load(self):
        """What the folder holds: the segments, the newest one read (and repaired), the next
        offset (never below the reservation), and the reservation."""
        report = self.store.report
        self.reserved = self._read_reserved()
        numbers = self.numbers()
        last = -1
        while numbers:
            newest = numbers[-1]
            last, self.last_ms, size, data = self._load_newest(newest, report)
            if last >= 0:
                if last + 1 < self.reserved:  # a gap: a crash, not a clean stop (close())
                    self.tail = data
                break
            os.remove(self.path(newest))  # nothing good in it: as if it had never been made
            numbers.pop()
        for first in numbers[:-1]:
            self.segments.append([first, self._first_stamp(first, report), os.stat(self.path(first))[6]])
        if numbers:
            self.segments.append([numbers[-1], self._first_stamp(numbers[-1], report), size])
        if numbers and not self.reserved:
            report.append("stream '%s': no reservation found: offsets go on from the last record" % _text(self.name))
        if self.tail is not None and len(self.segments) > 1 and self.segments[-1][1] >= self.last_ms - NEW_SEGMENT_MS:
            # the newest segment was begun just before the crash: the commit that began it may
            # have written records at the end of the one before, too
            with open(self.path(self.segments[-2][0]), "rb") as f:
                before = f.read()
            self.tail = before[: scan(before)[3]] + self.tail
        self.last = last
        self.next = max(last + 1, self.reserved)
        self.reserved = max(self.reserved, self.next)
        self.wanted = self.reserved

    def _load_newest(self, first, report):
        """(last offset or -1, its timestamp, bytes, its good records' bytes) of the newest
        segment, after cutting a torn tail or quarantining damage; synced, so what consumers
        are given is durable."""
        path = self.path(first)
        with open(path, "rb") as f:
            data = f.read()
        count, last, last_ms, good_end, ending = scan(data)
        if ending == TORN or ending == CORRUPT:
            from .repair import Repair  # only when there is damage

            make_dir(self.store.folder + "/quarantine")
            repair = Repair(self)
            what = "stream '%s' segment %d" % (_text(self.name), first)
            if ending == TORN:
                repair.cut(first, data, good_end)
                report.append(
                    "%s: torn tail cut at byte %d (%d bytes dropped: a write cut short)"
                    % (what, good_end, len(data) - good_end)
                )
            else:
                kept = repair.quarantine(first, data, good_end)
                report.append(
                    "%s: corrupt at byte %d; quarantined as %s, its %d good records kept"
                    % (what, good_end, kept, count)
                )
        else:
            with open(path, "ab") as f:
                sync_file(f)  # written before a crash is not yet durable: make it so before anyone reads it
        return last, last_ms, good_end, data[:good_end] if good_end < len(data) else data

    def _first_stamp(self, first, report):
        try:
            with open(self.path(first), "rb") as f:
                head = f.read(HEADER_SIZE + PREFIX)
        except OSError:
            return 0
        if len(head) < HEADER_SIZE + PREFIX:
            return 0
        offset, stamp = offset_and_time(head, 0)
        if offset != first:
            report.append("stream '%s': segment %d begins with offset %d" % (_text(self.name), first, offset))
        return stamp

    def _read_reserved(self):
        try:
            with open(self.dir + "/reserved", "rb") as f:
                records = scan_records(f.read())[0]
        except OSError:
            return 0
        for kind, payload in records:
            if kind == RESERVED and len(payload) == 8:
                return struct.unpack(">Q", payload)[0]
        return 0

    # ------------------------------------------------------------ offsets

    def reserve(self, offset):
        """The core hands out offset, at or past the reservation: the new reservation (about a
        second of records at the rate of the last one), made durable by the next write before
        the record itself (SegmentFile.append)."""
        now = self.clock.now_ms()
        elapsed = now - self.reserved_at
        self.reserved_at = now
        if elapsed < 1000 and self.block < MAX_BLOCK:
            self.block *= 2
        elif elapsed > 4000 and self.block > MIN_BLOCK:
            self.block //= 2
        self.wanted = offset + self.block
        return self.wanted

    def write_reserved(self, offset):
        """reserved = offset, durably: a new file, synced, renamed over the old one."""
        replace_file(self.dir + "/reserved", encode_record(RESERVED, struct.pack(">Q", offset)))
        self.reserved = offset

    # ------------------------------------------------------------ the core's calls

    def segment(self, first):
        """The file of the segment whose first record is first (new, or the newest after a start)."""
        self.current = SegmentFile(self, first)
        return self.current

    def read_into(self, first, position, buf):
        """Read segment first from position into buf: how many bytes came (0 past its end);
        OSError if the segment is gone. (A consumer reads into one buffer again and again.)"""
        with open(self.path(first), "rb") as f:
            f.seek(position)
            return f.readinto(buf) or 0

    def remove(self, first):
        """Retention: the segment is no longer part of the stream."""
        try:
            os.remove(self.path(first))
        except OSError:
            pass  # already gone: nothing was needed from it

    def destroy(self):
        """The stream is deleted: its folder is set aside at once (a new stream of the same name
        starts afresh); discard() removes it once the deletion is durable."""
        self.destroyed = True
        if MICROPYTHON and self.current is not None:
            self.current.close()  # (CPython: its sync may be running in the writer's thread; it closes it)
        parent = self.store.dir
        base = self.dir + GONE
        n = 1
        while exists(base + str(n)):
            n += 1
        self.gone = base + str(n)
        try:
            os.rename(self.dir, self.gone)
        except OSError:
            self.gone = self.dir  # could not rename (it is gone?): removed in place later
        if self.dir in self.store.opened:
            self.store.opened.remove(self.dir)
        sync_dir(parent)

    def discard(self):
        if self.gone is not None:
            remove_tree(self.gone)
            self.gone = None

    def close(self, next_offset):
        """A clean stop (after the journal's last sync): the exact next offset is the reservation,
        so the next start leaves no gap."""
        if self.current is not None:
            self.current.close()
        if not self.destroyed:
            self.write_reserved(next_offset)


class SegmentFile:
    """One segment file, as the journal's writer sees it: append(parts), sync()."""

    def __init__(self, log, first):
        self.log = log
        self.first = first
        self.file = None
        self.size = -1  # bytes in the file that are whole records (-1: not opened yet)
        self.failed = False  # a write failed: the next one starts again at size
        self.new = False  # the file was made: its folder needs a sync too

    def append(self, parts):
        log = self.log
        if log.destroyed:
            return  # the stream was deleted: nothing of it is written any more
        if log.wanted > log.reserved:
            log.write_reserved(log.wanted)  # offsets first, durable before any record that uses them
        f = self._open()
        try:
            if MICROPYTHON:
                n = 0
                for part in parts:  # no join: one large buffer would fragment a board's heap
                    f.write(part)
                    n += len(part)
            else:
                data = b"".join(parts)
                f.write(data)
                f.flush()  # to the operating system now: a killed process loses nothing
                n = len(data)
        except OSError:
            self.failed = True  # part of it may be in the file: the retry writes over it
            raise
        self.size += n
        log.writes += 1

    def _open(self):
        f = self.file
        if f is not None and not self.failed:
            return f
        if f is not None:
            f.close()
        path = self.log.path(self.first)
        if self.size < 0:
            self.new = not exists(path)
            self.size = 0 if self.new else os.stat(path)[6]
            f = open(path, "ab")
        else:
            f = open(path, "r+b")  # after a failed write: on from the last whole record
            f.seek(self.size)
        self.file = f
        self.failed = False
        return f

    def sync(self):
        """(The journal writer's sync, with the journal's files: CPython runs it in a thread.)"""
        f = self.file
        if f is None:
            return
        sync_file(f)
        if self.new:
            self.new = False
            sync_dir(self.log.dir)
        if self.log.current is not self or self.log.destroyed:
            self.close()  # rolled over (or deleted): nothing more comes to it

    def close(self):
        f = self.file
        if f is not None:
            self.file = None
            try:
                sync_file(f)
            finally:
                f.close()
