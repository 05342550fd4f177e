"""The journal's segment files in the data folder: the names, the sealed segment's trailer, and
SegmentFiles (read at start, append to the newest, sync, delete old ones). Shared by the
journal's writer (storage.py), its recovery (recovery.py, repair.py) and the streams' files
(streams.py).

    DATA/journal/00000001.seg ...  segments of records (core/store/records.py, core/store/journal.py)
                                   a sealed one ends with its summary's records and a
                                   16-byte trailer (see seal_trailer)
    DATA/quarantine/               segments found corrupt at start, kept as they were
"""

import os
import struct
import sys
from binascii import crc32

MICROPYTHON = sys.implementation.name == "micropython"
SEGMENT_SUFFIX = ".seg"
TRAILER_MAGIC = b"HSUM"
TRAILER_SIZE = 16


def seal_trailer(summary_start, data_crc):
    """The last 16 bytes of a sealed segment: magic, where its summary starts, the CRC-32 of
    every byte before the summary (checked at start: a flipped byte in a message is found
    without reading records), and the CRC-32 of those 12 bytes."""
    head = TRAILER_MAGIC + struct.pack(">II", summary_start, data_crc)
    return head + struct.pack(">I", crc32(head) & 0xFFFFFFFF)


def exists(path):
    try:
        os.stat(path)
        return True
    except OSError:
        return False


def make_dir(path):
    """path made if it is not there, durably: a new folder's entry is in its parent, which is
    synced too (a power cut would otherwise take the folder, and all it holds, away)."""
    if not exists(path):
        os.mkdir(path)
        sync_dir(path.rsplit("/", 1)[0] if "/" in path.rstrip("/") else ".")


def sync_dir(path):
    """A new, renamed or deleted entry is durable once its directory is synced (CPython; a
    board's flush() of the file is all its filesystem offers)."""
    read_only = getattr(os, "O_RDONLY", None)  # (MicroPython's os has neither)
    if hasattr(os, "fsync") and read_only is not None:
        fd = os.open(path or "/", read_only)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class SegmentFiles:
    """The segment files: read them at start, append to the newest, sync, delete old ones."""

    def __init__(self, folder):
        self.folder = folder
        self.dir = folder + "/journal"
        self.quarantine_dir = folder + "/quarantine"
        make_dir(folder)
        make_dir(self.dir)
        self.file = None  # the open segment file, and its number
        self.file_segment = None
        self.size = 0  # its bytes so far, and their CRC-32 (a summary's trailer holds it)
        self.crc = 0
        self.reader = None  # a segment open for reading (page-ins), and its number
        self.reader_segment = None
        self.unsynced = []  # files written since the last sync (a rolled one stays until then)
        self.new_file = False  # a segment file was created: its directory entry needs a sync too

    def path(self, segment):
        return "%s/%08d%s" % (self.dir, segment, SEGMENT_SUFFIX)

    def numbers(self):
        out = []
        for name in os.listdir(self.dir):
            if name.endswith(SEGMENT_SUFFIX) and name[: -len(SEGMENT_SUFFIX)].isdigit():
                out.append(int(name[: -len(SEGMENT_SUFFIX)]))
        out.sort()
        return out

    def strangers(self):
        """The names in the journal's folder that are not segments: files hutch did not write
        (said at start, left alone)."""
        return sorted(name for name in os.listdir(self.dir) if not (name.endswith(SEGMENT_SUFFIX) and name[: -len(SEGMENT_SUFFIX)].isdigit()))  # fmt: skip

    def append(self, segment, parts, tail):
        """parts (then tail, unless None) written at the end of segment's file as one whole. If the
        disk refuses any of it (full, failing), size and crc stay as they were, and the retry
        (storage.py writes the same parts again) writes from there on, over whatever part of
        this write reached the file: no record is in the file twice or torn in its middle."""
        f = self.file
        if segment != self.file_segment:
            f = self.file = open(self.path(segment), "ab")
            self.file_segment = segment
            self.new_file = True
            self.size = 0
            self.crc = 0
        elif f is None:  # the last write failed (below): on from the end of the last whole one
            f = self.file = open(self.path(segment), "r+b")
            f.seek(self.size)
        if f not in self.unsynced:
            self.unsynced.append(f)
        crc = self.crc
        n = 0
        try:
            if MICROPYTHON:
                for part in parts:  # no join: one large buffer would fragment a board's heap
                    f.write(part)
                    crc = crc32(part, crc)
                    n += len(part)
                if tail is not None:
                    f.write(tail)
                    crc = crc32(tail, crc)
                    n += len(tail)
            else:
                data = b"".join(parts)
                if tail is not None:
                    data += tail
                f.write(data)
                f.flush()  # to the operating system now: a killed process loses nothing
                crc = crc32(data, crc)
                n = len(data)
        except OSError:
            # The file object goes: in append mode the retry would follow this write's torn
            # bytes, and CPython's buffered file still holds what it could not write (closing
            # it writes that or drops it: either way the retry writes over it). The file's
            # data is synced through the object the retry opens.
            self.file = None
            self.unsynced.remove(f)
            try:
                f.close()
            except OSError:
                pass
            raise
        self.size += n
        self.crc = crc

    def append_summary(self, segment, parts):
        """A segment's summary records, then the trailer that seals it: one write, so that a
        retry after a failed one writes them once."""
        if segment != self.file_segment:
            self.append(segment, (), None)
        self.append(segment, parts, seal_trailer(self.size, self.crc & 0xFFFFFFFF))

    def read(self, segment, position, size):
        """Bytes of a segment from position (fewer at its end): page-ins read their runs so."""
        if segment != self.reader_segment:
            self.close_reader()
            self.reader = open(self.path(segment), "rb")
            self.reader_segment = segment
        self.reader.seek(position)
        return self.reader.read(size)

    def close_reader(self):
        if self.reader is not None:
            self.reader.close()
            self.reader = None
            self.reader_segment = None

    def remove(self, segment):
        if segment == self.reader_segment:
            self.close_reader()
        try:
            os.remove(self.path(segment))
        except OSError:
            pass  # already gone (by hand): nothing was needed from it

    def take_unsynced(self):
        """The files to sync, and whether the directory needs it too; the caller passes them
        to sync() (CPython: in a worker thread) and then to synced()."""
        files = self.unsynced
        self.unsynced = []
        new_file = self.new_file
        self.new_file = False
        return files, new_file

    def sync(self, files, new_file):
        for f in files:
            self.sync_file(f)
        if new_file:
            sync_dir(self.dir)  # a new file is durable once its directory entry is

    def synced(self, files):
        """Close the files that were rolled over, now that they are synced."""
        for f in files:
            if f is not self.file and f not in self.unsynced:
                f.close()

    def sync_file(self, f):
        f.flush()  # MicroPython: the filesystem's own sync (see the module's docstring)
        if hasattr(os, "fsync"):
            os.fsync(f.fileno())

    def close(self):
        self.close_reader()
        if self.file is not None:
            self.sync_file(self.file)
            self.file.close()
            self.file = None
            self.file_segment = None
