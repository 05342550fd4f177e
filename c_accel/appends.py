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


def stream_appends(run, stream, template, now_ms, max_body):
    """(taken, next, records): the records for the publishes of run (amqp091/batch.py
    PublishRun: the publishes recorded from its slot on, count of them, each like the first:
    channel number, method arguments after the ticket, content header but for the body size at
    most max_body, and but for the properties after the first `fixed` octets of its payload,
    each record's own), for stream from its next offset on: at most the offsets it reserved,
    taking at most the room of its segment. template is (prefix, body_size_at, after) of
    core/streams/streamlog.py record_template. next: where the frame after the last taken
    starts."""
    prefix, body_size_at, after = template
    out = _out  # (a record larger than it is not taken: that publish goes the one-by-one way)
    made = lib.hutch_stream_appends(
        ffi.from_buffer(run.data), len(run.data), run.records + run.slot, run.count, run.number,
        run.routing, len(run.routing), run.header, len(run.header), run.fixed, max_body,
        prefix, len(prefix), body_size_at, after, len(after),
        stream.next, now_ms, stream.reserved - stream.next, stream.room(),
        out, len(out), _outcome,
    )  # fmt: skip
    return _outcome[TAKEN], _outcome[NEXT], ffi.buffer(out, made)[:]
