"""Runs of alike publishes in C, what amqp091/batch.py's PublishRun is handed (loader.py): how many
of the publishes the frame scanner recorded go together into queues (c_accel/runs.c; PublishRun.take)
and their basic.deliver frames for one consumer in one call (amqp091/output.py deliver_run), and
a run's records for a stream (c_accel/appends.c, through appends.py: stream_appends).

Importing this module fails with ImportError when the extension was not built (loader.py
then leaves the broker without it: every publish takes the one-by-one path).
"""

from ._accel import ffi, lib
from .appends import stream_appends  # noqa: F401 (one of the three this module hands on)

COUNT, NEXT, BYTES, STATUS = range(4)
OUT_FULL = 1  # (runs.h) the next delivery did not fit: a larger buffer, again

# One outcome array and one output buffer for every connection: the broker runs on one
# thread, and what a call writes is copied out before the next call.
_outcome = ffi.new("uint64_t[4]")
_out = [ffi.new("uint8_t[]", 64 * 1024)]


def alike_publishes(data, records, slot, count, number, method, header, fixed, max_body, most):
    """(taken, next, content bytes): how many of the count publishes recorded in records from slot
    on are like the first (runs.h hutch_publish_alike), at most `most`; where the frame after the
    last of them starts; their body sizes and header frame tails added up."""
    lib.hutch_alike_publishes(
        ffi.from_buffer(data),
        records + slot,
        count,
        number,
        method,
        len(method),
        header,
        len(header),
        fixed,
        max_body,
        most,
        _outcome,
    )
    return _outcome[COUNT], _outcome[NEXT], _outcome[BYTES]


def queue_deliveries(data, records, slot, count, number, tag_ss, tag, route, max_payload, space):
    """(given, counted, frames): the basic.deliver frames of the first count publishes recorded from slot on
    (alike: taken by alike_publishes) to consumer tag_ss on channel number, tags from tag on, as
    long as the bytes counted (body size + 64 each) stay below space and each body fits one frame
    (max_payload)."""
    buf = ffi.from_buffer(data)
    while True:
        out = _out[0]
        made = lib.hutch_queue_deliveries(
            buf,
            records + slot,
            count,
            number,
            tag_ss,
            len(tag_ss),
            tag,
            route,
            len(route),
            max_payload,
            space,
            out,
            len(out),
            _outcome,
        )
        if _outcome[STATUS] != OUT_FULL or _outcome[COUNT]:
            return _outcome[COUNT], _outcome[BYTES], ffi.buffer(out, made)[:]
        _out[0] = ffi.new("uint8_t[]", 2 * len(out))  # one delivery larger than the buffer
