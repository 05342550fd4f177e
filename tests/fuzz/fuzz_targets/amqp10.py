"""AMQP 1.0 as a peer's bytes reach the broker.

types: the frames in the bytes (after any protocol headers) split (amqp10/frames.py), each
body decoded (amqp10/types.py), a transfer's payload read as a message's sections
(amqp10/sections.py) and converted as the broker converts it (amqp10/message.py): a value or
DecodeError, never another exception; the bytes decoded as one value too.

session: a served 1.0 connection (SASL, then AMQP) fed the bytes in pieces: no internal error
logged, and a good client served after it ends.
"""

from hutch.amqp10 import spec
from hutch.amqp10.frames import split
from hutch.amqp10.message import body_091, properties_091
from hutch.amqp10.sections import Sections
from hutch.amqp10.types import DecodeError, decode

from .served import PEER, served


def types(data):
    """The outcome: the value's type or DecodeError, then each frame's performative code (a
    transfer's sections read: +) or DecodeError."""
    try:
        said = [type(decode(data)[0]).__name__]
    except DecodeError:
        said = ["DecodeError"]
    at = 0
    while at < len(data):
        if data[at : at + 4] == b"AMQP":
            at += 8
            continue
        try:
            frame, at_next = split(data, at, 1 << 20)
            if frame is None:
                break
            said.append(str(frame.code))
            if frame.code == spec.TRANSFER and frame.payload:
                found = Sections(frame.payload)
                properties_091(found)
                body_091(found)
                said.append("+")
        except DecodeError:
            said.append("DecodeError")
            break
        at = at_next
    return " ".join(said)


def session(data):
    from hutch.amqp10.connection import Connection

    served(data, lambda broker: Connection(broker, PEER))
