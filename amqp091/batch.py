"""Reading frames in batches: the connection's frame reader when the C scanner is there.

The C scanner (c_accel/, its reference is framing.scan_frames) finds every whole frame of
a read buffer in one call, a whole publish (method, header and body frames) as one
record and an ack, nack or reject with its arguments decoded. The reader then hands them
to the connection and its channels one by one, exactly as connection.read_frames would
frame by frame: any of them may pause or close the connection, and what follows must
then stay unread or be dropped. tests/accel/test_accel_connection.py feeds the same bytes to
both readers and compares everything they do.

    broker = Broker(..., frame_reader=batch.reader_factory(scanner.scan_frames, scanner.new_records))

Only CPython uses this (hutch.c_accel.loader), so no board bundle holds it: its code
would only cost heap there.
"""

from ..codec import spec
from ..codec.errors import ChannelException, ConnectionException
from ..core.message import Message
from .channel import IDLE, publish_arguments
from .channel import OPEN as CHANNEL_OPEN
from .framing import (
    BODY_END,
    CHANNEL,
    DELIVERY_TAG,
    FULL,
    HEADER_END,
    METHOD_ID,
    NEED_MORE,
    OVERSIZE,
    PAYLOAD_END,
    PAYLOAD_START,
    PUBLISH,
    RECORD_SLOTS,
    SETTLE,
    TYPE,
)
from .handshake import OPEN


def reader_factory(scan, new_records, appends=None):
    """For Broker(frame_reader=...): each connection gets a reader of its own records (one may
    be fed while another's batch is being handled) that finds frames with scan. appends:
    c_accel/appends.py's stream_appends, to make the records of a run of publishes into a
    stream in one call (stream_run), or None (each publish goes its way alone)."""

    def new_reader():
        records = new_records()

        def read(conn, data, pos):
            return read_batch(conn, data, pos, scan, records, appends)

        return read

    return new_reader


def read_batch(conn, data, pos, scan, records, appends=None):
    """The frames of data from pos on, found a batch at a time by scan into records, then
    handled one by one, because any of them may pause or close the connection, and what
    follows must then stay unread (kept pending) or be dropped. Where the next unread
    frame starts, as connection.read_frames returns it."""
    while True:
        max_payload = conn.accept_payload
        count, stop, status, detail = scan(data, pos, max_payload, records)
        i = 0
        while i < count:
            if conn.paused or conn.closed:
                return pos
            slot = i * RECORD_SLOTS
            ftype = records[slot + TYPE]
            end = records[slot + PAYLOAD_END]
            number = records[slot + CHANNEL]
            i += 1
            if ftype == PUBLISH:
                if appends is not None:
                    taken, after = stream_run(conn, number, data, records, slot, count - i + 1, appends)
                    if taken:
                        i += taken - 1
                        pos = after
                        continue
                last = records[slot + BODY_END]
                after = whole_publish(
                    conn, number, data, records[slot + PAYLOAD_START], end, records[slot + HEADER_END], last
                )
                if after <= last:
                    return after  # paused or closed part way: the rest stays unread
                pos = after
            elif ftype == SETTLE:
                method_id, tag = records[slot + METHOD_ID], records[slot + DELIVERY_TAG]
                settle(conn, number, data, records[slot + PAYLOAD_START], end, method_id, tag)
                pos = end + 1
            else:
                if not conn.handle_frame(ftype, number, data, records[slot + PAYLOAD_START] - 7, end):
                    return len(data)
                pos = end + 1
            if conn.accept_payload != max_payload:
                break  # tune-ok lowered frame_max: the frames after it were checked against the old one
        else:
            if status == FULL:
                continue
            if status == NEED_MORE or conn.paused or conn.closed:
                return stop
            if status == OVERSIZE:
                conn.oversize_frame(detail)
            else:
                conn.bad_frame_end(detail)
            return len(data)


def stream_run(conn, number, data, records, slot, count, appends):
    """The publishes recorded from slot on (count records) that go, one after the other, into
    one stream, made into its records in one call (appends) when each is like the first:
    same channel, exchange, routing key, flags and properties, only the body differs (the C
    call stops at the first that is not). The channel publishes them as one run
    (Channel.publish_run: the broker's one publish path, Broker.publish_run, decides whether
    they may go together and routes them once). (taken, where the frame after them starts);
    taken is 0 when the first publish must go the one-by-one way, which also gives any error
    it has the usual way."""
    if not conn.broker.streams:  # no stream at all: nothing to make a run for
        return 0, 0
    channel = _idle_channel(conn, number)
    if channel is None:
        return 0, 0
    payload = records[slot + PAYLOAD_START]
    end = records[slot + PAYLOAD_END]
    header_end = records[slot + HEADER_END]
    try:
        name, routing_key, route, bits = publish_arguments(data, payload + 4, end)
    except ConnectionException:
        return 0, 0
    header_tail = bytes(data[end + 4 : header_end + 1])
    if bits & 2 or len(header_tail) < 19 or header_tail[4:8] != b"\x00\x3c\x00\x00":
        return 0, 0  # immediate, or not a basic content header of weight 0: refused one by one
    limit = conn.broker.limits.max_message_bytes
    routing = bytes(data[payload + 6 : end])

    def append(stream, template, now_ms):
        taken, after, made = appends(
            data,
            records,
            slot,
            count,
            number,
            routing,
            header_tail[4:-1],
            limit,
            template,
            stream.next,
            now_ms,
            stream.reserved - stream.next,
            stream.room(),
        )
        return taken, after, made

    return channel.publish_run(name, Message(name, routing_key, route, header_tail, None, 0), append)


def whole_publish(conn, number, data, payload, end, header_end, body_end):
    """A basic.publish method frame (payload to end) and its content frames, which end at
    header_end and body_end (the same when the body is empty): one step for the channel
    when it is open and idle, else frame by frame, exactly as they would have been.
    Returns where the next unhandled frame starts."""
    channel = _idle_channel(conn, number)
    if channel is not None:
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
        conn.handle_frame(ftype, number, data, start, frame_end)
    return body_end + 1


def settle(conn, number, data, payload, end, method_id, tag):
    """A basic.ack, nack or reject whose delivery tag the scanner decoded: straight to the
    channel when it is open and idle, else as any method frame."""
    channel = _idle_channel(conn, number)
    if channel is None:
        conn.handle_frame(1, number, data, payload - 7, end)
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


def _idle_channel(conn, number):
    """Channel number if the connection is open and the channel open and between messages: it
    may then take a whole publish, or a settlement, in one step. (Its attributes read here, not
    through calls: this runs for every publish.)"""
    channel = conn.channels.get(number) if conn.state == OPEN else None
    if channel is not None and channel.state == CHANNEL_OPEN and channel.content_state == IDLE:
        return channel
    return None
