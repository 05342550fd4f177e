"""A broker and one connection fed bytes directly, reading frames one of three ways:
"inline" (connection.read_frames: MicroPython, or CPython without the C scanner),
"python" (the batch reader with amqp091/framing.py's reference scanner) and "c" (the batch
reader with the C scanner). The differential tests feed all three the same bytes."""

from hutch.amqp091 import batch, framing
from hutch.amqp091.batch import install
from hutch.amqp091.connection import Connection
from hutch.c_accel import scanner as c_scanner
from hutch.core.broker import Broker

SCANNERS = ("inline", "python", "c")
READERS = {
    "inline": None,
    "python": batch.reader_factory(framing.scan_frames, framing.new_records),
    "c": batch.reader_factory(c_scanner.scan_frames, c_scanner.new_records),
}


class Side:
    """One broker and one connection, reading frames one way."""

    def __init__(self, how, limits):
        self.log = []
        self.broker = install(
            Broker(limits, log=lambda level, message, exc=None: self.log.append((level, message))), READERS[how]
        )
        self.conn = Connection(self.broker, {"address": "127.0.0.1", "port": 1})

    def feed(self, chunk):
        self.conn.feed(chunk)
        conn = self.conn
        return conn.take_output(), conn.state, conn.closed, conn.paused, conn.pending, self.log[:]
