"""The TCP port on CPython: asyncio protocol callbacks instead of streams.

ports/tcp.py serves each client with two tasks on streams, because that is what
MicroPython's asyncio offers. CPython's event loop can instead call the port when
bytes arrive and when a socket's send buffer fills or drains. That saves, per read,
a task switch for the reader and one for the writer, two Events and the stream's
own buffering: on a busy broker that was most of the port's cost per message.

Per client: data_received feeds the connection; whatever output that read produced,
for this client and for the consumers its publishes reached, is written once the pass
over the ready sockets that read it ends (ports/epoll_sockets.py; with asyncio's own
transports, before data_received returns), one write per client (see _wake): many
deliveries go out in one send, a subscriber that many sensors' readings reached in one
pass gets them all in one, and none waits for another turn of the event loop.
Flow control is the same as the stream port's: a held-back publisher or a client that
does not read what it is sent is not read from (pause_reading), and while the socket's
send buffer is full (pause_writing) output stays in the connection, where the broker
sees it (conn.reading, core/connections.py) and stops delivering to it.

A TLS listener's sockets speak TLS through ports/tls_cpython.py: its TLSLayer does the
handshake, then is the client protocol's transport.

On Linux the clients' sockets are served by ports/epoll_sockets.py (one epoll set per listener,
a small transport per socket, which also ends a held-back client whose peer hung up); elsewhere
by asyncio's own transports.
"""

import asyncio
import os
import select

from .tcp import TcpListener, peer_address

# Linux: the sockets on an epoll set of the listener's own (ports/epoll_sockets.py)
EPOLL = hasattr(select, "epoll") and hasattr(select, "EPOLLRDHUP")


class ProtocolListener(TcpListener):
    """TcpListener with the same start/close/abort, serving clients through _ClientProtocol."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.feeding = False  # inside a client's data_received
        self.passing = False  # inside a pass over the ready sockets (ports/epoll_sockets.py)
        self.woken = []  # clients given output meanwhile: flushed once the read (or the pass) ends
        self.handshaking = set()  # a TLS listener's sockets whose handshake is under way
        # What every client's read fills (get_buffer), one for them all: each read is copied out
        # (buffer_updated) before the event loop reads another socket, so an idle client holds
        # no read buffer of its own.
        # (another listener's, when server/startup.py hands it on: one for the whole broker)
        if self.read_buffer is None:
            self.read_buffer = bytearray(READ_CHUNK)
        self.read_view = memoryview(self.read_buffer)
        # The buffer large frames are read into, for every client of the listener: fed to the
        # connection as a memoryview, of which it copies what it keeps (as of the read buffer),
        # so one does for all (a buffer per read cost its allocation and zeroing each time);
        # grown to the largest read asked for.
        self.large_buffer = bytearray()

    def flush_woken(self):
        woken = self.woken
        self.woken = []
        for client in woken:
            client.flush()

    # (ports/epoll_sockets.py, around each pass over its ready sockets) A pass that reads many
    # sensors' readings writes them to their subscriber in one send, not one each: at the
    # fan-in of 1,000 sensors (hutch bench --mqtt), 12-15 % less broker CPU per reading.
    def begin_pass(self):
        self.passing = True

    def end_pass(self):
        self.passing = False
        self.flush_woken()

    async def start(self):
        loop = asyncio.get_running_loop()
        if self.tls is None:
            factory = lambda: _ClientProtocol(self, loop)  # noqa: E731
        else:
            from .tls_cpython import TLSLayer  # (ssl is loaded only for a TLS listener)

            factory = lambda: TLSLayer(self, loop, lambda: _ClientProtocol(self, loop))  # noqa: E731
        if EPOLL:
            from .epoll_sockets import EpollSockets  # (Linux only: it names epoll's constants at import)

            self.server = EpollSockets(loop, self.log, self)  # (close and wait_closed, as asyncio's server)
            await self.server.listen(self.host, self.port, factory)
        else:
            self.server = await loop.create_server(factory, self.host, self.port)

    async def abort(self):
        for layer in list(self.handshaking):
            layer.abort()
        await super().abort()


# The most one read takes from a client before the event loop moves on (asyncio's own takes up
# to 256 KB: four publishers' windows made one long turn while a bridge waited for its
# confirms). 16 KB is about 100 small publishes. Figures: docs/performance.md.
READ_CHUNK = 16 * 1024
# The one exception: a frame larger than that (a large message's body) is read whole at once,
# into the large buffer below with the start the connection holds of it in front, and with
# room for LARGE_FRAMES_AHEAD more frames of its size, each with FRAME_MARGIN octets for the
# method and header frames in front of a body. A publisher of 64 KiB messages is so read about
# five messages a turn, and their deliveries go out in one write (a writev, below): much of the
# kernel's cost of a write is per call, and a read that stops inside a body frame copies that
# frame's start twice more (to the connection's pending octets, then to the front of the next
# read); hence the margin, so that a read of alike messages stops in the next one's first
# frames. A turn reads at most five large frames (about a third of a millisecond
# of 64 KiB messages); a client whose large frame is followed by small publishes has them read
# with it, up to four frames' size, once: its next read, at a small frame, takes READ_CHUNK
# again.
LARGE_FRAMES_AHEAD = 4
FRAME_MARGIN = 512
# What the listener keeps of its large buffer between reads, and the most room a read has ahead
# of its frame: 64 KiB messages' reads (five frames, 330 KB) keep theirs. A frame of megabytes
# (max_message_bytes allows 16 MB) gets a buffer its size, let go of once its read is done or
# its client gone: kept, one client that announced a 16 MB MQTT packet and left held 80 MB of
# the broker's memory for good (a soak's mutated sessions raised its RSS by a third so).
KEEP_LARGE_BUFFER = 1024 * 1024
WRITE_HIGH_WATER = 256 * 1024  # bytes in a client's send buffer before writing pauses (see below)
# A large output (LARGE_WRITE or more, as the connection counts its deliveries' octets: those
# of large messages) is written with one writev of its parts straight to the socket, as
# asyncio's writelines does from Python 3.12 on, when the transport has nothing of its own
# still to send (the order stays) and is not closing (the descriptor is still this client's
# socket): what the socket does not take goes through transport.write. Joining the parts first
# copied every body once more, into a new buffer of a few hundred KB whose pages the allocator
# mapped and the kernel zeroed each time. A TLS listener's writes are joined: its layer
# encrypts them, a copy anyway.
LARGE_WRITE = 64 * 1024
# The most buffers one writev takes (Linux: 1024); 0 where the system has no writev (Windows):
# every output is then joined.
IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "writev") and "SC_IOV_MAX" in os.sysconf_names else 0


def write_parts(transport, fd, parts):
    """Write parts to transport: with one writev to its socket fd (None: joined, as a small
    output, a TLS layer's or one on a system without writev), if the transport holds nothing
    still to send and is not closing; what the socket does not take through the transport."""
    if (
        fd is not None
        and len(parts) <= IOV_MAX
        and not transport.get_write_buffer_size()
        and not transport.is_closing()
    ):
        total = sum(map(len, parts))
        try:
            written = os.writev(fd, parts)
        except OSError:  # no room (the transport waits for it), or an error the transport meets again
            written = 0
        if written == total:
            return
        parts = _after(parts, written)
    transport.write(b"".join(parts))


def _after(parts, written):
    """What of parts is left once the first `written` octets are sent."""
    i = 0
    while written >= len(parts[i]):
        written -= len(parts[i])
        i += 1
    return [memoryview(parts[i])[written:]] + parts[i + 1 :]


class _ClientProtocol(asyncio.BufferedProtocol):
    # (an object per client, idle ones included: slots keep it small)
    __slots__ = (
        "server",
        "loop",
        "conn",
        "transport",
        "fd",
        "large",
        "large_start",
        "flush_scheduled",
        "writing_paused",
        "reading_paused",
        "greeting",
    )

    def __init__(self, server, loop):
        self.server = server
        self.loop = loop
        self.conn = None
        self.transport = None
        self.fd = None  # its socket's number, for large writes (write_parts); None over TLS
        self.large = None  # the large buffer, while a large frame's rest is read into it (get_buffer)
        self.large_start = 0  # where in it the rest goes: the frame's start, taken from the connection, is before
        self.flush_scheduled = False
        self.writing_paused = False  # the socket's send buffer is above its high-water mark
        self.reading_paused = False
        self.greeting = None  # (peer, octets kept) until the protocol header is known

    def connection_made(self, transport):
        self.transport = transport
        if self.server.tls is None and IOV_MAX:  # (a TLS listener's transport: ports/tls_cpython.py TLSLayer)
            # (ports/epoll_sockets.py's transport knows it: one int object fewer per client)
            self.fd = getattr(transport, "fd", None) or transport.get_extra_info("socket").fileno()
        # asyncio pauses writing above 64 KiB in the socket's send buffer: one 64 KiB delivery
        # would fill it, and the next wait for the client to read all of it. The broker's own
        # bound on what waits for a client is the connection's (limits.output_high_water).
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        server = self.server
        host, port = peer_address(transport.get_extra_info("peername"))
        peer = {"address": host, "port": port, "transport": "tcp"}
        if server.tls is not None:  # (transport: ports/tls_cpython.py TLSLayer)
            peer["tls"] = server.tls.peer(transport.get_extra_info("ssl_object"))
        try:
            conn = server.front.open(peer)
        except MemoryError:
            server.log("warning", "%s:%s: out of memory, connection dropped" % (host, port))
            transport.abort()
            return
        self.greeting = (peer, b"")
        self.attach(conn)
        server.clients.append(self)
        if server.tls is None:
            server.log("debug", "%s: accepted" % conn.name)
        else:
            tls = peer["tls"]
            server.log(
                "debug",
                "%s: accepted over %s (%s), certificate %s"
                % (conn.name, tls["protocol"], tls["cipher"], tls["subject"]),
            )

    def attach(self, conn):
        """Serve this connection (the one made at accept, or the one its header chose)."""
        conn.wake = self._wake
        self.conn = conn

    def get_buffer(self, sizehint):
        conn = self.conn
        wanted = conn.read_wanted() if conn is not None and self.greeting is None else 0
        if wanted > READ_CHUNK:
            # The frame's start, which the connection keeps until the rest comes, goes in front
            # of the rest in one buffer (fed as one: no joining the two). The connection lets go
            # of it once the read has brought something (buffer_updated): a read that brings
            # nothing (asyncio returns on a spurious wake-up) must leave it there.
            start = conn.pending
            frame = len(start) + wanted
            size = frame + min(LARGE_FRAMES_AHEAD * (frame + FRAME_MARGIN), KEEP_LARGE_BUFFER)
            large = self.server.large_buffer
            if len(large) < size:
                large = self.server.large_buffer = bytearray(size)
            large[: len(start)] = start
            self.large = large
            self.large_start = len(start)
            return memoryview(large)[len(start) : size]
        return self.server.read_buffer

    def buffer_updated(self, nbytes):
        large = self.large
        if large is None:  # the listener's buffer: copied out at once (the one copy)
            self.data_received(bytes(self.server.read_view[:nbytes]))
            return
        self.large = None
        if self.conn is not None:
            self.conn.pending = b""  # (in front of what was read: see get_buffer)
        # (a memoryview of the large buffer: what the connection keeps of it, it copies out)
        self.data_received(memoryview(large)[: self.large_start + nbytes])
        if len(large) > KEEP_LARGE_BUFFER and (self.conn is None or self.conn.read_wanted() <= READ_CHUNK):
            self.server.large_buffer = bytearray()  # (its frame is read: see KEEP_LARGE_BUFFER)

    def data_received(self, data):
        conn = self.conn
        if conn is None or conn.closed:
            return
        server = self.server
        server.feeding = True
        try:
            server.front.received(self, data)
            conn = self.conn  # (its protocol header may have chosen another)
        except MemoryError:
            conn.out_of_memory()
        except Exception as e:  # a bug in the port: it costs this client, never the broker
            server.log("error", "%s: port error: %r" % (conn.name, e), e)
            conn.lost()
        finally:
            server.feeding = False
        self._wake()
        if not server.passing:
            server.flush_woken()

    def eof_received(self):
        if self.conn is not None and not self.conn.closed:
            self.server.front.received(self, b"")  # (octets kept of a header cut short go first)
            self._wake()
        return False  # let the transport close itself

    def connection_lost(self, exc):
        conn = self.conn
        if conn is None:
            return
        if exc is not None:
            self.server.log("debug", "%s: socket error: %r" % (conn.name, exc))
        if self in self.server.clients:
            self.server.clients.remove(self)
        if len(self.server.large_buffer) > KEEP_LARGE_BUFFER:
            self.server.large_buffer = bytearray()  # (a frame's start it never finished: KEEP_LARGE_BUFFER)
        if not conn.closed:
            self.server.front.lost(conn)
        conn.wake = None  # (it and this hold each other: see ports/epoll_sockets.py _let_go)

    def pause_writing(self):
        self.writing_paused = True

    def resume_writing(self):
        self.writing_paused = False
        self._wake()

    def _wake(self):
        """Output appeared, or the connection's state changed. While a client's bytes are being
        fed (the usual case: a publish delivered to consumers), or in a pass over the ready
        sockets, every client so woken is flushed once the pass (or the read) ends: one write
        each per pass, at once. Otherwise (a tick, a resumed socket) once the event loop is
        free."""
        if self.flush_scheduled:
            return
        self.flush_scheduled = True
        server = self.server
        if server.feeding or server.passing:
            server.woken.append(self)
        else:
            self.loop.call_soon(self.flush)

    def flush(self):
        if not self.flush_scheduled:
            return  # flushed already, by the other of the two ways
        self.flush_scheduled = False
        conn = self.conn
        transport = self.transport
        if conn.closed:
            data = conn.take_output()  # the last words (close, close-ok): then hang up
            if data and not transport.is_closing():
                transport.write(data)
            transport.close()
            return
        if not self.writing_paused:
            # large or not by what the connection counted of its deliveries as it made them
            # (out_bytes, which take_parts resets): small outputs pay no scan of their parts
            large = conn.out_bytes >= LARGE_WRITE
            parts = conn.take_parts()
            if parts:
                write_parts(transport, self.fd if large else None, parts)
        read = conn.reading()
        if read == self.reading_paused:
            self.reading_paused = not read
            if read:
                transport.resume_reading()
            else:
                transport.pause_reading()

    async def abort(self):
        """Hang up without waiting for the client (the end of a shutdown's grace time)."""
        self.conn.lost()
        self.transport.abort()
