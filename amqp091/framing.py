"""Finding the frames in a read buffer: the batch frame scanner.

A frame on the wire is type(1) channel(2) size(4), size octets of payload, 0xCE.
scan_frames() walks a buffer and records every complete frame it finds, so the
connection learns where all the frames are in one call per buffer. This is the
pure-Python reference: c_accel/ has the same function in C (one FFI call per
buffer, never one per frame) and its tests check the two agree on any input.
Connections read with the C one through amqp091/batch.py when it is built.

Why connections do not read with scan_frames when there is no C: in pure Python the
batch costs more than it saves. Each frame's record is written and read back on top
of reading its header, and each call returns a tuple; on the MicroPython unix port,
feeding small publishes through scan_frames was ~35-45% slower than the connection's
own loop (~10-15% on CPython). So connection.read_frames reads them there, and
scan_frames stays the reference the C code is tested against (the batch reader is
tested with it too: tests/accel/test_accel_*.py).

It only checks what tells where frames start and end: a payload larger than the
connection allows (its header is enough to know; the payload need not have
arrived) and the frame-end octet. Frame types and channels are the connection's
business: they are recorded, not judged; the things made of them are a record for
a whole publish (PUBLISH, below), so the connection handles its three frames in
one step, and the decoded arguments of an ack, nack or reject (SETTLE).

Written for MicroPython too (its tests run there), though no board runs it.
"""

# Why a scan stopped (the third value scan_frames returns).
NEED_MORE = 0  # the rest of the buffer is not a whole frame (maybe nothing): wait for more bytes
FULL = 1  # records is full: scan again from where it stopped
OVERSIZE = 2  # the frame at the stop has a payload size above max_payload (detail: that size)
BAD_FRAME_END = 3  # the frame at the stop does not end with 0xCE (detail: the octet found instead)

FRAME_END = 0xCE

# One record per frame, six slots each, in a flat sequence the caller owns:
# records[6*i + TYPE], ... for record i.
TYPE = 0
CHANNEL = 1
PAYLOAD_START = 2  # index of the payload's first octet (the frame header starts 7 before)
PAYLOAD_END = 3  # index of the frame-end octet, just past the payload
HEADER_END = 4  # PUBLISH only: frame-end index of the content header frame
BODY_END = 5  # PUBLISH only: frame-end index of the body frame (= HEADER_END: no body)
METHOD_ID = 4  # SETTLE only: basic.ack, basic.nack or basic.reject
DELIVERY_TAG = 5  # SETTLE only: its delivery tag (the bits are the octet before the frame end)
RECORD_SLOTS = 6

# The record TYPE of a whole publish: a basic.publish method frame (PAYLOAD_START and
# PAYLOAD_END are its own) followed on its channel by its content header frame and, unless
# the body is empty, one body frame holding the whole body. Most publishes arrive so, and the
# connection then hands all three to the channel at once. Only the grouping is judged here
# (method id, frame types, channel, body size = body frame's size): the channel still checks
# every field, exactly as it does frame by frame. 256 is above any frame type octet.
PUBLISH = 256
BASIC_PUBLISH_ID = b"\x00\x3c\x00\x28"  # class 60, method 40

# The record TYPE of a basic.ack, basic.nack or basic.reject frame with exactly its arguments
# (delivery tag, one octet of bits), decoded: METHOD_ID and DELIVERY_TAG. 257: above any type.
SETTLE = 257
SETTLE_IDS = (0x003C0050, 0x003C0078, 0x003C005A)  # ack, nack, reject

# Frames per scan with this reference (tests): in pure Python a larger batch saves nothing.
BATCH = 4


def new_records(capacity=BATCH):
    """A records sequence for scan_frames, room for capacity records."""
    return [0] * (RECORD_SLOTS * capacity)


def frame_at(buf, pos, max_payload):
    """(status, payload_start, end, detail) of the frame at pos: status None for a whole,
    sound frame, else the scan status it stops with (NEED_MORE: not all here yet)."""
    if len(buf) - pos < 7:
        return NEED_MORE, 0, 0, 0
    size = (buf[pos + 3] << 24) | (buf[pos + 4] << 16) | (buf[pos + 5] << 8) | buf[pos + 6]
    if size > max_payload:
        return OVERSIZE, 0, 0, size
    end = pos + 7 + size
    if end >= len(buf):  # the payload or the frame-end octet has not arrived yet
        return NEED_MORE, 0, 0, 0
    if buf[end] != FRAME_END:
        return BAD_FRAME_END, 0, 0, buf[end]
    return None, pos + 7, end, 0


def channel_at(buf, pos):
    return (buf[pos + 1] << 8) | buf[pos + 2]


def whole_publish(buf, pos, payload, end, max_payload):
    """(header_end, body_end) if the method frame at pos is a basic.publish followed by its
    whole content as PUBLISH describes, else None."""
    if end - payload < 4 or bytes(buf[payload : payload + 4]) != BASIC_PUBLISH_ID:
        return None
    channel = channel_at(buf, pos)
    at = end + 1
    status, header_payload, header_end, _ = frame_at(buf, at, max_payload)
    if status is not None or buf[at] != 2 or channel_at(buf, at) != channel or header_end - header_payload < 12:
        return None
    body_size = int.from_bytes(bytes(buf[header_payload + 4 : header_payload + 12]), "big")
    if body_size == 0:
        return header_end, header_end
    at = header_end + 1
    status, body_payload, body_end, _ = frame_at(buf, at, max_payload)
    if status is not None or buf[at] != 3 or channel_at(buf, at) != channel or body_end - body_payload != body_size:
        return None
    return header_end, body_end


def scan_frames(buf, pos, max_payload, records):
    """Record the complete frames in buf from pos on, until records is full.

    buf is bytes, bytearray or a memoryview; pos an index into it (0 <= pos <= len(buf)).
    Returns (count, stop, status, detail): count records written to records (a frame, or
    a whole publish); stop, the index just past the last of them (where the frame status
    speaks of begins); status, one of NEED_MORE, FULL, OVERSIZE, BAD_FRAME_END; detail,
    the size or octet at fault (0 otherwise). A frame after a bad one is never looked at:
    past a framing error the byte stream cannot be trusted.

    This reference is written for clarity, not speed: only the C one runs in a broker.
    """
    capacity = len(records) // RECORD_SLOTS
    count = 0
    while True:
        if len(buf) - pos >= 7 and count == capacity:
            return count, pos, FULL, 0
        status, payload, end, detail = frame_at(buf, pos, max_payload)
        if status is not None:
            return count, pos, status, detail
        slot = count * RECORD_SLOTS
        records[slot + CHANNEL] = channel_at(buf, pos)
        records[slot + PAYLOAD_START] = payload
        records[slot + PAYLOAD_END] = end
        group = whole_publish(buf, pos, payload, end, max_payload) if buf[pos] == 1 else None
        method_id = int.from_bytes(bytes(buf[payload : payload + 4]), "big") if end - payload == 13 else 0
        if group is not None:
            records[slot + TYPE] = PUBLISH
            records[slot + HEADER_END], records[slot + BODY_END] = group
            pos = group[1] + 1
        elif buf[pos] == 1 and method_id in SETTLE_IDS:
            records[slot + TYPE] = SETTLE
            records[slot + METHOD_ID] = method_id
            records[slot + DELIVERY_TAG] = int.from_bytes(bytes(buf[payload + 4 : payload + 12]), "big")
            pos = end + 1
        else:
            records[slot + TYPE] = buf[pos]
            records[slot + HEADER_END] = records[slot + BODY_END] = 0
            pos = end + 1
        count += 1
