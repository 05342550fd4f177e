"""Reading frames in batches: the connection's path when the C scanner is installed.

The C scanner (c_accel/, its reference is framing.scan_frames) finds every whole frame of
a read buffer in one call, a whole publish (method, header and body frames) as one
record and an ack, nack or reject with its arguments decoded. read_batch then hands them
to the connection and its channels one by one, exactly as Connection._read_frames would
frame by frame: any of them may pause or close the connection, and what follows must
then stay unread or be dropped. tests/test_accel_connection.py feeds the same bytes to
both paths and compares everything they do.

Only CPython gets here (framing.use_scanner installs read_batch), so this module is
never imported on a board: its code would only cost heap there.
"""

from . import spec
from .channel import IDLE
from .channel import OPEN as CHANNEL_OPEN
from .connection import CLOSING, OPEN
from .errors import ChannelException, ConnectionException
from .framing import FULL, NEED_MORE, OVERSIZE, PUBLISH, RECORD_SLOTS, SETTLE
from .spec import UNEXPECTED_FRAME


def read_batch(conn, data, pos):
    # The scanner (C) finds a batch of frames in one call; then they are handled one by
    # one, because any of them may pause or close the connection, and what follows must
    # then stay unread (kept in _pending) or be dropped. Same behaviour as Connection._read_frames.
    records = conn._records
    while True:
        max_payload = conn.max_payload
        count, stop, status, detail = conn._scan(data, pos, max_payload, records)
        slot = 0
        for _ in range(count):
            if conn.paused or conn.closed:
                return pos
            ftype = records[slot]
            end = records[slot + 3]
            if ftype == PUBLISH:
                last = records[slot + 5]
                after = whole_publish(conn, records[slot + 1], data, records[slot + 2], end, records[slot + 4], last)
                if after <= last:
                    return after  # paused or closed part way: the rest stays unread
                pos = after
            elif ftype == SETTLE:
                settle(conn, records[slot + 1], data, records[slot + 2], end, records[slot + 4], records[slot + 5])
                pos = end + 1
            else:
                if not handle_frame(conn, ftype, records[slot + 1], data, records[slot + 2] - 7, end):
                    return len(data)
                pos = end + 1
            slot += RECORD_SLOTS
            if conn.max_payload != max_payload:
                break  # tune-ok lowered frame_max: the frames after it were checked against the old one
        else:
            if status == FULL:
                continue
            if status == NEED_MORE or conn.paused or conn.closed:
                return stop
            if status == OVERSIZE:
                conn._oversize_frame(detail)
            else:
                conn._bad_frame_end(detail)
            return len(data)


def whole_publish(conn, number, data, payload, end, header_end, body_end):
    """A basic.publish method frame (payload to end) and its content frames, which end at
    header_end and body_end (the same when the body is empty): one step for the channel
    when it is open and idle, else frame by frame, exactly as they would have been.
    Returns where the next unhandled frame starts."""
    channel = conn.channels.get(number) if conn.state == OPEN else None
    if channel is not None and channel.state == CHANNEL_OPEN and channel.content_state == IDLE:
        try:
            channel.on_publish(data, payload + 4, end)
            channel.on_header(data, end + 1, header_end)
            if body_end != header_end:
                channel.on_body(data, header_end + 1, body_end)
        except ChannelException as e:
            conn.channel_error(channel, e)  # the frames after the error go unread, as on a closing channel
        return body_end + 1
    frames = [(1, payload - 7, end), (2, end + 1, header_end)]
    if body_end != header_end:
        frames.append((3, header_end + 1, body_end))
    for ftype, start, frame_end in frames:
        if conn.paused or conn.closed:
            return start
        handle_frame(conn, ftype, number, data, start, frame_end)
    return body_end + 1


def settle(conn, number, data, payload, end, method_id, tag):
    """A basic.ack, nack or reject whose delivery tag the scanner decoded: straight to the
    channel when it is open and idle, else as any method frame."""
    channel = conn.channels.get(number) if conn.state == OPEN else None
    if channel is None or channel.state != CHANNEL_OPEN or channel.content_state != IDLE:
        handle_frame(conn, 1, number, data, payload - 7, end)
        return
    bits = data[end - 1]
    try:
        if method_id == spec.BASIC_ACK:
            channel.settle(tag, bits & 1, True, False, method_id)
        elif method_id == spec.BASIC_NACK:
            channel.settle(tag, bits & 1, False, bits & 2, method_id)
        else:
            channel.settle(tag, False, False, bits & 1, method_id)
    except ChannelException as e:
        conn.channel_error(channel, e)


def handle_frame(conn, ftype, number, data, pos, end):
    """One whole frame, its header at pos and its frame-end octet at end. False after a
    framing error: the rest of the stream cannot be read. (Connection._read_frames has it inline.)"""
    if conn.state == CLOSING:
        conn._closing_frame(ftype, number, data, pos, end)
    elif ftype == 1:
        conn._method_frame(number, data, pos + 7, end)
    elif ftype == 2 or ftype == 3:
        conn._content_frame(ftype, number, data, pos, end)
    elif ftype == 8:
        if number != 0:
            raise ConnectionException(UNEXPECTED_FRAME, "UNEXPECTED_FRAME - heartbeat frame on channel %d" % number)
    else:
        conn._frame_error("FRAME_ERROR - unknown frame type %d" % ftype)
        return False
    return True
