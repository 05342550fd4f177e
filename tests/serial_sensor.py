"""A minimal sensor on a serial line, for the serial tests: Link + hand-made AMQP frames.

    serial_sensor.py DEVICE COUNT SIZE [first=N] [connections=N] [die_after=N] [inflight=N] [queue=Q]
                     [consume=N]

Runs on CPython (pyserial) and on MicroPython's unix port (the tty opened as a
file: MICROPYPATH must hold hutch/core and hutch/ports). It starts a link session, opens an
AMQP connection (guest/guest, channel 1, confirm.select), declares the queue
and publishes COUNT messages of SIZE bytes to it through the default exchange,
at most `inflight` unconfirmed at a time, then closes the connection.
Message i's body is "%08d" % i followed by a pattern of i (any damage shows).
With connections=N the messages are spread over N AMQP connections opened one
after the other on the same link. With die_after=N the process stops dead once
N messages are confirmed, in the middle of writing a link frame, as a sensor
that loses power does. With consume=N it then consumes N messages of SIZE
bytes from the queue (numbered from 0, as this script makes them: the test
publishes them over TCP), checks each body and acks it.

Prints one line per event for the test to read: "ready", "confirmed N",
"link up", "ready", "confirmed N", "rate MSGS_PER_S BYTES_PER_S MS", "stats K=V ...", "died N", "done".
"""

import os
import select
import struct
import sys

from hutch.core.link import Link
from hutch.ports.clock import Clock
from hutch.ports.serial import open_serial


def body(i, size):
    head = ("%08d" % i).encode()
    return head + bytes((i * 31 + k * 7) & 0xFF for k in range(size - len(head)))


def shortstr(s):
    return bytes((len(s),)) + s


def method(channel, class_id, method_id, args=b""):
    payload = struct.pack(">HH", class_id, method_id) + args
    return struct.pack(">BHI", 1, channel, len(payload)) + payload + b"\xce"


def publish(queue, data):
    args = struct.pack(">H", 0) + shortstr(b"") + shortstr(queue) + b"\x00"
    header = struct.pack(">HHQH", 60, 0, len(data), 0)
    return (
        method(1, 60, 40, args)
        + struct.pack(">BHI", 2, 1, len(header))
        + header
        + b"\xce"
        + struct.pack(">BHI", 3, 1, len(data))
        + data
        + b"\xce"
    )


class Publisher:
    """One AMQP connection's client side, sans-IO: feed() bytes in, `out` bytes to send."""

    def __init__(self, queue):
        self.queue = queue
        self.out = b"AMQP\x00\x00\x09\x01"
        self.buf = b""
        self.ready = False
        self.closed = False
        self.published = 0
        self.confirmed = 0
        self.deliveries = []  # (delivery tag, body) received
        self._delivery = None  # [tag, size, body so far] while a delivery's content arrives

    def feed(self, data):
        self.buf += data
        while len(self.buf) >= 8:
            ftype, channel, size = struct.unpack(">BHI", self.buf[:7])
            if len(self.buf) < size + 8:
                return
            payload = self.buf[7 : 7 + size]
            if self.buf[7 + size] != 0xCE:
                raise RuntimeError("bad frame end from the broker")
            self.buf = self.buf[8 + size :]
            if ftype == 1:
                self._method(channel, payload)
            elif ftype == 2 and self._delivery is not None:
                self._delivery[1] = struct.unpack(">Q", payload[4:12])[0]
                self._content(b"")
            elif ftype == 3 and self._delivery is not None:
                self._content(payload)

    def _content(self, data):
        self._delivery[2] += data
        if self._delivery[1] is not None and len(self._delivery[2]) >= self._delivery[1]:
            self.deliveries.append((self._delivery[0], self._delivery[2]))
            self._delivery = None

    def _method(self, channel, payload):
        cls, meth = struct.unpack(">HH", payload[:4])
        if (cls, meth) == (10, 10):  # connection.start
            response = b"\x00guest\x00guest"
            self.out += method(
                0,
                10,
                11,
                b"\x00\x00\x00\x00"
                + shortstr(b"PLAIN")
                + struct.pack(">I", len(response))
                + response
                + shortstr(b"en_US"),
            )
        elif (cls, meth) == (10, 30):  # connection.tune
            channel_max, frame_max, _heartbeat = struct.unpack(">HIH", payload[4:12])
            self.out += method(0, 10, 31, struct.pack(">HIH", channel_max, frame_max, 0))
            self.out += method(0, 10, 40, shortstr(b"/") + shortstr(b"") + b"\x00")
        elif (cls, meth) == (10, 41):  # connection.open-ok
            self.out += method(1, 20, 10, shortstr(b""))
        elif (cls, meth) == (20, 11):  # channel.open-ok
            self.out += method(1, 85, 10, b"\x00")
            self.out += method(1, 50, 10, struct.pack(">H", 0) + shortstr(self.queue) + b"\x00\x00\x00\x00\x00")
        elif (cls, meth) == (50, 11):  # queue.declare-ok
            self.ready = True
        elif (cls, meth) == (60, 80):  # basic.ack
            tag, multiple = struct.unpack(">QB", payload[4:13])
            self.confirmed = tag if multiple & 1 else max(self.confirmed, tag)
        elif (cls, meth) == (60, 60):  # basic.deliver: consumer tag, delivery tag, ...
            at = 5 + payload[4]
            self._delivery = [struct.unpack(">Q", payload[at : at + 8])[0], None, b""]
        elif (cls, meth) == (60, 120):  # basic.nack
            raise RuntimeError("the broker nacked a message")
        elif (cls, meth) == (10, 50):  # connection.close from the broker
            self.out += method(0, 10, 51)
            self.closed = True
            raise RuntimeError("the broker closed the connection: %r" % bytes(payload[4:80]))
        elif (cls, meth) == (10, 51):  # connection.close-ok
            self.closed = True
        elif (cls, meth) == (20, 40):  # channel.close
            raise RuntimeError("the broker closed the channel: %r" % bytes(payload[4:80]))

    def consume(self, prefetch):
        self.out += method(1, 60, 10, struct.pack(">IHB", 0, prefetch, 0))  # basic.qos
        self.out += method(
            1, 60, 20, struct.pack(">H", 0) + shortstr(self.queue) + shortstr(b"") + b"\x00" + b"\x00\x00\x00\x00"
        )  # basic.consume: acks on, no arguments

    def ack(self, tag):
        self.out += method(1, 60, 80, struct.pack(">QB", tag, 0))

    def close(self):
        self.out += method(0, 10, 50, struct.pack(">H", 200) + shortstr(b"bye") + struct.pack(">HH", 0, 0))


class Sensor:
    def __init__(self, device, baudrate=115200):
        self.clock = Clock()
        self.port = open_serial(device, baudrate)
        self.poller = select.poll()
        self.poller.register(self.port, select.POLLIN)
        self.link = Link(self.clock.now_ms(), os.urandom(4))
        self.pending = b""  # AMQP bytes the link has not accepted yet

    def step(self, amqp, wait_ms=5):
        """One round: line -> link -> amqp, amqp -> link -> line."""
        link = self.link
        link.tick(self.clock.now_ms())
        out = link.take_output()
        if out:
            self.write(out)
        self.poller.poll(wait_ms)
        data = self.port.read(512)
        if data:
            link.receive(data)
        if link.peer_restarted:
            raise RuntimeError("the broker's end of the link restarted")
        data = link.take_data()
        if data and amqp is not None:
            amqp.feed(data)
        if amqp is not None and amqp.out:
            self.pending += amqp.out
            amqp.out = b""
        if self.pending:
            n = link.send(self.pending)
            self.pending = self.pending[n:]

    def write(self, data):
        while data:
            n = self.port.write(data)
            data = data[n:] if n is not None and n < len(data) else b""

    def run_until(self, amqp, done, timeout_ms, what):
        start = self.clock.now_ms()
        while not done():
            if self.clock.now_ms() - start > timeout_ms:
                raise RuntimeError("timed out waiting for %s; link %r" % (what, self.link.stats))
            self.step(amqp)


def say(*words):
    print(" ".join(str(w) for w in words))


def consume(sensor, amqp, count, size):
    clock = sensor.clock
    amqp.consume(40)
    got = 0
    started = clock.now_ms()
    while got < count:
        sensor.run_until(amqp, lambda: amqp.deliveries, 30000, "a delivery")
        for tag, data in amqp.deliveries:
            number = int(data[:8])
            if data != body(number, size):
                raise RuntimeError("delivery %d arrived damaged" % number)
            if number != got:
                raise RuntimeError("delivery %d where %d was due" % (number, got))
            amqp.ack(tag)
            got += 1
        amqp.deliveries = []
    elapsed = max(1, clock.now_ms() - started)
    say("consumed", got, count * 1000 // elapsed, count * size * 1000 // elapsed)


def main(argv):
    device, count, size = argv[0], int(argv[1]), int(argv[2])
    opts = {"first": 0, "connections": 1, "die_after": -1, "inflight": 40, "queue": "sensor", "consume": 0}
    for arg in argv[3:]:
        key, value = arg.split("=", 1)
        opts[key] = value if key == "queue" else int(value)
    queue = opts["queue"].encode()
    sensor = Sensor(device)
    clock = sensor.clock
    sensor.run_until(None, lambda: sensor.link.connected, 20000, "the link handshake")
    say("link up")
    per_connection = (count + opts["connections"] - 1) // opts["connections"]
    sent = 0
    started = None
    payload_bytes = 0
    for _ in range(opts["connections"]):
        amqp = Publisher(queue)
        sensor.run_until(amqp, lambda amqp=amqp: amqp.ready, 20000, "the AMQP handshake")
        if started is None:
            started = clock.now_ms()
            say("ready")
        batch = min(per_connection, count - sent)
        while amqp.confirmed < batch:
            while (
                amqp.published < batch
                and amqp.published - amqp.confirmed < opts["inflight"]
                and not sensor.pending
                and not amqp.out
            ):
                data = body(opts["first"] + sent + amqp.published, size)
                amqp.out += publish(queue, data)
                amqp.published += 1
                payload_bytes += len(data)
            before = clock.now_ms()
            sensor.step(amqp)
            if clock.now_ms() - before > 30000:
                raise RuntimeError("stuck")
            if 0 <= opts["die_after"] <= sent + amqp.confirmed:
                # lose power while a frame is half written: the broker must resync on it
                sensor.link.send(publish(queue, body(999999, size)))
                out = sensor.link.take_output()
                sensor.write(out[: len(out) // 2])
                say("died", sent + amqp.confirmed)
                sys.exit(3)
        sent += batch
        finished = clock.now_ms()
        say("confirmed", sent)
        if opts["consume"]:
            consume(sensor, amqp, opts["consume"], size)
        amqp.close()
        sensor.run_until(amqp, lambda amqp=amqp: amqp.closed, 20000, "connection.close-ok")
    elapsed = max(1, finished - started)
    say("rate", count * 1000 // elapsed, payload_bytes * 1000 // elapsed, elapsed)
    # let the link deliver what it holds, and ack the broker's last frames, before leaving
    sensor.run_until(None, lambda: sensor.link.pending() == 0, 5000, "the last acks")
    for _ in range(10):
        sensor.step(None, 2)
    say("stats", " ".join("%s=%d" % (k, v) for k, v in sorted(sensor.link.stats.items())))
    say("done")


if __name__ == "__main__":
    main(sys.argv[1:])
