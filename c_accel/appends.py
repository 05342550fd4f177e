"""A run of whole publishes into a stream's records in C (c_accel/appends.c): what
amqp091/batch.py's stream_run hands a stream (server/startup.py gives it to the broker as
Broker.stream_appends).

A publisher into a stream sends run after run of publishes with the same exchange,
routing key and properties (a sensor's readings): the frame scanner finds up to a batch
of them in one read, and one call here makes all their records, where each would
otherwise go through the channel, the broker and the stream one by one.

Importing this module fails with ImportError when the extension was not built (loader.py
then leaves the broker without it: every publish takes the one-by-one path).
"""

from ._accel import ffi, lib

TAKEN, NEXT = range(2)

# One outcome array and one output buffer for every stream: the broker runs on one thread,
# and what a call writes is copied out before the next call.
_outcome = ffi.new("uint64_t[2]")
_out = ffi.new("uint8_t[]", 256 * 1024)


def stream_appends(
    data, records, slot, count, number, method, header, fixed, max_body, template, offset, now_ms, most, budget
):
    """(taken, next, records): the records for the publishes recorded in records from slot on
    (count of them), as long as each is like the first (channel number, method arguments
    after the ticket, content header but for the body size at most max_body, and but for
    the properties after the first `fixed` octets of its payload, each record's own); template is
    (prefix, body_size_at, after) of core/streams/streamlog.py record_template. At most `most`
    records, taking at most budget bytes. next: where the frame after the last taken starts."""
    prefix, body_size_at, after = template
    out = _out  # (a record larger than it is not taken: that publish goes the one-by-one way)
    made = lib.hutch_stream_appends(
        ffi.from_buffer(data),
        len(data),
        records + slot,
        count,
        number,
        method,
        len(method),
        header,
        len(header),
        fixed,
        max_body,
        prefix,
        len(prefix),
        body_size_at,
        after,
        len(after),
        offset,
        now_ms,
        most,
        budget,
        out,
        len(out),
        _outcome,
    )
    return _outcome[TAKEN], _outcome[NEXT], ffi.buffer(out, made)[:]
