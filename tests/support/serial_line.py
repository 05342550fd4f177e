"""A serial line for tests: two ptys joined by a simulated wire (CPython).

    line = SerialLine(rate=11520, seed=1).start()   # 115,200 baud, 8N1: 11,520 bytes/s
    line.a_path, line.b_path                        # open one end each, like /dev/ttyUSB0
    line.set_damage(corrupt=1e-3, drop=5e-4, garbage=5e-4)   # chances per byte
    line.stop()

A thread copies each direction from one pty master to the other at `rate`
bytes per second, so a writer that outruns the line is held back by the pty's
buffer as by a UART's transmit FIFO. Damage is drawn per byte from a seeded
generator: a corrupted byte is XORed with a random non-zero value, a dropped
byte vanishes, garbage inserts 1-16 random bytes (zeros included). The
slaves are raw ttys with VMIN=0, VTIME=0 (what `stty raw -echo min 0 time 0`
sets), and this object keeps them open so either end can close and reopen
its side (a restarting sensor) without the other end seeing a hang-up.
"""

import errno
import os
import random
import termios
import threading
import time
import tty


def _raw(fd):
    tty.setraw(fd)
    attrs = termios.tcgetattr(fd)
    attrs[6][termios.VMIN] = 0
    attrs[6][termios.VTIME] = 0
    termios.tcsetattr(fd, termios.TCSANOW, attrs)


class Direction:
    def __init__(self, name, source, sink):
        self.name = name
        self.source = source
        self.sink = sink
        self.pending = bytearray()  # damaged bytes not yet accepted by the sink's pty
        self.credit = 0.0
        self.stats = {"bytes": 0, "corrupted": 0, "dropped": 0, "garbage": 0, "overrun": 0}


class SerialLine:
    def __init__(self, rate=11520, seed=1, corrupt=0.0, drop=0.0, garbage=0.0):
        self.rate = rate
        self.rng = random.Random(seed)
        self.set_damage(corrupt, drop, garbage)
        self.a_master, self.a_slave = os.openpty()
        self.b_master, self.b_slave = os.openpty()
        for fd in (self.a_slave, self.b_slave):
            _raw(fd)
        for fd in (self.a_master, self.b_master):
            os.set_blocking(fd, False)
        self.a_path = os.ttyname(self.a_slave)
        self.b_path = os.ttyname(self.b_slave)
        self.ab = Direction("a->b", self.a_master, self.b_master)
        self.ba = Direction("b->a", self.b_master, self.a_master)
        self._stop = threading.Event()
        self._thread = None
        self.error = None

    def set_damage(self, corrupt=0.0, drop=0.0, garbage=0.0):
        self.corrupt = corrupt
        self.drop = drop
        self.garbage = garbage

    def start(self):
        self._thread = threading.Thread(target=self._run, name="serial-line", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            assert not self._thread.is_alive(), "the line thread did not stop"
        for fd in (self.a_master, self.b_master, self.a_slave, self.b_slave):
            try:
                os.close(fd)
            except OSError:
                pass
        assert self.error is None, self.error

    def stats(self):
        return {"a->b": dict(self.ab.stats), "b->a": dict(self.ba.stats)}

    def _run(self):
        try:
            last = time.monotonic()
            while not self._stop.is_set():
                time.sleep(0.002)
                now = time.monotonic()
                elapsed, last = now - last, now
                for d in (self.ab, self.ba):
                    self._carry(d, elapsed)
        except Exception as e:  # reported by stop()
            self.error = repr(e)

    def _carry(self, d, elapsed):
        # the line holds at most ~10 ms of bytes: a writer cannot bank unused time
        d.credit = min(d.credit + elapsed * self.rate, self.rate * 0.01 + 1)
        if d.pending:
            self._deliver(d)
        n = int(d.credit)
        if n <= 0 or len(d.pending) > 4096:
            return
        try:
            data = os.read(d.source, n)
        except OSError as e:
            if e.errno in (errno.EAGAIN, errno.EIO):  # nothing written, or nobody has the slave open
                return
            raise
        d.credit -= len(data)
        d.stats["bytes"] += len(data)
        d.pending += self._damage(d, data)
        self._deliver(d)

    def _damage(self, d, data):
        if not (self.corrupt or self.drop or self.garbage):
            return data
        rng = self.rng
        out = bytearray()
        for b in data:
            if self.garbage and rng.random() < self.garbage:
                out += bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
                d.stats["garbage"] += 1
            if self.drop and rng.random() < self.drop:
                d.stats["dropped"] += 1
                continue
            if self.corrupt and rng.random() < self.corrupt:
                b ^= rng.randint(1, 255)
                d.stats["corrupted"] += 1
            out.append(b)
        return out

    def _deliver(self, d):
        try:
            n = os.write(d.sink, d.pending)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EIO):
                raise
            n = 0
        del d.pending[:n]
        if len(d.pending) > 65536:  # the far end stopped reading: a UART would overrun
            d.stats["overrun"] += len(d.pending)
            d.pending.clear()
