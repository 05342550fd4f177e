"""Every frame the 0-9-1 front end sends with content: a delivery (basic.deliver), a basic.get-ok
and a basic.return with their messages, and a stream's deliveries made straight from its records.
One module, so that a faster way of making them (c_accel/) plugs in here and nowhere else.

A message keeps the publisher's content frames minus their first three octets (core/message.py
header_tail, body_tail): sending it on a channel puts that channel's 3-octet prefix in front of
each. The content header goes out byte for byte and the body is never copied, unless the
client's frame_max is smaller than the frame it came in.

Frames go to the connection's output list (conn.out) and are counted with conn.output_added,
which wakes the port: nothing else of the broker touches either.
"""

import struct

from ..codec.spec import BASIC_DELIVER
from ..codec.wire import FRAME_END_BYTE, shortstr
from ..core.queue import Consumer
from ..core.store.records import HEADER_SIZE, TRAILER_SIZE
from ..core.streams.streamlog import BAD_RECORD, DONE, PREFIX, WANT

DELIVER_ID = struct.pack(">I", BASIC_DELIVER)


class ChannelConsumer(Consumer):
    """A consumer on a 0-9-1 channel: its tag as a shortstr and the start of its basic.deliver
    frames, kept for amqp091/output.py (made once per consumer, not per delivery)."""

    def __init__(self, channel, tag, queue, no_ack, exclusive, prefetch):
        Consumer.__init__(self, channel, tag, queue, no_ack, exclusive, prefetch)
        self.tag_shortstr = shortstr(tag)
        self.deliver_head = None  # (route length, frame bytes up to the delivery tag): output.deliver


def content(out, channel, message, max_payload):
    """Append the header and body frames of message for channel to out."""
    out.append(channel.header_prefix)
    out.append(message.header_tail)
    size = message.body_size
    if size == 0:
        return
    if size <= max_payload:
        out.append(channel.body_prefix)
        out.append(message.body_tail)
        return
    body = message.body()
    for start in range(0, size, max_payload):
        chunk = bytes(body[start : start + max_payload])
        out.append(channel.body_prefix + struct.pack(">I", len(chunk)))
        out.append(chunk)
        out.append(FRAME_END_BYTE)


def with_content(channel, method_id, args, message):
    """A method that carries a message (basic.get-ok, basic.return) and the message's frames."""
    conn = channel.conn
    conn.send_method(channel.number, method_id, args)
    content(conn.out, channel, message, conn.max_payload)
    conn.output_added(message.body_size)


def deliver(channel, consumer, tag, message, redelivered):
    """basic.deliver of message to consumer with delivery tag `tag`, and its content. The method
    frame up to the delivery tag is the same for every message of one route length: made once
    per consumer (a queue's messages mostly share their exchange and routing key)."""
    conn = channel.conn
    route = message.route
    head = consumer.deliver_head
    if head is None or head[0] != len(route):
        tag_ss = consumer.tag_shortstr
        size = 13 + len(tag_ss) + len(route)
        head = consumer.deliver_head = (len(route), struct.pack(">BHI", 1, channel.number, size) + DELIVER_ID + tag_ss)
    out = conn.out
    out += (head[1], struct.pack(">QB", tag, redelivered), route, FRAME_END_BYTE)
    content(out, channel, message, conn.max_payload)
    conn.output_added(message.body_size + 64)


def deliver_run(channel, consumer, run, count):
    """Up to count basic.deliver frames, with their content, of a run of alike publishes
    (amqp091/batch.py PublishRun) to consumer, delivery tags from the channel's next on: the
    frames deliver() makes of each, made in one call from the publisher's bytes
    (c_accel/runs.c), as long as the connection has room (the bytes counted as deliver()
    counts them) and each body fits one frame. How many were made."""
    conn = channel.conn
    route = run.first.route
    given, counted, frames = run.deliveries(
        channel.number,
        consumer.tag_shortstr,
        channel.next_tag,
        route,
        conn.max_payload,
        conn.high_water - conn.out_bytes,
        count,
    )
    if given:
        conn.out.append(frames)
        conn.output_added(counted)
    return given


# ---------------------------------------------------------------- a stream's records


def deliver_records(channel, consumer, cursor, visible, room):
    """Up to room deliveries to consumer of the stream records its cursor has read ahead (below
    offset visible), their frames made in one call, with delivery tags from the channel's
    next_tag on. (given, status): status as stream_records says."""
    conn = channel.conn
    make = conn.serving.stream_deliveries or stream_records  # (its C twin, where installed)
    given, status, made = make(cursor, visible, room, channel, consumer)
    if given:
        conn.output_added(made)
    return given, status


def stream_records(cursor, visible, count, channel, consumer):
    """The frames of basic.deliver (method, content header, body) to consumer on channel,
    delivery tags from channel.next_tag on, for the records the cursor has read ahead
    (cursor.buf[cursor.pos:cursor.end]; core/streams/streamlog.py says what a record holds),
    each checked (streamlog.parse: its envelope and CRC-32) before it is believed: at most
    count of them, the first at or past cursor.offset and (when cursor.after_ms is not 0)
    stamped at or after after_ms, each below visible, stopping once the frames made fill the
    connection's room (its high-water mark). Records before the offset or after_ms are read
    past. Each delivery's frames go to the connection's output list as one bytes object;
    bodies larger than its max_payload are cut into frames of that size. c_accel/streams.py is
    the C twin (CPython: one call for a whole read buffer).

    The cursor moves on: pos, where the next record starts; offset, the one wanted next (the
    offset of the record stopped at, when it is not visible yet); after_ms, 0 once a record
    passed it. Returns (delivered, status, bytes made), status why it stopped: WANT, the record
    at pos is not whole in the buffer (read on); DONE, count or room reached or the next record
    not visible yet; BAD_RECORD, the record at pos does not check out."""
    # (here: the firmware build folds the constants above into numbers, and a board without
    # stream consumers does not load core/streams/streamlog.py; INCOMPLETE, -1, is not folded)
    from ..core.streams.streamlog import INCOMPLETE, parse

    conn = channel.conn
    buf = cursor.buf
    pos = cursor.pos
    end = cursor.end
    offset = cursor.offset
    after_ms = cursor.after_ms
    space = conn.high_water - conn.out_bytes
    number = channel.number
    tag = channel.next_tag
    max_payload = conn.max_payload
    out = conn.out
    tag_ss = consumer.tag_shortstr
    view = memoryview(buf)
    given = made = 0
    status = DONE
    method_head = DELIVER_ID + tag_ss
    method_size = 13 + len(tag_ss)
    header_prefix = bytes((2, number >> 8, number & 255))
    body_prefix = bytes((3, number >> 8, number & 255))
    while given < count and made < space:
        after = parse(view, pos, end)
        if after < 0:
            status = WANT if after == INCOMPLETE else BAD_RECORD
            break
        start = pos + HEADER_SIZE
        stop = after - TRAILER_SIZE  # the payload's end
        if stop - start < PREFIX + 2:
            status = BAD_RECORD
            break
        # where its route, header and body are: inside the payload, or the record is damaged
        key_at = start + PREFIX + 1 + buf[start + PREFIX]
        route_end = key_at + 1 + (buf[key_at] if key_at < stop else 0)
        header_end = route_end + 4 + (struct.unpack_from(">I", buf, route_end)[0] if route_end + 4 <= stop else 0)
        if route_end + 4 > stop or header_end > stop or 0 < stop - header_end < 5:
            status = BAD_RECORD
            break
        record, stamp = struct.unpack_from(">QQ", buf, start)
        if record < offset:
            pos = after  # before where this consumer reads from
            continue
        if record >= visible:
            offset = record  # not durable yet
            break
        pos = after
        offset = record + 1
        if after_ms:
            if stamp < after_ms:
                continue
            after_ms = 0
        route = bytes(buf[start + PREFIX : route_end])
        frames = [
            struct.pack(">BHI", 1, number, method_size + len(route)),
            method_head,
            struct.pack(">QB", tag, 0),
            route,
            FRAME_END_BYTE,
            header_prefix,
            bytes(buf[route_end + 4 : header_end]),
        ]
        body_size = stop - header_end - 5
        if 0 < body_size <= max_payload:
            frames.append(body_prefix)
            frames.append(bytes(buf[header_end:stop]))
        elif body_size > 0:
            for at in range(header_end + 4, stop - 1, max_payload):
                chunk = bytes(buf[at : min(at + max_payload, stop - 1)])
                frames.append(body_prefix + struct.pack(">I", len(chunk)))
                frames.append(chunk)
                frames.append(FRAME_END_BYTE)
        data = b"".join(frames)
        out.append(data)
        made += len(data)
        given += 1
        tag += 1
    cursor.pos = pos
    cursor.offset = offset
    cursor.after_ms = after_ms
    return given, status, made
