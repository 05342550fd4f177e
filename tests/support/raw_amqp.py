"""AMQP 0-9-1 written byte by byte, for tests that feed a connection (or a socket) exactly the
bytes a client sends, including what no client library would send."""

import struct

from hutch.codec import spec
from hutch.codec.wire import PROTOCOL_HEADER, encode_args, frame


def method(channel, method_id, sig, args):
    """One method frame: sig is codec/wire.py's argument signature ("hssbb", ...)."""
    return frame(1, channel, struct.pack(">I", method_id) + encode_args(sig, args))


def login(frame_max=131072, user=b"guest", password=b"guest", channel=1):
    """The protocol header and a client's whole side of the handshake, sent at once as a fast
    client does: start-ok (PLAIN), tune-ok with this frame_max and no heartbeat, open of
    vhost /, and channel.open of one channel."""
    return (
        PROTOCOL_HEADER
        + method(0, spec.CONNECTION_START_OK, "tsSs", [{}, b"PLAIN", b"\x00" + user + b"\x00" + password, b"en_US"])
        + method(0, spec.CONNECTION_TUNE_OK, "hlh", [100, frame_max, 0])
        + method(0, spec.CONNECTION_OPEN, "ssb", [b"/", b"", False])
        + method(channel, spec.CHANNEL_OPEN, "s", [b""])
    )


def publish(body, queue=b"q", exchange=b"", properties=b"\x00\x00", channel=1):
    """A basic.publish and its content frames (properties: the content header's flags and what
    they announce; none by default)."""
    return (
        method(channel, spec.BASIC_PUBLISH, "hssbb", [0, exchange, queue, False, False])
        + frame(2, channel, struct.pack(">HHQ", 60, 0, len(body)) + properties)
        + (frame(3, channel, body) if body else b"")
    )
