"""Reading and repairing journal segments: a sealed segment's summary, a torn tail cut off, a
corrupt segment set aside in the quarantine with its good records kept. Used at start
(ports/recovery.py), for a stream's segments (ports/streams.py) and by the CRC check of sealed
segments once the broker serves (ports/verify.py)."""

import os
import struct
from binascii import crc32

from ..core.store.records import CLEAN, scan_records
from .segments import SEGMENT_SUFFIX, TRAILER_MAGIC, TRAILER_SIZE, exists, make_dir, seal_trailer


def read_trailer(tail):
    """(summary_start, data_crc) from a segment's last 16 bytes, or None if it is not sealed."""
    if len(tail) != TRAILER_SIZE or tail[:4] != TRAILER_MAGIC:
        return None
    if crc32(tail[:12]) & 0xFFFFFFFF != struct.unpack_from(">I", tail, 12)[0]:
        return None
    return struct.unpack_from(">II", tail, 4)


class Repair:
    """Reading and repairing the segment files of a SegmentFiles."""

    def __init__(self, files):
        self.files = files

    def read(self, segment):
        with open(self.files.path(segment), "rb") as f:
            return f.read()

    def summary(self, segment, read_size, check_data=True):
        """The records of a sealed segment's summary, if its trailer, its summary and the CRC
        of everything before it all check out; else None (the segment is read whole).
        check_data False: the data's CRC is left for later (ports/verify.py), the records of
        the summary are trusted on their own CRCs; then (records, summary start, data CRC)."""
        with open(self.files.path(segment), "rb") as f:
            size = f.seek(0, 2)
            if size < TRAILER_SIZE:
                return None
            f.seek(size - TRAILER_SIZE)
            sealed = read_trailer(f.read(TRAILER_SIZE))
            if sealed is None:
                return None
            start, data_crc = sealed
            if start > size - TRAILER_SIZE:
                return None
            f.seek(start)
            records, _end, ending = scan_records(f.read(size - TRAILER_SIZE - start))
            if ending != CLEAN or not records:
                return None
            if not check_data:
                return records, start, data_crc
            f.seek(0)
            crc = 0
            left = start
            while left > 0:
                data = f.read(min(read_size, left))
                if not data:
                    return None
                crc = crc32(data, crc)
                left -= len(data)
            if crc & 0xFFFFFFFF != data_crc:
                return None
            return records

    def seal(self, segment, parts):
        """Append a summary and its trailer to a segment read whole at this start."""
        data = self.read(segment)
        start = len(data)
        with open(self.files.path(segment), "ab") as f:
            for part in parts:
                f.write(part)
            f.write(seal_trailer(start, crc32(data) & 0xFFFFFFFF))
            self.files.sync_file(f)

    def cut(self, segment, data, good_end):
        """Keep only the first good_end bytes (written to a new file, then renamed over: a
        crash during the cut leaves the old file or the new one, never half of each)."""
        path = self.files.path(segment)
        temporary = path + ".cut"
        with open(temporary, "wb") as f:
            f.write(data[:good_end])
            self.files.sync_file(f)
        os.rename(temporary, path)

    def quarantine(self, segment, data, good_end):
        """Copy the segment as it is into quarantine/ (a new name each time), then cut it."""
        make_dir(self.files.quarantine_dir)
        base = "%s/%08d%s" % (self.files.quarantine_dir, segment, SEGMENT_SUFFIX)
        name = base
        n = 1
        while exists(name):
            n += 1
            name = "%s.%d" % (base, n)
        with open(name, "wb") as f:
            f.write(data)
            self.files.sync_file(f)
        self.cut(segment, data, good_end)
        return name
