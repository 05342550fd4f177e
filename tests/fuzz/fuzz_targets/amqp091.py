"""AMQP 0-9-1 as a client's bytes reach the broker.

frames: the frame scanner in Python (amqp091/framing.py) and, where it is built, in C
(c_accel/scanner.py) over the same buffer: the same frames, the same stop and the same error;
each method frame's arguments decoded as the connection decodes them (codec/wire.py) raise
DecodeError or nothing.

session: a served connection fed the bytes in pieces, four ways at once: the connection's own
frame loop (what MicroPython runs), the batch reader with the Python scanner, with the C
scanner, and with the C scanner and the C runs of alike publishes (what CPython serves with).
After each piece their output, state and log must be the same; no internal error is logged;
and a good client is served by the same broker after the session ends. Two more sides, the
connection's own loop and the C runs, serve on a journal (a data folder on tmpfs, written and
synced after each piece): the journal's runs (core/store/journal_runs.py) against its messages
one by one (Journal.add_message) and the streams' C appends against theirs one by one; the two
answer alike and leave the same bytes in every file.
"""

import struct

from hutch.amqp091 import framing
from hutch.codec.errors import DecodeError
from hutch.codec.wire import decode_args, signature

from .served import ended, pieces

try:
    from hutch.c_accel import scanner as c_scanner
except ImportError:  # (not built, or MicroPython: the Python scanner alone)
    c_scanner = None

RECORDS = framing.new_records(64)
C_RECORDS = c_scanner.new_records(64) if c_scanner is not None else None


def frames(data):
    """data: the first octet a frame_max's choice, the rest the buffer scanned. The outcome: the
    scan's (count, stop, status, detail) and each method's decoding."""
    if not data:
        return ""
    max_payload = (4088, 131064, 65536, 7)[data[0] % 4]
    buf = data[1:]
    found = framing.scan_frames(buf, 0, max_payload, RECORDS)
    if c_scanner is not None:
        in_c = c_scanner.scan_frames(buf, 0, max_payload, C_RECORDS)
        assert in_c == found, "the C scanner: %r, Python: %r" % (in_c, found)
        slots = found[0] * framing.RECORD_SLOTS
        assert list(C_RECORDS[0:slots]) == list(RECORDS[0:slots]), "the scanners' records differ"
    said = [repr(found)]
    at = 0
    while at + 7 <= len(buf):  # each method frame's arguments, as the connection decodes them
        kind, _channel, size = struct.unpack_from(">BHI", buf, at)
        payload = buf[at + 7 : at + 7 + size]
        if kind == 1 and len(payload) >= 4:
            sig = signature(struct.unpack_from(">I", payload)[0])
            if sig is not None:
                try:
                    decode_args(sig, payload, 4, len(payload))
                    said.append(sig)
                except DecodeError:
                    said.append("DecodeError")
        at += 8 + size
    return " ".join(said)


SIDES = None  # how each side reads frames: [(name, reader factory or None)], made at the first session


def _sides():
    global SIDES
    if SIDES is None:
        from hutch.amqp091 import batch

        SIDES = [("inline", None), ("python", batch.reader_factory(framing.scan_frames, framing.new_records))]
        if c_scanner is not None:
            from hutch.c_accel import runs

            SIDES.append(("c", batch.reader_factory(c_scanner.scan_frames, c_scanner.new_records)))
            SIDES.append(("c+runs", batch.reader_factory(c_scanner.scan_frames, c_scanner.new_records, runs)))
    return SIDES


JOURNALLED = ("inline", "c+runs")  # the sides that serve on a journal too


def session(data):
    """data: the first octet the size of the pieces it arrives in, the rest a client's bytes."""
    if not data:
        return
    import gc
    import os
    import shutil
    import tempfile

    from hutch.amqp091.batch import install
    from hutch.amqp091.connection import Connection
    from hutch.ports.recovery import recover

    from .served import PEER, Logged

    parts, _stream = pieces(data)
    sides, folders = [], []
    try:
        for name, reader in _sides():
            logged = Logged()
            install(logged.broker, reader)
            sides.append((name, logged, Connection(logged.broker, PEER), None))
        for name, reader in _sides():
            if name in JOURNALLED:
                logged = Logged()
                scratch = "/dev/shm" if os.path.isdir("/dev/shm") else None  # (tmpfs: a sync costs nothing)
                folders.append(tempfile.mkdtemp(prefix="hutch-fuzz-", dir=scratch))
                writer = recover(folders[-1], logged.broker, 1 << 14, 1 << 24, logged.broker.log)
                gc.unfreeze()  # (recover freezes what it rebuilt: each input's would pile up)
                del logged.said[:]  # (its line says how many ms it took)
                install(logged.broker, reader)
                sides.append((name + " on a journal", logged, Connection(logged.broker, PEER), writer))
        for part in parts:
            results = []
            for _name, logged, conn, writer in sides:
                conn.feed(part)
                if writer is not None:
                    writer.commit()  # (and the confirms it allows)
                results.append((conn.take_output(), conn.state, conn.closed, conn.paused, conn.pending, logged.said[:]))
            _alike(sides, results)
        for _name, logged, conn, _writer in sides:
            ended(logged, conn)
        on_disk = [_files(folder) for folder in folders]
        assert on_disk[1:] == on_disk[:-1], "the journal's runs wrote other files than its messages one by one"
    finally:
        for _name, _logged, _conn, writer in sides:
            if writer is not None:
                writer.files.close()
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)


def _alike(sides, results):
    """Each side read a piece as the first of its kind did (on a journal, or not)."""
    for kind in (False, True):
        mine = [
            (name, result) for (name, _l, _c, writer), result in zip(sides, results) if (writer is not None) == kind
        ]
        for name, result in mine[1:]:
            assert result == mine[0][1], "%s reads differently from %s" % (name, mine[0][0])


def _files(folder):
    """{path in folder: its bytes} of every file under it but recovery.txt (the start's ms)."""
    import os

    found = {}
    for root, _dirs, names in os.walk(folder):
        for name in names:
            if name == "recovery.txt":
                continue
            with open(os.path.join(root, name), "rb") as f:
                found[os.path.relpath(os.path.join(root, name), folder)] = f.read()
    return found
