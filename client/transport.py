"""Byte transports for hutch.client: TCP, and a serial line through hutch's link layer (TLS:
client/tls.py, a TCP transport in TLS).

A transport has open(timeout_ms), readinto(buf, timeout_ms) -> bytes read (0 when
nothing came in time; OSError when the peer is gone), write(data) (all of it, or
OSError) and close(). Client.reconnect() calls close() then open() again.
"""

import errno
import select
import socket

from .clock import sleep_ms, ticks_diff, ticks_ms

_AGAIN = (errno.EAGAIN, getattr(errno, "EWOULDBLOCK", errno.EAGAIN))


class Tcp:
    """A non-blocking socket waited on with select.poll (MicroPython and CPython)."""

    def __init__(self, host, port=5672):
        self.host = host
        self.port = port
        self.sock = None

    def open(self, timeout_ms):
        self.close()
        self.timeout_ms = timeout_ms
        ai = socket.getaddrinfo(self.host, self.port, 0, socket.SOCK_STREAM)[0]
        s = socket.socket(ai[0], socket.SOCK_STREAM)
        try:
            s.settimeout(timeout_ms / 1000)
            s.connect(ai[-1])
        except Exception:
            s.close()  # a node retrying every few seconds must not run out of sockets
            raise
        try:
            s.setsockopt(6, 1, 1)  # IPPROTO_TCP, TCP_NODELAY: frames go out at once
        except Exception:
            pass
        try:
            s = self._wrap(s)  # (TLS: its handshake, within the timeout)
        except Exception:
            s.close()
            raise
        self.sock = s
        s.setblocking(False)
        # CPython sockets have recv_into, MicroPython's readinto (None when nothing is there)
        self._recv = getattr(s, "recv_into", None) or s.readinto
        self.poll = select.poll()
        self.poll.register(s, select.POLLIN)

    def _wrap(self, sock):
        """The socket the transport speaks through, once connected (client/tls.py: in TLS)."""
        return sock

    def _ready(self, timeout_ms):
        return self.poll.poll(timeout_ms)

    def _again(self, e):
        """Whether an OSError of a non-blocking socket means "not now" (try again)."""
        return e.args[0] in _AGAIN

    def readinto(self, buf, timeout_ms):
        if not self._ready(timeout_ms):
            return 0
        try:
            n = self._recv(buf)
        except OSError as e:
            if self._again(e):
                return 0
            raise
        if n is None:
            return 0
        if not n:
            raise OSError(errno.ECONNRESET, "connection closed by the broker")
        return n

    def write(self, data):
        mv = data
        while len(mv):
            try:
                n = self.sock.send(mv)
            except OSError as e:
                if not self._again(e):
                    raise
                n = 0
            if n == len(mv):
                return
            if n:
                mv = memoryview(mv)[n:]  # only a partial send allocates
            else:
                self.poll.modify(self.sock, select.POLLOUT)
                ready = self.poll.poll(self.timeout_ms)
                self.poll.modify(self.sock, select.POLLIN)
                if not ready:
                    raise OSError(errno.ETIMEDOUT, "send timed out")

    def close(self):
        if self.sock:
            self.sock.close()
            self.sock = None


class Serial:
    """AMQP over a serial line through hutch's link layer (hutch/codec/link.py: framing,
    checksums, retransmission, peer-restart detection). Needs hutch/codec/link.py on the node.

    `port` is a machine.UART (e.g. UART(1, 115200, tx=17, rx=16, timeout=0)), or any object
    with write(data) and a readinto(buf) that does not block (returns None or 0 when nothing
    came; with any(), only what any() reports is read). Pollable ports are waited on with
    select.poll, others checked every millisecond.

    open() starts a new link session, so the broker drops whatever AMQP connection the
    previous session carried; a restart of the broker's end raises OSError (reconnect()).
    """

    def __init__(self, port, mtu=240, window=4, retransmit_ms=200):
        self.port = port
        self.mtu = mtu
        self.window = window
        self.retransmit_ms = retransmit_ms
        self.link = None
        self._buf = bytearray(256)
        self._rest = b""
        self._at = 0
        try:
            self.poll = select.poll()
            self.poll.register(port, select.POLLIN)
        except Exception:
            self.poll = None

    def open(self, timeout_ms):
        from ..codec.link import Link

        self.timeout_ms = timeout_ms
        self._rest = b""
        self.link = Link(ticks_ms(), mtu=self.mtu, window=self.window, retransmit_ms=self.retransmit_ms)
        start = ticks_ms()
        while not self.link.connected:
            if ticks_diff(ticks_ms(), start) > timeout_ms:
                self.link = None
                raise OSError(errno.ETIMEDOUT, "no answer on the serial link")
            self._pump(20)
        self.link.clear_restart()

    def _pump(self, ms):
        """Wait up to ms for the line, then move bytes: line -> link -> line (acks, resends)."""
        if self.poll:
            self.poll.poll(ms)
        elif ms:
            sleep_ms(1)
        port = self.port
        link = self.link
        buf = self._buf
        while True:
            if hasattr(port, "any"):
                n = min(port.any(), len(buf))
                n = n and port.readinto(memoryview(buf)[:n])
            else:
                n = port.readinto(buf)
            if not n:
                break
            link.receive(buf[:n])
        link.tick(ticks_ms())
        out = link.take_output()
        while out:
            n = port.write(out)
            out = out[n:] if n is not None and n < len(out) else b""

    def readinto(self, buf, timeout_ms):
        start = ticks_ms()
        while self._at == len(self._rest):
            self._check()
            self._rest = self.link.take_data()
            self._at = 0
            if self._rest:
                break
            left = timeout_ms - ticks_diff(ticks_ms(), start)
            if left <= 0:
                return 0
            self._pump(min(left, 20))
        n = min(len(buf), len(self._rest) - self._at)
        buf[:n] = self._rest[self._at : self._at + n]
        self._at += n
        return n

    def write(self, data):
        mv = memoryview(data)
        start = ticks_ms()
        while True:
            self._check()
            n = self.link.send(mv)
            mv = mv[n:]
            self._pump(5 if len(mv) else 0)
            if not len(mv):
                return
            if ticks_diff(ticks_ms(), start) > self.timeout_ms:
                raise OSError(errno.ETIMEDOUT, "serial link send timed out")

    def _check(self):
        if self.link is None:
            raise OSError(errno.ENOTCONN)
        if self.link.peer_restarted:
            raise OSError(errno.ECONNRESET, "the broker's end of the serial link restarted")

    def close(self):
        self.link = None
