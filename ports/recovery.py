"""Recovery at start: read the journal back, repair what a crash or a bad card did, replay.

Recovery never refuses to boot. Each segment is read and checked record by record
(core/records.py): a torn tail (a write cut short by a crash or a power cut) is cut at
the last good record; a corrupt segment is copied to quarantine/ and cut where the
damage starts; a segment missing from the sequence is reported. The broker then starts
with every record it can still trust, and says what it cut or set aside in the log and
in DATA/recovery.txt (`hutch ctl status` shows it).

Only needed at start: on a board, server/serve.py drops this module and core/replay.py
afterwards, so they do not hold heap while the broker runs.
"""

import gc
import os
import sys

from ..core.journal import Journal
from ..core.records import CORRUPT, TORN, scan_records
from ..core.replay import Replay
from .clock import Clock
from .storage import SEGMENT_SUFFIX, JournalWriter, SegmentFiles, exists, make_dir


class Repair:
    """Reading and repairing the segment files of a SegmentFiles."""

    def __init__(self, files):
        self.files = files

    def read(self, segment):
        with open(self.files.path(segment), "rb") as f:
            return f.read()

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


def recover(folder, broker, segment_bytes, max_bytes, log):
    """Replay the journal in folder into broker, attach a Journal to it and return the
    JournalWriter that keeps it. Whatever is found on disk, this returns."""
    clock = Clock()
    started = clock.now_ms()
    # CPython's cyclic collector would walk every object made so far, again and again, while a
    # million messages are rebuilt (they form no cycles: reference counting frees them). Off
    # until the replay is done. (MicroPython's collector must stay on: it only frees memory.)
    collector = sys.implementation.name != "micropython" and gc.isenabled()
    if collector:
        gc.disable()
    try:
        return _recover(folder, broker, segment_bytes, max_bytes, log, clock, started)
    finally:
        if collector:
            gc.enable()
            freeze = getattr(gc, "freeze", None)  # CPython 3.7+ (named so for the board's type check)
            if freeze is not None:
                freeze()  # what was rebuilt lives long: keep it out of later collections too


def _recover(folder, broker, segment_bytes, max_bytes, log, clock, started):
    files = SegmentFiles(folder)
    repair = Repair(files)
    replay = Replay()
    report = []
    sizes = {}
    numbers = files.numbers()
    for segment in numbers:
        data = repair.read(segment)
        records, good_end, ending = scan_records(data)
        if ending == TORN:
            repair.cut(segment, data, good_end)
            report.append(
                "segment %08d: torn tail cut at byte %d (%d bytes dropped: a write cut short)"
                % (segment, good_end, len(data) - good_end)
            )
        elif ending == CORRUPT:
            kept = repair.quarantine(segment, data, good_end)
            report.append(
                "segment %08d: corrupt at byte %d; quarantined as %s, its %d good records kept"
                % (segment, good_end, kept, len(records))
            )
        replay.segment(segment, records)
        sizes[segment] = good_end
        data = records = None
    for segment in sorted(replay.expected):
        if segment not in sizes:
            report.append("segment %08d: missing; the messages it held are lost" % segment)
    if replay.skipped:
        report.append("%d records did not decode and were skipped" % replay.skipped)
    journal = Journal(broker, segment_bytes, max_bytes)
    writer = JournalWriter(journal, files, broker, log)
    broker.open_stream = writer.open_stream  # the streams the replay declares open their folders
    replay.apply(broker, journal, log)
    report.extend(_streams_found(writer))
    for segment in sizes:
        journal.sizes[segment] = sizes[segment]
        journal.total += sizes[segment]
    broker.journal = journal
    journal.start(numbers[-1] + 1 if numbers else 1)
    elapsed = clock.now_ms() - started
    total = 0
    for segment in sizes:
        total += sizes[segment]
    summary = "journal: recovered %d messages in %d queues from %d segments (%d bytes) in %d ms" % (
        replay.message_count(),
        len(replay.queues),
        len(numbers),
        total,
        elapsed,
    )
    for line in report:
        log("warning", "journal: " + line)
    log("info", summary)
    _write_report(folder, summary, report)
    return writer


def _streams_found(writer):
    """The folders of streams the replay did not declare (deleted ones) are removed; what opening
    the streams cut or set aside, for the report."""
    if writer.stream_store is None:
        try:
            if not os.listdir(writer.files.folder + "/streams"):
                return []
        except OSError:
            return []  # no streams folder: no streams
        from .streams import StreamStore

        writer.stream_store = StreamStore(writer.files.folder, writer.log)
    return writer.stream_store.finish()


def _write_report(folder, summary, report):
    try:
        with open(folder + "/recovery.txt", "w") as f:
            f.write(summary + "\n")
            if not report:
                f.write("nothing was cut or set aside\n")
            for line in report:
                f.write(line + "\n")
    except OSError:
        pass  # a report we cannot write must not stop the broker; the log has it too
