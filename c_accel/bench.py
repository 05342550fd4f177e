"""Micro-benchmark of the frame scanner, C against pure Python (prints figures; not a test).

    python -m hutch.c_accel.bench [--body N] [--seconds S]

The buffer is 64 KiB of small publishes (basic.publish, content header, body),
as a port's read buffer holds them under load. Three figures per scanner:

- scan: finding the frames alone (the calls a connection makes on one buffer);
- scan + read: the same, plus reading each record's four fields back in Python,
  which is what connection.read_frames does before handling a frame;
- feed: Connection.feed of the whole buffer (publishes to a queue that does not
  exist, so nothing piles up), with the C scanner, and without it (the
  connection's own loop, what pure Python runs): the share of framing in the
  broker's work.
"""

import argparse
import sys
import time

from hutch.amqp091 import batch, framing
from hutch.amqp091.batch import install
from hutch.amqp091.connection import Connection
from hutch.amqp091.framing import FULL, RECORD_SLOTS
from hutch.codec import spec
from hutch.codec.wire import PROTOCOL_HEADER, content_frames, method_frame
from hutch.core.broker import Broker

BUFFER_SIZE = 64 * 1024


def publish(body):
    return method_frame(1, spec.BASIC_PUBLISH, (0, b"", b"nowhere", False, False)) + content_frames(1, body)


def publishes(body_size):
    """A 64 KiB buffer of whole publishes (3 frames each); how many frames it holds."""
    one = publish(b"x" * body_size)
    count = BUFFER_SIZE // len(one)
    return one * count, 3 * count


def rates(runs, frames, seconds):
    """Frames per second of each run() (each handles `frames` frames): the best of 0.2 s rounds,
    taken in turn, so that a busy machine slows every scanner alike."""
    best = [0.0] * len(runs)
    deadline = time.perf_counter() + seconds * len(runs)
    while time.perf_counter() < deadline:
        for i, run in enumerate(runs):
            rounds = 0
            start = time.perf_counter()
            while time.perf_counter() - start < 0.2:
                run()
                rounds += 1
            best[i] = max(best[i], rounds * frames / (time.perf_counter() - start))
    return best


def scan_only(scan, records, buf):
    def run():
        pos = 0
        while True:
            count, pos, status, detail = scan(buf, pos, 131064, records)
            if status != FULL:
                return

    return run


def scan_and_read(scan, records, buf):
    def run():
        pos = 0
        while True:
            count, stop, status, detail = scan(buf, pos, 131064, records)
            slot = 0
            for _ in range(count):
                # reading each record's fields is the work being measured
                ftype = records[slot]  # noqa: F841
                number = records[slot + 1]  # noqa: F841
                start = records[slot + 2]  # noqa: F841
                end = records[slot + 3]  # noqa: F841
                slot += RECORD_SLOTS
            pos = stop
            if status != FULL:
                return

    return run


def open_connection(frame_reader):
    broker = install(Broker(), frame_reader)
    conn = Connection(broker, {"address": "127.0.0.1", "port": 1})
    conn.feed(PROTOCOL_HEADER)
    conn.feed(method_frame(0, spec.CONNECTION_START_OK, ({}, b"PLAIN", b"\x00guest\x00guest", b"en_US")))
    conn.feed(method_frame(0, spec.CONNECTION_TUNE_OK, (100, 131072, 0)))
    conn.feed(method_frame(0, spec.CONNECTION_OPEN, (b"/", b"", False)))
    conn.feed(method_frame(1, spec.CHANNEL_OPEN, (b"",)))
    conn.take_output()
    return conn


def feed(buf, frame_reader):
    conn = open_connection(frame_reader)

    def run():
        conn.feed(buf)
        assert not conn.closed and not conn.take_output()

    return run


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--body", type=int, default=32, help="body size of each publish (default 32)")
    parser.add_argument("--seconds", type=float, default=1.0, help="time per figure (default 1)")
    args = parser.parse_args(argv)
    try:
        from hutch.c_accel import scanner as c_scanner
    except ImportError as e:
        print("C accelerator not built (%s): nothing to compare" % e)
        return 1
    buf, frames = publishes(args.body)
    print("64 KiB buffer: %d frames (publishes of %d-byte bodies), %s" % (frames, args.body, sys.version.split()[0]))
    scanners = [
        ("C", c_scanner.scan_frames, c_scanner.new_records),
        ("Python", framing.scan_frames, framing.new_records),
    ]
    columns = []
    for make_run in (
        lambda name, scan, new_records: scan_only(scan, new_records(), buf),
        lambda name, scan, new_records: scan_and_read(scan, new_records(), buf),
        # the connection reads with the C scanner; without C, with its own loop, as in
        # production (framing.py says why)
        lambda name, scan, new_records: feed(buf, batch.reader_factory(scan, new_records) if name == "C" else None),
    ):
        runs = []
        for name, scan, new_records in scanners:
            runs.append(make_run(name, scan, new_records))
        columns.append(rates(runs, frames, args.seconds))
    print("%-8s %14s %14s %14s" % ("", "scan", "scan + read", "feed"))
    for i, (name, _, _) in enumerate(scanners):
        print("%-8s" % name + "".join("%11.2f M/s" % (column[i] / 1e6) for column in columns))
    print("(frames per second, best 0.2 s round of %.1f s per figure)" % args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
