"""A load generator for `hutch bench`: just enough AMQP 0-9-1 on raw sockets to push a broker.

The scenarios are those of the shared firehose.py (throughput, confirms, latency, fanout,
idle), written again here so that `hutch bench` needs nothing outside the project. The
generator is kept cheap so that the broker, not the generator, is what is measured:
every publish is the same pre-encoded frames, and a consumer counts bytes instead of
parsing frames (every delivery of a scenario has the same length, because its delivery
tag is a fixed-width integer and its exchange, routing key and properties do not change).

Each scenario is a function taking the broker's (host, port) and its parameters and
returning a dict of figures. Every wait is bounded by a timeout; a scenario that runs
out of time raises LoadError.
"""

import socket
import struct
import threading
import time

FRAME_END = b"\xce"
DELIVER_FIXED = 4 + 1 + 8 + 1 + 1 + 1  # method id, tag length, delivery tag, redelivered, exchange and key lengths


class LoadError(Exception):
    pass


def shortstr(text):
    data = text.encode()
    return bytes((len(data),)) + data


def frame(ftype, channel, payload):
    return struct.pack(">BHI", ftype, channel, len(payload)) + payload + FRAME_END


def method(channel, class_id, method_id, args=b""):
    return frame(1, channel, struct.pack(">HH", class_id, method_id) + args)


class Connection:
    """A blocking connection: the handshake, synchronous methods, and raw sends and reads."""

    def __init__(self, host, port, timeout, frame_max=131072):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""
        self.sock.sendall(b"AMQP\x00\x00\x09\x01")
        self.expect(0, 10, 10)  # start
        login = b"\x00guest\x00guest"
        self.send(
            method(
                0,
                10,
                11,
                struct.pack(">I", 0) + shortstr("PLAIN") + struct.pack(">I", len(login)) + login + shortstr("en_US"),
            )
        )
        tune = self.expect(0, 10, 30)
        channel_max, offered, _ = struct.unpack_from(">HIH", tune)
        self.frame_max = min(offered or frame_max, frame_max)
        self.send(method(0, 10, 31, struct.pack(">HIH", channel_max or 2047, self.frame_max, 0)))
        self.send(method(0, 10, 40, shortstr("/") + shortstr("") + b"\x00"))
        self.expect(0, 10, 41)

    def send(self, data):
        self.sock.sendall(data)

    def read_frame(self):
        """(type, channel, payload) of the next frame."""
        while True:
            if len(self.buffer) >= 7:
                ftype, channel, size = struct.unpack_from(">BHI", self.buffer)
                if len(self.buffer) >= size + 8:
                    payload = self.buffer[7 : 7 + size]
                    self.buffer = self.buffer[size + 8 :]
                    return ftype, channel, payload
            data = self.sock.recv(65536)
            if not data:
                raise LoadError("the broker closed the connection")
            self.buffer += data

    def expect(self, channel, class_id, method_id):
        """The arguments of the next method, which must be class_id.method_id on channel."""
        while True:
            ftype, number, payload = self.read_frame()
            if ftype != 1:
                continue  # heartbeats
            ids = struct.unpack_from(">HH", payload)
            if number == channel and ids == (class_id, method_id):
                return payload[4:]
            raise LoadError(
                "expected method %d.%d on channel %d, got %d.%d on %d"
                % (class_id, method_id, channel, ids[0], ids[1], number)
            )

    def call(self, channel, class_id, method_id, args, reply_id):
        self.send(method(channel, class_id, method_id, args))
        return self.expect(channel, class_id, reply_id)

    def open_channel(self, channel=1):
        self.call(channel, 20, 10, shortstr(""), 11)

    def declare_queue(self, channel, name, durable=False):
        flags = 0x02 if durable else 0
        self.call(channel, 50, 10, struct.pack(">H", 0) + shortstr(name) + bytes((flags,)) + struct.pack(">I", 0), 11)

    def consume(self, channel, queue, tag, no_ack, prefetch):
        if not no_ack:
            self.call(channel, 60, 10, struct.pack(">IHB", 0, prefetch, 0), 11)  # basic.qos
        flags = 0x02 if no_ack else 0
        self.call(
            channel,
            60,
            20,
            struct.pack(">H", 0) + shortstr(queue) + shortstr(tag) + bytes((flags,)) + struct.pack(">I", 0),
            21,
        )

    def close(self):
        try:
            self.call(0, 10, 50, struct.pack(">H", 200) + shortstr("bye") + struct.pack(">HH", 0, 0), 51)
        except (OSError, LoadError):
            pass
        self.sock.close()


def publish_frames(exchange, key, body, frame_max, persistent=False):
    """One publish, pre-encoded: method, content header and body frames."""
    properties = struct.pack(">HB", 0x1000, 2) if persistent else struct.pack(">H", 0)
    data = method(1, 60, 40, struct.pack(">H", 0) + shortstr(exchange) + shortstr(key) + b"\x00")
    data += frame(2, 1, struct.pack(">HHQ", 60, 0, len(body)) + properties)
    for start in range(0, len(body), frame_max - 8):
        data += frame(3, 1, body[start : start + frame_max - 8])
    return data


def delivery_size(tag, exchange, key, body_size, frame_max, persistent=False):
    """Bytes on the wire of one delivery to consumer `tag` (fixed for a whole scenario)."""
    size = 8 + DELIVER_FIXED + len(tag.encode()) + len(exchange.encode()) + len(key.encode())
    size += 8 + 14 + (3 if persistent else 0)
    chunk = frame_max - 8
    frames = max(1, -(-body_size // chunk)) if body_size else 0
    return size + body_size + 8 * frames


class Consumer(threading.Thread):
    """Counts whole deliveries by their bytes; acks (multiple) every ack_every when asked."""

    def __init__(self, host, port, queue, expected, exchange, key, size, ack_every, prefetch, timeout, tag="bench"):
        super().__init__(daemon=True)
        self.conn = Connection(host, port, timeout)
        self.conn.open_channel()
        self.conn.consume(1, queue, tag, no_ack=not ack_every, prefetch=prefetch)
        self.per_message = delivery_size(tag, exchange, key, size, self.conn.frame_max)
        self.expected = expected
        self.ack_every = ack_every
        self.received = 0
        self.finished_at = None
        self.error = None

    def run(self):
        conn = self.conn
        got = len(conn.buffer)
        acked = 0
        try:
            while self.received < self.expected:
                got += len(conn.sock.recv(262144) or b"")
                self.received = got // self.per_message
                if self.ack_every and self.received - acked >= self.ack_every:
                    acked = self.received
                    conn.send(method(1, 60, 80, struct.pack(">QB", acked, 1)))
            self.finished_at = time.perf_counter()
        except OSError as e:
            self.error = e


def _finish(consumers, deadline):
    for consumer in consumers:
        consumer.join(max(0.0, deadline - time.monotonic()))
        if consumer.is_alive() or consumer.error or consumer.finished_at is None:
            raise LoadError(
                "a consumer got %d of %d deliveries in time (%s)"
                % (consumer.received, consumer.expected, consumer.error or "timed out")
            )


def throughput(host, port, count, size=16, ack_every=0, prefetch=1000, timeout=120):
    """One publisher -> one queue -> one consumer (no-ack, or acking every ack_every)."""
    deadline = time.monotonic() + timeout
    queue = "bench-throughput"
    publisher = Connection(host, port, timeout)
    publisher.open_channel()
    publisher.declare_queue(1, queue)
    publisher.call(1, 50, 30, struct.pack(">H", 0) + shortstr(queue) + b"\x00", 31)  # purge what a previous run left
    consumer = Consumer(host, port, queue, count, "", queue, size, ack_every, prefetch, timeout)
    one = publish_frames("", queue, b"x" * size, publisher.frame_max)
    batch = one * max(1, 65536 // len(one))
    per_batch = len(batch) // len(one)
    consumer.start()
    start = time.perf_counter()
    sent = 0
    while sent + per_batch <= count:
        publisher.send(batch)
        sent += per_batch
    publisher.send(one * (count - sent))
    _finish([consumer], deadline)
    elapsed = consumer.finished_at - start
    publisher.close()
    consumer.conn.close()
    return {"messages": count, "seconds": round(elapsed, 3), "msgs_per_s": round(count / elapsed)}


def confirms(host, port, count, size=16, window=1000, timeout=120, persistent=False, queue=None, keep=False):
    """One publisher in confirm mode with at most `window` messages unconfirmed; nobody consumes.
    persistent: a durable queue and delivery-mode 2, so every confirm waits for the disk.
    keep: leave the messages in the queue (a restart is measured next), else delete it."""
    deadline = time.monotonic() + timeout
    queue = queue or ("bench-persistent" if persistent else "bench-confirms")
    conn = Connection(host, port, timeout)
    conn.open_channel()
    conn.declare_queue(1, queue, durable=persistent)
    if not keep:
        conn.call(1, 50, 30, struct.pack(">H", 0) + shortstr(queue) + b"\x00", 31)  # purge a previous run's
    conn.call(1, 85, 10, b"\x00", 11)  # confirm.select
    one = publish_frames("", queue, b"x" * size, conn.frame_max, persistent)
    sent = confirmed = 0
    start = time.perf_counter()
    while confirmed < count:
        room = min(window - (sent - confirmed), count - sent)
        if room > 0:
            conn.send(one * room)
            sent += room
        ftype, _, payload = conn.read_frame()
        if ftype == 1 and payload[:4] == b"\x00\x3c\x00\x50":  # basic.ack
            tag, multiple = struct.unpack_from(">QB", payload, 4)
            confirmed = tag if multiple & 1 else max(confirmed, tag)
        elif ftype == 1 and payload[:4] == b"\x00\x3c\x00\x78":
            raise LoadError("the broker nacked publish %d" % struct.unpack_from(">Q", payload, 4))
        if time.monotonic() > deadline:
            raise LoadError("%d of %d publishes confirmed in time" % (confirmed, count))
    elapsed = time.perf_counter() - start
    if not keep:
        # queue.delete: a durable queue would otherwise keep its messages on disk between rounds
        conn.call(1, 50, 40, struct.pack(">H", 0) + shortstr(queue) + b"\x00", 41)
    conn.close()
    return {"messages": count, "seconds": round(elapsed, 3), "msgs_per_s": round(count / elapsed)}


def latency(host, port, count, size=16, timeout=120):
    """One message in flight: publish, wait for its delivery, repeat. p50/p99 in microseconds."""
    deadline = time.monotonic() + timeout
    queue = "bench-latency"
    publisher = Connection(host, port, timeout)
    publisher.open_channel()
    publisher.declare_queue(1, queue)
    consumer = Connection(host, port, timeout)
    consumer.open_channel()
    consumer.consume(1, queue, "bench", no_ack=True, prefetch=0)
    per_message = delivery_size("bench", "", queue, size, consumer.frame_max)
    one = publish_frames("", queue, b"x" * size, publisher.frame_max)
    times = []
    pending = len(consumer.buffer)
    for _ in range(count):
        start = time.perf_counter()
        publisher.send(one)
        while pending < per_message:
            pending += len(consumer.sock.recv(65536) or b"")
        pending -= per_message
        times.append(time.perf_counter() - start)
        if time.monotonic() > deadline:
            raise LoadError("latency: %d of %d round trips in time" % (len(times), count))
    publisher.close()
    consumer.close()
    times.sort()
    return {
        "messages": count,
        "p50_us": round(times[len(times) // 2] * 1e6, 1),
        "p99_us": round(times[min(len(times) - 1, len(times) * 99 // 100)] * 1e6, 1),
    }


def fanout(host, port, count, queues=10, size=16, timeout=120):
    """One publisher -> a fanout exchange -> `queues` queues, one no-ack consumer each."""
    deadline = time.monotonic() + timeout
    exchange = "bench-fanout"
    publisher = Connection(host, port, timeout)
    publisher.open_channel()
    publisher.call(
        1, 40, 10, struct.pack(">H", 0) + shortstr(exchange) + shortstr("fanout") + b"\x00" + struct.pack(">I", 0), 11
    )
    consumers = []
    for i in range(queues):
        name = "bench-fanout-%d" % i
        publisher.declare_queue(1, name)
        publisher.call(1, 50, 30, struct.pack(">H", 0) + shortstr(name) + b"\x00", 31)
        publisher.call(
            1,
            50,
            20,
            struct.pack(">H", 0) + shortstr(name) + shortstr(exchange) + shortstr("") + b"\x00" + struct.pack(">I", 0),
            21,
        )
        consumers.append(Consumer(host, port, name, count, exchange, "", size, 0, 0, timeout))
    one = publish_frames(exchange, "", b"x" * size, publisher.frame_max)
    for consumer in consumers:
        consumer.start()
    start = time.perf_counter()
    for sent in range(0, count, 1000):
        publisher.send(one * min(1000, count - sent))
    _finish(consumers, deadline)
    elapsed = max(c.finished_at for c in consumers) - start
    publisher.close()
    for consumer in consumers:
        consumer.conn.close()
    return {
        "messages": count,
        "queues": queues,
        "seconds": round(elapsed, 3),
        "deliveries_per_s": round(count * queues / elapsed),
    }


def idle(host, port, connections, timeout=120):
    """Open `connections` connections with a channel each; returns them, open (close_all them)."""
    opened = []
    try:
        for _ in range(connections):
            conn = Connection(host, port, timeout)
            conn.open_channel()
            opened.append(conn)
    except Exception:
        close_all(opened)
        raise
    return opened


def close_all(connections):
    for conn in connections:
        conn.close()
