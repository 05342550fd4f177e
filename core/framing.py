"""Finding the frames in a read buffer: the batch frame scanner.

A frame on the wire is type(1) channel(2) size(4), size octets of payload, 0xCE.
scan_frames() walks a buffer and records every complete frame it finds, so the
connection learns where all the frames are in one call per buffer. This is the
pure-Python reference: c_accel/ has the same function in C (one FFI call per
buffer, never one per frame) and its tests check the two agree on any input.
Connections use the C one when it is installed (use_scanner, below).

It only checks what tells where frames start and end: a payload larger than the
connection allows (its header is enough to know; the payload need not have
arrived) and the frame-end octet. Frame types and channels are the connection's
business: they are recorded, not judged.

Written for MicroPython too: byte indexing, no struct.unpack_from (60x slower
there), no allocation per frame (records is a list the caller reuses).
"""

# Why a scan stopped (the third value scan_frames returns).
NEED_MORE = 0       # the rest of the buffer is not a whole frame (maybe nothing): wait for more bytes
FULL = 1            # records is full: scan again from where it stopped
OVERSIZE = 2        # the frame at the stop has a payload size above max_payload (detail: that size)
BAD_FRAME_END = 3   # the frame at the stop does not end with 0xCE (detail: the octet found instead)

FRAME_END = 0xCE

# One record per frame, four slots each, in a flat sequence the caller owns:
# records[4*i + TYPE], ... for frame i.
TYPE = 0
CHANNEL = 1
PAYLOAD_START = 2   # index of the payload's first octet (the frame header starts 7 before)
PAYLOAD_END = 3     # index of the frame-end octet, just past the payload
RECORD_SLOTS = 4

# Frames per scan with this reference (tests): in pure Python a larger batch saves nothing.
BATCH = 4


def new_records(capacity=BATCH):
    """A records sequence for scan_frames, room for capacity frames."""
    return [0] * (RECORD_SLOTS * capacity)


def scan_frames(buf, pos, max_payload, records):
    """Record the complete frames in buf from pos on, until records is full.

    buf is bytes, bytearray or a memoryview; pos an index into it (0 <= pos <= len(buf)).
    Returns (count, stop, status, detail): count frames recorded in records; stop, the
    index just past the last of them (where the frame status speaks of begins); status,
    one of NEED_MORE, FULL, OVERSIZE, BAD_FRAME_END; detail, the size or octet at fault
    (0 otherwise). A frame after a bad one is never looked at: past a framing error the
    byte stream cannot be trusted.
    """
    n = len(buf)
    capacity = len(records) // RECORD_SLOTS
    count = 0
    slot = 0
    while n - pos >= 7:
        if count == capacity:
            return count, pos, FULL, 0
        size = (buf[pos + 3] << 24) | (buf[pos + 4] << 16) | (buf[pos + 5] << 8) | buf[pos + 6]
        if size > max_payload:
            return count, pos, OVERSIZE, size
        end = pos + 7 + size
        if end >= n:  # the payload or the frame-end octet has not arrived yet
            break
        if buf[end] != FRAME_END:
            return count, pos, BAD_FRAME_END, buf[end]
        records[slot] = buf[pos]
        records[slot + 1] = (buf[pos + 1] << 8) | buf[pos + 2]
        records[slot + 2] = pos + 7
        records[slot + 3] = end
        slot += RECORD_SLOTS
        count += 1
        pos = end + 1
    return count, pos, NEED_MORE, 0


# The scanner connections use: none (they read each frame header in their own loop) until
# a CPython entry point installs the C one (hutch.c_accel.loader). The core never imports
# the accelerator itself: on MicroPython there is none, and the core stays free of
# CPython-only code. Nor does the connection import this module: a board never needs it.
#
# Why not scan_frames above when there is no C: in pure Python the batch costs more than
# it saves. Each frame's record is written and read back on top of reading its header, and
# each call returns a tuple; on the MicroPython unix port, feeding small publishes through
# scan_frames was ~35-45% slower than the connection's own loop (~10-15% on CPython).
# scan_frames stays the reference the C code is tested against, and the connection's
# batch loop is tested with it too (tests/test_accel_*.py).
def use_scanner(scan, make_records):
    """Make scan (with records from make_records()) the scanner of connections made from now
    on; scan None: the connection's own loop."""
    from . import connection
    connection.frame_scanner = (scan, make_records) if scan is not None else None
