"""A minimal sensor on a serial line, for the serial tests: Link + hutch.client's sans-IO protocol.

    serial_sensor.py DEVICE COUNT SIZE [first=N] [connections=N] [die_after=N] [inflight=N] [queue=Q]
                     [consume=N]

Runs on CPython (pyserial) and on MicroPython's unix port (the tty opened as a
file: MICROPYPATH holds the node bundle, hutch/client and the core it speaks through, plus
hutch/ports' serial.py and clock.py). It drives the link layer (codec/link.py) and the
client's protocol (client/protocol.py) itself, without the blocking client, so that it can
keep many publishes in flight and die mid-frame. It starts a link session, opens an
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
import sys

from hutch.client.protocol import AMQPError, Message, Protocol
from hutch.codec.link import Link
from hutch.ports.clock import Clock
from hutch.ports.uart import open_serial

# (class id << 16) | method id: the node bundle's codec/spec.py has no constants (they are
# folded into the code that uses them), so those of the methods this script sends are here
CONFIRM_SELECT = 0x0055000A
QUEUE_DECLARE = 0x0032000A
BASIC_QOS = 0x003C000A
BASIC_CONSUME = 0x003C0014
BASIC_ACK = 0x003C0050
CONNECTION_CLOSE = 0x000A0032


def body(i, size):
    head = ("%08d" % i).encode()
    return head + bytes((i * 31 + k * 7) & 0xFF for k in range(size - len(head)))


class Amqp:
    """One AMQP connection's client side: client/protocol.py, fed from the link; take() gives
    what to send. Ready once channel 1 is in confirm mode and the queue is declared."""

    def __init__(self, queue, now):
        self.queue = queue
        self.protocol = Protocol()
        self.protocol.connect(now, "guest", "guest", "/", heartbeat=0)
        self.declared = self.ready = False
        self.deliveries = []  # (delivery tag, body) received

    def published(self):
        return self.protocol.seq

    def confirmed(self):
        return self.protocol.seq - len(self.protocol.in_flight)

    def closed(self):
        return self.protocol.state == "closed"

    def feed(self, data):
        p = self.protocol
        while data:
            data = data[p.receive_data(data) :]
            event = p.next_event()
            while event is not None:
                if isinstance(event, AMQPError):
                    raise RuntimeError("the broker closed the %s: %s" % (type(event).__name__, event))
                if isinstance(event, Message):
                    self.deliveries.append((event.delivery_tag, event.body))
                event = p.next_event()
        if p.unconfirmed:
            raise RuntimeError("the broker nacked a message")
        if p.channel_open and not self.declared:  # the handshake is done
            p.call(CONFIRM_SELECT, (False,))
            p.call(QUEUE_DECLARE, (0, self.queue, False, False, False, False, False, None))
            self.declared = True
        self.ready = self.declared and not p.awaiting

    def take(self):
        out = b""
        data = self.protocol.data_to_send()
        while data is not None:
            out += bytes(data)
            data = self.protocol.data_to_send()
        return out

    def publish(self, data):
        self.protocol.publish("", self.queue, data)

    def consume(self, prefetch):
        self.protocol.call(BASIC_QOS, (0, prefetch, False))
        self.protocol.call(BASIC_CONSUME, (0, self.queue, "", False, False, False, False, None))  # with acks

    def ack(self, tag):
        self.protocol.send(BASIC_ACK, (tag, False))

    def close(self):
        self.protocol.call(CONNECTION_CLOSE, (200, "bye", 0, 0))


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
        if amqp is not None:
            self.pending += amqp.take()
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
    queue = opts["queue"]
    sensor = Sensor(device)
    clock = sensor.clock
    sensor.run_until(None, lambda: sensor.link.connected, 20000, "the link handshake")
    say("link up")
    per_connection = (count + opts["connections"] - 1) // opts["connections"]
    sent = 0
    started = None
    payload_bytes = 0
    for _ in range(opts["connections"]):
        amqp = Amqp(queue, clock.now_ms())
        sensor.run_until(amqp, lambda amqp=amqp: amqp.ready, 20000, "the AMQP handshake")
        if started is None:
            started = clock.now_ms()
            say("ready")
        batch = min(per_connection, count - sent)
        while amqp.confirmed() < batch:
            while (
                amqp.published() < batch
                and amqp.published() - amqp.confirmed() < opts["inflight"]
                and not sensor.pending
            ):
                data = body(opts["first"] + sent + amqp.published(), size)
                amqp.publish(data)
                payload_bytes += len(data)
            before = clock.now_ms()
            sensor.step(amqp)
            if clock.now_ms() - before > 30000:
                raise RuntimeError("stuck")
            if 0 <= opts["die_after"] <= sent + amqp.confirmed():
                # lose power while a frame is half written: the broker must resync on it
                amqp.publish(body(999999, size))
                sensor.link.send(amqp.take())
                out = sensor.link.take_output()
                sensor.write(out[: len(out) // 2])
                say("died", sent + amqp.confirmed())
                sys.exit(3)
        sent += batch
        finished = clock.now_ms()
        say("confirmed", sent)
        if opts["consume"]:
            consume(sensor, amqp, opts["consume"], size)
        amqp.close()
        sensor.run_until(amqp, amqp.closed, 20000, "connection.close-ok")
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
