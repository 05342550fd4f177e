"""TLS on CPython's TCP port: a TLS listener's socket as a transport its client protocol uses.

    layer = TLSLayer(listener, loop, make_client)   # the protocol of one accepted socket
    # handshake (at most 5 s) with the listener's context of the moment, then
    # make_client().connection_made(layer): the client writes, closes, pauses through the layer

The layer speaks TLS through OpenSSL's memory BIOs (ssl.SSLObject) on the plain socket's
transport. asyncio has TLS of its own (create_server(ssl=...), start_tls), but it drops what
OpenSSL wrote when a handshake fails: the alert that tells a client why it was refused (an
unknown CA, an expired certificate, TLS 1.1, plain AMQP on the TLS port) never leaves, and the
client sees its socket close instead, as a broken connection; nor does it say why to the
broker's log. Here the alert is sent before the socket closes, the reason is logged in a line,
and each handshake takes the listener's context as it is then (SIGHUP's reload: ports/tls.py).
"""

import ssl

from .tcp import peer_address
from .tls import HANDSHAKE_TIMEOUT

# A TLS alert record: fatal (2), unexpected_message (10).
UNEXPECTED_MESSAGE = b"\x15\x03\x03\x00\x02\x02\x0a"
# Plaintext handed to the client per pass, as ports/tcp_cpython.py's READ_CHUNK (its reasons).
READ_CHUNK = 16 * 1024


class TLSLayer:
    """asyncio's protocol of an accepted socket of a TLS listener, and the transport its client
    protocol is given once the handshake is done (write, close, abort, pause_reading,
    resume_reading, is_closing, get_extra_info)."""

    def __init__(self, listener, loop, make_client):
        self.listener = listener  # its tls (ports/tls.py ServerTLS), log, handshaking
        self.loop = loop
        self.make_client = make_client
        self.raw = None  # the socket's transport
        self.client = None  # the client protocol, once the handshake is done
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.sslobj = listener.tls.context.wrap_bio(self.incoming, self.outgoing, server_side=True)
        self.timer = None
        self.name = "?"
        self.paused = False  # the client does not want to be read (flow control)
        self.reading = False  # a pass of _read_app is under way or scheduled
        self.closing = False  # closed or refused: nothing more is read or written
        self.first = None  # the first octets the client sent (what it speaks, if a handshake fails)

    # ------------------------------------------------------------ the socket's protocol

    def connection_made(self, raw):
        self.raw = raw
        self.name = "%s:%s" % peer_address(raw.get_extra_info("peername"))
        self.timer = self.loop.call_later(HANDSHAKE_TIMEOUT, self._too_slow)
        self.listener.handshaking.add(self)

    def data_received(self, data):
        if self.closing:
            return
        self.incoming.write(data)
        if self.client is None:
            if self.first is None:
                self.first = bytes(data[:8])
            self._handshake()
        else:
            self._read_app()

    def eof_received(self):
        if self.closing:
            return False
        self.incoming.write_eof()
        if self.client is None:
            self._failed("the client closed the connection during the handshake")
        elif not self.paused:
            self._read_app()  # what came before the end first, then the end
        return False  # the socket closes

    def connection_lost(self, exc):
        self._handshake_over()
        self.closing = True
        client, self.client = self.client, None  # (no cycle left with it: see ports/epoll_sockets.py _let_go)
        if client is not None:
            client.connection_lost(exc)

    def pause_writing(self):
        if self.client is not None:
            self.client.pause_writing()

    def resume_writing(self):
        if self.client is not None:
            self.client.resume_writing()

    # ------------------------------------------------------------ the handshake

    def _handshake(self):
        try:
            self.sslobj.do_handshake()
        except ssl.SSLWantReadError:
            self._send_pending()  # the handshake's next messages
            return
        except (ssl.SSLError, OSError, ValueError) as e:
            self._send_pending()  # the alert: the client learns why it is refused
            self._failed(reason(e) + self._not_tls())
            return
        self._send_pending()  # its last messages (and TLS 1.3's session tickets)
        self._handshake_over()
        self.client = client = self.make_client()
        client.connection_made(self)
        self._read_app()  # what the client sent right after its Finished (its protocol header)

    def _not_tls(self):
        """A client that does not speak TLS gets no alert from OpenSSL; it gets the one RabbitMQ
        sends (fatal, unexpected_message), and the log says what it sent."""
        first = self.first
        if first is None or first[:1] in (b"\x14", b"\x15", b"\x16", b"\x17"):  # a TLS record
            return ""
        if not self.raw.is_closing():
            self.raw.write(UNEXPECTED_MESSAGE)
        if first.startswith(b"AMQP"):
            return ": plain AMQP (%r) sent to a TLS port" % first
        return ": %r is not TLS" % first

    def _too_slow(self):
        self.timer = None
        self._failed("not done within %d s" % HANDSHAKE_TIMEOUT)
        self.raw.abort()

    def _failed(self, why):
        self.listener.log("warning", "%s: TLS handshake failed: %s" % (self.name, why))
        self.closing = True
        self._handshake_over()
        self.raw.close()  # after what is written (the alert) is sent

    def _handshake_over(self):
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.listener.handshaking.discard(self)

    # ------------------------------------------------------------ plaintext to the client

    def _read_app(self):
        """Hand the client what the records received so far decrypt to, READ_CHUNK at a time;
        the rest waits for the next pass (scheduled), or for resume_reading."""
        self.reading = False
        if self.paused or self.client is None:
            return
        client = self.client
        chunks = []
        size = 0
        ended = False
        try:
            while size < READ_CHUNK:
                chunk = self.sslobj.read(READ_CHUNK - size)
                if not chunk:
                    ended = True
                    break
                chunks.append(chunk)
                size += len(chunk)
        except ssl.SSLWantReadError:
            pass
        except (ssl.SSLZeroReturnError, ssl.SSLEOFError):  # its close_notify, or its socket's end
            ended = True
        except (ssl.SSLError, OSError) as e:
            self.listener.log("debug", "%s: TLS error: %s" % (self.name, reason(e)))
            self.raw.abort()
            return
        self._send_pending()  # (what reading made OpenSSL answer: a key update)
        if chunks:
            client.data_received(chunks[0] if len(chunks) == 1 else b"".join(chunks))
        if ended:
            client.eof_received()
            self.raw.close()
        elif size >= READ_CHUNK and not self.reading:
            self.reading = True
            self.loop.call_soon(self._read_app)

    # ------------------------------------------------------------ the client's transport

    def write(self, data):
        if self.closing:
            return
        try:
            view = memoryview(data)
            written = 0
            while written < len(view):  # (a memory BIO takes it all at once; said, not assumed)
                written += self.sslobj.write(view[written:])
        except (ssl.SSLError, OSError) as e:
            self.listener.log("debug", "%s: TLS error: %s" % (self.name, reason(e)))
            self.raw.abort()
            return
        self._send_pending()

    def close(self):
        """Say close_notify, then close the socket once what is written is sent (without
        waiting for the client's own close_notify: nothing more is read)."""
        if self.closing:
            return
        self.closing = True
        try:
            self.sslobj.unwrap()
        except (ssl.SSLError, OSError, ValueError):
            pass  # (it waits for the client's close_notify: not needed)
        self._send_pending()
        self.raw.close()

    def abort(self):
        self.closing = True
        self.raw.abort()

    def is_closing(self):
        return self.closing or self.raw.is_closing()

    def pause_reading(self):
        self.paused = True
        self.raw.pause_reading()

    def resume_reading(self):
        self.paused = False
        self.raw.resume_reading()
        if not self.reading:  # what was decrypted or received meanwhile
            self.reading = True
            self.loop.call_soon(self._read_app)

    def set_write_buffer_limits(self, high=None, low=None):
        self.raw.set_write_buffer_limits(high, low)  # (the encrypted bytes wait in the socket's)

    def get_extra_info(self, name, default=None):
        if name == "ssl_object":
            return self.sslobj
        if name == "peercert":
            return self.sslobj.getpeercert()
        if name == "cipher":
            return self.sslobj.cipher()
        return self.raw.get_extra_info(name, default)

    def _send_pending(self):
        pending = self.outgoing.read()
        if pending and not self.raw.is_closing():
            self.raw.write(pending)


# The alerts a client sends when it does not accept the broker's certificate (RFC 8446 6.2)
CERTIFICATE_ALERTS = (
    "BAD_CERTIFICATE",
    "UNSUPPORTED_CERTIFICATE",
    "CERTIFICATE_REVOKED",
    "CERTIFICATE_EXPIRED",
    "CERTIFICATE_UNKNOWN",
    "UNKNOWN_CA",
)


def reason(e):
    """A TLS error in a line: OpenSSL's reason ("CERTIFICATE_VERIFY_FAILED (certificate has
    expired)", "WRONG_VERSION_NUMBER") rather than the whole exception. An alert the client
    sent (OpenSSL's SSLV3_ALERT_... or TLSV1_ALERT_...) is said to be the client's: read as it
    is, "SSLV3_ALERT_BAD_CERTIFICATE" would blame the broker's certificate for a client that
    refused it."""
    name = getattr(e, "reason", None)
    verify = getattr(e, "verify_message", None)
    if name and verify:
        return "%s (%s)" % (name, verify)
    if name and "_ALERT_" in name:
        alert = name.split("_ALERT_", 1)[1]
        said = "%s, %s" % (alert.lower().replace("_", " "), name)
        if alert in CERTIFICATE_ALERTS:
            return "the client refused the broker's certificate (its alert: %s)" % said
        return "the client ended it with an alert (%s)" % said
    return name or str(e) or e.__class__.__name__
