"""A listener's sockets on one epoll set of its own (CPython on Linux): the TCP port's transport.

    sockets = EpollSockets(loop, log)          # the event loop watches the set as one reader
    await sockets.listen(host, port, factory)  # accepted sockets each get factory()'s protocol
    sockets.close()                            # no more accepts; the clients stay

Each accepted socket is a SocketTransport: the part of asyncio's transport API that the port's
protocols use (write, close, abort, is_closing, pause_reading, resume_reading,
get_write_buffer_size, set_write_buffer_limits, get_extra_info), calling them as asyncio does
(connection_made, get_buffer and buffer_updated or data_received, eof_received, pause_writing,
resume_writing, connection_lost). ports/tcp_cpython.py's client protocol and
ports/tls_cpython.py's TLS layer run on it unchanged.

Why not asyncio's own transports: an idle MQTT sensor cost about 2.8 KB of the broker's memory,
half of it asyncio's (the transport, its buffer and registry, the selector's key, the reader's
handle); a SocketTransport is one object of a few slots. And every read went through the event
loop's select, its ready queue and a handle per socket; here one handle runs a pass over all
the sockets epoll says are ready. Figures: docs/performance.md.

A socket not read (its client held back: pause_reading) stays in the set for one event only,
the peer's hang-up (EPOLLRDHUP): a publisher held back by a full queue whose link was cut is
ended at once, as RabbitMQ, which does not stop reading for a full queue, sees the FIN at once
(without it, the socket stayed open until a heartbeat failed to go out, and a client
reconnecting meanwhile found its exclusive queue still locked: 405).
"""

import asyncio
import errno
import resource
import select
import socket

EPOLLIN = select.EPOLLIN
EPOLLOUT = select.EPOLLOUT
EPOLLRDHUP = select.EPOLLRDHUP
HANG_UP = EPOLLRDHUP | select.EPOLLHUP | select.EPOLLERR  # (the last two: reported whatever the mask)
READ_MASK = EPOLLIN | EPOLLRDHUP  # (one int object for every socket's mask: each one made costs 32 B)
# asyncio's limit on what one read gives a protocol that is not buffered (the TLS layer)
READ_SIZE = 256 * 1024
# What may wait unsent before the protocol is told pause_writing (asyncio's default)
HIGH_WATER = 64 * 1024
# Connections accepted per listening socket in one pass: a gateway's thousand sensors
# reconnecting at once are taken in a few passes, each leaving the event loop its turn.
ACCEPTS_PER_PASS = 100
# Ready sockets served in one pass, as much for the same reason.
EVENTS_PER_PASS = 256
# How long accepting pauses when the process is out of file descriptors (as asyncio does).
ACCEPT_PAUSE_S = 1.0
# The listening sockets' backlog: connections the kernel holds before they are accepted.
BACKLOG = 1024
# Errors of accept() that concern only the connection being accepted.
ACCEPT_GONE = (errno.ECONNABORTED, errno.EPROTO, errno.EAGAIN, errno.EWOULDBLOCK)
OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


# What an unbuffered protocol's read (the TLS layer's) is read into, one for every socket, and
# copied out of at the size read: sock.recv(READ_SIZE) would have malloc map READ_SIZE afresh for
# each read, shrink it and unmap it (three system calls a read, each TLS record's). Made at the
# first such read: a broker without TLS does not hold it.
_unbuffered = None  # (a memoryview of it)


def unbuffered_buffer():
    global _unbuffered
    if _unbuffered is None:
        _unbuffered = memoryview(bytearray(READ_SIZE))
    return _unbuffered


class EpollSockets:
    """One listener's listening sockets and its clients' sockets (see the module's docstring)."""

    def __init__(self, loop, log, passes=None):
        """passes: told begin_pass() before a pass over the ready sockets and end_pass() after it
        (ports/tcp_cpython.py's listener writes each client's output of the whole pass once)."""
        self.loop = loop
        self.log = log
        self.passes = passes
        self.epoll = select.epoll()
        self.transports = {}  # fd -> SocketTransport
        self.listening = []  # the listening sockets
        self.factory = None
        loop.add_reader(self.epoll.fileno(), self._ready)

    async def listen(self, host, port, factory):
        """Listen on every address host names (as asyncio's create_server: "0.0.0.0", "::",
        "localhost" with both families); OSError if one cannot be had (the others closed)."""
        self.factory = factory
        infos = await self.loop.getaddrinfo(
            host or None, port, family=socket.AF_UNSPEC, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        try:
            for family, kind, proto, _name, address in dict.fromkeys(infos):
                sock = socket.socket(family, kind, proto)
                self.listening.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:  # (as asyncio: "::" does not take the IPv4 port too)
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(address)
                sock.listen(BACKLOG)
                sock.setblocking(False)
        except OSError:
            self.close()
            raise
        for sock in self.listening:
            self.loop.add_reader(sock.fileno(), self._accept, sock)

    def close(self):
        """Accept no more (the clients already here stay)."""
        for sock in self.listening:
            if sock.fileno() >= 0:
                self.loop.remove_reader(sock.fileno())
                sock.close()
        self.listening = []

    async def wait_closed(self):
        """Once the clients were aborted (their sockets are let go in the loop's next turn):
        the set too."""
        self.close()
        await asyncio.sleep(0)
        if not self.epoll.closed:
            self.loop.remove_reader(self.epoll.fileno())
            self.epoll.close()

    def _accept(self, listening):
        for _ in range(ACCEPTS_PER_PASS):
            try:
                sock, _address = listening.accept()
            except OSError as e:
                if e.errno in OUT_OF_DESCRIPTORS:
                    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
                    self.log(
                        "warning",
                        "out of file descriptors (ulimit -n: %d): accepting again in %.0f s" % (limit, ACCEPT_PAUSE_S),
                    )
                    self.loop.remove_reader(listening.fileno())
                    self.loop.call_later(ACCEPT_PAUSE_S, self._accept_again, listening)
                elif e.errno not in ACCEPT_GONE:
                    self.log("warning", "accepting a connection: %s" % (e.strerror or e))
                return
            sock.setblocking(False)
            protocol = self.factory()
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # (as asyncio: no Nagle)
                transport = SocketTransport(self, sock, protocol)
            except OSError:  # (the client left already)
                sock.close()
                continue
            try:
                protocol.connection_made(transport)
            except Exception as e:  # a bug in the port: it costs this client, never the listener
                self.log("error", "%s: port error: %r" % (transport.name(), e), e)
                transport.abort()

    def _accept_again(self, listening):
        if listening in self.listening:
            self.loop.add_reader(listening.fileno(), self._accept, listening)

    def _ready(self):
        transports = self.transports
        passes = self.passes
        if passes is not None:
            passes.begin_pass()
        try:
            for fd, events in self.epoll.poll(0, EVENTS_PER_PASS):
                transport = transports.get(fd)
                if transport is None:
                    continue
                if events & EPOLLOUT:
                    transport.write_ready()
                if events & ~EPOLLOUT and transport.watching:  # (write_ready may have ended it)
                    transport.read_ready(events)
        finally:
            if passes is not None:
                passes.end_pass()


class SocketTransport:
    """One accepted socket as its protocol's transport (asyncio's calls, see the module's
    docstring). Its mask in the set says what it waits for: EPOLLIN while read, EPOLLRDHUP
    always, EPOLLOUT while output waits that the socket did not take."""

    __slots__ = (
        "sockets",
        "sock",
        "fd",
        "protocol",
        "buffered",
        "out",
        "high_water",
        "low_water",
        "writing_paused",
        "reading",
        "closing",
        "watching",
        "mask",
    )

    def __init__(self, sockets, sock, protocol):
        self.sockets = sockets
        self.sock = sock
        self.fd = sock.fileno()
        self.protocol = protocol
        self.buffered = hasattr(protocol, "get_buffer")  # (asyncio's BufferedProtocol: reads into its buffer)
        self.out = None  # a bytearray of what the socket did not take yet
        self.high_water = HIGH_WATER
        self.low_water = None  # (None: a quarter of high_water, as asyncio's)
        self.writing_paused = False  # the protocol was told pause_writing
        self.reading = True
        self.closing = False
        self.watching = True  # in the set (False once the socket is let go)
        self.mask = READ_MASK
        sockets.epoll.register(self.fd, self.mask)
        sockets.transports[self.fd] = self

    # ------------------------------------------------------------ what the set calls

    def read_ready(self, events):
        if not self.reading:
            # Held back: only a hang-up is asked for. An EPOLLIN is one the poll reported before
            # the socket was held back (by an earlier socket's read in the same pass): its octets
            # wait in the socket, read once it is resumed. Taken for a hang-up, it ended a busy
            # consumer, and the client found its connection reset.
            if events & HANG_UP:
                self._eof()
            return
        protocol = self.protocol
        try:
            if self.buffered:
                buffer = protocol.get_buffer(-1)
                data = self.sock.recv_into(buffer)  # (a count)
            else:
                buffer = unbuffered_buffer()
                data = self.sock.recv_into(buffer)
                if data:
                    data = bytes(buffer[:data])
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:  # reset: the connection is gone
            self._lost(e)
            return
        if not data:
            self._eof()
            return
        try:
            if self.buffered:
                protocol.buffer_updated(data)
            else:
                protocol.data_received(data)
        except Exception as e:
            self._failed(e)

    def write_ready(self):
        out = self.out
        try:
            sent = self.sock.send(out) if out else 0
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._lost(e)
            return
        del out[:sent]
        if not out:
            self.out = None
            self._set_mask(self.mask & ~EPOLLOUT)
            if self.closing:
                self._let_go(None)
                return
        low = self.low_water if self.low_water is not None else self.high_water // 4
        if self.writing_paused and len(out) <= low:
            self.writing_paused = False
            try:
                self.protocol.resume_writing()
            except Exception as e:
                self._failed(e)

    # ------------------------------------------------------------ the transport's API

    def write(self, data):
        if self.closing or not data:
            return
        if self.out is None:
            try:
                sent = self.sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as e:
                self._lost(e)
                return
            if sent == len(data):
                return
            self.out = bytearray(memoryview(data)[sent:])
            self._set_mask(self.mask | EPOLLOUT)
        else:
            self.out += data
        if not self.writing_paused and len(self.out) > self.high_water:
            self.writing_paused = True
            self.protocol.pause_writing()

    def get_write_buffer_size(self):
        return len(self.out) if self.out is not None else 0

    def set_write_buffer_limits(self, high=None, low=None):
        self.high_water = HIGH_WATER if high is None else high
        self.low_water = low

    def is_closing(self):
        return self.closing

    def pause_reading(self):
        if self.reading and not self.closing:
            self.reading = False
            self._set_mask(self.mask & ~EPOLLIN)

    def resume_reading(self):
        if not self.reading and not self.closing:
            self.reading = True
            self._set_mask(self.mask | EPOLLIN)

    def close(self):
        """Close once what was written is sent; nothing more is read."""
        if self.closing:
            return
        self.closing = True
        self.reading = False
        self._set_mask(self.mask & ~(EPOLLIN | EPOLLRDHUP))
        if self.out is None:
            self.sockets.loop.call_soon(self._let_go, None)

    def abort(self):
        """Close at once, dropping what waits to be sent."""
        self._lost(None)

    def name(self):
        peer = self.get_extra_info("peername", ("?", "?"))
        return "%s:%s" % peer[:2]

    def get_extra_info(self, name, default=None):
        if name == "socket":
            return self.sock
        try:  # (asked once, at accept: kept, they would cost every idle client 150 B)
            if name == "peername":
                return self.sock.getpeername()
            if name == "sockname":
                return self.sock.getsockname()
        except OSError:  # (closed, or the peer is gone)
            pass
        return default

    # ------------------------------------------------------------ the end

    def _eof(self):
        """The peer's stream ended (or it hung up while not read)."""
        if self.closing:
            return
        self.reading = False
        self._set_mask(self.mask & ~(EPOLLIN | EPOLLRDHUP))
        try:
            keep_open = self.protocol.eof_received()
        except Exception as e:
            self._failed(e)
            return
        if not keep_open:
            self.close()

    def _failed(self, e):
        """Its protocol raised (a bug): as asyncio's transports do, this connection is ended and
        the error logged; the listener and the other clients go on."""
        self.sockets.log("error", "%s: port error: %r" % (self.name(), e), e)
        self._lost(e)

    def _lost(self, exc):
        """The socket failed (exc), or is aborted (None): what waits is dropped."""
        if not self.watching:
            return
        self.out = None
        self.closing = True
        self.reading = False
        self._unwatch()
        self.sockets.loop.call_soon(self._let_go, exc)

    def _let_go(self, exc):
        self._unwatch()
        if self.sock.fileno() < 0:
            return  # let go already
        self.sock.close()
        # The protocol and its transport hold each other: a cycle only CPython's full collection
        # frees, and that is rare. A TLS client's OpenSSL buffers (some 40 KiB) stayed with it:
        # a scanner's 10,000 refused handshakes left 200 MB resident. Broken here, as asyncio's
        # transports do (no event reaches a transport let go).
        protocol, self.protocol = self.protocol, None
        protocol.connection_lost(exc)

    def _unwatch(self):
        if self.watching:
            self.watching = False
            del self.sockets.transports[self.fd]
            try:
                self.sockets.epoll.unregister(self.fd)
            except (OSError, ValueError):
                pass  # (the set is closed already)

    def _set_mask(self, mask):
        if mask != self.mask and self.watching:
            self.mask = mask
            self.sockets.epoll.modify(self.fd, mask)
