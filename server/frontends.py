"""The protocol front ends a listener hands its clients to, and the sniffer that chooses one.

Every listener (server/startup.py makes them from the config: a port of ports/ on one
bind:port) and the serial links are handed a FrontEnds: their connection factory. A port calls

    conn = front.open(peer)             # at accept: the connection it starts with

    front.received(client, data)        # every read (b"": the stream ended)

A client's first octets are its protocol header, and they choose the front end: FrontEnds
says, per listener protocol, which front end takes which header.

Which front end serves a listener's protocol, and which claims which header, is
server/listeners.py's table.
"""

from ..amqp091.connection import Connection


class FrontEnds:
    """The connections one listener (or the serial links) makes: a front end's Connection(broker,
    peer), with feed/take_output/tick/lost/eof/wake as amqp091/connection.py has them.

    A client starts with the default front end's connection, made at accept, so its handshake
    deadline runs from then, while its header is read too: a client that sends nothing, or
    dribbles its header and stops, is closed at that deadline. Its first octets go through
    first_octets() until they say which front end serves it; then the port holds the chosen
    connection, and every later read goes to it directly. (A claiming front end's connection
    is made once its header is whole, and times its own handshake from then.)"""

    def __init__(self, runtime, protocol="amqp", websocket=None):
        self.broker = runtime.broker
        self.clock = runtime.clock
        self.default = Connection
        self.claims = {}  # {header: the front end that claims it}
        from .listeners import CLAIMS, LISTENERS, PACKAGE, TITLE, front_end  # (a board forgets it once started)

        row = LISTENERS[protocol]
        self.title = row[TITLE]  # what it serves, for the listener's log line
        if row[PACKAGE] is not None:  # (its connection module is loaded with its first client)
            self.default = front_end(row[PACKAGE], "new_connection")
        if websocket is not None:  # ({"path", "origins"}: ports/websocket.py, CPython only)
            from ..ports.websocket import WebSocketFraming  # pyright: ignore[reportMissingImports] (host only)

            self.default = _framed(self.default, WebSocketFraming, websocket)
            self.title += " over WebSocket"
        if row[CLAIMS] is not None and runtime.amqp10:
            claimer = front_end(row[CLAIMS], "new_connection")
            for header in front_end(row[CLAIMS], "HEADERS"):
                self.claims[header] = claimer
            self.title += " and 1.0"

    def received(self, client, data):
        """The read rule every port calls: what it read from a client (data; b"" at the end of
        its stream), for client.conn, or, while its protocol header is not known
        (client.greeting), for first_octets() to choose its connection by."""
        if client.greeting is not None:
            self.first_octets(client, data)
            if data:
                return
        elif data:
            client.conn.feed(data)
            return
        self.lost(client.conn, True)

    def lost(self, conn, eof=False):
        """A client's stream ended (eof: with an EOF; else a reset, or the port gave up on it):
        the connection is told, the broker's clock read first, so what counts from the end (a
        version 5 will's delay) counts from now, not from the last tick."""
        self.broker.now = self.clock.now_ms()
        if eof:
            conn.eof()
        else:
            conn.lost()

    def open(self, peer):
        """The connection a client starts with (peer: its "address", "port" and "transport").
        The port sets client.greeting = (peer, b"") and calls first_octets() with what it reads."""
        self.broker.now = self.clock.now_ms()  # its deadline counts from now, not from the last tick
        conn = self.default(self.broker, peer)
        if "tls" in peer:
            # What the port knows of the client's TLS (ports/tls.py ServerTLS.peer: the
            # certificate's subject, the name EXTERNAL logs in as), as conn.tls; a plain
            # client's connection has no such attribute, and pays nothing for it.
            conn.tls = peer["tls"]  # pyright: ignore[reportAttributeAccessIssue] (read with getattr)
        return conn

    def first_octets(self, client, data):
        """What a client sent (data; b"" at the end of its stream) while its protocol header
        was not known (client.greeting: its peer and the octets kept so far). Feeds the octets
        to the connection of their front end, once they say which: client.conn, or a claiming
        front end's (client.attach(conn) then, and open()'s is given up without a word). Until
        then, while they may still become a claimed header, they are kept."""
        peer, kept = client.greeting
        ended = not data
        if kept:
            data = kept + bytes(data)
        claims = self.claims
        make = None
        if claims:
            start = bytes(data[:8])  # (a memoryview equals no bytes on MicroPython)
            for header in claims:
                if start[: len(header)] == header:
                    make = claims[header]
                    break
            else:
                for header in claims:
                    if not ended and len(start) < len(header) and header[: len(start)] == start:
                        client.greeting = (peer, bytes(data))  # may still become this header
                        return
        client.greeting = None
        if make is not None:
            opened = client.conn
            opened.wake = None  # given up: the port has nothing to send for it
            opened.lost()
            self.broker.now = self.clock.now_ms()
            conn = make(self.broker, peer)
            if "tls" in peer:  # (as in open())
                conn.tls = peer["tls"]  # pyright: ignore[reportAttributeAccessIssue] (read with getattr)
            client.attach(conn)
        if data:
            client.conn.feed(data)


def _framed(make, framing, settings):
    """A connection factory like make, whose connections carry their octets in framing's."""

    def framed(broker, peer):
        conn = make(broker, peer)
        conn.framing = framing(conn, settings.get("path"), settings.get("origins"))
        return conn

    return framed
