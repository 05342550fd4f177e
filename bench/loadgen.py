"""A load generator for `hutch bench`: AMQP 0-9-1 on blocking sockets, cheap enough to push a broker.

The scenarios are those of the shared firehose.py (throughput, confirms, latency, fanout,
idle), written again here so that `hutch bench` needs nothing outside the project. The
handshake and the synchronous methods go through the client's protocol (client/protocol.py)
and every frame is built with codec/wire.py, as everywhere else; what is measured stays cheap
so that the broker, not the generator, is what is measured: every publish is the same
pre-encoded frames, sent straight to the socket, and a consumer counts bytes instead of
parsing frames (every delivery of a scenario has the same length, because its delivery tag
is a fixed-width integer and its exchange, routing key and properties do not change).

Each scenario is a function taking the broker's (host, port) and its parameters and
returning a dict of figures. Every wait is bounded by a timeout; a scenario that runs
out of time raises LoadError.
"""

import socket
import threading
import time

from ..client.protocol import AMQPError, Protocol
from ..codec import spec, wire


class LoadError(Exception):
    pass


# Seconds a broker may stay silent before a long run (a backlog of millions: hours in all) gives up.
SILENCE = 300


class Connection:
    """A blocking connection: the handshake and synchronous methods through the client's
    protocol (client/protocol.py, which opens channel 1), and raw sends and reads."""

    def __init__(self, host, port, timeout, frame_max=131072, tls=None):
        """tls: an ssl.SSLContext to speak TLS with (the broker's TLS listener on port)."""
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:
            self.sock = tls.wrap_socket(self.sock, server_hostname=host)
        self.protocol = Protocol(frame_max)
        self.protocol.connect(0, "guest", "guest", "/", heartbeat=0)
        self.wait()
        self.frame_max = self.protocol.frame_max

    def send(self, data):
        self.sock.sendall(data)

    def unread(self):
        """How many bytes were received that no event has taken yet (deliveries, to a consumer
        that counts bytes)."""
        return self.protocol._n - self.protocol._pos

    def _flush(self):
        p = self.protocol
        data = p.data_to_send()
        while data is not None:
            self.sock.sendall(data)
            data = p.data_to_send()

    def _next(self, block):
        """The next event; None if there is none and block is false, else read until there is."""
        p = self.protocol
        event = p.next_event()
        while event is None and block:
            self._flush()  # what the protocol answered meanwhile (the handshake...)
            n = self.sock.recv_into(p.read_buffer())
            if not n:
                raise LoadError("the broker closed the connection")
            p.received(n)
            event = p.next_event()
        if isinstance(event, AMQPError):
            raise LoadError(
                "the broker closed the %s: %s" % ("connection" if p.state == "closed" else "channel", event)
            )
        return event

    def events(self):
        """The events that came in with one read (at least one)."""
        events = [self._next(True)]
        event = self._next(False)
        while event is not None:
            events.append(event)
            event = self._next(False)
        return events

    def wait(self):
        """Send what is queued and read until the reply the protocol awaits has come: its
        arguments. What came after it stays unread."""
        while True:
            event = self._next(True)
            if not self.protocol.awaiting:
                return event[1]

    def call(self, method_id, args=()):
        self.protocol.call(method_id, args)
        return self.wait()

    def declare_queue(self, name, durable=False, arguments=None, passive=False):
        """queue.declare; its reply's arguments (name, message count, consumer count)."""
        return self.call(spec.QUEUE_DECLARE, (0, name, passive, durable, False, False, False, arguments))

    def consume(self, queue, tag, no_ack, prefetch, arguments=None):
        if not no_ack:
            self.call(spec.BASIC_QOS, (0, prefetch, False))
        self.call(spec.BASIC_CONSUME, (0, queue, tag, False, no_ack, False, False, arguments))

    def hang_up(self):
        """connection.close without waiting for close-ok: for a consumer that read the socket
        itself (what is still on its way would be read as the reply)."""
        try:
            self.send(wire.method_frame(0, spec.CONNECTION_CLOSE, (200, "bye", 0, 0)))
        except OSError:
            pass
        self.sock.close()

    def unread_bytes(self):
        """The bytes received that no event has taken yet (see unread)."""
        p = self.protocol
        return bytes(p._rx[p._pos : p._n])

    def close(self):
        try:
            self.call(spec.CONNECTION_CLOSE, (200, "bye", 0, 0))
        except (OSError, LoadError):
            pass
        self.sock.close()


def publish_frames(exchange, key, body, frame_max, persistent=False, properties=None):
    """One publish, pre-encoded: method, content header and body frames (properties: its own,
    delivery-mode 2 added when persistent)."""
    data = wire.method_frame(1, spec.BASIC_PUBLISH, (0, exchange.encode(), key.encode(), False, False))
    if persistent:
        properties = dict(properties or {}, **{"delivery-mode": 2})
    return data + wire.content_frames(1, body, properties, frame_max)


def reading_frames(key, size, count, frame_max):
    """count publishes as sensors send readings: each with its own message-id and timestamp (one
    a second, from a fixed start), pre-encoded one after the other."""
    body = b"x" * size
    return [
        publish_frames("", key, body, frame_max, properties={"message-id": b"r-%08d" % i, "timestamp": 1700000000 + i})
        for i in range(count)
    ]


def delivery_size(tag, exchange, key, body_size, frame_max, persistent=False):
    """Bytes on the wire of one delivery to consumer `tag` (fixed for a whole scenario: the delivery
    tag is a fixed-width integer, the rest does not change)."""
    deliver = wire.method_frame(1, spec.BASIC_DELIVER, (tag.encode(), 1, False, exchange.encode(), key.encode()))
    properties = {"delivery-mode": 2} if persistent else None
    return len(deliver) + len(wire.content_frames(1, bytes(body_size), properties, frame_max))


class ConfirmedPublisher:
    """Publishes to one queue on a connection in confirm mode, with at most `window` publishes
    unconfirmed. The broker confirms a queue's publishes in order, so one count (`settled`:
    every publish up to it is acked or nacked) says where they are."""

    def __init__(self, conn, queue, size, persistent, body=None):
        """body: what each publish carries (default: size bytes of x)."""
        conn.call(spec.CONFIRM_SELECT, (False,))
        self.conn = conn
        self.one = publish_frames("", queue, b"x" * size if body is None else body, conn.frame_max, persistent)
        self.sent = self.settled = self.nacked = 0
        self.first_nacked = None  # the sequence number of the first nacked publish

    @property
    def acked(self):
        return self.settled - self.nacked

    def frames(self, count):
        """The next count publishes, encoded (each the same one here)."""
        return self.one * count

    def run(self, count, window, deadline, stop=None):
        """Publish `count` more and wait for their confirms. After a nack no more are sent (a
        broker says no when a budget is used up: the caller decides what that means); nor once
        stop() is true (another publisher failed). LoadError when the deadline passes first."""
        target = self.sent + count
        while self.settled < self.sent or (self.sent < target and not self.nacked):
            if stop is not None and stop():
                return
            room = min(window - (self.sent - self.settled), target - self.sent)
            if room > 0 and not self.nacked:
                self.conn.send(self.frames(room))
                self.sent += room
            for method_id, args in self.conn.events():
                if method_id == spec.BASIC_ACK or method_id == spec.BASIC_NACK:
                    tag, multiple = args[0], args[1]
                    settles = tag - self.settled if multiple else 1
                    if method_id == spec.BASIC_NACK and settles > 0:
                        self.nacked += settles
                        if self.first_nacked is None:
                            self.first_nacked = self.settled + 1 if multiple else tag
                    self.settled = max(self.settled, tag)
            if time.monotonic() > deadline:
                raise LoadError("%d of %d publishes confirmed in time" % (self.acked, target))


class Consumer(threading.Thread):
    """Counts whole deliveries by their bytes; acks (multiple) every ack_every when asked."""

    def __init__(
        self,
        host,
        port,
        queue,
        expected,
        exchange,
        key,
        size,
        ack_every,
        prefetch,
        timeout,
        tag="bench",
        persistent=False,
        tls=None,
    ):
        super().__init__(daemon=True)
        self.conn = Connection(host, port, timeout, tls=tls)
        self.conn.consume(queue, tag, no_ack=not ack_every, prefetch=prefetch)
        self.per_message = delivery_size(tag, exchange, key, size, self.conn.frame_max, persistent)
        self.expected = expected
        self.ack_every = ack_every
        self.received = 0
        self.finished_at = None
        self.error = None

    def run(self):
        conn = self.conn
        got = conn.unread()
        acked = 0
        try:
            while self.received < self.expected:
                got += len(conn.sock.recv(262144) or b"")
                self.received = got // self.per_message
                if self.ack_every and self.received - acked >= self.ack_every:
                    acked = self.received
                    conn.send(wire.method_frame(1, spec.BASIC_ACK, (acked, True)))
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


class Scraper:
    """A thread that GETs url every interval seconds while the with block runs (a Prometheus
    server scraping the broker)."""

    def __init__(self, url, interval):
        self.url, self.interval = url, interval
        self.stop = threading.Event()
        self.scrapes = 0

    def _run(self):
        import urllib.request

        while not self.stop.wait(self.interval):
            with urllib.request.urlopen(self.url, timeout=10) as response:
                response.read()
            self.scrapes += 1

    def __enter__(self):
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(15)


def throughput(host, port, count, size=16, ack_every=0, prefetch=1000, timeout=120, tls=None):
    """One publisher -> one queue -> one consumer (no-ack, or acking every ack_every); both over
    TLS with tls (an ssl.SSLContext)."""
    deadline = time.monotonic() + timeout
    queue = "bench-throughput"
    publisher = Connection(host, port, timeout, tls=tls)
    publisher.declare_queue(queue)
    publisher.call(spec.QUEUE_PURGE, (0, queue, False))  # what a previous run left
    consumer = Consumer(host, port, queue, count, "", queue, size, ack_every, prefetch, timeout, tls=tls)
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
    consumer.conn.hang_up()  # (it read the socket itself: the protocol cannot find the close-ok)
    return {"messages": count, "seconds": round(elapsed, 3), "msgs_per_s": round(count / elapsed)}


def confirms(
    host, port, count, size=16, window=1000, timeout=120, persistent=False, queue=None, keep=False, arguments=None
):
    """One publisher in confirm mode with at most `window` messages unconfirmed; nobody consumes.
    persistent: a durable queue and delivery-mode 2, so every confirm waits for the disk.
    keep: leave the messages in the queue (a restart is measured next), else delete it.
    arguments: the queue's (x-queue-mode...)."""
    deadline = time.monotonic() + timeout
    queue = queue or ("bench-persistent" if persistent else "bench-confirms")
    conn = Connection(host, port, timeout)
    conn.declare_queue(queue, durable=persistent, arguments=arguments)
    if not keep:
        conn.call(spec.QUEUE_PURGE, (0, queue, False))  # a previous run's
    publisher = ConfirmedPublisher(conn, queue, size, persistent)
    start = time.perf_counter()
    publisher.run(count, window, deadline)
    if publisher.nacked:
        raise LoadError("the broker nacked publish %d" % publisher.first_nacked)
    elapsed = time.perf_counter() - start
    if not keep:
        # queue.delete: a durable queue would otherwise keep its messages on disk between rounds
        conn.call(spec.QUEUE_DELETE, (0, queue, False, False, False))
    conn.close()
    return {"messages": count, "seconds": round(elapsed, 3), "msgs_per_s": round(count / elapsed)}


def fill(
    host,
    port,
    queue,
    count,
    size=100,
    publishers=4,
    window=1000,
    timeout=3600,
    arguments=None,
    progress=None,
    bodies=None,
):
    """`count` persistent messages into the durable `queue` (declared with `arguments`), published
    by `publishers` connections at once, each in confirm mode with at most `window` unconfirmed:
    a backlog built as fast as the broker takes it. bodies: one per publisher, which it sends
    again and again (sensor readings: one sensor per publisher); default size bytes of x each.
    progress(confirmed, seconds) is called about
    twice a second meanwhile, and once at the end. LoadError if the broker nacks a publish (a
    budget is used up: the error says after how many) or time runs out."""
    deadline = time.monotonic() + timeout
    shares = [count // publishers + (1 if i < count % publishers else 0) for i in range(publishers)]
    conns, senders, threads, errors = [], [], [], []
    failed = threading.Event()

    def publish(sender, share):
        try:
            sender.run(share, window, deadline, failed.is_set)
        except (OSError, LoadError) as e:
            errors.append(e)
            failed.set()

    try:
        for i in range(publishers):
            conns.append(Connection(host, port, min(timeout, SILENCE)))
            conns[-1].declare_queue(queue, durable=True, arguments=arguments)
            body = bodies[i % len(bodies)] if bodies else None
            senders.append(ConfirmedPublisher(conns[-1], queue, size, persistent=True, body=body))
        threads += [threading.Thread(target=publish, args=pair, daemon=True) for pair in zip(senders, shares)]
        start = time.perf_counter()
        for thread in threads:
            thread.start()
        next_sample = start + 0.5
        while time.monotonic() < deadline + 5:
            alive = [thread for thread in threads if thread.is_alive()]
            if not alive:
                break
            alive[0].join(max(0.0, next_sample - time.perf_counter()))
            if time.perf_counter() >= next_sample:
                # (the next moment moves on even with nobody to tell: otherwise, once past,
                # join(0) returned at once and this thread spun, taking a core from the brokers)
                if progress is not None:
                    progress(sum(s.acked for s in senders), time.perf_counter() - start)
                next_sample = time.perf_counter() + 0.5
        elapsed = time.perf_counter() - start
        confirmed = sum(s.acked for s in senders)
        if errors or any(t.is_alive() for t in threads):
            raise LoadError(
                "%d of %d publishes confirmed: %s" % (confirmed, count, errors[0] if errors else "timed out")
            )
        if any(s.nacked for s in senders):
            raise LoadError(
                "the broker refused publishes (basic.nack) once %d of %d were confirmed" % (confirmed, count)
            )
    finally:
        stuck = any(t.is_alive() for t in threads)
        for conn in conns:
            if stuck:
                conn.sock.close()  # a publisher may still be reading it: no close handshake
            else:
                conn.close()
    if progress is not None:
        progress(confirmed, elapsed)
    return {"messages": count, "seconds": round(elapsed, 3), "msgs_per_s": round(count / elapsed)}


def drain(host, port, queue, count, size=100, ack_every=100, prefetch=1000, timeout=3600):
    """One consumer takes `count` persistent messages already in `queue`, acking (multiple) every
    `ack_every`. The clock starts before it connects: what is measured is how fast the broker
    hands out a backlog it holds (from disk, after a restart)."""
    deadline = time.monotonic() + timeout
    start = time.perf_counter()
    silence = min(timeout, SILENCE)
    consumer = Consumer(host, port, queue, count, "", queue, size, ack_every, prefetch, silence, persistent=True)
    consumer.start()
    _finish([consumer], deadline)
    elapsed = consumer.finished_at - start
    # Hung up on, not closed: when the queue holds more than count, deliveries beyond them are
    # still coming in, cut anywhere, and the close handshake could not read past them. The
    # broker requeues what it had sent.
    consumer.conn.sock.close()
    return {"messages": count, "seconds": round(elapsed, 3), "msgs_per_s": round(count / elapsed)}


def latency(host, port, count, size=16, timeout=120, tls=None):
    """One message in flight: publish, wait for its delivery, repeat. p50/p99 in microseconds."""
    deadline = time.monotonic() + timeout
    queue = "bench-latency"
    publisher = Connection(host, port, timeout, tls=tls)
    publisher.declare_queue(queue)
    consumer = Connection(host, port, timeout, tls=tls)
    consumer.consume(queue, "bench", no_ack=True, prefetch=0)
    per_message = delivery_size("bench", "", queue, size, consumer.frame_max)
    one = publish_frames("", queue, b"x" * size, publisher.frame_max)
    times = []
    pending = consumer.unread()
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
    publisher.call(spec.EXCHANGE_DECLARE, (0, exchange, "fanout", False, False, False, False, False, None))
    consumers = []
    for i in range(queues):
        name = "bench-fanout-%d" % i
        publisher.declare_queue(name)
        publisher.call(spec.QUEUE_PURGE, (0, name, False))
        publisher.call(spec.QUEUE_BIND, (0, name, exchange, "", False, None))
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
        consumer.conn.hang_up()  # (as in throughput)
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
            conn = Connection(host, port, timeout)  # with its channel
            opened.append(conn)
    except Exception:
        close_all(opened)
        raise
    return opened


def close_all(connections):
    for conn in connections:
        conn.close()


# ---------------------------------------------------------------- streams (x-queue-type = stream)

_streams = [0]


def _stream(conn):
    """A new stream for one run of a scenario (deleted at its end: a stream keeps what it gets)."""
    _streams[0] += 1
    name = "bench-stream-%d-%d" % (int(time.time() * 1000) % 1000000, _streams[0])
    conn.declare_queue(name, durable=True, arguments={"x-queue-type": "stream"})
    return name


def _publish_confirmed(conn, name, count, size, window, deadline, readings=False):
    """Publish count messages to name with at most window unconfirmed: the seconds it took.
    readings: each with its own properties (reading_frames), else all the same."""
    conn.call(spec.CONFIRM_SELECT, (False,))
    one = publish_frames("", name, b"x" * size, conn.frame_max)
    frames = reading_frames(name, size, count, conn.frame_max) if readings else None
    sent = confirmed = 0
    start = time.perf_counter()
    while confirmed < count:
        room = min(window - (sent - confirmed), count - sent)
        if room > 0:
            conn.send(b"".join(frames[sent : sent + room]) if frames else one * room)
            sent += room
        for method_id, args in conn.events():
            if method_id == spec.BASIC_ACK:
                confirmed = args[0] if args[1] else max(confirmed, args[0])
            elif method_id == spec.BASIC_NACK:
                raise LoadError("the broker nacked publish %d" % args[0])
        if time.monotonic() > deadline:
            raise LoadError("%d of %d publishes confirmed in time" % (confirmed, count))
    return time.perf_counter() - start


def stream_publish(host, port, count, size=16, window=1000, timeout=120, readings=False):
    """One publisher in confirm mode (window unconfirmed) into a stream; readings: each publish
    with its own message-id and timestamp, as sensors send them."""
    deadline = time.monotonic() + timeout
    conn = Connection(host, port, timeout)
    name = _stream(conn)
    elapsed = _publish_confirmed(conn, name, count, size, window, deadline, readings)
    conn.call(spec.QUEUE_DELETE, (0, name, False, False, False))
    conn.close()
    return {"messages": count, "seconds": round(elapsed, 3), "msgs_per_s": round(count / elapsed)}


class StreamReader(threading.Thread):
    """A stream consumer from offset `start` that counts `expected` whole deliveries by their bytes
    (their length read from the first one: every delivery of a run has the same, the
    x-stream-offset header being a fixed-width long) and acks (multiple) every ack_every."""

    def __init__(self, host, port, name, start, expected, ack_every, prefetch, timeout, tag):
        super().__init__(daemon=True)
        self.conn = Connection(host, port, timeout)
        self.conn.consume(name, tag, False, prefetch, {"x-stream-offset": start})
        self.expected = expected
        self.ack_every = ack_every
        self.received = 0
        self.finished_at = None
        self.error = None

    def _first(self, data):
        """The length of the first delivery in data (method, header and body frames), or 0."""
        pos = 0
        for _ in range(3):
            if len(data) - pos < 7:
                return 0
            pos += 8 + int.from_bytes(data[pos + 3 : pos + 7], "big")
        return pos if pos <= len(data) else 0

    def run(self):
        conn = self.conn
        data = conn.unread_bytes()
        acked = 0
        try:
            per_message = self._first(data)
            while not per_message:
                data += conn.sock.recv(262144) or b""
                per_message = self._first(data)
            got = len(data)
            while self.received < self.expected:
                self.received = got // per_message
                if self.received - acked >= self.ack_every or self.received >= self.expected:
                    acked = self.received
                    conn.send(wire.method_frame(1, spec.BASIC_ACK, (acked, True)))
                if self.received < self.expected:
                    got += len(conn.sock.recv(262144) or b"")
            self.finished_at = time.perf_counter()
        except OSError as e:
            self.error = e


def stream_read(host, port, count, consumers=1, size=16, prefetch=1000, ack_every=100, timeout=120):
    """A stream of count messages (published first, with confirms: not timed) read by consumers,
    each from its own offset, count / consumers records each (the last to the end): deliveries
    per second from their start to the last one's end."""
    deadline = time.monotonic() + timeout
    conn = Connection(host, port, timeout)
    name = _stream(conn)
    _publish_confirmed(conn, name, count, size, 1000, deadline)
    share = count // consumers
    readers = []
    for i in range(consumers):
        expected = share if i < consumers - 1 else count - share * i
        readers.append(
            StreamReader(host, port, name, share * i, expected, ack_every, prefetch, timeout, "bench-%d" % i)
        )
    start = time.perf_counter()
    for reader in readers:
        reader.start()
    _finish(readers, deadline)
    elapsed = max(reader.finished_at for reader in readers) - start
    for reader in readers:
        reader.conn.hang_up()
    conn.call(spec.QUEUE_DELETE, (0, name, False, False, False))
    conn.close()
    return {
        "messages": count,
        "consumers": consumers,
        "seconds": round(elapsed, 3),
        "msgs_per_s": round(count / elapsed),
    }
