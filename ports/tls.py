"""TLS, one policy for both sides: a listener's server context and the bridge's client context.

    tls = ServerTLS(settings, log)      # a [[listener]]'s tls table, as server/options.py checked it
    tls.context                         # what the next accepted socket is wrapped with
    tls.reload()                        # SIGHUP (server/runtime.py): the files read again; new
                                        # handshakes use them, connections already made keep theirs
    peer["tls"] = tls.peer(ssl_object)  # what a client's connection knows of its TLS (CPython)
    context = client_context(ca_file, cert_file, key_file, verify)   # an amqps:// uplink

The policy is Mozilla's "intermediate" (what sslyze --mozilla_config=intermediate checks):
TLS 1.2 and 1.3 only, AEAD suites with forward secrecy only, the key exchange on X25519, P-256
or P-384. On MicroPython the firmware's Mbed TLS decides all three (TLS 1.2 only, its built-in
suites): there a context takes the certificates and the verification mode, and nothing else.

`ssl` is imported only here, and only when a context is made: a broker without TLS never
loads OpenSSL (4.5 MB of resident memory on CPython; tools/cli.py keeps it out) nor Mbed
TLS's state on a board.
"""

import sys

from ..codec.pem import der

MICROPYTHON = sys.implementation.name == "micropython"

# TLS 1.2 suites: ECDHE or DHE key exchange, AES-GCM or ChaCha20-Poly1305 (no CBC, no SHA-1, no
# RSA key transport). TLS 1.3's three default suites are all in Mozilla's intermediate list.
CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20:DHE+AESGCM:DHE+CHACHA20"
# OpenSSL 3 also offers X448, P-521 and the FFDHE groups, which the intermediate profile does not list.
GROUPS = b"X25519:P-256:P-384"
# A client that opens a socket and says nothing holds it this long (asyncio's default is 60 s;
# RabbitMQ's ssl_handshake_timeout is 5 s).
HANDSHAKE_TIMEOUT = 5.0

# Linux and lwIP agree on these; MicroPython's socket module does not name them.
IPPROTO_TCP = 6
TCP_NODELAY = 1
# Where EXTERNAL takes the user name from (RabbitMQ's ssl_cert_login_from; ports/certname.py).
LOGIN_FROM = ("common_name", "distinguished_name", "subject_alternative_name")


class ServerTLS:
    """A TLS listener's context, made again from its files on reload()."""

    def __init__(self, settings, log):
        self.settings = settings
        self.log = log
        self.context = server_context(settings, log)  # ssl.SSLError, OSError: the caller says which file

    def reload(self):
        """Read the certificate, key and CA files again into a new context, which the next
        handshakes use; a connection already made keeps the one it was made with. If the files
        do not make a context (half-written, a key that does not fit), the old one stays."""
        settings = self.settings
        try:
            self.context = server_context(settings, self.log)
        except (OSError, ValueError) as e:  # ssl.SSLError is an OSError
            self.log("warning", "TLS: %s not reloaded, the old certificate stays: %s" % (settings["certfile"], e))
            return False
        self.log("info", "TLS: certificate %s reloaded: new connections see it" % settings["certfile"])
        return True

    def wrap_socket(self, sock, server_side=True, do_handshake_on_connect=False):
        """MicroPython's asyncio.start_server(ssl=...) hands each accepted socket here: small
        writes go out at once (TLS or not, a delivery is several; waiting for the client's
        delayed ACK would cost ~40 ms each), then it is wrapped with the current context."""
        try:
            sock.setsockopt(IPPROTO_TCP, TCP_NODELAY, 1)
        except (OSError, AttributeError):
            pass  # a port without the option: still correct, only slower
        return self.context.wrap_socket(sock, server_side=server_side, do_handshake_on_connect=do_handshake_on_connect)

    def peer(self, ssl_object):
        """What a client's connection knows of its TLS: the protocol, the suite, the subject of
        its certificate (None without one) and the user name EXTERNAL logs in as (None without
        a verified certificate: getpeercert() is empty when none was asked for or sent)."""
        from .certname import distinguished_name, login_name  # pyright: ignore[reportMissingImports] (host only)

        cert = ssl_object.getpeercert()
        cipher = ssl_object.cipher()
        return {
            "protocol": ssl_object.version(),
            "cipher": cipher[0] if cipher else None,
            "subject": distinguished_name(cert) if cert else None,
            "login": login_name(cert, self.settings["login_from"]) if cert else None,
        }


def server_context(settings, log=None):
    """A listener's context from its tls settings (certfile, keyfile, cacertfile, verify_peer,
    fail_if_no_peer_cert)."""
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    if MICROPYTHON:
        context.load_cert_chain(der(settings["certfile"]), der(settings["keyfile"], b"PRIVATE KEY"))
    else:
        if not _policy(context, ssl) and log is not None:
            log("warning", "TLS: this OpenSSL offers its own key exchange groups (X448, P-521 too)")
        context.load_cert_chain(settings["certfile"], settings["keyfile"])
    if settings["verify_peer"]:
        # CERT_OPTIONAL: a certificate is checked if the client sends one (EXTERNAL then names
        # the user); CERT_REQUIRED: a client without one is refused in the handshake.
        context.verify_mode = ssl.CERT_REQUIRED if settings["fail_if_no_peer_cert"] else ssl.CERT_OPTIONAL
        _load_ca(context, settings["cacertfile"])
    return context


def client_context(ca_file=None, cert_file=None, key_file=None, verify=True):
    """The context of an amqps:// link to another broker: its certificate checked against
    ca_file (or the system's CAs) and its name, unless verify is false; a client certificate
    (for EXTERNAL, or a listener that requires one) when cert_file is given."""
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if not MICROPYTHON:
        _policy(context, ssl)
    if verify:
        context.verify_mode = ssl.CERT_REQUIRED
        if ca_file:
            _load_ca(context, ca_file)
        elif hasattr(context, "load_default_certs"):  # (CPython; a board names its CA file)
            context.load_default_certs()
    else:
        if hasattr(context, "check_hostname"):  # CPython forbids CERT_NONE while it is on
            context.check_hostname = False  # pyright: ignore[reportAttributeAccessIssue] (not on MicroPython)
        context.verify_mode = ssl.CERT_NONE
    if cert_file:
        if MICROPYTHON:
            context.load_cert_chain(der(cert_file), der(key_file or cert_file, b"PRIVATE KEY"))
        else:
            context.load_cert_chain(cert_file, key_file)
    return context


def _load_ca(context, path):
    if MICROPYTHON:  # its Mbed TLS takes the CA as DER bytes
        context.load_verify_locations(cadata=der(path))
    else:
        context.load_verify_locations(cafile=path)


def _policy(context, ssl):
    """TLS 1.2 and 1.3, the suites and groups above; no renegotiation (a client could make the
    broker do a handshake's work again and again on one connection). False if the groups could
    not be restricted."""
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(CIPHERS)
    context.options |= ssl.OP_NO_RENEGOTIATION
    return _restrict_groups(context, ssl)


def _restrict_groups(context, ssl):
    """Offer only GROUPS for the key exchange. CPython 3.11 has no call for it (set_ecdh_curve
    leaves one curve, and no X25519), so OpenSSL's SSL_CTX_set1_groups_list is called on the
    context's SSL_CTX: the first field after the object header of CPython's PySSLContext. That
    pointer is used only once it proves to be the context's (OpenSSL reads back the options
    the context has); otherwise, or on an OpenSSL without the call, the groups stay OpenSSL's
    defaults (X448 and P-521 too: still safe, only not what the intermediate profile lists)."""
    try:
        import ctypes

        # the _ssl module's symbols and those of the libssl it links (a Python that has _ssl
        # built in: the process's own)
        library = ctypes.CDLL(getattr(ssl._ssl, "__file__", None))
        get_options = library.SSL_CTX_get_options
        get_options.restype = ctypes.c_uint64
        get_options.argtypes = [ctypes.c_void_p]
        ctrl = library.SSL_CTX_ctrl
        ctrl.restype = ctypes.c_long
        ctrl.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_long, ctypes.c_char_p]
        pointer = ctypes.c_void_p.from_address(id(context) + object.__basicsize__).value
        if pointer and get_options(pointer) == context.options:
            SSL_CTRL_SET_GROUPS_LIST = 92  # (the macro SSL_CTX_set1_groups_list calls this)
            if ctrl(pointer, SSL_CTRL_SET_GROUPS_LIST, 0, GROUPS) == 1:
                return True
    except (ImportError, OSError, AttributeError, ValueError):
        pass
    return False
