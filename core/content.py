"""A message's stored form (core/message.py: a 0-9-1 publisher's content header and body frames,
after their type and channel) made from properties and a body, for the front ends whose clients
send something else: AMQP 1.0 (amqp10/links.py) and MQTT (mqtt/publishing.py). Loaded by them
alone: a board that serves 0-9-1 only holds none of it."""

import struct
import sys

from ..codec.spec import CLASS_BASIC, FRAME_END
from ..codec.wire import encode_properties

MICROPYTHON = sys.implementation.name == "micropython"
FRAME_END_OCTET = bytes((FRAME_END,))


def header_tail(encoded_properties, body_size):
    """A content header frame's tail from its encoded properties (codec/wire.py)."""
    header = struct.pack(">HHQ", CLASS_BASIC, 0, body_size) + encoded_properties
    return struct.pack(">I", len(header)) + header + FRAME_END_OCTET


def body_tail(body):
    """A body frame's tail (its size, the octets, frame-end), or None for no body. (A memoryview
    spares CPython a copy; MicroPython's join takes bytes only.)"""
    if not len(body):
        return None
    if MICROPYTHON and type(body) is not bytes:
        body = bytes(body)
    return b"".join((struct.pack(">I", len(body)), body, FRAME_END_OCTET))


def made(exchange, routing_key, props, body):
    """A message the broker makes itself (a device's reading, a command's answer, a $SYS topic,
    what an MQTT session keeps in its own queues): to exchange (b"": the default) with
    routing_key, its 0-9-1 properties (codec/wire.py's names) and body, as a client's publish of
    them would arrive."""
    from .message import Message  # (loaded already: the broker's)

    route = bytes((len(exchange),)) + exchange + bytes((len(routing_key),)) + routing_key
    return Message(exchange, routing_key, route, *tails(props, body))


def tails(props, body):
    """(header_tail, body_tail, body_size), as core/message.py Message takes them, from 0-9-1
    properties (as codec/wire.py decode_properties gives them) and a body."""
    return header_tail(encode_properties(props), len(body)), body_tail(body), len(body)
