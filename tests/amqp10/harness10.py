"""An AMQP 1.0 client for driving the broker's 1.0 front end with bytes, no sockets: it writes
frames with hutch's own codec (amqp10/frames.py, types.py) and reads the broker's output frame
by frame. The interop tests check the same behaviour with real clients (rhea, Qpid Proton)."""

from hutch.amqp10 import spec
from hutch.amqp10.connection import AMQP_HEADER, SASL_HEADER, Connection
from hutch.amqp10.frames import frame, split, transfer_fields
from hutch.amqp10.types import Described, Symbol, Uint, Ulong, encode
from hutch.core.broker import Broker
from hutch.core.limits import Limits

LOCAL = {"address": "127.0.0.1", "port": 40000, "transport": "tcp"}
NAMES = {code: entry[0] for code, entry in spec.TYPES.items()}


class Frame:
    def __init__(self, found):
        self.channel = found.channel
        self.name = NAMES.get(found.code, "empty") if found.code is not None else "empty"
        self.fields = found.fields or []
        if found.fields is None and found.transfer is not None:  # (read by frames.transfer_at)
            self.fields = transfer_fields(found.transfer)
        self.payload = found.payload

    def __getitem__(self, name):
        """A field by its name in the specification (None when absent)."""
        names = spec.TYPES[next(code for code, entry in spec.TYPES.items() if entry[0] == self.name)][1]
        i = names.index(name)
        return self.fields[i] if i < len(self.fields) else None

    def __repr__(self):
        return "Frame(%d, %s, %r)" % (self.channel, self.name, self.fields)


def target(address):
    return Described(Ulong(spec.TARGET), [address])


def source(address, filters=None):
    fields = [address]
    if filters is not None:
        fields += [None, None, None, None, None, None, filters]
    return Described(Ulong(spec.SOURCE), fields)


def section(code, value):
    return encode(Described(Ulong(code), value))


def data_message(body, durable=False, properties=None, application=None):
    out = []
    if durable:
        out.append(section(spec.HEADER, [True]))
    if properties is not None:
        out.append(section(spec.PROPERTIES, properties))
    if application is not None:
        out.append(section(spec.APPLICATION_PROPERTIES, application))
    out.append(section(spec.DATA, body))
    return b"".join(out)


class Client10:
    def __init__(self, broker=None, limits=None, peer=LOCAL):
        self.broker = broker if broker is not None else Broker(limits or Limits())
        self.conn = Connection(self.broker, peer)
        self.buf = b""
        self.max_frame = 512

    # --------------------------------------------------------- raw I/O

    def send(self, data):
        self.conn.feed(data)

    def frame(self, channel, code, fields, payload=b"", sasl=False):
        self.send(frame(channel, code, fields, payload, sasl))

    def read(self):
        """What the broker wrote since the last read: protocol headers as bytes, frames as Frame."""
        self.buf += self.conn.take_output()
        out = []
        while True:
            if self.buf[:4] == b"AMQP" and len(self.buf) >= 8:
                out.append(self.buf[:8])
                self.buf = self.buf[8:]
                continue
            found, end = split(self.buf, 0, 1 << 30)
            if found is None:
                return out
            self.buf = self.buf[end:]
            out.append(Frame(found))

    def frames(self, name=None):
        return [f for f in self.read() if not isinstance(f, bytes) and (name is None or f.name == name)]

    # --------------------------------------------------------- the handshake

    def login(self, user="guest", password="guest", max_frame=131072, idle=None, hostname=None):
        self.send(SASL_HEADER)
        self.frame(
            0, spec.SASL_INIT, [Symbol("PLAIN"), b"\x00" + user.encode() + b"\x00" + password.encode()], sasl=True
        )
        self.send(AMQP_HEADER)
        self.frame(0, spec.OPEN, ["test-client", hostname, Uint(max_frame), None, Uint(idle) if idle else None])
        return self.read()

    def begin(self, channel=0, incoming_window=10000):
        self.frame(channel, spec.BEGIN, [None, Uint(0), Uint(incoming_window), Uint(10000)])
        return self.frames()

    def attach_sender(self, address, handle=0, channel=0, name=None, settled=False):
        from hutch.amqp10.types import Ubyte

        self.frame(
            channel,
            spec.ATTACH,
            [name or "sender-%d" % handle, Uint(handle), False, Ubyte(1) if settled else Ubyte(0), None,
             source("client"), target(address) if address is not None else target(None)],
        )  # fmt: skip
        return self.frames()

    def attach_receiver(self, address, handle=0, channel=0, name=None, settled=False, filters=None):
        from hutch.amqp10.types import Ubyte

        self.frame(
            channel,
            spec.ATTACH,
            [name or "receiver-%d" % handle, Uint(handle), True, Ubyte(1) if settled else Ubyte(0), None,
             source(address, filters), target("client")],
        )  # fmt: skip
        return self.frames()

    def transfer(self, payload, handle=0, delivery_id=0, channel=0, settled=False, more=False):
        self.frame(
            channel, spec.TRANSFER, [Uint(handle), Uint(delivery_id), b"t%d" % delivery_id, Uint(0), settled, more],
            payload,
        )  # fmt: skip

    def flow(self, handle, credit, delivery_count=0, channel=0, drain=False, echo=False, next_incoming=0, window=10000):
        self.frame(
            channel,
            spec.FLOW,
            [Uint(next_incoming), Uint(window), Uint(0), Uint(10000), Uint(handle), Uint(delivery_count),
             Uint(credit), None, drain, echo],
        )  # fmt: skip

    def disposition(self, first, last=None, state=None, channel=0):
        self.frame(
            channel, spec.DISPOSITION, [True, Uint(first), Uint(last) if last is not None else None, True, state]
        )


def outcome(code, *fields):
    return Described(Ulong(code), list(fields))


def condition(frame_):
    """The condition of an error a detach, end or close carries (None: no error)."""
    error = frame_.fields[-1] if frame_.fields else None
    if type(error) is not Described:
        return None
    return error.value[0].value
