"""`hutch bench --mqtt`: MQTT rows against hutch (`hutch serve --mqtt-port`) and, with
--start-mosquitto, Debian's mosquitto (a single-threaded C broker that keeps messages in RAM,
started here on a free port, no persistence), side by side in one run.

    qos0        one publisher to one subscriber, 16 B, QoS 0: messages a second, from the first
                publish until the subscriber has them all
    qos1        the same at QoS 1, the publisher keeping WINDOW PUBLISHes unacknowledged, the
                subscriber acknowledging each delivery: hutch answers PUBACK once the message
                is on disk (its subscription queue is durable), mosquitto once it has it in RAM
    per-conn    resident memory per idle MQTT connection (CONNECT, keep alive 0), over
                IDLE connections

The load is MQTT packets written and read with hutch's own codec (mqtt/packets.py) over plain
sockets, one thread each for the publisher and the subscriber: the same client for both
brokers.
"""

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

from ..mqtt import packets
from .brokers import BenchError, Hutch, free_port, rss_kb

MOSQUITTO = "/usr/sbin/mosquitto"
SIZE = 16
WINDOW = 100
IDLE = 500
ROWS = (
    ("qos0", "MQTT QoS 0, 16 B, 1 publisher -> 1 subscriber", "msg/s"),
    ("qos1", "MQTT QoS 1, 16 B, window %d, subscriber acks" % WINDOW, "msg/s"),
    ("per-conn", "RSS per idle MQTT connection (%d)" % IDLE, "KB"),
)


class Client:
    """One MQTT connection: packets out, whole packets in."""

    def __init__(self, host, port, client_id, clean=True):
        self.sock = socket.create_connection((host, port), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.sock.sendall(packets.connect(client_id, clean=clean, keep_alive=0, user=b"guest", password=b"guest"))
        first, body = self.packet()
        if first >> 4 != packets.CONNACK or body[1]:
            raise BenchError("MQTT CONNECT refused: %r" % body)

    def packet(self):
        while True:
            found = packets.split(self.buf, 0, 1 << 30)
            if found is not None:
                first, start, end = found
                body = self.buf[start:end]
                self.buf = self.buf[end:]
                return first, body
            data = self.sock.recv(1 << 16)
            if not data:
                raise BenchError("the broker closed the MQTT connection")
            self.buf += data

    def subscribe(self, topic, qos):
        self.sock.sendall(packets.subscribe(1, [(topic, qos)]))
        first, _ = self.packet()
        if first >> 4 != packets.SUBACK:
            raise BenchError("no SUBACK")

    def close(self):
        try:
            self.sock.sendall(bytes((0xE0, 0)))
        except OSError:
            pass
        self.sock.close()


def _subscriber(host, port, qos, count, done):
    client = Client(host, port, b"bench-sub-%d" % qos, clean=False)
    client.subscribe(b"bench/%d/#" % qos, qos)
    done["ready"].set()
    got = 0
    while got < count:
        first, body = client.packet()
        if first >> 4 != packets.PUBLISH:
            continue
        got += 1
        if (first >> 1) & 3:
            topic_len = (body[0] << 8) | body[1]
            client.sock.sendall(packets.ack(packets.PUBACK, (body[2 + topic_len] << 8) | body[3 + topic_len]))
    done["end"] = time.perf_counter()
    client.close()


def throughput(host, port, qos, count):
    """Messages a second, one publisher to one subscriber at this QoS."""
    done = {"ready": threading.Event()}
    sub = threading.Thread(target=_subscriber, args=(host, port, qos, count, done), daemon=True)
    sub.start()
    if not done["ready"].wait(30):
        raise BenchError("the subscriber did not subscribe")
    pub = Client(host, port, b"bench-pub-%d" % qos)
    topic = b"bench/%d/readings" % qos
    payload = b"x" * SIZE
    start = time.perf_counter()
    if qos == 0:
        batch = packets.publish(topic, payload) * 100
        for _ in range(count // 100):
            pub.sock.sendall(batch)
        for _ in range(count % 100):
            pub.sock.sendall(packets.publish(topic, payload))
    else:
        sent = acked = 0
        while acked < count:
            while sent < count and sent - acked < WINDOW:
                sent += 1
                pub.sock.sendall(packets.publish(topic, payload, 1, packet_id=sent % 65535 + 1))
            first, _ = pub.packet()
            if first >> 4 == packets.PUBACK:
                acked += 1
    sub.join(600)
    pub.close()
    if "end" not in done:
        raise BenchError("the subscriber did not get all %d messages" % count)
    return count / (done["end"] - start)


def per_connection(host, port, pid, count):
    """KB of resident memory per idle connection (CONNECT, keep alive 0)."""
    before = rss_kb(pid)
    clients = [Client(host, port, b"idle-%d" % i) for i in range(count)]
    time.sleep(0.5)
    after = rss_kb(pid)
    for client in clients:
        client.close()
    return (after - before) / count


class Mosquitto:
    def __init__(self, workdir):
        self.host, self.port = "127.0.0.1", free_port()
        conf = os.path.join(workdir, "mosquitto.conf")
        with open(conf, "w") as f:
            f.write("listener %d 127.0.0.1\nallow_anonymous true\npersistence false\nmax_connections -1\n" % self.port)
        if not os.path.exists(MOSQUITTO):
            raise BenchError("no %s: apt install mosquitto (make test installs it)" % MOSQUITTO)
        self.proc = subprocess.Popen([MOSQUITTO, "-c", conf], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        self.pid = self.proc.pid

    def start(self):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection((self.host, self.port), timeout=1).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise BenchError("mosquitto did not listen on %d" % self.port)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)


def run(args):
    """The rows, for hutch and (--start-mosquitto) mosquitto; prints the table. Exit code."""
    workdir = tempfile.mkdtemp(prefix="hutch-bench-mqtt-")
    plan = [("hutch", lambda: Hutch("c", workdir, mqtt=True))]
    if args.start_mosquitto:
        plan.append(("mosquitto", lambda: Mosquitto(workdir)))
    results = {}
    for key, make in plan:
        broker = make().start()
        try:
            port = broker.mqtt_port if key == "hutch" else broker.port
            print("%s: MQTT on %s:%d" % (key, broker.host, port), file=sys.stderr, flush=True)
            results[key] = {
                "qos0": throughput(broker.host, port, 0, args.count),
                "qos1": throughput(broker.host, port, 1, max(1000, args.count // 4)),
                "per-conn": per_connection(broker.host, port, broker.pid, IDLE),
            }
        finally:
            broker.stop()
    keys = [key for key, _ in plan]
    print(
        "%-52s %-6s %s" % ("scenario", "unit", "  ".join("%12s" % k for k in keys))
        + ("  hutch/mosquitto" if len(keys) > 1 else "")
    )
    for row, title, unit in ROWS:
        figures = [results[k][row] for k in keys]
        line = "%-52s %-6s %s" % (
            title,
            unit,
            "  ".join("%12s" % ("{:,.1f}".format(f) if unit == "KB" else "{:,.0f}".format(f)) for f in figures),
        )
        if len(keys) > 1 and figures[1]:
            line += "  %14.2f" % (figures[0] / figures[1])
        print(line)
    print("hutch PUBACKs a QoS 1 message once its durable queue has it on disk; mosquitto keeps it in RAM.")
    return 0
