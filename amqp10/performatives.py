"""What the broker says to an AMQP 1.0 client, made in one place: each performative's frame
from its fields by name (amqp10/spec.py TYPES gives their order), the outcomes and the error.

A field a performative's reader needs is read by its position in that order; the positions
used are named here, next to the frames written with them.
"""

import struct

from . import spec
from .frames import frame
from .types import Described, Symbol, Ubyte, Uint, Ulong, Ushort

ACCEPTED = Described(Ulong(spec.ACCEPTED), [])
RELEASED = Described(Ulong(spec.RELEASED), [])
EMPTY_FRAME = b"\x00\x00\x00\x08\x02\x00\x00\x00"  # a frame with no body: we are alive (2.4.5)
# a transfer frame's header and performative: size, doff, type, channel; the transfer's list of
# 5 (handle and delivery-id as uint, the delivery id as its 4-octet tag, message-format 0,
# settled), 32 octets before the payload
TRANSFER_HEAD = ">IBBHBBBBBBBIBIBBIBB"

# field positions (spec.TYPES) read from a client's performatives
OPEN_MAX_FRAME_SIZE, OPEN_CHANNEL_MAX, OPEN_IDLE_TIME_OUT = 2, 3, 4
OPEN_HOSTNAME = 1
BEGIN_REMOTE_CHANNEL, BEGIN_NEXT_OUTGOING_ID, BEGIN_INCOMING_WINDOW, BEGIN_OUTGOING_WINDOW, BEGIN_HANDLE_MAX = range(5)
ATTACH_NAME, ATTACH_HANDLE, ATTACH_ROLE, ATTACH_SND_SETTLE_MODE, ATTACH_RCV_SETTLE_MODE = range(5)
ATTACH_SOURCE, ATTACH_TARGET, ATTACH_UNSETTLED, ATTACH_INCOMPLETE_UNSETTLED = 5, 6, 7, 8
FLOW_NEXT_INCOMING_ID, FLOW_INCOMING_WINDOW, FLOW_NEXT_OUTGOING_ID, FLOW_OUTGOING_WINDOW = range(4)
FLOW_HANDLE, FLOW_DELIVERY_COUNT, FLOW_LINK_CREDIT, FLOW_AVAILABLE, FLOW_DRAIN, FLOW_ECHO = range(4, 10)
TRANSFER_HANDLE, TRANSFER_DELIVERY_ID, TRANSFER_DELIVERY_TAG, TRANSFER_MESSAGE_FORMAT = range(4)
TRANSFER_SETTLED, TRANSFER_MORE, TRANSFER_RCV_SETTLE_MODE = 4, 5, 6
TRANSFER_ABORTED = 9
DISPOSITION_ROLE, DISPOSITION_FIRST, DISPOSITION_LAST, DISPOSITION_SETTLED, DISPOSITION_STATE = range(5)
DETACH_HANDLE, DETACH_CLOSED, DETACH_ERROR = range(3)
SOURCE_ADDRESS, SOURCE_DYNAMIC, SOURCE_FILTER = 0, 4, 7
TARGET_ADDRESS, TARGET_DYNAMIC = 0, 4

SENDER = False  # a link's role
RECEIVER = True
SETTLED = Ubyte(1)  # snd-settle-mode
UNSETTLED = Ubyte(0)
FIRST = Ubyte(0)  # rcv-settle-mode
SECOND = Ubyte(1)


def error(condition, description):
    return Described(Ulong(spec.ERROR), [Symbol(condition), description])


def rejected(condition, description):
    return Described(Ulong(spec.REJECTED), [error(condition, description)])


def open_frame(container_id, max_frame, channel_max, idle_ms):
    return frame(0, spec.OPEN, [container_id, None, Uint(max_frame), Ushort(channel_max), Uint(idle_ms)])


def begin_frame(channel, remote_channel, next_outgoing_id, incoming_window, outgoing_window, handle_max):
    return frame(
        channel,
        spec.BEGIN,
        [
            Ushort(remote_channel),
            Uint(next_outgoing_id),
            Uint(incoming_window),
            Uint(outgoing_window),
            Uint(handle_max),
        ],
    )


def attach_frame(channel, name, handle, role, snd_settle_mode, rcv_settle_mode, source, target, initial=None):
    """An attach: the answer to a client's (a refused one has a null source or target)."""
    return frame(
        channel,
        spec.ATTACH,
        [name, Uint(handle), role, snd_settle_mode, rcv_settle_mode, source, target, None, None, initial],
    )


def flow_frame(session, link=None, echo=False):
    """The session's flow state, and a link's (delivery count, credit, available, drain) if given."""
    fields: list = [
        Uint(session.next_incoming_id),
        Uint(session.incoming_window),
        Uint(session.next_outgoing_id),
        Uint(session.outgoing_window),
    ]
    if link is not None:
        fields += [Uint(link.handle), Uint(link.delivery_count), Uint(link.credit)]
        available = getattr(link, "available", None)
        fields += [Uint(available()) if available is not None else None, getattr(link, "drain", False) or None]
        if echo:
            fields.append(True)
    return frame(session.channel, spec.FLOW, fields)


def transfer_frames(channel, handle, delivery_id, settled, payload, room):
    """The transfer frames of one delivery: payload split so no frame carries more than room
    octets of it (more=true on all but the last)."""
    if len(payload) <= room:  # one frame (most deliveries): written directly, as encode() would
        return [
            struct.pack(TRANSFER_HEAD, len(payload) + 32, 2, 0, channel, 0x00, 0x53, 0x14, 0xC0, 19, 5, 0x70, handle, 0x70,
                               delivery_id, 0xA0, 4, delivery_id, 0x43, 0x41 if settled else 0x42) + payload
        ]  # fmt: skip
    fields = [Uint(handle), Uint(delivery_id), delivery_id.to_bytes(4, "big"), Uint(0), settled]
    frames = []
    while len(payload) > room:
        frames.append(frame(channel, spec.TRANSFER, fields + [True], payload[:room]))
        payload = payload[room:]
        fields = [Uint(handle), None, None, None, None]  # a continuation: its delivery is the first's
    frames.append(frame(channel, spec.TRANSFER, fields, payload))
    return frames


def disposition_frame(channel, first, last, outcome):
    """We settle deliveries the client sent (role receiver), first..last, with outcome."""
    return frame(
        channel, spec.DISPOSITION, [RECEIVER, Uint(first), Uint(last) if last != first else None, True, outcome]
    )


def detach_frame(channel, handle, why=None):
    return frame(channel, spec.DETACH, [Uint(handle), True, why])


def end_frame(channel, why=None):
    return frame(channel, spec.END, [why])


def close_frame(why=None):
    return frame(0, spec.CLOSE, [why])
