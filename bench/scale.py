"""The scale rows of `hutch bench`, as the edge sees them: many sensors, many queues, many consumers.

    sensors(broker, ...)      N sensor connections, each publishing `rate` readings a second with
                              confirms for `seconds`: p50/p99 confirm latency, the broker's CPU and RSS
    many_queues(broker, ...)  N queues declared one after the other: declares a second, RSS per queue
    many_consumers(broker, ...)   one publisher, N consumers (each its own connection) on one queue

Each takes the broker (host, port and, for CPU and memory, pid) and returns a dict of figures.
Like bench/loadgen.py, standard library only and bounded: every wait has a deadline, and a
scenario that runs out of time raises LoadError. The sensors are one thread with non-blocking
sockets (a thread each would measure the load generator): each sensor's reading goes out at its
own moment of every period, and its confirm's latency is from that send to the basic.ack read.
"""

import selectors
import struct
import time

from ..codec import spec, wire
from .brokers import cpu_seconds
from .loadgen import Connection, Consumer, LoadError, publish_frames

ACK_FRAME = 21  # basic.ack on the wire: frame header 7, method 4, tag 8, bits 1, frame-end 1
ACK_ID = struct.pack(">I", spec.BASIC_ACK)


def rss_mb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise LoadError("no VmRSS for process %d" % pid)


class _Sensor:
    """One sensor's connection, in confirm mode, read without blocking."""

    def __init__(self, host, port, queue, timeout, number):
        self.conn = Connection(host, port, timeout)
        self.conn.call(spec.CONFIRM_SELECT, (False,))
        self.sock = self.conn.sock
        self.sock.setblocking(False)
        self.reading = publish_frames("", queue, b'{"t":21.5,"h":40}', self.conn.frame_max)
        self.sent = 0  # readings published
        self.times = {}  # publish sequence number -> when it was sent (perf_counter)
        self.rx = b""
        self.number = number

    def send(self, now):
        self.sent += 1
        self.times[self.sent] = now
        self.sock.send(self.reading)  # (a few dozen octets: the socket buffer always takes them)

    def received(self, now, latencies):
        """Read what came; each confirm's latency into latencies. False when the broker hung up."""
        try:
            data = self.sock.recv(65536)
        except BlockingIOError:
            return True
        if not data:
            return False
        rx = self.rx + data
        pos = 0
        while len(rx) - pos >= 7:
            size = struct.unpack_from(">I", rx, pos + 3)[0]
            if len(rx) - pos < size + 8:
                break
            if rx[pos] == 1 and size == 13 and rx[pos + 7 : pos + 11] == ACK_ID:
                tag, bits = struct.unpack_from(">QB", rx, pos + 11)
                for seq in [s for s in self.times if s <= tag] if bits & 1 else [tag]:
                    sent = self.times.pop(seq, None)
                    if sent is not None:
                        latencies.append(now - sent)
            elif rx[pos] == 1:
                raise LoadError("sensor %d: the broker sent method %r" % (self.number, rx[pos + 7 : pos + 11]))
            pos += size + 8
        self.rx = rx[pos:]
        return True


def sensors(broker, count=1000, rate=10, seconds=10.0, timeout=300):
    """count sensor connections, each publishing rate readings a second with confirms to one queue
    for `seconds`: the confirm latency's p50/p99 (ms), the broker's CPU meanwhile (% of one core)
    and its RSS with them connected (MB). The connections open first (not timed)."""
    deadline = time.monotonic() + timeout
    host, port = broker.host, broker.port
    queue = "bench-sensors"
    control = Connection(host, port, timeout)
    control.declare_queue(queue)
    control.call(spec.QUEUE_PURGE, (0, queue, False))
    control.close()
    fleet = []
    selector = selectors.DefaultSelector()
    try:
        for number in range(count):
            sensor = _Sensor(host, port, queue, min(timeout, 60), number)
            fleet.append(sensor)
            selector.register(sensor.sock, selectors.EVENT_READ, sensor)
            if time.monotonic() > deadline:
                raise LoadError("%d of %d sensors connected in time" % (number, count))
        period = 1.0 / rate
        latencies = []
        cpu_before = cpu_seconds(broker.pid) if broker.pid else None
        start = time.perf_counter()
        end = start + seconds
        rounds = int(seconds * rate)
        # sensor i sends its k-th reading at start + k * period + i * period / count
        step = period / count
        next_round, next_sensor = 0, 0
        while True:
            now = time.perf_counter()
            while next_round < rounds and start + next_round * period + next_sensor * step <= now:
                fleet[next_sensor].send(now)
                next_sensor += 1
                if next_sensor == count:
                    next_sensor, next_round = 0, next_round + 1
            waiting = next_round < rounds or any(sensor.times for sensor in fleet)
            if not waiting:
                break
            if now > end + 30 or time.monotonic() > deadline:
                raise LoadError("sensors: %d confirms missing" % sum(len(s.times) for s in fleet))
            due = start + next_round * period + next_sensor * step if next_round < rounds else now + 0.01
            for key, _ in selector.select(max(0.0, min(due - now, 0.01))):
                if not key.data.received(time.perf_counter(), latencies):
                    raise LoadError("sensor %d: the broker closed the connection" % key.data.number)
        elapsed = time.perf_counter() - start
        figures = {}
        if cpu_before is not None:
            figures["sensors-cpu"] = round(100 * (cpu_seconds(broker.pid) - cpu_before) / elapsed, 1)
            figures["sensors-rss"] = round(rss_mb(broker.pid), 1)
        latencies.sort()
        figures["sensors-p50"] = round(latencies[len(latencies) // 2] * 1000, 2)
        figures["sensors-p99"] = round(latencies[min(len(latencies) - 1, len(latencies) * 99 // 100)] * 1000, 2)
        return figures
    finally:
        selector.close()
        for sensor in fleet:
            sensor.sock.close()  # hung up: each broker counts that as a closed connection
        try:
            control = Connection(host, port, timeout)
            control.call(spec.QUEUE_DELETE, (0, queue, False, False, False))
            control.close()
        except (OSError, LoadError):
            pass


def many_queues(broker, count=10000, timeout=600):
    """count queues declared one after the other on one channel (each waits for its declare-ok):
    declares a second, and the broker's RSS they add, per queue (KB). Deleted after."""
    deadline = time.monotonic() + timeout
    conn = Connection(broker.host, broker.port, timeout)
    names = ["bench-many-%05d" % i for i in range(count)]
    try:
        time.sleep(0.5)
        before = rss_mb(broker.pid) if broker.pid else None
        start = time.perf_counter()
        for name in names:
            conn.declare_queue(name)
            if time.monotonic() > deadline:
                raise LoadError("queues: %d of %d declared in time" % (names.index(name), count))
        elapsed = time.perf_counter() - start
        time.sleep(0.5)
        figures = {"queues-rate": round(count / elapsed)}
        if before is not None:
            figures["queues-rss"] = round((rss_mb(broker.pid) - before) * 1024 / count, 2)
        return figures
    finally:
        # queue.delete without waiting for each reply (its replies read at the end)
        conn.send(b"".join(wire.method_frame(1, spec.QUEUE_DELETE, (0, name, False, False, True)) for name in names))
        conn.close()


def many_consumers(broker, count, consumers=100, size=16, timeout=120):
    """One publisher to one queue, `consumers` no-ack consumers on it, each its own connection:
    deliveries a second until they all have been delivered, whoever got them."""
    deadline = time.monotonic() + timeout
    host, port = broker.host, broker.port
    queue = "bench-consumers"
    publisher = Connection(host, port, timeout)
    publisher.declare_queue(queue)
    publisher.call(spec.QUEUE_PURGE, (0, queue, False))
    readers = [
        Consumer(host, port, queue, 1 << 62, "", queue, size, 0, 0, timeout, tag="bench-%02d" % (i % 100))
        for i in range(consumers)
    ]
    for reader in readers:
        reader.start()
    one = publish_frames("", queue, b"x" * size, publisher.frame_max)
    start = time.perf_counter()
    for sent in range(0, count, 1000):
        publisher.send(one * min(1000, count - sent))
    while sum(reader.received for reader in readers) < count:
        if time.monotonic() > deadline:
            raise LoadError("consumers: %d of %d delivered in time" % (sum(r.received for r in readers), count))
        time.sleep(0.001)
    elapsed = time.perf_counter() - start
    publisher.call(spec.QUEUE_DELETE, (0, queue, False, False, False))
    publisher.close()
    for reader in readers:
        reader.conn.hang_up()
    return {"consumers-100": round(count / elapsed)}
