"""WebSocket frames (RFC 6455 section 5), sans-IO: what a peer's frames carry, read from the
octets that bring them however they are split, and frames written.

hutch's WebSocket listener (ports/websocket.py) reads its clients' frames with FrameReader and
writes its own with frame(); `hutch bench --mqtt` writes and reads a client's. MQTT rides in
binary messages as a stream of octets (MQTT 5 6.0: a packet may span frames, a frame may hold
several), so a binary frame's payload is handed on as it arrives, piece by piece, never
gathered whole: its length bounds nothing here, the MQTT connection's own limits bound the
packets. Control frames (close, ping, pong) are at most 125 octets and handed on whole.

The upgrade before the frames is HTTP's: wsproto's, in ports/websocket.py. Frames are read
here rather than by wsproto because a 20-octet MQTT packet cost 30 to 57 us of wsproto's
Python per frame read (its event objects and generators), more than the rest of hutch's work
for it; this reads one in 2 to 3.
"""

import struct

CONTINUATION, TEXT, BINARY, CLOSE, PING, PONG = 0, 1, 2, 8, 9, 10
NORMAL, PROTOCOL_ERROR, UNSUPPORTED_DATA = 1000, 1002, 1003
_OPCODES = (CONTINUATION, TEXT, BINARY, CLOSE, PING, PONG)
_U16 = struct.Struct(">H")
_U64 = struct.Struct(">Q")


class FrameError(Exception):
    """A frame the protocol does not allow: code is the close code that says so."""

    def __init__(self, code, reason):
        Exception.__init__(self, reason)
        self.code = code
        self.reason = reason


def frame(opcode, payload, mask=None):
    """One final frame (FIN set) of opcode holding payload: masked with mask (4 octets: a
    client's frames), or not (a server's)."""
    n = len(payload)
    first = 0x80 | opcode
    bit = 0x80 if mask else 0
    if n < 126:
        head = bytes((first, bit | n))
    elif n < 65536:
        head = bytes((first, bit | 126)) + _U16.pack(n)
    else:
        head = bytes((first, bit | 127)) + _U64.pack(n)
    if mask:
        return head + mask + unmask(payload, mask)
    return head + payload


def unmask(data, mask, offset=0):
    """data XOR mask repeated (masking and unmasking are one operation), mask's octet offset
    (0 to 3) lining up with data's first: big integers do it in C."""
    n = len(data)
    if not n:
        return b""
    key = (mask[offset:] + mask * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "little") ^ int.from_bytes(key, "little")).to_bytes(n, "little")


def close_payload(code, reason=""):
    return _U16.pack(code) + reason.encode("utf-8")[:123]


def close_code(payload):
    """The code of a close frame's payload (1005, "no status", for an empty one) and its reason."""
    if len(payload) < 2:
        return 1005, ""
    return _U16.unpack_from(payload, 0)[0], bytes(payload[2:]).decode("utf-8", "replace")


class FrameReader:
    """A peer's frames, as feed() is given the octets that bring them: masked ones only (what a
    server reads from its clients) or unmasked ones only (a client's from its server)."""

    def __init__(self, masked=True):
        self.masked = masked
        self.buf = b""
        self.left = 0  # the octets of the current binary frame's payload still to come
        self.mask = b""  # and its mask, at offset self.at
        self.at = 0
        self.message = None  # the opcode of a data message whose frames are not all here, or None

    def feed(self, data):
        """[(opcode, payload)] of what data brings: (BINARY, octets) for a binary message's
        octets as they come (pieces of frames; continuation frames' too), (TEXT, b"") once a
        text message starts, (CLOSE, PING or PONG, payload) for a whole control frame. A frame
        the protocol does not allow raises FrameError."""
        found = []
        if self.left:
            data = self._payload(data, found)
        buf = self.buf + data if self.buf else data
        pos, end = 0, len(buf)
        while end - pos >= 2:
            first, second = buf[pos], buf[pos + 1]
            opcode, fin = first & 0x0F, first & 0x80
            if first & 0x70:
                raise FrameError(PROTOCOL_ERROR, "a frame with reserved bits set (no extension was agreed)")
            if opcode not in _OPCODES:
                raise FrameError(PROTOCOL_ERROR, "opcode %d is reserved" % opcode)
            if bool(second & 0x80) != self.masked:
                raise FrameError(PROTOCOL_ERROR, "a client's frame not masked" if self.masked else "a masked frame")
            n, at = second & 0x7F, pos + 2
            if n == 126:
                if end - at < 2:
                    break
                n, at = _U16.unpack_from(buf, at)[0], at + 2
            elif n == 127:
                if end - at < 8:
                    break
                n, at = _U64.unpack_from(buf, at)[0], at + 8
                if n >> 63:
                    raise FrameError(PROTOCOL_ERROR, "a frame's length with its most significant bit set")
            if self.masked:
                if end - at < 4:
                    break
                mask, at = buf[at : at + 4], at + 4
            else:
                mask = b""
            if opcode >= CLOSE:  # a control frame: whole, at most 125 octets, not fragmented
                if n > 125 or not fin:
                    raise FrameError(PROTOCOL_ERROR, "a control frame fragmented or over 125 octets")
                if end - at < n:
                    break
                payload = buf[at : at + n]
                found.append((opcode, unmask(payload, mask) if mask else payload))
                pos = at + n
                continue
            if opcode == CONTINUATION:
                if self.message is None:
                    raise FrameError(PROTOCOL_ERROR, "a continuation frame with no message to continue")
                opcode = self.message
            elif self.message is not None:
                raise FrameError(PROTOCOL_ERROR, "a new message before the last one's final frame")
            self.message = None if fin else opcode
            if opcode == TEXT:
                found.append((TEXT, b""))  # (the caller ends the connection: MQTT is binary)
                self.buf = b""
                return found
            take = min(n, end - at)
            payload = buf[at : at + take]
            if take:
                found.append((BINARY, unmask(payload, mask) if mask else payload))
            pos = at + take
            if take < n:  # the rest of this frame's payload comes with later octets
                self.left, self.mask, self.at = n - take, mask, take % 4
                break
        self.buf = buf[pos:]
        return found

    def _payload(self, data, found):
        """The current binary frame's payload that data brings; the octets after it."""
        take = min(self.left, len(data))
        if take:
            piece = data[:take]
            found.append((BINARY, unmask(piece, self.mask, self.at) if self.mask else piece))
            self.left -= take
            self.at = (self.at + take) % 4
        return data[take:]
