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

from .clock import Clock

MICROPYTHON = sys.implementation.name == "micropython"
# CPython's StreamReader.read(n) returns just what arrived. MicroPython's allocates n+1 bytes for
# every read, which soon fragments a small heap (a 2 MB unix heap fails within a few hundred
# reads of 64 KiB), so there the port reads into one buffer it keeps and copies what arrived.
READ_SIZE = 16384 if MICROPYTHON else 65536
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


def _sleep_ms(ms):
    if hasattr(asyncio, "sleep_ms"):
        return asyncio.sleep_ms(ms)
    return asyncio.sleep(ms / 1000)


class TcpServer:
    def __init__(self, broker, host="0.0.0.0", port=5672, log=None):
        self.broker = broker
        self.host = host
        self.port = port
        self.log = log or broker.log
        self.clock = Clock()
        self.server = None
        self.clients = []
        self._stopping = False
        self.read_buffer = bytearray(READ_SIZE) if MICROPYTHON else None

    async def start(self):
        self.server = await asyncio.start_server(self._client, self.host, self.port)
        self._ticker = asyncio.create_task(self._tick_loop())
        self.log("info", "listening for AMQP 0-9-1 on %s:%d" % (self.host, self.port))

    async def _tick_loop(self):
        broker = self.broker
        clock = self.clock
        while not self._stopping:
            broker.tick(clock.now_ms(), clock.wall_seconds())
            await _sleep_ms(TICK_MS)

    async def _client(self, reader, writer):
        host, port = peer_address(writer.get_extra_info("peername"))
        broker = self.broker
        broker.now = self.clock.now_ms()
        conn = broker.connect({"address": host, "port": port, "transport": "tcp"})
        client = _Client(conn, reader, writer, self.read_buffer)
        self.clients.append(client)
        self.log("debug", "%s: accepted" % conn.name)
        reader_task = asyncio.create_task(self._read(client))
        try:
            await client.write_loop()  # returns once the connection is closed and flushed
        finally:
            reader_task.cancel()
            self.clients.remove(client)
            if not conn.closed:
                conn.lost()

    async def _read(self, client):
        try:
            await client.read_loop()
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a reset socket, or a bug: either way this client is done
            if not isinstance(e, OSError):
                self.log("error", "%s: port error: %r" % (client.conn.name, e), e)
            client.conn.lost()
        client.output.set()

    async def stop(self, grace_ms=2000):
        """Close every connection with 320 CONNECTION_FORCED, then stop listening."""
        self._stopping = True
        if self.server is not None:
            self.server.close()
        self.broker.shutdown()
        waited = 0
        while self.clients and waited < grace_ms:
            await _sleep_ms(50)
            waited += 50
            self.broker.tick(self.clock.now_ms(), self.clock.wall_seconds())
        for client in list(self.clients):
            client.conn.lost()
            client.output.set()
            await client.close_socket()
        if self.server is not None:
            await self.server.wait_closed()
        self.log("info", "stopped")


class _Client:
    def __init__(self, conn, reader, writer, read_buffer=None):
        self.conn = conn
        # Shared by every client of the server: safe, because what readinto() put there is
        # copied out before this task awaits again.
        self.read_buffer = read_buffer
        self.reader = reader
        self.writer = writer
        self.output = asyncio.Event()   # the core has output, or closed
        self.resume = asyncio.Event()   # the core may want reading again
        self.caught_up = asyncio.Event()
        conn.wake = self._wake

    def _wake(self):
        self.output.set()
        self.resume.set()

    async def read_loop(self):
        conn = self.conn
        reader = self.reader
        while not conn.closed:
            if not conn.want_read:
                self.resume.clear()
                if not conn.want_read:
                    await self.resume.wait()
                continue
            if conn.saturated():
                # the client is not reading what we send; stop reading what it sends
                self.caught_up.clear()
                self.output.set()
                await self.caught_up.wait()
                continue
            if self.read_buffer is None:
                data = await reader.read(READ_SIZE)
            else:
                n = await reader.readinto(self.read_buffer)
                if n is None:  # woken without data (EAGAIN)
                    continue
                data = bytes(memoryview(self.read_buffer)[:n])
            if not data:
                conn.eof()
                break
            conn.feed(data)

    async def write_loop(self):
        conn = self.conn
        writer = self.writer
        try:
            while True:
                await self.output.wait()
                self.output.clear()
                data = conn.take_output()
                while data:
                    writer.write(data)
                    await writer.drain()
                    data = conn.take_output()
                self.caught_up.set()
                if conn.closed:
                    break
        except OSError:
            conn.lost()
        finally:
            self.caught_up.set()
            await self.close_socket()

    async def close_socket(self):
        try:
            self.writer.close()
            if MICROPYTHON:
                # MicroPython's StreamWriter.close() does nothing: the socket is closed by
                # wait_closed() (at once, without waiting). CPython's close() closes the
                # transport once its buffer is flushed; waiting for that could hang on a
                # client that does not read, so it is not awaited there.
                await self.writer.wait_closed()
        except OSError:
            pass
