"""TLS for hutch.client (amqps, port 5671): the TCP transport with its socket wrapped in TLS by
the interpreter's own ssl module, CPython's or MicroPython's (Mbed TLS), as umqtt's ssl= does.

    from hutch.client import Client
    from hutch.client.tls import context
    ctx = context(cafile="ca.pem", certfile="sensor-01.pem", keyfile="sensor-01.key")
    c = Client("gateway.local", ssl=ctx, mechanism="EXTERNAL")   # the certificate's user
    c = Client(transport=Tls("192.168.4.1", 5671, ctx, server_hostname="gateway.local"))

context() checks the broker's certificate against cafile and its name against the host the
client connects to, on both interpreters (MicroPython's SSLContext checks nothing unless told
to). certfile and keyfile are the client's own certificate, for a listener that asks for one
(verify_peer) and for SASL EXTERNAL. Loaded only by a node that uses TLS: a plain node's heap
keeps none of it.
"""

import ssl
import sys

from .transport import Tcp

MICROPYTHON = sys.implementation.name == "micropython"


def context(cafile=None, certfile=None, keyfile=None):
    """An SSLContext that verifies the broker: its certificate signed by cafile's CA (on
    CPython, without cafile, the system's CAs), and its name the host's. certfile and keyfile
    (PEM): the client's own certificate."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if MICROPYTHON:  # its Mbed TLS takes DER, read out of the PEM files here
        from ..codec.pem import der

        if cafile is None:
            raise ValueError("TLS on MicroPython needs cafile= (the CA of the broker's certificate): no CA store")
        ctx.load_verify_locations(cadata=der(cafile))
        if certfile is not None:
            ctx.load_cert_chain(der(certfile), der(keyfile or certfile, b"PRIVATE KEY"))
    else:
        if cafile is not None:
            ctx.load_verify_locations(cafile=cafile)
        else:
            ctx.load_default_certs()
        if certfile is not None:
            ctx.load_cert_chain(certfile, keyfile)
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


# What a non-blocking TLS socket raises when a record is not whole yet (CPython; MicroPython's
# returns None, or raises EAGAIN)
_WANT = tuple(getattr(ssl, name) for name in ("SSLWantReadError", "SSLWantWriteError") if hasattr(ssl, name))


class Tls(Tcp):
    """TCP with TLS: the handshake when it opens (within its timeout), then as Tcp.
    tls_context: an SSLContext (context() makes one), or None for context() with the system's
    CAs (CPython). server_hostname: the name the broker's certificate must have (the host's)."""

    def __init__(self, host, port=5671, tls_context=None, server_hostname=None):
        super().__init__(host, port)
        self.context = context() if tls_context is None else tls_context
        self.server_hostname = server_hostname or host

    def _wrap(self, sock):
        try:
            return self.context.wrap_socket(sock, server_hostname=self.server_hostname)
        except ValueError as e:  # MicroPython's refusal of the broker: an OSError, as CPython's
            if not MICROPYTHON or isinstance(e, OSError):
                raise
            raise OSError("TLS handshake failed: %s" % " ".join(str(e).split()))

    def _ready(self, timeout_ms):
        pending = getattr(self.sock, "pending", None)  # what TLS decrypted already: poll cannot see it
        return (pending is not None and pending() > 0) or super()._ready(timeout_ms)

    def _again(self, e):
        return isinstance(e, _WANT) or super()._again(e)
