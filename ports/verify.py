"""The data CRCs of sealed segments, checked while the broker already serves (CPython only).

A restart replays each sealed segment from its summary (ports/recovery.py, check_later): with
10 million messages queued that is 1.7 GB of segments whose data nobody needs to read before
the first client connects, and reading it all for its CRC alone took longer than the whole
rest of the start. So the broker serves first and this checks each segment's data against
its trailer's CRC afterwards, in a worker thread (zlib's CRC and file reads let the event
loop go on meanwhile).

What it finds is handled as the start would have handled it: a segment whose data does not
match is read record by record; from the first bad record on it is copied to quarantine/ and
cut (on the event loop, and only if the journal still needs that segment: a segment it has
deleted meanwhile is not written back), the journal's idea of its size shrinks with it, and
the line goes to the log and to recovery.txt. Messages queued from the cut part are lost as
their queue reaches them (core/store/paging.py says so in the log), as they would have been lost
at the start. Until the check reaches a segment, a page-in still checks each record's own
CRC as it reads it.
"""

import asyncio
import zlib

from ..core.store.records import CORRUPT, scan_records

READ = 1024 * 1024  # bytes per read


def data_crc(path, length):
    """The CRC-32 of the first length bytes of a file; None if it is gone or shorter."""
    crc = 0
    try:
        with open(path, "rb") as f:
            while length > 0:
                data = f.read(min(READ, length))
                if not data:
                    return None
                crc = zlib.crc32(data, crc)
                length -= len(data)
    except FileNotFoundError:
        return None
    return crc & 0xFFFFFFFF


async def verify_sealed(writer, repair, segments, folder):
    """Check each (segment, summary start, data CRC); quarantine and cut what fails."""
    loop = asyncio.get_running_loop()
    journal = writer.journal
    for segment, start, expected in segments:
        if segment not in journal.sizes:
            continue  # deleted meanwhile: nothing in it is needed
        found = await loop.run_in_executor(None, data_crc, repair.files.path(segment), start)
        if found is None or found == expected or segment not in journal.sizes:
            continue
        line = _quarantine(writer, repair, segment)
        writer.log("warning", "journal: " + line)
        try:
            with open(folder + "/recovery.txt", "a") as f:
                f.write(line + "\n")
        except OSError:
            pass  # the log has it too


def _quarantine(writer, repair, segment):
    """The segment read whole: copied to quarantine and cut at its first bad record."""
    data = repair.read(segment)
    records, good_end, ending = scan_records(data)
    if ending != CORRUPT:  # the CRC of the data disagrees, every record agrees: said, kept
        return "segment %08d: its data does not match its CRC, but every record checks out; kept" % segment
    writer.files.close_reader()  # a page-in opens the cut file from now on
    kept = repair.quarantine(segment, data, good_end)
    journal = writer.journal
    if segment in journal.sizes:
        journal.total -= journal.sizes[segment] - good_end
        journal.sizes[segment] = good_end
    return "segment %08d: corrupt at byte %d (found after the start); quarantined as %s, its %d good records kept" % (
        segment,
        good_end,
        kept,
        len(records),
    )
