"""What every served-session target shares: a broker that logs to a list, a connection of any
front end fed a client's bytes in pieces, and the checks after it: no internal error logged, and
a good client served by the same broker."""

import struct

from raw_amqp import login, method

from hutch.codec import spec
from hutch.core.broker import Broker
from hutch.core.limits import Limits

PEER = {"address": "127.0.0.1", "port": 40000, "transport": "tcp"}
# a 0-9-1 client's whole handshake and a queue.declare, as a fast client sends them
AMQP_LOGIN = login() + method(1, spec.QUEUE_DECLARE, "hsbbbbbt", [0, b"", False, False, True, True, False, {}])


class Logged:
    """A broker whose log lines are kept: (level, line)."""

    def __init__(self, limits=None):
        self.said = []
        self.broker = Broker(limits or Limits(), log=lambda level, line, exc=None: self.said.append((level, line)))

    def errors(self):
        return [line for level, line in self.said if level == "error" or "internal error" in line]


def pieces(data):
    """(the pieces a client's bytes arrive in, the bytes): the first octet the pieces' size."""
    size = 1 + data[0] * 3
    stream = data[1:]
    return [stream[at : at + size] for at in range(0, len(stream), size)], stream


def served(data, connect):
    """A client's bytes (pieces() of data) fed to the connection connect(broker) makes, on a
    broker of its own, its output taken after each piece; then ended()'s checks."""
    if not data:
        return
    parts, _stream = pieces(data)
    logged = Logged()
    conn = connect(logged.broker)
    for part in parts:
        conn.feed(part)
        conn.take_output()
    ended(logged, conn)


def ended(logged, connection):
    """The client gone, two minutes on: no internal error, and a 0-9-1 client served."""
    connection.eof()
    broker = logged.broker
    broker.tick(broker.now + 120_000)
    assert not logged.errors(), logged.errors()
    from hutch.amqp091.connection import Connection

    good = Connection(broker, dict(PEER, port=40001))
    good.feed(AMQP_LOGIN)
    out = good.take_output()
    assert struct.pack(">I", 0x0032000B) in out, "a good client after the session: %r" % out[-200:]  # declare-ok
    good.eof()
