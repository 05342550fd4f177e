"""Reading frames in batches: the connection's frame reader when the C scanner is there.

The C scanner (c_accel/, its reference is framing.scan_frames) finds every whole frame of
a read buffer in one call, a whole publish (method, header and body frames) as one
record and an ack, nack or reject with its arguments decoded. The reader then hands them
to the connection and its channels one by one, exactly as connection.read_frames would
frame by frame: any of them may pause or close the connection, and what follows must
then stay unread or be dropped. tests/accel/test_accel_connection.py feeds the same bytes to
both readers and compares everything they do.

    batch.install(broker, batch.reader_factory(scanner.scan_frames, scanner.new_records, runs), deliveries)

Only CPython uses this (hutch.c_accel.loader), so no board bundle holds it: its code
would only cost heap there.
"""

import struct

from ..codec import spec
from ..codec.errors import UNEXPECTED_FRAME, DecodeError, Refused
from ..codec.wire import check_property_list
from ..core import headers
from ..core.message import FLAG_EXPIRATION, FLAG_REPLY_TO, FLAG_USER_ID, Message
from ..core.runs import publish_run as broker_publish_run
from . import output
from .channel import IDLE, publish_arguments
from .channel import OPEN as CHANNEL_OPEN
from .connection import Serving
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
from .handshake import CLOSING, OPEN
from .output import ChannelConsumer


def reader_factory(scan, new_records, runs=None):
    """For Broker(frame_reader=...): the reader every connection gets, which finds frames with
    scan into a records array taken for the read and given back after it (an idle connection
    holds none; a connection fed while another's batch is being handled, its publisher let go
    by an ack, takes another). runs: the C code for runs of alike publishes (c_accel/runs.py:
    a stream's records of a run in one call, how many publishes go together into queues,
    their deliveries in one buffer), or None (each publish goes its way alone)."""
    spare = []  # records arrays not in use

    def read(conn, data, pos):
        records = spare.pop() if spare else new_records()
        try:
            return read_batch(conn, data, pos, scan, records, runs)
        finally:
            spare.append(records)

    def new_reader():
        return read

    return new_reader


def read_batch(conn, data, pos, scan, records, runs=None):
    """The frames of data from pos on, found a batch at a time by scan into records, then
    handled one by one, because any of them may pause or close the connection, and what
    follows must then stay unread (kept pending) or be dropped. Where the next unread
    frame starts, as connection.read_frames returns it."""
    while True:
        max_payload = conn.accept_payload
        count, stop, status, detail = scan(data, pos, max_payload, records)
        i = 0
        solo = 0  # publishes to take one by one without trying a run again (one was refused)
        while i < count:
            if conn.paused or conn.closed:
                return pos
            slot = i * RECORD_SLOTS
            ftype = records[slot + TYPE]
            end = records[slot + PAYLOAD_END]
            number = records[slot + CHANNEL]
            i += 1
            if ftype == PUBLISH:
                if runs is not None and not solo and i < count:  # (a run of one would only cost more)
                    taken, after = publish_run(conn, number, data, records, slot, count - i + 1, runs)
                    if taken > 0:
                        i += taken - 1
                        pos = after
                        continue
                    solo = max(0, -taken - 1)  # the rest of those alike go one by one, as the first must
                elif solo:
                    solo -= 1
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
                if not handle_frame(conn, ftype, number, data, records[slot + PAYLOAD_START] - 7, end):
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


def publish_run(conn, number, data, records, slot, count, runs):
    """The publishes recorded from slot on (count records) that are alike (same channel,
    exchange, routing key, flags and properties, only the body differs, and the properties
    after the headers table when no gate reads them: fixed_length), as one run of the
    channel's: the broker's run path (core/runs.py publish_run) decides whether they may go
    together, into one stream or into queues, and the channel confirms them together.
    (taken, where the frame after them starts); taken is 0 or less when the first publish
    must go the one-by-one way, which also gives any error it has the usual way: -taken of
    them then go one by one."""
    channel = _idle_channel(conn, number)
    if channel is None:
        return 0, 0
    payload = records[slot + PAYLOAD_START]
    end = records[slot + PAYLOAD_END]
    header_end = records[slot + HEADER_END]
    try:
        name, routing_key, route, bits = publish_arguments(data, payload + 4, end)
    except Refused:
        return 0, 0
    header_tail = data[end + 4 : header_end + 1]
    if type(header_tail) is not bytes:
        header_tail = bytes(header_tail)
    if bits & 2 or len(header_tail) < 19 or header_tail[4:8] != b"\x00\x3c\x00\x00":
        return 0, 0  # immediate, or not a basic content header of weight 0: refused one by one
    try:
        check_property_list(header_tail, 4, len(header_tail) - 1)  # (the others': runs.c, as it takes them)
    except DecodeError:
        return 0, 0  # its properties cut short or overlong: the frame error of the one-by-one way
    run = PublishRun(runs, data, records, slot, count, number, bytes(data[payload + 6 : end]), header_tail)
    body_tail = data[header_end + 4 : records[slot + BODY_END] + 1] if header_end != records[slot + BODY_END] else None
    if body_tail is not None and type(body_tail) is not bytes:
        body_tail = bytes(body_tail)
    first = Message(name, routing_key, route, header_tail, body_tail, len(body_tail) - 5 if body_tail else 0)
    run.first = first
    if channel.tx is None:  # (a transaction holds each publish: one by one)
        taken, after, result = broker_publish_run(channel.broker, channel, name, first, run)
        if taken:
            if channel.confirming:
                channel.confirms.published(result, taken)
            else:
                channel.conn.after_publish()
            return taken, after
    return -run.take(count)[0], 0


def fixed_length(header_tail):
    """How many octets of a content header's payload every publish of a run must share: up to
    the end of its headers table (or where it would be) when none of the properties after it
    is one a gate of the broker reads (reply-to, expiration, user-id: Broker.admit passes a run
    as it passes its first publish); all of them otherwise. The properties after it (a
    message-id or timestamp per reading) are then each publish's own, but for the
    delivery-mode, which the C code keeps alike (runs.c hutch_publish_alike)."""
    flags = (header_tail[16] << 8) | header_tail[17]
    if flags & (FLAG_REPLY_TO | FLAG_EXPIRATION | FLAG_USER_ID | 1):  # (1: more flags follow)
        return len(header_tail) - 5
    try:
        after = headers.split(header_tail)[3]  # (size(4), payload, frame-end)
    except (IndexError, struct.error):  # properties cut short: the whole header must be alike
        return len(header_tail) - 5
    return len(header_tail) - 5 - len(after)


class PublishRun:
    """A run of alike publishes as the frame scanner recorded them (publish_run): what the broker's
    run path asks of it, made by the C code from the read buffer itself. `first` is the first
    publish as a Message (the gates and routing look at it)."""

    def __init__(self, runs, data, records, slot, count, number, routing, header_tail):
        self.runs = runs
        self.data = data
        self.records = records
        self.slot = slot
        self.count = count
        self.number = number
        self.routing = routing  # the method's arguments after the ticket: exchange, key, bits
        self.header = header_tail[4:-1]  # the first's content header payload
        self.fixed = fixed_length(header_tail)
        # what tells the C code which publishes are like the first (runs.h hutch_publish_alike)
        self.alike = (data, records, slot, count, number, self.routing, self.header, self.fixed)
        self.first = None
        self.taken = 0
        self.made = None  # the taken publishes as Messages, once asked for (messages())

    def stream_records(self, stream, template, now_ms, max_body):
        """(taken, next, records): the publishes' records for stream in one call (core/runs.py
        publish_run for a stream), from its next offset on, within its reserved offsets and its
        segment."""
        return self.runs.stream_appends(self, stream, template, now_ms, max_body)

    def take(self, most, max_body=-1):
        """(taken, next, content bytes): how many of the publishes go together, at most `most`
        (for queues: core/runs.py), each body at most max_body; where the frame after them
        starts; their bodies and content header tails added up (what their Messages cost
        beyond MESSAGE_OVERHEAD each)."""
        taken, after, size = self.runs.alike_publishes(*self.alike, max_body if max_body >= 0 else 1 << 62, most)
        self.taken = taken
        return taken, after, size

    def messages(self, arrived, order):
        """The taken publishes as Messages (made once), numbered from order on, arrived at
        `arrived` (Broker.publish sets both of each)."""
        made = self.made
        if made is not None:
            return made
        made = self.made = []
        first = self.first
        data = self.data
        records = self.records
        exchange, routing_key, route = first.exchange, first.routing_key, first.route
        shared = first.header_tail if self.fixed == len(self.header) else None
        shared_size = first.body_size
        copy = type(data) is not bytes
        slot = self.slot
        for _ in range(self.taken):
            header_end = records[slot + HEADER_END]
            body_end = records[slot + BODY_END]
            size = body_end - header_end - 8 if body_end != header_end else 0
            if shared is not None and size == shared_size:
                header_tail = shared  # (alike but for the body size: the same bytes)
            else:
                header_tail = data[records[slot + PAYLOAD_END] + 4 : header_end + 1]
                if copy:
                    header_tail = bytes(header_tail)
            body_tail = None
            if size:
                body_tail = data[header_end + 4 : body_end + 1]
                if copy:
                    body_tail = bytes(body_tail)
            message = Message(exchange, routing_key, route, header_tail, body_tail, size)
            message.arrived = arrived
            message.order = order
            order += 1
            made.append(message)
            slot += RECORD_SLOTS
        return made

    def deliver(self, consumer, queue, count, arrived, order):
        """(core/runs.py) Up to count deliveries of the taken publishes to consumer, a 0-9-1
        channel's (else 0: the queue hands them one by one), their frames made in one call
        (amqp091/output.py deliver_run), as many as its prefetch and its connection's room
        allow: how many. Each is booked as Channel.deliver books one; a consumer that acks
        gets the run's Messages (messages(arrived, order)) as the entries it settles, a no-ack
        consumer's deliveries keep nothing."""
        if not isinstance(consumer, ChannelConsumer):
            return 0
        channel = consumer.session
        messages = None
        if not consumer.no_ack:
            messages = self.messages(arrived, order)
            if consumer.prefetch:
                count = min(count, consumer.prefetch - consumer.unacked)
            if channel.prefetch_global:
                count = min(count, channel.prefetch_global - channel.consumer_unacked)
        tag = channel.next_tag
        given = output.deliver_run(channel, consumer, self, count)
        if given and messages is not None:
            unacked = channel.unacked
            for i in range(given):
                unacked[tag + i] = (queue, (messages[i], False, None), consumer)
            consumer.unacked += given
            channel.consumer_unacked += given
        channel.next_tag = tag + given
        return given

    def deliveries(self, number, tag_ss, tag, route, max_payload, space, count):
        """(given, bytes counted, frames): basic.deliver frames of the first count taken publishes
        to consumer tag_ss on channel number (amqp091/output.py deliver_run)."""
        return self.runs.queue_deliveries(
            self.data, self.records, self.slot, count, number, tag_ss, tag, route, max_payload, space
        )


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
        except Refused as e:
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
    channel = _idle_channel(conn, number)
    if channel is None:
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
    except Refused as e:
        conn.channel_error(channel, e)


def _idle_channel(conn, number):
    """Channel number if the connection is open and the channel open and between messages: it
    may then take a whole publish, or a settlement, in one step. (Its attributes read here, not
    through calls: this runs for every publish.)"""
    channel = conn.channels.get(number) if conn.state == OPEN else None
    if channel is not None and channel.state == CHANNEL_OPEN and channel.content_state == IDLE:
        return channel
    return None


def install(broker, frame_reader=None, stream_deliveries=None):
    """The faster paths every later 0-9-1 connection of broker takes (before clients come):
    frame_reader as reader_factory makes it, stream_deliveries c_accel/streams.py's."""
    serving = broker.front_ends["amqp091"] = Serving()
    serving.frame_reader = frame_reader
    serving.stream_deliveries = stream_deliveries
    return broker


def handle_frame(conn, ftype, number, data, pos, end):
    """One whole frame, its header at pos and its frame-end octet at end, from a batch frame
    reader. False after a framing error: the rest of the stream cannot be read. (amqp091/connection.py read_frames
    has the same written out.)"""
    if conn.state == CLOSING:
        conn.closing_frame(ftype, number, data, pos, end)
    elif ftype == 1:
        conn.method_frame(number, data, pos + 7, end)
    elif ftype == 2 or ftype == 3:
        conn.content_frame(ftype, number, data, pos, end)
    elif ftype == 8:
        if number != 0:
            raise Refused(UNEXPECTED_FRAME, "heartbeat frame on channel %d" % number)
    else:
        conn.frame_error("unknown frame type %d" % ftype)
        return False
    return True
