"""The serial port: AMQP 0-9-1 over a UART, through the link layer of codec/link.py.

    server = SerialServer(runtime, front, "/dev/ttyUSB0", 115200)
    await server.start()    # opens the port (and keeps trying if it cannot)
    ...
    await server.stop()     # closes the AMQP connection (320), then the port

One serial line carries one AMQP connection at a time:

    UART -> link.receive -> link.take_data -> conn.feed
    conn.take_output -> link.send -> link.take_output -> UART

runtime is the broker's (server/runtime.py: its clock, log, stop on Ctrl-C), which ticks the
broker; front is the connection factory a listener gets too (server/frontends.py FrontEnds):
open(peer) makes each connection, first_octets() hands its protocol header to the connection
of its front end.

A line has no connect or close of its own, so: an AMQP connection starts at
the protocol header ("AMQP..."); bytes before it (the tail of a connection
that has just closed) are skipped. When the AMQP connection closes, the next
header starts a fresh one on the same link. When the link sees that the peer
restarted (a new session in its HELLO), the old connection is dropped as if
its socket had closed (conn.lost()), and the next header starts a fresh one.

The same asyncio code runs on CPython and MicroPython; only the byte stream
differs (ports/uart.py opens the port, `_stream` reads it): on CPython pyserial
opens and configures the port and the event loop watches its file descriptor
(no polling); on MicroPython a board's machine.UART, or on the unix port a tty
path, is read through asyncio.StreamReader.
"""

import os
import sys

try:
    import asyncio
except ImportError:  # pragma: no cover - every supported Python has it
    asyncio = None

from ..codec.link import Link
from .clock import sleep_ms
from .interrupt import guarded
from .uart import device_name, open_serial

MICROPYTHON = sys.implementation.name == "micropython"
READ_SIZE = 256 if MICROPYTHON else 4096
TICK_MS = 50  # link timers (retransmission after 200 ms, HELLO retries)
IDLE_TICK_MS = 250  # when nothing is in flight
RETRY_MS = 2000  # reopening a port that is missing or failed
STOP_GRACE_MS = 1000  # waiting for the peer's close-ok when the broker stops


class _FdStream:
    """CPython: a pyserial port whose non-blocking file descriptor the event loop watches."""

    def __init__(self, port):
        self.port = port
        self.fd = port.fileno()
        # MicroPython's asyncio has no get_running_loop(), and the board's type check reads this
        # file against it: looked up by name, as only CPython builds an _FdStream (see _stream).
        self.loop = getattr(asyncio, "get_running_loop")()
        self._waiting = {}  # "read"/"write": the future a task waits on
        self.closed = False

    async def _ready(self, kind):
        if self.closed:
            raise OSError("closed")
        future = self.loop.create_future()
        self._waiting[kind] = future

        def ready():
            if not future.done():
                future.set_result(None)

        if kind == "read":
            self.loop.add_reader(self.fd, ready)
        else:
            self.loop.add_writer(self.fd, ready)
        try:
            await future
        finally:
            self._waiting.pop(kind, None)
            if not self.closed:  # close() has unregistered it: the number may be another file's now
                if kind == "read":
                    self.loop.remove_reader(self.fd)
                else:
                    self.loop.remove_writer(self.fd)

    async def read(self):
        """Bytes that arrived (waits for some); OSError when the device went away."""
        woken = False
        while True:
            try:
                data = os.read(self.fd, READ_SIZE)
            except BlockingIOError:
                data = None
            if data:
                return data
            # pyserial sets VMIN=0: an empty read is "nothing yet", unless the loop just said the
            # device was readable, which is how a tty that hung up (an unplugged adapter) reads.
            if data == b"" and woken:
                raise OSError("the device hung up")
            await self._ready("read")
            woken = True

    async def write(self, data):
        view = memoryview(data)
        while len(view):
            try:
                n = os.write(self.fd, view)
            except BlockingIOError:
                n = 0
            view = view[n:]
            if len(view):
                await self._ready("write")

    def close(self):
        self.closed = True
        self.loop.remove_reader(self.fd)
        self.loop.remove_writer(self.fd)
        for future in list(self._waiting.values()):
            if not future.done():
                future.set_exception(OSError("closed"))
        self.port.close()


class _PollStream:
    """MicroPython: a machine.UART or a tty file, through asyncio's stream classes."""

    def __init__(self, port):
        self.port = port
        self.reader = asyncio.StreamReader(port)
        self.writer = asyncio.StreamWriter(port, {})

    async def read(self):
        while True:
            data = await self.reader.read(READ_SIZE)
            if data:
                return data
            # A UART with timeout=0 answers None, a tty with min 0 answers b"": nothing yet.
            await sleep_ms(5)

    async def write(self, data):
        self.writer.write(data)
        await self.writer.drain()

    def close(self):
        try:
            self.port.close()
        except (AttributeError, OSError):
            pass  # machine.UART has deinit() rather than close() on some ports
        if hasattr(self.port, "deinit"):
            self.port.deinit()


def _stream(port):
    return _PollStream(port) if MICROPYTHON else _FdStream(port)


class SerialServer:
    def __init__(self, runtime, front, device, baudrate=115200):
        self.front = front
        self.on_interrupt = runtime.interrupt  # Ctrl-C on a board: the broker's stop (ports/interrupt.py)
        self.device = device
        self.name = device_name(device)
        if isinstance(device, dict):
            baudrate = device.get("baudrate", baudrate)
        self.baudrate = baudrate
        self.log = runtime.log
        self.clock = runtime.clock  # the link's timers
        self.link = None
        self.conn = None
        self.greeting = None  # (peer, octets kept) until the protocol header is known
        self.stream = None
        self._parts = []  # the connection's output the link has not taken yet
        self._part_pos = 0
        self._header = b""  # bytes that may begin a protocol header
        self._skipped = 0
        self._event = None
        self._tasks = []
        self._stopping = False
        self._open_failed = False

    # ------------------------------------------------------------ life cycle

    async def start(self):
        self._event = asyncio.Event()
        self.link = Link(self.clock.now_ms(), os.urandom(4))
        self._open()
        loops = (self._read_loop(), self._write_loop(), self._tick_loop())
        self._tasks = [asyncio.create_task(guarded(loop, self.on_interrupt)) for loop in loops]

    async def stop(self, grace_ms=STOP_GRACE_MS):
        """Close the AMQP connection with 320 CONNECTION_FORCED, give the peer a moment, close the port."""
        self._stopping = True
        conn = self.conn
        if conn is not None and not conn.closed:
            conn.close()
            self._event.set()
        waited = 0
        while self.link.connected and self.stream is not None and waited < grace_ms:
            if (self.conn is None or self.conn.closed) and not self._parts and not self.link.pending():
                break
            await sleep_ms(20)
            waited += 20
        if self.conn is not None and not self.conn.closed:
            self.conn.lost()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        self._close_port()
        self.log("info", "serial %s: stopped; link %s" % (self.name, self._stats()))

    def _stats(self):
        s = self.link.stats
        return "%d frames sent, %d received, %d CRC errors, %d resyncs, %d retransmits, %d peer restarts" % (
            s["frames_sent"],
            s["frames_received"],
            s["crc_errors"],
            s["resyncs"],
            s["retransmits"],
            s["restarts"],
        )

    def _open(self):
        try:
            port = open_serial(self.device, self.baudrate)
        except Exception as e:  # OSError, or ValueError for a baud rate the port refuses
            if not self._open_failed:
                self.log(
                    "warning", "serial %s: cannot open: %s (retrying every %d s)" % (self.name, e, RETRY_MS // 1000)
                )
                self._open_failed = True
            return False
        self.stream = _stream(port)
        self._open_failed = False
        self.log("info", "AMQP 0-9-1 over serial on %s at %d baud" % (self.name, self.baudrate))
        return True

    def _close_port(self):
        stream = self.stream
        self.stream = None
        if stream is not None:
            try:
                stream.close()
            except Exception:
                pass

    def _port_failed(self, e):
        if self.stream is not None:
            self.log("warning", "serial %s: %s; reopening" % (self.name, e))
            self._close_port()

    # ------------------------------------------------------------ tasks

    async def _read_loop(self):
        while not self._stopping:
            if self.stream is None and not self._open():
                await sleep_ms(RETRY_MS)
                continue
            try:
                data = await self.stream.read()
            except OSError as e:
                self._port_failed(e)
                await sleep_ms(RETRY_MS)
                continue
            self.link.receive(data)
            self._event.set()

    async def _tick_loop(self):
        link = self.link
        while True:
            self._event.set()
            # retransmission needs a fine tick; HELLO retries (every 0.2-2 s) do not
            await sleep_ms(TICK_MS if link.pending() else IDLE_TICK_MS)

    async def _write_loop(self):
        event = self._event
        while True:
            await event.wait()
            event.clear()
            try:
                self._pump()
            except Exception as e:  # a bug here must not end the serial port
                self.log("error", "serial %s: port error: %r" % (self.name, e), e)
                self._drop_conn()
            if self.stream is None:
                continue  # nothing can be written: the link retransmits once the port is back
            data = self.link.take_output()
            if data:
                try:
                    await self.stream.write(data)
                except OSError as e:
                    self._port_failed(e)

    # ------------------------------------------------------------ bytes between link and core

    def _pump(self):
        link = self.link
        link.tick(self.clock.now_ms())
        if link.peer_restarted:
            link.clear_restart()
            if self.conn is not None:
                self.log("info", "serial %s: the peer restarted; its AMQP connection is gone" % self.name)
            self._drop_conn()
        self._to_link()
        conn = self.conn
        if conn is None or conn.reading():
            data = link.take_data()
            if data:
                self._feed(data)
                self._to_link()

    def _drop_conn(self):
        conn = self.conn
        self.conn = None
        self.greeting = None
        if conn is not None and not conn.closed:
            conn.lost()
        self._parts = []
        self._part_pos = 0
        self._header = b""

    def _to_link(self):
        link = self.link
        while True:
            parts = self._parts
            while parts:
                part = parts[0]
                self._part_pos += link.send(memoryview(part)[self._part_pos :])
                if self._part_pos < len(part):
                    return  # the link is full; the next round goes on as it drains
                parts.pop(0)
                self._part_pos = 0
            conn = self.conn
            if conn is None:
                return
            # the buffers as the core built them: no joining into one large buffer on a small heap
            if hasattr(conn, "take_parts"):
                parts = conn.take_parts()
            else:
                parts = conn.take_output()
                parts = [parts] if parts else None
            if not parts:
                if conn.closed:
                    self.conn = None
                    self.log(
                        "debug", "serial %s: AMQP connection closed; the next protocol header opens another" % self.name
                    )
                return
            self._parts = list(parts)

    def _feed(self, data):
        if self.conn is None:
            data = self._find_header(data)
            if not data or self._stopping:
                return
            peer = {"transport": "serial", "address": self.name, "port": 0}
            self.attach(self.front.open(peer))
            self.greeting = (peer, b"")
            self.log("debug", "serial %s: AMQP connection starting" % self.name)
        self.front.received(self, data)

    def attach(self, conn):
        """Serve this connection (the one the header started, or the one it chose)."""
        self.conn = conn
        conn.wake = self._event.set

    def _find_header(self, data):
        """`data` from the first "AMQP" on, or b"" (keeping a possible start of one) if none yet."""
        data = self._header + data
        self._header = b""
        at = data.find(b"AMQP")
        if at >= 0:
            if at or self._skipped:
                self.log(
                    "debug", "serial %s: skipped %d bytes before a protocol header" % (self.name, self._skipped + at)
                )
            self._skipped = 0
            return data[at:]
        keep = 3
        while keep and not (len(data) >= keep and data[len(data) - keep :] == b"AMQ"[:keep]):
            keep -= 1
        self._skipped += len(data) - keep
        self._header = data[len(data) - keep :] if keep else b""
        return b""
