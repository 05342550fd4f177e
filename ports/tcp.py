"""The TCP port: an asyncio server that drives the sans-IO core.

The same code runs on CPython's asyncio and MicroPython's asyncio, so it uses
only what both have: start_server, StreamReader.read, StreamWriter.write/drain,
Event, create_task, sleep_ms/sleep.

Per client there are two tasks: a reader that feeds bytes to the connection,
and a writer that sends what the connection produced. Only the writer writes,
because MicroPython cannot have two tasks waiting to write on one socket. The
core calls `conn.wake` whenever output appears (from this client's input or
from another client's publish), which wakes both tasks.
"""

import asyncio
import sys

from ..amqp091.connection import Connection
from .clock import Clock, sleep_ms
from .interrupt import interrupted

MICROPYTHON = sys.implementation.name == "micropython"
# CPython's StreamReader.read(n) returns just what arrived. MicroPython's allocates n+1 bytes for
# every read, which soon fragments a small heap (a 2 MB unix heap fails within a few hundred
# reads of 64 KiB), so there the port reads into one buffer it keeps and copies what arrived.
# Its size comes from the board profile (READ_SIZE).
TICK_MS = 200


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


class TcpServer:
    def __init__(self, broker, host="0.0.0.0", port=5672, log=None, read_size=65536, monitor=None, on_interrupt=None):
        self.broker = broker
        # Ctrl-C on MicroPython (no signal module) raises KeyboardInterrupt in whatever runs at
        # that moment. In a client's task it would end the task, and the client would lose the
        # 320 CONNECTION_FORCED a shutdown owes it: the task calls on_interrupt (the broker's
        # stop) instead and goes on.
        self.on_interrupt = on_interrupt
        self.host = host
        self.port = port
        self.log = log or broker.log
        self.clock = Clock()
        self.server = None
        self.clients = []
        self._stopping = False
        self.read_size = read_size
        self.read_buffer = bytearray(read_size) if MICROPYTHON else None
        self.monitor = monitor  # sampled every tick: heap watch and stats (ports/heap.py)

    async def start(self):
        self.server = await asyncio.start_server(self._client, self.host, self.port)
        self._ticker = asyncio.create_task(self._tick_loop())
        self.log("info", "listening for AMQP 0-9-1 on %s:%d" % (self.host, self.port))

    async def _tick_loop(self):
        broker = self.broker
        clock = self.clock
        while not self._stopping:
            try:
                now = clock.now_ms()
                broker.tick(now, clock.wall_seconds())
                if self.monitor is not None:
                    self.monitor.sample(now)
                await sleep_ms(TICK_MS)
            except KeyboardInterrupt:
                interrupted(self.on_interrupt)

    async def _client(self, reader, writer):
        host, port = peer_address(writer.get_extra_info("peername"))
        broker = self.broker
        broker.now = self.clock.now_ms()
        if MICROPYTHON:
            _no_delay(writer)
        if self.monitor is not None and self.monitor.measures:
            self.monitor.watch()  # fresh figures, so a client that does not fit is refused with 530
        conn = None
        try:
            conn = Connection(broker, {"address": host, "port": port, "transport": "tcp"})
            client = _Client(conn, reader, writer, self.read_size, self.read_buffer, self.on_interrupt)
            reader_task = asyncio.create_task(client.read_loop(self.log, self.monitor))
        except MemoryError:
            # Not even room for this client's state, so no AMQP to speak yet: hang up. (Once
            # it runs, a lack of memory closes a connection with 506: see _Client.read_loop.)
            self.log("warning", "%s:%s: out of memory, connection dropped" % (host, port))
            if conn is not None:
                conn.lost()
            await close_writer(writer)
            return
        self.clients.append(client)
        self.log("debug", "%s: accepted" % conn.name)
        try:
            await client.write_loop(self.log)  # returns once the connection is closed and flushed
        finally:
            reader_task.cancel()
            self.clients.remove(client)
            if not conn.closed:
                conn.lost()

    async def stop(self, grace_ms=2000):
        """Close every connection with 320 CONNECTION_FORCED, then stop listening."""
        self._stopping = True
        if self.server is not None:
            self.server.close()
        self.broker.shutdown()
        waited = 0
        while self.clients and waited < grace_ms:
            await sleep_ms(50)
            waited += 50
            self.broker.tick(self.clock.now_ms(), self.clock.wall_seconds())
        for client in list(self.clients):
            await client.abort()
        if self.server is not None:
            await self.server.wait_closed()
        self.log("info", "stopped")


class _Client:
    def __init__(self, conn, reader, writer, read_size, read_buffer=None, on_interrupt=None):
        self.conn = conn
        self.on_interrupt = on_interrupt
        self.read_size = read_size
        # Shared by every client of the server: safe, because what readinto() put there is
        # copied out before this task awaits again.
        self.read_buffer = read_buffer
        self.reader = reader
        self.writer = writer
        self.output = asyncio.Event()  # the writer has something to do: output, or the end
        self.ready = asyncio.Event()  # the reader may go on: reading resumed, or output caught up
        conn.wake = self._wake

    def _wake(self):
        self.output.set()
        self.ready.set()

    async def abort(self):
        """Hang up without waiting for the client (the end of a shutdown's grace time)."""
        self.conn.lost()
        self.output.set()
        await close_writer(self.writer)

    async def read_loop(self, log, monitor=None):
        conn = self.conn
        try:
            while not conn.closed:
                try:
                    if not await self._read_some(monitor):
                        break
                except KeyboardInterrupt:
                    # Raised amid a read or its parsing: those bytes are gone, and what follows
                    # no longer lines up with a frame. The broker stops now; this client still
                    # gets its 320 from the writer, and its answer is not waited for.
                    interrupted(self.on_interrupt)
                    break
        except asyncio.CancelledError:
            raise
        except MemoryError:
            conn.out_of_memory()
        except Exception as e:  # a reset socket, or a bug: either way this client is done
            if isinstance(e, OSError):
                log("debug", "%s: socket error while reading: %r" % (conn.name, e))
            else:
                log("error", "%s: port error: %r" % (conn.name, e), e)
            conn.lost()
        self.output.set()

    async def _read_some(self, monitor):
        """Wait for and feed one read; False at the end of the stream."""
        conn = self.conn
        if not conn.want_read or conn.saturated():
            # Held back by the broker, or the client does not read what we send:
            # either way, stop reading what it sends until that changes.
            self.ready.clear()
            self.output.set()
            await self.ready.wait()
            return True
        data = await self._read()
        if data is None:
            return True
        if not data:
            conn.eof()
            return False
        conn.feed(data)
        if monitor is not None and monitor.measures:
            monitor.fed(len(data))  # a burst of publishes can outrun the tick's sampling
        return True

    async def _read(self):
        """Bytes from the socket (b"" at the end, None if woken without data)."""
        if self.read_buffer is None:
            return await self.reader.read(self.read_size)
        n = await self.reader.readinto(self.read_buffer)
        if n is None:  # woken without data (EAGAIN)
            return None
        return memoryview(self.read_buffer)[:n]  # the core copies what it keeps

    async def write_loop(self, log):
        conn = self.conn
        try:
            while True:
                try:
                    await self.output.wait()
                    self.output.clear()
                    await self._flush()
                except KeyboardInterrupt:
                    interrupted(self.on_interrupt)
                    self._wake()  # look again at what is left to write
                    continue
                self.ready.set()
                if conn.closed:
                    break
        except OSError as e:
            log("debug", "%s: socket error while writing: %r" % (conn.name, e))
            conn.lost()
        except MemoryError:
            conn.dropped()  # not even room to say why; the client sees the socket close
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


async def close_writer(writer):
    try:
        writer.close()
        if MICROPYTHON:
            # MicroPython's StreamWriter.close() does nothing: the socket is closed by
            # wait_closed() (at once, without waiting). CPython's close() closes the
            # transport once its buffer is flushed; waiting for that could hang on a
            # client that does not read, so it is not awaited there.
            await writer.wait_closed()
    except OSError:
        pass
