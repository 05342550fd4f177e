"""A small reliable link layer for AMQP over a UART, sans-IO (no I/O, no clock).

    link = Link(now_ms, os.urandom(4))
    link.receive(data)          # bytes read from the UART, any chunking, garbage included
    n = link.send(data)         # queue bytes for reliable, in-order delivery; n may be < len(data)
    link.tick(now_ms)           # timers: call it often (every 10-50 ms) and before take_output()
    out = link.take_output()    # bytes to write to the UART now
    data = link.take_data()     # bytes the peer sent, in order, exactly once
    link.peer_restarted         # the peer rebooted: reset the upper layer, then clear_restart()
    link.connected              # the HELLO handshake with the current peer session is done

The wire format (README, "Serial link layer"): every frame is
0x00 COBS(type seq ack payload crc32) 0x00. COBS leaves no 0x00 inside a frame,
so whatever garbage the line delivers, the receiver is back in step at the
next 0x00. A frame whose CRC-32 fails is dropped whole: its bytes never reach
the upper layer. DATA frames are numbered modulo 256 and acknowledged
cumulatively (ack = the next sequence number expected); the sender keeps at
most `window` of them unacknowledged and resends them all (go-back-N) when
the oldest has waited retransmit_ms (doubling up to 2 s while nothing gets
through), or at once on a duplicate ACK that flags a gap (seq 1: the receiver
got a frame beyond the one it expects). HELLO carries this boot's random
session id: a HELLO or HELLO_ACK from a session other than the one we know
means the peer restarted, and both directions start again from sequence 0
with nothing in flight.

Check peer_restarted after receive() and before take_data(): what take_data()
returns after a restart belongs to the peer's new life only.

Runs unchanged on MicroPython: binascii.crc32, struct, no typing.
"""

import struct
from binascii import crc32

try:
    from micropython import const
except ImportError:

    def _const(x):
        return x

    const = _const  # assigned, not defined as `const`: MicroPython's signature differs (type check)

DATA = const(1)
ACK = const(2)
HELLO = const(3)
HELLO_ACK = const(4)

_OVERHEAD = const(7)  # type, seq, ack, crc32
_MAX_BACKOFF_MS = const(2000)
# A receiver takes DATA payloads up to max(its mtu, this), so ends need not agree on mtu.
_ACCEPT_PAYLOAD = const(1024)


def cobs_encode(data):
    """COBS: the bytes of `data` with every 0x00 removed (no 0x00 in the result)."""
    out = bytearray()
    n = len(data)
    pos = 0
    while True:
        zero = data.find(b"\x00", pos)
        end = n if zero < 0 else zero
        while end - pos >= 254:
            out.append(255)
            out += data[pos : pos + 254]
            pos += 254
        out.append(end - pos + 1)
        out += data[pos:end]
        if zero < 0:
            return out
        pos = zero + 1


def cobs_decode(data):
    """The bytes COBS encoded as `data`, or None if `data` is not valid COBS."""
    out = bytearray()
    n = len(data)
    pos = 0
    while pos < n:
        code = data[pos]
        end = pos + code
        if code == 0 or end > n:
            return None
        out += data[pos + 1 : end]
        pos = end
        if code != 255 and pos < n:
            out.append(0)
    return out


def _new_session(now_ms):
    try:
        import os

        return bytes(os.urandom(4))
    except (ImportError, AttributeError, OSError):
        pass
    try:
        import random

        return struct.pack("<I", random.getrandbits(32))
    except (ImportError, AttributeError):
        return struct.pack("<I", (now_ms * 2654435761 ^ id(now_ms)) & 0xFFFFFFFF)


class Link:
    def __init__(self, now_ms, session=None, mtu=240, window=4, retransmit_ms=200, buffer=None):
        if not 0 < window < 128:
            raise ValueError("window must be 1..127")
        if mtu < 1:
            raise ValueError("mtu must be positive")
        self.now = now_ms
        self.session = bytes(session) if session is not None else _new_session(now_ms)
        if len(self.session) != 4:
            raise ValueError("session must be 4 bytes")
        self.mtu = mtu
        self.window = window
        self.retransmit_ms = retransmit_ms
        # send(): bytes not yet framed; take_data(): bytes received not yet taken
        self.buffer = buffer if buffer is not None else max(2 * window * mtu, 1024)
        accept = mtu if mtu > _ACCEPT_PAYLOAD else _ACCEPT_PAYLOAD
        self._accept = accept
        # the longest frame on the wire: COBS adds one byte per 254, plus one
        self._max_encoded = accept + _OVERHEAD + (accept + _OVERHEAD) // 254 + 2
        self.stats = {
            "frames_sent": 0,
            "frames_received": 0,
            "crc_errors": 0,
            "retransmits": 0,
            "resyncs": 0,
            "restarts": 0,
            "bytes_in": 0,
            "bytes_out": 0,
            "duplicates": 0,
            "timeouts": 0,
            "rx_full": 0,
        }
        self.peer_session = None
        self.peer_restarted = False
        self._hello_acked = False
        self._hello_due = True
        self._hello_at = now_ms
        self._hello_wait = retransmit_ms
        self._answer = False  # a HELLO_ACK to send
        self._rx = bytearray()  # the frame being received (still COBS)
        self._skipping = False  # an overlong run: drop bytes until the next 0x00
        self._tx = bytearray()  # encoded frames not yet taken
        self._reset()

    def _reset(self):
        self._unsent = bytearray()
        self._unacked = []  # payloads of DATA frames in flight, oldest first
        self._base = 0  # sequence number of the oldest unacknowledged frame
        self._next = 0  # sequence number of the next new frame
        self._sent_at = self.now
        self._rto = self.retransmit_ms
        self._resend = False
        self._fast_done = False  # one fast retransmit per loss, until the acks move
        self._expected = 0  # next sequence number to deliver
        self._data = bytearray()
        self._ack_due = False
        self._nak = False  # ask the peer to go back at once (ACK with seq 1)
        self._starved = False  # a frame was dropped because take_data() lagged

    # ------------------------------------------------------------ state

    @property
    def connected(self):
        return self._hello_acked and self.peer_session is not None

    def clear_restart(self):
        self.peer_restarted = False

    def pending(self):
        """Bytes accepted by send() that the peer has not acknowledged yet (0: all delivered)."""
        n = len(self._unsent)
        for payload in self._unacked:
            n += len(payload)
        return n

    # ------------------------------------------------------------ upper layer

    def send(self, data):
        room = self.buffer - len(self._unsent)
        if room <= 0 or not data:
            return 0
        if len(data) > room:
            self._unsent += data[:room]
            return room
        self._unsent += data
        return len(data)

    def take_data(self):
        if not self._data:
            return b""
        data = bytes(self._data)
        self._data = bytearray()
        if self._starved:
            # we dropped frames for want of room: ask for them now instead of at the next timeout
            self._starved = False
            self._nak = True
        return data

    # ------------------------------------------------------------ time

    def tick(self, now_ms):
        if now_ms < self.now:
            # the clock went back (a raw ticks_ms() that wrapped): restart the timers from here
            self._sent_at = now_ms
            self._hello_at = now_ms
        self.now = now_ms
        if self._unacked and now_ms - self._sent_at >= self._rto:
            self._resend = True
            self.stats["timeouts"] += 1
            self._rto = min(self._rto * 2, _MAX_BACKOFF_MS)
            self._sent_at = now_ms
        if not self._hello_acked and now_ms >= self._hello_at:
            self._hello_due = True

    # ------------------------------------------------------------ bytes out

    def take_output(self):
        if self._hello_due:
            self._hello_due = False
            self._hello_at = self.now + self._hello_wait
            self._hello_wait = min(self._hello_wait * 2, _MAX_BACKOFF_MS)
            self._frame(HELLO, 0, self.session)
        if self._answer and self.peer_session is not None:  # always known when answering a HELLO
            self._answer = False
            self._frame(HELLO_ACK, 0, self.session + self.peer_session)
        if self.peer_session is not None:
            if self._nak:
                self._nak = False
                self._frame(ACK, 1)
            if self.connected:
                self._send_data()
            if self._ack_due:
                self._frame(ACK, 0)
        out = self._tx
        if not out:
            return b""
        self._tx = bytearray()
        self.stats["bytes_out"] += len(out)
        return bytes(out)

    def _send_data(self):
        unacked = self._unacked
        if self._resend:
            self._resend = False
            seq = self._base
            for payload in unacked:
                self._frame(DATA, seq, payload)
                seq = (seq + 1) & 0xFF
            self.stats["retransmits"] += len(unacked)
            self._sent_at = self.now
        while self._unsent and len(unacked) < self.window:
            payload = bytes(self._unsent[: self.mtu])
            self._unsent = self._unsent[self.mtu :]
            if not unacked:
                self._sent_at = self.now
            unacked.append(payload)
            self._frame(DATA, self._next, payload)
            self._next = (self._next + 1) & 0xFF

    def _frame(self, ftype, seq, payload=b""):
        if ftype == DATA or ftype == ACK:
            self._ack_due = False  # every DATA or ACK frame carries our cumulative ack
        head = bytes((ftype, seq, self._expected))
        crc = crc32(payload, crc32(head)) & 0xFFFFFFFF
        tx = self._tx
        tx.append(0)
        tx += cobs_encode(head + payload + struct.pack("<I", crc))
        tx.append(0)
        self.stats["frames_sent"] += 1

    # ------------------------------------------------------------ bytes in

    def receive(self, data):
        if not data:
            return
        if not isinstance(data, (bytes, bytearray)):
            data = bytes(data)
        self.stats["bytes_in"] += len(data)
        n = len(data)
        pos = 0
        while pos < n:
            zero = data.find(b"\x00", pos)
            end = n if zero < 0 else zero
            if end > pos and not self._skipping:
                if len(self._rx) + end - pos > self._max_encoded:
                    self._rx = bytearray()
                    self._skipping = True
                    self.stats["resyncs"] += 1
                else:
                    self._rx += data[pos:end]
            if zero < 0:
                return
            pos = zero + 1
            if self._skipping:
                self._skipping = False
            elif self._rx:
                raw = self._rx
                self._rx = bytearray()
                self._on_raw(raw)

    def _on_raw(self, raw):
        frame = cobs_decode(raw)
        if frame is None or len(frame) < _OVERHEAD:
            self.stats["resyncs"] += 1
            return
        body = memoryview(frame)[:-4]
        crc = frame[-4] | (frame[-3] << 8) | (frame[-2] << 16) | (frame[-1] << 24)
        if crc32(body) & 0xFFFFFFFF != crc:
            self.stats["crc_errors"] += 1
            return
        ftype = frame[0]
        seq = frame[1]
        ack = frame[2]
        payload = frame[3:-4]
        if ftype == DATA:
            if len(payload) > self._accept:
                self.stats["resyncs"] += 1
                return
        elif ftype == HELLO:
            if len(payload) < 4:
                self.stats["resyncs"] += 1
                return
        elif ftype == HELLO_ACK:
            if len(payload) < 8:
                self.stats["resyncs"] += 1
                return
        elif ftype != ACK:
            self.stats["resyncs"] += 1
            return
        self.stats["frames_received"] += 1
        if ftype == HELLO:
            self._learn(bytes(payload[:4]))
            self._answer = True
            if not self._hello_acked:
                # the peer is there now: ask for its ack at once rather than at the next retry
                self._hello_due = True
                self._hello_wait = self.retransmit_ms
        elif ftype == HELLO_ACK:
            if bytes(payload[4:8]) != self.session:
                return  # answers a HELLO of an earlier boot of ours
            self._learn(bytes(payload[:4]))
            self._hello_acked = True
            self._hello_due = False
        elif self.peer_session is not None:
            self._on_ack(ack, ftype == ACK and seq == 1)
            if ftype == DATA:
                self._on_data(seq, payload)

    def _learn(self, session):
        if self.peer_session == session:
            return
        if self.peer_session is not None:
            # The peer rebooted: what was in flight belongs to its previous life.
            self.stats["restarts"] += 1
            self.peer_restarted = True
            self._reset()
            self._hello_acked = False
            self._hello_due = True
            self._hello_wait = self.retransmit_ms
        self.peer_session = session

    def _on_ack(self, ack, nak):
        acked = (ack - self._base) & 0xFF
        if acked == 0:
            if nak and self._unacked and not self._fast_done:
                # the peer saw a gap (or dropped frames for want of room): go back now
                self._fast_done = True
                self._resend = True
            return
        if acked > len(self._unacked):
            return  # an old or impossible ack
        del self._unacked[:acked]
        self._base = ack
        self._sent_at = self.now
        self._rto = self.retransmit_ms
        self._fast_done = False
        if not self._unacked:
            self._resend = False

    def _on_data(self, seq, payload):
        if seq != self._expected:
            self.stats["duplicates"] += 1
            if (self._expected - seq) & 0xFF <= 128:
                self._ack_due = True  # an old frame again: our ack was lost, say it again
            elif not self._starved:
                self._nak = True  # a frame is missing before this one
            return
        if len(self._data) + len(payload) > self.buffer:
            self.stats["rx_full"] += 1
            self._starved = True
            return
        self._data += payload
        self._expected = (self._expected + 1) & 0xFF
        self._ack_due = True
