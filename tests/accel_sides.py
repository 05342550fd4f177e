"""A broker and one connection fed bytes directly, reading frames one of three ways:
"inline" (the connection's own loop: MicroPython, or CPython without the C scanner),
"python" (the batch loop with core/framing.py's reference scanner) and "c" (the batch
loop with the C scanner). The differential tests feed all three the same bytes."""

from hutch.c_accel import scanner as c_scanner
from hutch.core import batch, framing
from hutch.core.broker import Broker

SCANNERS = ("inline", "python", "c")


class Side:
    """One broker and one connection, reading frames one way."""

    def __init__(self, how, limits):
        self.log = []
        self.broker = Broker(limits, log=lambda level, message, exc=None: self.log.append((level, message)))
        self.conn = self.broker.connect({"address": "127.0.0.1", "port": 1})
        conn = self.conn
        if how == "inline":
            conn._scan, conn._records, conn._read_batch = None, None, None
        elif how == "c":
            conn._scan, conn._records, conn._read_batch = (
                c_scanner.scan_frames,
                c_scanner.new_records(),
                batch.read_batch,
            )
        else:
            conn._scan, conn._records, conn._read_batch = framing.scan_frames, framing.new_records(), batch.read_batch

    def feed(self, chunk):
        self.conn.feed(chunk)
        conn = self.conn
        return conn.take_output(), conn.state, conn.closed, conn.paused, conn._pending, self.log[:]
