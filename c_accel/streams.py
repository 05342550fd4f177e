"""A stream's records into basic.deliver frames in C, called the way amqp091/output.py's
stream_records() is (server/startup.py installs it: amqp091/batch.py install).

One call makes the frames of a whole read buffer of records (up to 64 KiB): the CRC-32
checks, the method frames and the copies of each record's route, header and body, with
no Python object per delivery but the run's one bytes object.

Importing this module fails with ImportError when the extension was not built (loader.py
then leaves the broker on amqp091/output.py).
"""

from ..core.streams.streamlog import DONE
from ._accel import ffi, lib

OUT_FULL = 3  # (streams.h) the next delivery's frames did not fit: a larger buffer, again
POS, OFFSET, AFTER_MS, GIVEN, STATUS = range(5)

# One state array and one output buffer for every stream: the broker runs on one thread, and
# what a call writes is copied out before the next call.
_state = ffi.new("uint64_t[5]")
_out = [ffi.new("uint8_t[]", 256 * 1024)]


def deliveries(cursor, visible, count, channel, consumer):
    """amqp091/output.py stream_records in C: same arguments, same result, the same bytes added
    to the connection's output (as one bytes object for the run), the cursor moved alike."""
    conn = channel.conn
    tag_ss = consumer.tag_shortstr
    state = _state
    state[POS] = cursor.pos
    state[OFFSET] = cursor.offset
    state[AFTER_MS] = cursor.after_ms
    data = ffi.from_buffer(cursor.buf)
    space = conn.high_water - conn.out_bytes
    while True:
        target = _out[0]
        made = lib.hutch_stream_deliveries(
            data, cursor.end, state, visible, count, space, channel.number, tag_ss, len(tag_ss),
            channel.next_tag, conn.max_payload, target, len(target),
        )  # fmt: skip
        status = state[STATUS]
        if status != OUT_FULL:
            break
        if state[GIVEN]:
            status = DONE  # the caller comes back for the rest
            break
        _out[0] = ffi.new("uint8_t[]", 2 * len(target))  # one delivery larger than the buffer
    if made:
        conn.out.append(ffi.buffer(target, made)[:])
    cursor.pos = state[POS]
    cursor.offset = state[OFFSET]
    cursor.after_ms = state[AFTER_MS]
    return state[GIVEN], status, made
