"""`hutch bench --mqtt`'s rows with many connections, against any MQTT broker on host:port:

    fan_in      SENSORS connections each publishing at RATE msg/s at QoS 1 (their PUBACKs
                awaited, none waited for before the next) for SECONDS, to one subscriber of
                `sensors/#` at QoS 1 that acknowledges each delivery: the p99 latency from a
                publish to its delivery, and the broker's CPU per message
    fan_out     one publisher at QoS 0 to FANOUT subscribers of `fan/#`: deliveries a second
    overload    two QoS 1 publishers, each with WINDOW PUBLISHes unacknowledged, ahead of one
                QoS 1 subscriber that takes SUBSCRIBER_RATE messages a second (a dashboard, a
                slow link): of the messages the broker PUBACKed, how many it delivered
                (mosquitto drops what is past its max_queued_messages, 1,000 by default)
    idle        IDLE connections (CONNECT, keep alive 0), all still answering a PINGREQ at the
                end: resident memory per connection

One thread drives all of a row's sockets through a selector (selectors), so a thousand sensors
cost the load generator one thread; the packets are written and read with hutch's own codec
(mqtt/packets.py), the same client for every broker.
"""

import json
import selectors
import socket
import struct
import threading
import time

from ..mqtt import packets
from .brokers import BenchError, cpu_times, rss_kb

STAMP = struct.Struct(">Q")  # a reading's payload starts with its publish time, in ns
SUBSCRIBER_RATE = 2000  # messages a second the overload row's subscriber takes at most


class Conn:
    """One non-blocking MQTT connection of a selector-driven row: whole packets in, bytes out."""

    def __init__(self, host, port, client_id, clean=True):
        self.sock = socket.create_connection((host, port), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.sendall(packets.connect(client_id, clean=clean, keep_alive=0, user=b"guest", password=b"guest"))
        self.buf = b""
        self.out = b""
        first, body = self.wait_packet()
        if first >> 4 != packets.CONNACK or body[1]:
            raise BenchError("MQTT CONNECT refused: %r" % body)
        self.sock.setblocking(False)

    def wait_packet(self):
        """The next packet, blocking (before the row's selector takes over)."""
        while True:
            found = self.packet()
            if found is not None:
                return found
            data = self.sock.recv(1 << 16)
            if not data:
                raise BenchError("the broker closed an MQTT connection")
            self.buf += data

    def packet(self):
        found = packets.split(self.buf, 0, 1 << 30)
        if found is None:
            return None
        first, start, end = found
        body = self.buf[start:end]
        self.buf = self.buf[end:]
        return first, body

    def read(self):
        """What the socket has (non-blocking); False once the broker closed it."""
        try:
            data = self.sock.recv(1 << 16)
        except BlockingIOError:
            return True
        if not data:
            return False
        self.buf += data
        return True

    def send(self, data):
        self.out += data
        self.flush()

    def flush(self):
        if self.out:
            try:
                sent = self.sock.send(self.out)
            except BlockingIOError:
                return
            self.out = self.out[sent:]

    def subscribe(self, topic_filter, qos):
        self.sock.setblocking(True)
        self.sock.sendall(packets.subscribe(1, [(topic_filter, qos)]))
        first, _ = self.wait_packet()
        if first >> 4 != packets.SUBACK:
            raise BenchError("no SUBACK")
        self.sock.setblocking(False)

    def close(self):
        try:
            self.sock.setblocking(True)
            self.sock.sendall(bytes((0xE0, 0)))
        except OSError:
            pass
        self.sock.close()


def publish_id(body):
    """The packet id of a QoS 1 or 2 PUBLISH's body (3.1.1)."""
    topic_len = (body[0] << 8) | body[1]
    return (body[2 + topic_len] << 8) | body[3 + topic_len], 4 + topic_len


def received(events, on_packet, row):
    """Read every ready connection of a selector's events, each whole packet to
    on_packet(conn, first octet, body)."""
    for key, _ in events:
        conn = key.data
        if not conn.read():
            raise BenchError("%s: the broker closed a connection" % row)
        while True:
            found = conn.packet()
            if found is None:
                break
            on_packet(conn, *found)


def percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))] if ordered else 0


def fan_in(host, port, pid, sensors, rate, seconds, numbered=False):
    """(p99 latency in ms, broker CPU per message in µs, messages delivered, (its user and its
    system CPU per message in µs)) of SENSORS at RATE.
    numbered: each reading a JSON object that names it (x-sensor-id, x-sensor-seq: what the
    broker deduplicates by) and carries its publish time, instead of the time alone."""
    subscriber = Conn(host, port, b"fan-in-collector")
    subscriber.subscribe(b"sensors/#", 1)
    conns = [Conn(host, port, b"sensor-%d" % i) for i in range(sensors)]
    total = sensors * rate * seconds
    selector = selectors.DefaultSelector()
    for conn in conns + [subscriber]:
        selector.register(conn.sock, selectors.EVENT_READ, conn)
    latencies = []

    def on_packet(conn, first, body):
        if conn is subscriber and first >> 4 == packets.PUBLISH:
            packet_id, at = publish_id(body)
            sent_at = json.loads(bytes(body[at:]))["t"] if numbered else STAMP.unpack_from(body, at)[0]
            latencies.append(time.perf_counter_ns() - sent_at)
            subscriber.send(packets.ack(packets.PUBACK, packet_id))

    pad = b"x" * 8
    interval = 1.0 / rate
    start = time.perf_counter()
    user_before, system_before = cpu_times(pid)
    due = [start + (i / sensors) * interval for i in range(sensors)]  # each sensor's first reading, spread
    sent = [0] * sensors
    deadline = start + seconds + 60
    while len(latencies) < total:
        now = time.perf_counter()
        if now > deadline:
            raise BenchError("fan-in: %d of %d readings delivered within a minute of the end" % (len(latencies), total))
        for i, conn in enumerate(conns):
            if sent[i] < rate * seconds and due[i] <= now:
                sent[i] += 1
                due[i] += interval
                if numbered:
                    payload = b'{"x-sensor-id": "sensor-%d", "x-sensor-seq": %d, "t": %d}' % (
                        i, sent[i], time.perf_counter_ns())  # fmt: skip
                else:
                    payload = STAMP.pack(time.perf_counter_ns()) + pad
                conn.send(packets.publish(b"sensors/%d/temp" % i, payload, 1, packet_id=sent[i] % 65535 + 1))
        received(selector.select(timeout=0.002), on_packet, "fan-in")
        subscriber.flush()
    user, system = cpu_times(pid)
    user, system = (user - user_before) / total * 1e6, (system - system_before) / total * 1e6
    for conn in conns + [subscriber]:
        conn.close()
    return percentile(latencies, 99) / 1e6, user + system, len(latencies), (user, system)


def fan_out(host, port, subscribers, count):
    """Deliveries a second: one QoS 0 publisher, each message to every subscriber."""
    subs = []
    for i in range(subscribers):
        conn = Conn(host, port, b"fan-out-%d" % i)
        conn.subscribe(b"fan/#", 0)
        subs.append(conn)
    got = [0]
    done = threading.Event()

    def collect():
        selector = selectors.DefaultSelector()
        for conn in subs:
            selector.register(conn.sock, selectors.EVENT_READ, conn)
        while got[0] < count * subscribers:
            for key, _ in selector.select(timeout=30):
                conn = key.data
                if not conn.read():
                    return
                while conn.packet() is not None:
                    got[0] += 1
        done.set()

    collector = threading.Thread(target=collect, daemon=True)
    collector.start()
    pub = Conn(host, port, b"fan-out-publisher")
    pub.sock.setblocking(True)
    batch = packets.publish(b"fan/out", b"x" * 16) * 100
    start = time.perf_counter()
    for _ in range(count // 100):
        pub.sock.sendall(batch)
    if not done.wait(600):
        raise BenchError("fan-out: %d of %d deliveries" % (got[0], count * subscribers))
    elapsed = time.perf_counter() - start
    for conn in subs + [pub]:
        conn.close()
    return count * subscribers / elapsed


def overload(host, port, per_publisher, window):
    """(PUBACKed, delivered) when two QoS 1 publishers run WINDOW ahead of one QoS 1 subscriber."""
    subscriber = Conn(host, port, b"overload-sub", clean=False)
    subscriber.subscribe(b"overload/#", 1)
    pubs = [Conn(host, port, b"overload-pub-%d" % i) for i in range(2)]
    selector = selectors.DefaultSelector()
    for conn in pubs + [subscriber]:
        selector.register(conn.sock, selectors.EVENT_READ, conn)
    sent = [0, 0]
    acked = [0, 0]
    delivered = set()

    def on_packet(conn, first, body):
        if conn is subscriber and first >> 4 == packets.PUBLISH:
            packet_id, at = publish_id(body)
            delivered.add(bytes(body[at:]))
            subscriber.send(packets.ack(packets.PUBACK, packet_id))
        elif first >> 4 == packets.PUBACK:
            acked[pubs.index(conn)] += 1

    start = last_delivery = time.monotonic()
    while True:
        for i, conn in enumerate(pubs):
            while sent[i] < per_publisher and sent[i] - acked[i] < window:
                sent[i] += 1
                payload = b"%d:%d" % (i, sent[i])
                conn.send(packets.publish(b"overload/%d" % i, payload, 1, packet_id=sent[i] % 65535 + 1))
        now = time.monotonic()
        behind = len(delivered) < (now - start) * SUBSCRIBER_RATE  # (else the subscriber is not read)
        before = len(delivered)
        events = selector.select(timeout=0.05)
        received([event for event in events if behind or event[0].data is not subscriber], on_packet, "overload")
        if len(delivered) > before:
            last_delivery = now
        if sum(acked) == 2 * per_publisher:
            if len(delivered) >= sum(acked):
                break
            if now - last_delivery > 3:  # nothing more comes: what was dropped stays dropped
                break
    for conn in pubs + [subscriber]:
        conn.close()
    return sum(acked), len(delivered)


def idle(host, port, pid, count):
    """(KB of resident memory per idle connection, whether every one answered a PINGREQ after)."""
    before = rss_kb(pid)
    conns = [Conn(host, port, b"idle-%d" % i) for i in range(count)]
    time.sleep(0.5)
    after = rss_kb(pid)
    held = True
    for conn in conns:
        conn.sock.setblocking(True)
        try:
            conn.sock.sendall(bytes((0xC0, 0)))
            held = held and conn.wait_packet()[0] >> 4 == packets.PINGRESP
        except (OSError, BenchError):
            held = False
    for conn in conns:
        conn.close()
    return (after - before) / count, held
