"""MQTT over WebSocket as a browser's bytes reach the broker.

frames: codec/websocket.py's FrameReader (what a board's WebSocket reads too) fed the bytes
whole and in pieces of every size from 1 to 7: the same binary octets and control frames, or
the same FrameError (a close code), never another exception.

session: the upgrade (ports/websocket.py, wsproto) and then the frames, into a served MQTT
connection, fed in pieces: an upgrade refused is answered as HTTP, bad frames close with their
code; no exception leaves the connection, no internal error is logged, and a good client is
served after it ends.
"""

from hutch.codec import websocket as frames

from .served import PEER, served


def _read(data, size):
    """(the binary octets, the control frames, None) a reader finds in data fed size octets at a
    time, or (..., the FrameError's code) once it raises."""
    reader = frames.FrameReader(masked=True)
    octets, controls = [], []
    for at in range(0, len(data), size):
        try:
            found = reader.feed(data[at : at + size])
        except frames.FrameError as e:
            return b"".join(octets), controls, e.code
        for opcode, payload in found:
            if opcode == frames.BINARY:
                octets.append(bytes(payload))
            else:
                controls.append((opcode, bytes(payload)))
        if any(opcode == frames.TEXT for opcode, _payload in found):
            break  # (the caller ends the connection there)
    return b"".join(octets), controls, None


def frame_reader(data):
    """The outcome: what the reader found in data whole."""
    whole = _read(data, max(1, len(data)))
    for size in range(1, 8):
        piecewise = _read(data, size)
        if whole[2] is None and piecewise[2] is None:
            assert piecewise == whole, "fed %d octets at a time: %r, whole: %r" % (size, piecewise, whole)
        else:
            assert piecewise[2] == whole[2], "fed %d at a time: code %r, whole: %r" % (size, piecewise[2], whole[2])
    return repr(whole)


def session(data):
    from hutch.mqtt.connection import Connection
    from hutch.ports.websocket import WebSocketFraming

    def connect(broker):
        conn = Connection(broker, PEER)
        conn.framing = WebSocketFraming(conn, "/mqtt")
        return conn

    served(data, connect)
