"""A broker as tests/accel's differential tests run it: reading with the C frame scanner, with or
without the C run path (c_accel/runs.py), its journal in a folder of its own, its clock at
WALL. The same bytes fed to one with and one without the run path must leave the same replies
and the same files."""

from hutch.amqp091 import batch
from hutch.amqp091.batch import install
from hutch.c_accel import runs as run_code
from hutch.c_accel import scanner
from hutch.core.broker import Broker
from hutch.ports.recovery import recover

WALL = 1700000000  # the wall clock's seconds at the start


def journaled_broker(folder, limits, runs, segment_bytes=1 << 20):
    """(broker, journal writer): a broker on folder (its journal's segments of segment_bytes),
    ticked to time 0."""
    broker = install(
        Broker(limits, log=lambda level, message, exc=None: None),
        batch.reader_factory(scanner.scan_frames, scanner.new_records, run_code if runs else None),
    )
    writer = recover(folder, broker, segment_bytes, 1 << 30, broker.log)
    broker.tick(0, WALL)
    return broker, writer
