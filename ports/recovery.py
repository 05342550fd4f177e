"""Recovery at start: read the journal back, repair what a crash or a bad card did, replay.

Recovery never refuses to boot. A sealed segment (ports/storage.py: summary records and a
trailer at its end) is checked against the CRC-32 its trailer holds, in large reads, and
replayed from its summary alone: no message is decoded, whatever the backlog. A segment
without a sound summary (the one being written when the broker stopped) is read and
checked record by record (core/store/records.py): a torn tail (a write cut short by a crash or
a power cut) is cut at the last good record; a corrupt segment is copied to quarantine/
and cut where the damage starts; a segment missing from the sequence is reported. Such
segments are sealed once the broker has started, so the next start reads their
summaries. The broker then starts with every record it can still trust, and says what
it cut or set aside in the log and in DATA/recovery.txt (`hutch ctl status` shows it).

Only needed at start: on a board, server/startup.py drops this module and core/replay.py
afterwards, so they do not hold heap while the broker runs.
"""

import gc
import os
import sys

from ..core.replay import Replay
from ..core.store.journal import SUMMARY, Journal, unpaired_tail
from ..core.store.records import CORRUPT, HEADER_SIZE, TORN, scan_records
from ..core.store.records import TRAILER_SIZE as RECORD_TRAILER_SIZE
from .clock import Clock
from .repair import Repair
from .segments import TRAILER_SIZE, SegmentFiles
from .storage import JournalWriter

CHECK_READ = 1024 * 1024  # bytes per read while checking a sealed segment's CRC (boards: less)


def recover(folder, broker, segment_bytes, max_bytes, log, check_later=False):
    """Replay the journal in folder into broker, attach a Journal to it and return the
    JournalWriter that keeps it. Whatever is found on disk, this returns.

    check_later (CPython's `hutch serve`): a sealed segment is replayed from its summary
    without reading its data first; the data's CRCs are checked once the broker serves
    (ports/verify.py), so a restart with gigabytes queued takes as long as reading their
    summaries. A board's journal is small: it checks everything before it serves."""
    clock = Clock()
    started = clock.now_ms()
    # CPython's cyclic collector would walk every object made so far, again and again, while a
    # million messages are rebuilt (they form no cycles: reference counting frees them). Off
    # until the replay is done. (MicroPython's collector must stay on: it only frees memory.)
    collector = sys.implementation.name != "micropython" and gc.isenabled()
    if collector:
        gc.disable()
    try:
        return _recover(folder, broker, segment_bytes, max_bytes, log, clock, started, check_later)
    finally:
        if collector:
            gc.enable()
            freeze = getattr(gc, "freeze", None)  # CPython 3.7+ (named so for the board's type check)
            if freeze is not None:
                freeze()  # what was rebuilt lives long: keep it out of later collections too


def _unseal_for_a_pair(repair, segment):
    """The journal's last segment with anything in it is sealed (the one a roll began after it
    came to nothing, or never was): the roll may have come between a message and the record that
    completes it (core/store/journal.py PAIRED, NUMBERED), which the newer segment lost. If so,
    the segment is cut before that message (its summary goes with it, so it is read whole) and
    True."""
    data = repair.read(segment)
    records, _end, _ending = scan_records(data)
    kept = len(records)
    for i, (kind, _payload) in enumerate(records):
        if kind == SUMMARY:
            kept = i
            break
    cut = unpaired_tail(records[:kept])
    if not cut:
        return False
    at = 0
    for _kind, payload in records[: kept - cut]:
        at += HEADER_SIZE + len(payload) + RECORD_TRAILER_SIZE
    repair.cut(segment, data, at)
    return True


def _recover(folder, broker, segment_bytes, max_bytes, log, clock, started, check_later):
    files = SegmentFiles(folder)
    repair = Repair(files)
    replay = Replay(broker.limits)
    report = []
    sizes = {}
    to_seal = []  # (segment, summary parts) of segments read whole
    numbers = files.numbers()
    for name in files.strangers():  # (never read as a segment, never deleted)
        report.append("%s/journal/%s: not a segment, and not hutch's: left alone" % (folder, name))
    read_size = CHECK_READ if sys.implementation.name != "micropython" else 4096
    unchecked = []  # (segment, summary start, data CRC): sealed segments whose data is checked later
    # the journal's end: the newest segment with anything in it (a roll's new file may be empty)
    tail = next((n for n in reversed(numbers) if os.stat(files.path(n))[6]), None)
    for segment in numbers:
        summary = repair.summary(segment, read_size, not check_later)
        if summary is not None and segment == tail and _unseal_for_a_pair(repair, segment):
            report.append(
                "segment %08d: sealed as a roll split a message from the record that completes it, "
                "which a power cut took: the message cut (its repeat brings it once), the segment read whole" % segment
            )
            summary = None
        if summary is not None and check_later:
            summary, start, data_crc = summary
            unchecked.append((segment, start, data_crc))
        if summary is not None:
            replay.segment(segment, summary, True)
            sizes[segment] = os.stat(files.path(segment))[6]
            continue
        data = repair.read(segment)
        records, good_end, ending = scan_records(data)
        cut = unpaired_tail(records) if segment == tail else 0
        if cut:  # (a QoS 2 message whose packet id a power cut took: the client sends it again)
            for _kind, payload in records[-cut:]:
                good_end -= HEADER_SIZE + len(payload) + RECORD_TRAILER_SIZE
            del records[-cut:]
            repair.cut(segment, data, good_end)
            report.append("segment %08d: a QoS 2 message without its packet id cut at byte %d" % (segment, good_end))
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
        data = None
        replay.segment(segment, records)
        to_seal.append((segment, replay.seal(segment, records)))
        sizes[segment] = good_end
        records = None
    for segment in sorted(replay.expected):
        if segment not in sizes:
            report.append("segment %08d: missing; the messages it held are lost" % segment)
    report.extend(replay.undecodable)
    if replay.unknown:
        report.append("%d records of a kind a newer hutch wrote were left as they are" % replay.unknown)
    journal = Journal(broker, segment_bytes, max_bytes)
    writer = JournalWriter(journal, files, broker, log)
    if unchecked:  # (only then: a Repair kept would keep this module, which a board forgets)
        writer.check_later(repair, unchecked)
    broker.open_stream = writer.open_stream  # the streams the replay declares open their folders
    replay.apply(broker, journal, log)
    report.extend(_streams_found(writer))
    for segment in sizes:
        journal.sizes[segment] = sizes[segment]
        journal.total += sizes[segment]
    broker.journal = journal
    journal.start(numbers[-1] + 1 if numbers else 1)
    # The new segment's snapshot first, durable: a summary sealed here names no definitions
    # of its own (the snapshot has them all), so it must never be the newest word on them.
    writer.commit()
    for segment, parts in to_seal:
        if segment not in journal.sizes:
            continue  # nothing in it was needed any more: the commit deleted it
        try:
            repair.seal(segment, parts)
        except OSError as e:
            report.append("segment %08d: could not be sealed (%s): the next start reads it whole" % (segment, e))
            continue
        added = TRAILER_SIZE
        for part in parts:
            added += len(part)
        journal.sizes[segment] += added
        journal.total += added
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
