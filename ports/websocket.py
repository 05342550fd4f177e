"""MQTT over WebSocket (RFC 6455), on CPython: the framing between a listener's transport and a
front end's connection: the HTTP upgrade with wsproto (sans-IO, as hutch's front ends are: it
reads octets and says what they were, it never touches a socket), the frames after it with
codec/websocket.py (sans-IO too, and several times quicker for MQTT's small frames).

A listener with `websocket = true` makes each client's connection as usual and gives it a
WebSocketFraming (PortConnection.framing): what the port reads goes through unwrap() before
the connection parses it, and what the connection sends through wrap() before the port writes
it. So MQTT over WebSocket is MQTT over TCP on the same sessions, limits and deadlines: the
handshake deadline and the pre-login limits count from the TCP accept, and the upgrade is part
of the handshake.

- The upgrade: any path unless the listener names one (`path`), the subprotocol `mqtt` or
  `mqttv3.1` chosen where the client offers one, an `Origin` checked against
  `allowed_origins` where the listener has them. A request that is not an upgrade is answered
  400, one to another path 404, from an origin not allowed 403, and the connection ends.
- MQTT packets may be split across frames and frames may hold several: the connection parses
  the octets whatever frames brought them. Pings are answered; a close is answered and ends
  the connection; a text frame, or a frame the protocol does not allow (unmasked, a bad
  opcode, fragments out of order), ends the connection with the close code that says why.

A board's firmware has no wsproto: server/options.py says so in one line.
"""

from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import AcceptConnection, RejectConnection, Request
from wsproto.utilities import RemoteProtocolError

from ..codec import websocket as frames

SUBPROTOCOLS = ("mqtt", "mqttv3.1")  # what an MQTT client offers (MQTT 5 6.0), in our order


class WebSocketFraming:
    """One client's WebSocket, between its port and conn (a PortConnection): the upgrade with
    wsproto, then the frames with codec/websocket.py."""

    def __init__(self, conn, path=None, origins=None):
        self.conn = conn
        self.path = path  # the one path served (None: any)
        self.origins = origins  # the Origin headers allowed (None: any)
        self.handshake = WSConnection(ConnectionType.SERVER)
        self.reader = None  # the client's frames, once the upgrade is done (codec/websocket.py)
        self.raw = []  # the WebSocket's own octets to send before the connection's next output
        self.ended = False  # a close frame was sent (nothing more is)

    def unwrap(self, data):
        """The connection's octets in what the transport read (b"": none yet); what the
        WebSocket answers itself (the upgrade, a pong, a close) goes to raw."""
        conn = self.conn
        if conn.closed:
            return b""  # (a WebSocket that ended reads nothing more: wsproto, closed, would raise)
        try:
            return self._unwrap(data)
        except Exception as e:  # a bug of the framing's or wsproto's: it costs this connection, never the broker
            conn.broker.log("error", "%s: internal error: %r" % (conn.name, e), e)
            conn.end()
            return b""

    def _unwrap(self, data):
        if self.reader is None:
            return self._upgrading(data)
        try:
            found = self.reader.feed(bytes(data) if data else b"")
        except frames.FrameError as e:
            self.close(e.code, e.reason)
            return b""
        octets = []
        for opcode, payload in found:
            if opcode == frames.BINARY:
                octets.append(payload)
            elif opcode == frames.PING:
                self._say(frames.frame(frames.PONG, payload))
            elif opcode == frames.CLOSE:
                self._closed_by_client(payload)
                break
            elif opcode == frames.TEXT:
                self.close(frames.UNSUPPORTED_DATA, "MQTT is carried in binary frames")
                break
        return b"".join(octets)

    def wrap(self, parts):
        """The connection's output parts (None: none), as the port writes them: the WebSocket's
        own octets first, then the connection's in one binary frame; the close frame once the
        connection has closed."""
        out = self.raw
        self.raw = []
        if parts and self.reader is not None and not self.ended:
            out.append(frames.frame(frames.BINARY, b"".join(parts)))
        if self.conn.closed and self.reader is not None and not self.ended:
            self.ended = True
            out.append(frames.frame(frames.CLOSE, frames.close_payload(frames.NORMAL)))
        return out or None

    def waiting(self):
        return bool(self.raw)

    def close(self, code, reason):
        """End the WebSocket with a close frame (code, reason), and the connection with it."""
        if self.reader is not None and not self.ended:
            self.ended = True
            self._say(frames.frame(frames.CLOSE, frames.close_payload(code, reason)))
        self._end("WebSocket closed: %s" % reason)

    # ------------------------------------------------------------ the upgrade and the end

    def _upgrading(self, data):
        try:
            self.handshake.receive_data(bytes(data) if data else None)
            for event in self.handshake.events():
                if isinstance(event, Request):
                    self._upgrade(event)
        except RemoteProtocolError as e:  # not a WebSocket upgrade: answered as HTTP, then closed
            if e.event_hint is not None and self.handshake.state is not ConnectionState.CLOSED:
                self._say(self.handshake.send(e.event_hint))  # (wsproto answers no more once closed)
            self._end("WebSocket handshake refused: %s" % e)
        except UnicodeError:  # (wsproto reads the headers it checks as ASCII, and raises this for others)
            self._refuse(400, "a header of the upgrade that is not ASCII")
        return b""  # (a client sends its first frame once it has the answer)

    def _upgrade(self, request):
        if self.path is not None and request.target.split("?", 1)[0] != self.path:
            self._refuse(404, "the path %r is not served (%s is)" % (request.target, self.path))
            return
        if self.origins is not None:
            origin = dict(request.extra_headers).get(b"origin", b"").decode("latin-1")
            if origin not in self.origins:
                self._refuse(403, "the origin %r is not allowed" % origin)
                return
        chosen = None
        for name in SUBPROTOCOLS:
            if name in request.subprotocols:
                chosen = name
                break
        self._say(self.handshake.send(AcceptConnection(subprotocol=chosen)))
        self.reader = frames.FrameReader(masked=True)

    def _refuse(self, status, why):
        if self.handshake.state is ConnectionState.CONNECTING:  # (else wsproto answers no more)
            self._say(
                self.handshake.send(
                    RejectConnection(status_code=status, headers=[(b"content-length", b"0")], has_body=False)
                )
            )
        self._end("WebSocket upgrade refused (%d): %s" % (status, why))

    def _closed_by_client(self, payload):
        code, reason = frames.close_code(payload)
        if not self.ended:  # the client's close answered with its code (RFC 6455 5.5.1)
            self.ended = True
            self._say(frames.frame(frames.CLOSE, payload[:2]))
        if code not in (1000, 1001, 1005):
            self._end("WebSocket closed with code %d: %s" % (code, reason or "no reason"))
        else:
            self.conn.eof()

    def _say(self, octets):
        self.raw.append(octets)
        self.conn.output_added(0)  # (the port is woken: there is something to write)

    def _end(self, why):
        conn = self.conn
        if not conn.closed:
            conn.broker.log("warning", "%s: %s" % (conn.name, why))
            conn.end()
