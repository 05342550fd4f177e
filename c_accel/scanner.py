"""The C batch frame scanner, called the way amqp091/framing.py's scan_frames is.

Importing this module fails with ImportError when the extension was not built
(no compiler at install time, another platform): loader.py then keeps pure Python.
"""

from ..amqp091.framing import RECORD_SLOTS
from ._accel import ffi, lib

# Frames per scan. One FFI call costs about what scanning a few frames in Python does,
# so the batch must be large enough for the call to pay off; 32 frames of records are
# 1.5 KiB, taken by a read while it lasts (amqp091/batch.py reader_factory), not held by each
# connection.
BATCH = 32

# Where the C function reports its stop, status and detail. One for all connections: it is
# read straight after the call, before any frame is handled (and so before another
# connection can be fed).
_outcome = ffi.new("size_t[3]")


def new_records(capacity=BATCH):
    return ffi.new("uint64_t[]", RECORD_SLOTS * capacity)


def scan_frames(buf, pos, max_payload, records):
    """core.framing.scan_frames in C: same arguments (records from new_records()), same result."""
    outcome = _outcome
    # from_buffer: no copy of bytes, bytearray or memoryview; len() of it is in bytes
    data = ffi.from_buffer(buf)
    count = lib.hutch_scan_frames(data, len(data), pos, max_payload, records, len(records) // RECORD_SLOTS, outcome)
    return count, outcome[0], outcome[1], outcome[2]
