"""The TCP port: an asyncio listener that moves bytes between sockets and connections.

The same code runs on CPython's asyncio and MicroPython's asyncio, so it uses
only what both have: start_server, StreamReader.read, StreamWriter.write/drain,
Event, create_task, sleep_ms/sleep.

A listener is handed the runtime (server/runtime.py: the broker, its clock and
heap monitor, the stop on Ctrl-C), which ticks the broker and stops the
listeners in order (close, the clients' grace, abort), and its connection
factory (server/frontends.py FrontEnds): open(peer) makes the connection a
client starts with, and first_octets() feeds the client's protocol header to
the connection of its front end. Ports only move bytes: no front end is
imported here.

Per client there are two tasks: a reader that feeds bytes to the connection,
and a writer that sends what the connection produced. Only the writer writes,
because MicroPython cannot have two tasks waiting to write on one socket. The
core calls `conn.wake` whenever output appears (from this client's input or
from another client's publish), which wakes both tasks.
"""

import asyncio
import gc
import sys

from .interrupt import interrupted

MICROPYTHON = sys.implementation.name == "micropython"
# CPython's StreamReader.read(n) returns just what arrived. MicroPython's allocates n+1 bytes for
# every read, which soon fragments a small heap (a 2 MB unix heap fails within a few hundred
# reads of 64 KiB), so there the port reads into one buffer it keeps and copies what arrived.
# Its size comes from the board profile (READ_SIZE).


def peer_address(info):
    """(host, port) from get_extra_info('peername'): a tuple on CPython, raw sockaddr bytes on MicroPython unix."""
    if isinstance(info, tuple) and len(info) >= 2:
        return str(info[0]), info[1]
    if isinstance(info, (bytes, bytearray)) and len(info) >= 8 and info[0] == 2 and info[1] == 0:
        return "%d.%d.%d.%d" % (info[4], info[5], info[6], info[7]), (info[2] << 8) | info[3]
    if isinstance(info, (bytes, bytearray)) and len(info) >= 24 and info[0] == 10 and info[1] == 0:
        raw = info[8:24]
        if raw[:12] == b"\x00" * 10 + b"\xff\xff":
            return "%d.%d.%d.%d" % tuple(raw[12:16]), (info[2] << 8) | info[3]
        return ":".join("%x" % ((raw[i] << 8) | raw[i + 1]) for i in range(0, 16, 2)), (info[2] << 8) | info[3]
    return "?", 0


# Linux and lwIP agree on these; MicroPython's socket module does not name them.
IPPROTO_TCP = 6
TCP_NODELAY = 1


def _no_delay(writer):
    """Send small frames at once (no Nagle): a delivery is several small writes on MicroPython,
    and waiting for the client's delayed ACK would cost ~40 ms per message. CPython's asyncio
    already does this for every TCP stream."""
    sock = getattr(writer, "s", None)  # MicroPython's Stream keeps its socket as .s
    if sock is not None:
        try:
            sock.setsockopt(IPPROTO_TCP, TCP_NODELAY, 1)
        except (OSError, AttributeError):
            pass  # a port without the option: still correct, only slower


class TcpListener:
    tls = None  # a TLS listener's ports/tls.py ServerTLS: every client's socket is wrapped in TLS

    def __init__(self, runtime, front, host="0.0.0.0", port=5672, read_size=65536, read_buffer=None, tls=None):
        self.runtime = runtime
        if tls is not None:  # (a plain listener keeps nothing for it)
            self.tls = tls
        self.front = front  # the connection factory (server/frontends.py FrontEnds)
        self.host = host
        self.port = port
        self.log = runtime.log
        self.server = None
        self.clients = []
        self.read_size = read_size
        # Shared by every client (another listener's, if given): safe, because what readinto()
        # put there is copied out before the reading task awaits again.
        if read_buffer is None and MICROPYTHON:
            read_buffer = bytearray(read_size)
        self.read_buffer = read_buffer

    async def start(self):
        """Listen (OSError if the port cannot be had)."""
        if self.tls is None:
            self.server = await asyncio.start_server(self._client, self.host, self.port)
        else:  # (MicroPython 1.22 and later: each accepted socket goes through tls.wrap_socket)
            self.server = await asyncio.start_server(self._client, self.host, self.port, ssl=self.tls)

    # A client's two tasks end by themselves whatever runs out of heap: a MemoryError that left
    # one would be printed by asyncio (a board's console) instead of the broker's log, and could
    # leave its socket open. So a MemoryError anywhere in them hangs up (PortConnection.dropped).

    async def _client(self, reader, writer):
        if MICROPYTHON:
            _no_delay(writer)
        client = reader_task = None
        host, port = "?", 0
        try:
            host, port = peer_address(writer.get_extra_info("peername"))
            if self.runtime.monitor.measures:
                self.runtime.monitor.watch()  # fresh figures, so a client that does not fit is refused with 530
            client = _Client(self, reader, writer, host, port)
            reader_task = asyncio.create_task(client.read_loop())
            self.clients.append(client)
            self.log("debug", "%s: accepted" % client.conn.name)
        except MemoryError:
            # Not even room for this client's state, so no AMQP to speak yet: hang up. (Once
            # it runs, a lack of memory closes a connection with 506: see _Client.read_loop.)
            if reader_task is not None:
                reader_task.cancel()
            if client is not None:
                if client in self.clients:
                    self.clients.remove(client)
                client.conn.dropped()  # (it says so in the log)
            else:
                say_dropped(self.log, host, port)
            await close_writer(writer)
            return
        try:
            await client.write_loop()  # returns once the connection is closed and flushed
        finally:
            reader_task.cancel()
            self.clients.remove(client)
            if not client.conn.closed:
                try:
                    client.conn.lost()
                except MemoryError:  # (closed all the same, as PortConnection.dropped says)
                    gc.collect()

    def close(self):
        """Accept no more clients (the runtime's shutdown: then the grace, then abort())."""
        if self.server is not None:
            self.server.close()

    async def abort(self):
        """Hang up on the clients still here (the end of a shutdown's grace time); wait until
        the listening socket is closed."""
        for client in list(self.clients):
            await client.abort()
        if self.server is not None:
            await self.server.wait_closed()


class _Client:
    def __init__(self, listener, reader, writer, host, port):
        self.listener = listener
        self.reader = reader
        self.writer = writer
        self.output = asyncio.Event()  # the writer has something to do: output, or the end
        self.ready = asyncio.Event()  # the reader may go on: reading resumed, or output caught up
        # The peer is made here, not in the accepting task, whose frame lives as long as the
        # client: held by the greeting alone, it is garbage once the header is read. The
        # connection comes last: nothing runs out of memory after it is made.
        peer = {"address": host, "port": port, "transport": "tcp"}
        if listener.tls is not None:
            # Over TLS, and nothing more known: MicroPython's TLS socket shows no certificate,
            # so EXTERNAL, which needs one, is not offered (amqp091/handshake.py).
            peer["tls"] = {}
        self.greeting = (peer, b"")  # until the protocol header is known (FrontEnds.first_octets)
        wake = self._wake
        self.conn = conn = listener.front.open(peer)
        conn.wake = wake

    def attach(self, conn):
        """Serve this connection (the one made at accept, or the one its header chose)."""
        self.conn = conn
        conn.wake = self._wake

    def _wake(self):
        self.output.set()
        self.ready.set()

    async def abort(self):
        """Hang up without waiting for the client (the end of a shutdown's grace time)."""
        self.conn.lost()
        self.output.set()
        await close_writer(self.writer)

    # Ctrl-C on MicroPython (no signal module) raises KeyboardInterrupt in whatever runs at that
    # moment. In a client's task it would end the task, and the client would lose the 320
    # CONNECTION_FORCED a shutdown owes it: the task asks for the broker's stop
    # (runtime.interrupt) instead and goes on.

    async def read_loop(self):
        monitor = self.listener.runtime.monitor
        try:
            while not self.conn.closed:
                try:
                    if not await self._read_some(monitor):
                        break
                except KeyboardInterrupt:
                    # Raised amid a read or its parsing: those bytes are gone, and what follows
                    # no longer lines up with a frame. The broker stops now; this client still
                    # gets its 320 from the writer, and its answer is not waited for.
                    interrupted(self.listener.runtime.interrupt)
                    break
        except asyncio.CancelledError:
            raise
        except MemoryError:
            self.conn.out_of_memory()  # (closed whatever else runs out: PortConnection.dropped)
        except Exception as e:  # a reset socket, or a bug: either way this client is done
            self._failed(e, "reading")
        self.output.set()

    def _failed(self, e, doing):
        """The end of a client whose reading or writing raised e: a socket's error (a reset, a
        TLS handshake refused) said at debug or warning, a bug at error. (Its own MemoryError is
        caught here, not in the loops: a level of try nested in a loop's handler took 32 B more of
        every client's heap on a board, its frame living as long as the client.)"""
        conn = self.conn
        try:
            if (
                isinstance(e, OSError)
                and doing == "reading"
                and self.greeting is not None
                and self.listener.tls is not None
            ):
                # nothing read yet: its TLS handshake failed (a certificate refused, not TLS...)
                self.listener.log("warning", "%s: TLS handshake failed: %r" % (conn.name, e))
            elif isinstance(e, OSError):
                self.listener.log("debug", "%s: socket error while %s: %r" % (conn.name, doing, e))
            else:
                self.listener.log("error", "%s: port error: %r" % (conn.name, e), e)
            conn.lost()
        except MemoryError:
            conn.dropped()

    async def _read_some(self, monitor):
        """Wait for and feed one read; False at the end of the stream."""
        if not self.conn.reading():
            # Held back by the broker, or the client does not read what we send:
            # either way, stop reading what it sends until that changes.
            self.ready.clear()
            self.output.set()
            await self.ready.wait()
            return True
        data = await self._read()
        if data is None:
            return True
        self.listener.front.received(self, data)
        if not data:
            return False
        if monitor.measures:
            monitor.fed(len(data))  # a burst of publishes can outrun the tick's sampling
        return True

    async def _read(self):
        """Bytes from the socket (b"" at the end, None if woken without data)."""
        # (no locals: this frame waits as long as the client is idle, and each costs heap)
        if self.listener.read_buffer is None:
            return await self.reader.read(self.listener.read_size)
        n = await self.reader.readinto(self.listener.read_buffer)  # shared by every client (MicroPython)
        if n is None:  # woken without data (EAGAIN)
            return None
        return memoryview(self.listener.read_buffer)[:n]  # the core copies what it keeps

    async def write_loop(self):
        try:
            while True:
                try:
                    await self.output.wait()
                    self.output.clear()
                    await self._flush()
                except KeyboardInterrupt:
                    interrupted(self.listener.runtime.interrupt)
                    self._wake()  # look again at what is left to write
                    continue
                self.ready.set()
                if self.conn.closed:
                    break
        except MemoryError:
            self.conn.dropped()  # not even room to say why; the client sees the socket close
        except Exception as e:  # a reset socket, or a bug
            self._failed(e, "writing")
        finally:
            self.ready.set()
            await close_writer(self.writer)

    async def _flush(self):
        """Write everything the connection has produced."""
        conn = self.conn
        writer = self.writer
        while True:
            if MICROPYTHON:
                parts = conn.take_parts()  # no join: one large buffer fragments a small heap
                if not parts:
                    return
                for part in parts:
                    writer.write(part)
            else:
                data = conn.take_output()
                if not data:
                    return
                writer.write(data)
            await writer.drain()


def say_dropped(log, host, port):
    """The line of a client hung up on for want of memory before its connection was made (the
    line PortConnection.dropped writes for one that was), if even that fits."""
    try:
        log("warning", "%s:%s: out of memory, connection dropped" % (host, port))
    except MemoryError:
        gc.collect()


async def close_writer(writer):
    for _ in range(2):  # (a second time after a collection, if the first ran out of heap)
        try:
            writer.close()
            if MICROPYTHON:
                # MicroPython's StreamWriter.close() does nothing: the socket is closed by
                # wait_closed() (at once, without waiting). CPython's close() closes the
                # transport once its buffer is flushed; waiting for that could hang on a
                # client that does not read, so it is not awaited there.
                await writer.wait_closed()
            return
        except OSError:
            return
        except MemoryError:  # (calling wait_closed makes its generator: that can be what fails)
            gc.collect()
