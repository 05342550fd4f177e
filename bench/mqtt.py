"""`hutch bench --mqtt`: MQTT rows against hutch (`hutch serve --mqtt-port`) and, with
--start-mosquitto, Debian's mosquitto (a single-threaded C broker that keeps messages in RAM,
started here on a free port, no persistence), side by side in one run.

    qos0        one publisher to one subscriber, 16 B, QoS 0: messages a second, from the first
                publish until the subscriber has them all
    qos1        the same at QoS 1, the publisher keeping WINDOW PUBLISHes unacknowledged, the
                subscriber acknowledging each delivery: hutch answers PUBACK once the message
                is on disk (its subscription queue is durable), mosquitto once it has it in RAM
    qos1-memory the qos1 row to a clean session's subscriber: its queue is in memory, so
                neither broker keeps the messages on disk
    Each with the broker's user and system CPU per message over the row (its process's).
    And the rows with many connections of bench/mqtt_load.py: fan-in of 1,000 sensors (p99
    latency, broker CPU per message), fan-out to 100 subscribers, two QoS 1 publishers ahead
    of one subscriber (what was PUBACKed and delivered), 10,000 idle connections (RSS each)
    qos1-ws     the qos1 row over WebSocket (ws://, subprotocol mqtt): hutch's --mqtt-ws-port
                and (with --start-rabbitmq) RabbitMQ's rabbitmq_web_mqtt; mosquitto's Debian
                build opens no websockets listener
    floor       (a line under the table) the fan-in against bench/mqtt_floor.py, the least a
                Python process does per reading: what any Python broker pays before its own work
    uplink      (with --start-mosquitto) a gateway's bridge to an MQTT cloud: the qos1 row's
                publisher into the gateway, whose bridge forwards at QoS 1 to an upstream
                mosquitto, where the subscriber is: hutch's bridge (an up bridge from amq.topic,
                each message on disk at the gateway until upstream's PUBACK) against mosquitto's
                own bridge (`topic # out 1`, in RAM), to the same upstream mosquitto

With --start-rabbitmq, RabbitMQ (its rabbitmq_mqtt and rabbitmq_web_mqtt plugins) gets the
qos0, qos1 and qos1-ws rows too.

The load is MQTT packets written and read with hutch's own codec (mqtt/packets.py) over plain
sockets (or in WebSocket frames), one thread each for the publisher and the
subscriber: the same client for every broker.
"""

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

from ..codec import websocket
from ..mqtt import packets
from . import mqtt_load
from .brokers import BenchError, Hutch, RabbitMQ, cpu_times, free_port, wait_for_port

MOSQUITTO = "/usr/sbin/mosquitto"
SIZE = 16
WINDOW = 100
RATE = 2  # each fan-in sensor's readings a second
QUIET = 10  # s with no message, once the publisher is through, that end a throughput row's wait
FANOUT = 100


class WebSocketStream:
    """A client's WebSocket over a connected socket, with a socket's sendall and recv: each
    sendall one binary frame (masked, as a client's are), recv the octets of the frames that
    came. The upgrade is wsproto's, the frames codec/websocket.py's (hutch's listener's own)."""

    def __init__(self, sock, host, path):
        from wsproto import ConnectionType, WSConnection
        from wsproto.events import AcceptConnection, Request

        self.sock = sock
        upgrade = WSConnection(ConnectionType.CLIENT)
        sock.sendall(upgrade.send(Request(host=host, target=path, subprotocols=["mqtt"])))
        while True:
            data = sock.recv(1 << 16)
            if not data:
                raise BenchError("the broker closed the WebSocket handshake")
            upgrade.receive_data(data)
            for event in upgrade.events():
                if isinstance(event, AcceptConnection):
                    self.reader = websocket.FrameReader(masked=False)
                    return
                raise BenchError("the WebSocket upgrade was refused: %r" % (event,))

    def sendall(self, data):
        self.sock.sendall(websocket.frame(websocket.BINARY, data, os.urandom(4)))

    def recv(self, size):
        while True:
            data = self.sock.recv(size)
            if not data:
                return b""
            got = []
            for opcode, payload in self.reader.feed(data):
                if opcode == websocket.BINARY:
                    got.append(payload)
                elif opcode == websocket.PING:
                    self.sock.sendall(websocket.frame(websocket.PONG, payload, os.urandom(4)))
                elif opcode == websocket.CLOSE:
                    return b""
            if got:
                return b"".join(got)

    def close(self):
        self.sock.close()


class Client:
    """One MQTT connection: packets out, whole packets in; ws_path: over WebSocket, to that path."""

    def __init__(self, host, port, client_id, clean=True, ws_path=None):
        self.sock = socket.create_connection((host, port), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if ws_path is not None:
            self.sock = WebSocketStream(self.sock, "%s:%d" % (host, port), ws_path)
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


def _subscriber(host, port, qos, count, done, ws_path, clean):
    """Takes the row's messages; done["got"] and done["end"]: how many came, and when the last
    did. Ends when all came, or when the publisher is through and QUIET s pass with none (a
    broker that dropped some: mosquitto past its max_queued_messages). clean: a clean session
    (else a persistent one, whose queue is durable at hutch)."""
    client = Client(host, port, b"bench-sub-%d" % qos, clean=clean, ws_path=ws_path)
    client.subscribe(b"bench/%d/#" % qos, qos)
    getattr(client.sock, "sock", client.sock).settimeout(QUIET)  # (a WebSocketStream's socket)
    done["ready"].set()
    got = 0
    while got < count:
        try:
            first, body = client.packet()
        except TimeoutError:
            if done.get("published"):
                break
            continue
        if first >> 4 != packets.PUBLISH:
            continue
        got += 1
        done["end"] = time.perf_counter()
        if (first >> 1) & 3:
            topic_len = (body[0] << 8) | body[1]
            client.sock.sendall(packets.ack(packets.PUBACK, (body[2 + topic_len] << 8) | body[3 + topic_len]))
    done["got"] = got
    client.close()


def throughput(host, port, qos, count, subscribe_at=None, ws_path=None, dropped=None, clean=False):
    """Messages a second, one publisher to one subscriber at this QoS; subscribe_at: (host, port)
    of another broker the subscriber is on (the uplink row's upstream); ws_path: both over
    WebSocket, to that path. dropped: None, or a list a broker that may drop messages (the
    comparison's) has the count of those that did not come appended to; the figure is then
    those that came a second. hutch dropping one is an error. clean: the subscriber's session
    is clean (its queue in memory), else persistent."""
    done = {"ready": threading.Event()}
    sub_host, sub_port = subscribe_at or (host, port)
    args = (sub_host, sub_port, qos, count, done, ws_path, clean)
    sub = threading.Thread(target=_subscriber, args=args, daemon=True)
    sub.start()
    if not done["ready"].wait(30):
        raise BenchError("the subscriber did not subscribe")
    pub = Client(host, port, b"bench-pub-%d" % qos, ws_path=ws_path)
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
    done["published"] = True
    sub.join(600)
    pub.close()
    got = done.get("got", 0)
    if got < count:
        if dropped is None or not got:
            raise BenchError("the subscriber got %d of %d messages" % (got, count))
        dropped.append(count - got)
    return got / (done["end"] - start)


class Mosquitto:
    def __init__(self, workdir, bridge_to=None, unbounded=False):
        """bridge_to: an upstream's port, to which this one bridges what is published here (QoS 1);
        unbounded (and with bridge_to): no message dropped for a client that lags
        (max_queued_messages 0), as the uplink row must count every one."""
        self.host, self.port = "127.0.0.1", free_port()
        conf = os.path.join(workdir, "mosquitto-%d.conf" % self.port)
        with open(conf, "w") as f:
            f.write("listener %d 127.0.0.1\nallow_anonymous true\npersistence false\nmax_connections -1\n" % self.port)
            if unbounded or bridge_to is not None:
                f.write("max_queued_messages 0\n")
            if bridge_to is not None:
                f.write("connection uplink\naddress 127.0.0.1:%d\n" % bridge_to)
                f.write("topic bench/# out 1\ncleansession false\n")
        if not os.path.exists(MOSQUITTO):
            raise BenchError("no %s: apt install mosquitto (make test installs it)" % MOSQUITTO)
        self.proc = subprocess.Popen([MOSQUITTO, "-c", conf], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        self.pid = self.proc.pid

    def start(self):
        wait_for_port(self.host, self.port, self.proc, "mosquitto", 30)
        return self

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)


def sizes(count):
    """The rows' sizes for --count (the QoS 0 row's messages): 100,000 gives the full rows, 1,000
    sensors and 10,000 idle connections; CI's smaller counts, smaller rows."""
    return {
        "sensors": min(1000, max(50, count // 100)),
        "fanout": min(10000, max(100, count // 50)),
        "overload": min(10000, max(1000, count // 10)),
        "idle": min(10000, max(500, count // 10)),
        "seconds": 10 if count >= 100000 else 3,  # the fan-in's length
    }


def rows(size):
    """(key, title, unit) of each row, in order."""
    return (
        ("qos0", "MQTT QoS 0, 16 B, 1 publisher -> 1 subscriber", "msg/s"),
        ("qos0-user", "... the broker's CPU per message: user", "µs"),
        ("qos0-system", "... the broker's CPU per message: system", "µs"),
        ("qos1", "MQTT QoS 1, 16 B, window %d, subscriber acks" % WINDOW, "msg/s"),
        ("qos1-user", "... the broker's CPU per message: user", "µs"),
        ("qos1-system", "... the broker's CPU per message: system", "µs"),
        ("qos1-ws", "... the same over WebSocket (ws://)", "msg/s"),
        ("qos1-memory", "... to a clean session (its queue in memory)", "msg/s"),
        ("qos1-memory-user", "... the broker's CPU per message: user", "µs"),
        ("qos1-memory-system", "... the broker's CPU per message: system", "µs"),
        ("fan-in-p99", "fan-in: %d sensors x %d msg/s, QoS 1: p99 latency" % (size["sensors"], RATE), "ms"),
        ("fan-in-cpu", "... broker CPU per message", "µs"),
        ("fan-in-user", "... of it user (the broker's own code)", "µs"),
        ("fan-in-system", "... of it system (the kernel: sockets, disk)", "µs"),
        ("fan-out", "fan-out: 1 -> %d subscribers, QoS 0: deliveries" % FANOUT, "msg/s"),
        ("fan-out-user", "... the broker's CPU per delivery: user", "µs"),
        ("fan-out-system", "... the broker's CPU per delivery: system", "µs"),
        ("overload", "QoS 1, 2 publishers > a 2,000 msg/s subscriber: PUBACKed delivered", "%"),
        ("idle", "RSS per idle MQTT connection (%d)" % size["idle"], "KB"),
        ("idle-held", "... all %d still answering PINGREQ" % size["idle"], "yes=1"),
        ("uplink", "uplink: QoS 1 -> gateway -> its bridge -> mosquitto", "msg/s"),
    )


def _shown(figure, unit):
    if figure is None:
        return "-"
    return "{:,.0f}".format(figure) if unit == "msg/s" else "{:,.1f}".format(figure)


def uplink(key, workdir, count):
    """The uplink row of one gateway (hutch or mosquitto) bridging to a mosquitto started here."""
    upstream = Mosquitto(workdir, unbounded=True).start()
    try:
        if key == "hutch":
            config = os.path.join(workdir, "uplink.toml")
            with open(config, "w") as f:
                f.write('[[bridge]]\nname = "cloud"\nuri = "mqtt://127.0.0.1:%d"\n' % upstream.port)
                f.write('source_exchange = "amq.topic"\nbinding_key = "bench.#"\ntopic = "{routing_key}"\n')
            gateway = Hutch("c", workdir, config=config, mqtt=True).start()
            port = gateway.mqtt_port
        else:
            gateway = Mosquitto(workdir, bridge_to=upstream.port).start()
            port = gateway.port
        try:
            time.sleep(1)  # (the bridge's link up)
            return throughput(gateway.host, port, 1, count, (upstream.host, upstream.port))
        finally:
            gateway.stop()
    finally:
        upstream.stop()


def measure(host, port, pid, count, size, ws_port=None, lossy=False):
    """{row: figure} of one broker; ws_port: its MQTT over WebSocket listener's (path /mqtt);
    lossy: a broker that may drop what a lagging subscriber has not taken (mosquitto): its
    throughput rows count what came, and "dropped" says how much did not."""
    # The idle connections first: after the other rows, what their connections and messages
    # freed would hold the idle ones, and the broker's memory would not grow by what each costs.
    per_conn, held = mqtt_load.idle(host, port, pid, size["idle"])
    p99, cpu, _, (user, system) = mqtt_load.fan_in(host, port, pid, size["sensors"], RATE, size["seconds"])
    pubacked, delivered = mqtt_load.overload(host, port, size["overload"], WINDOW)
    dropped = [] if lossy else None
    figures = {
        "fan-in-p99": p99,
        "fan-in-cpu": cpu,
        "fan-in-user": user,
        "fan-in-system": system,
        "overload": 100.0 * delivered / pubacked,
        "idle": per_conn,
        "idle-held": 1.0 if held else 0.0,
    }
    with_cpu(figures, "qos0", pid, count, lambda: throughput(host, port, 0, count, dropped=dropped))
    n = max(1000, count // 4)
    with_cpu(figures, "qos1", pid, n, lambda: throughput(host, port, 1, n, dropped=dropped))
    figures["qos1-ws"] = throughput(host, ws_port, 1, n, ws_path="/mqtt") if ws_port else None
    with_cpu(figures, "qos1-memory", pid, n, lambda: throughput(host, port, 1, n, dropped=dropped, clean=True))
    fanned = FANOUT * size["fanout"]
    with_cpu(figures, "fan-out", pid, fanned, lambda: mqtt_load.fan_out(host, port, FANOUT, size["fanout"]))
    figures["dropped"] = sum(dropped) if dropped else 0
    return figures


def with_cpu(figures, row, pid, messages, measured):
    """figures[row] = measured(), and the broker's user and system CPU per message over it (its
    process's, as the fan-in counts them: the messages published, or the deliveries)."""
    user, system = cpu_times(pid)
    figures[row] = measured()
    after = cpu_times(pid)
    figures[row + "-user"] = 1e6 * (after[0] - user) / messages
    figures[row + "-system"] = 1e6 * (after[1] - system) / messages


def floor(size):
    """(p99 in ms, user and system CPU per reading in µs) of the fan-in against bench/mqtt_floor.py,
    started here on a free port and stopped by its PID."""
    port = free_port()
    lifetime = size["seconds"] + 120  # (it ends by itself, should the bench die first)
    command = [sys.executable, "-m", "hutch.bench.mqtt_floor", str(port), str(lifetime)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        if proc.stdout.readline().strip() != "ready":
            raise BenchError("bench/mqtt_floor.py did not start (exit code %s)" % proc.poll())
        p99, _, _, (user, system) = mqtt_load.fan_in(
            "127.0.0.1", port, proc.pid, size["sensors"], RATE, size["seconds"]
        )
    finally:
        proc.kill()
        proc.wait()
    return p99, user, system


def rabbitmq_figures(workdir, count):
    """The qos0, qos1 and qos1-ws rows of a RabbitMQ started here with its MQTT plugins
    (rabbitmq_web_mqtt's path: /ws)."""
    mqtt_port, ws_port = free_port(), free_port()
    conf = ("mqtt.listeners.tcp.1 = 127.0.0.1:%d" % mqtt_port, "web_mqtt.tcp.ip = 127.0.0.1",
            "web_mqtt.tcp.port = %d" % ws_port)  # fmt: skip
    broker = RabbitMQ(workdir, conf=conf, plugins=("rabbitmq_mqtt", "rabbitmq_web_mqtt"))
    try:
        broker.start()
        for port in (mqtt_port, ws_port):
            wait_for_port(broker.host, port, broker.proc, "rabbitmq-server", 60)
        print("rabbitmq: MQTT on %s:%d, over WebSocket on %d" % (broker.host, mqtt_port, ws_port), file=sys.stderr)
        return {
            "qos0": throughput(broker.host, mqtt_port, 0, count),
            "qos1": throughput(broker.host, mqtt_port, 1, max(1000, count // 4)),
            "qos1-ws": throughput(broker.host, ws_port, 1, max(1000, count // 4), ws_path="/ws"),
        }
    finally:
        broker.stop()


def run(args):
    """The rows, for hutch, (--start-mosquitto) mosquitto and (--start-rabbitmq) RabbitMQ's
    MQTT plugins; prints the table. Exit code."""
    workdir = tempfile.mkdtemp(prefix="hutch-bench-mqtt-")
    size = sizes(args.count)
    # (no config: the idle connections and the rest fit the max_connections the descriptors allow)
    plan = [("hutch", lambda: Hutch("c", workdir, mqtt=True))]
    if args.start_mosquitto:
        plan.append(("mosquitto", lambda: Mosquitto(workdir)))
    results = {}
    for key, make in plan:
        broker = make().start()
        try:
            port = broker.mqtt_port if key == "hutch" else broker.port
            print("%s: MQTT on %s:%d" % (key, broker.host, port), file=sys.stderr, flush=True)
            ws_port = broker.mqtt_ws_port if key == "hutch" else None
            results[key] = measure(broker.host, port, broker.pid, args.count, size, ws_port, lossy=key != "hutch")
        finally:
            broker.stop()
        results[key]["uplink"] = uplink(key, workdir, max(1000, args.count // 4)) if args.start_mosquitto else None
    keys = [key for key, _ in plan]
    if args.start_rabbitmq:
        results["rabbitmq"] = rabbitmq_figures(workdir, args.count)
        keys.append("rabbitmq")
    shown = rows(size) if args.start_mosquitto else rows(size)[:-1]  # (the uplink's upstream is a mosquitto)
    ratios = keys[1:]
    print(
        "%-52s %-6s %s" % ("scenario", "unit", "  ".join("%12s" % k for k in keys))
        + "".join("  %15s" % ("hutch/" + key) for key in ratios)
    )
    for row, title, unit in shown:
        figures = [results[k].get(row) for k in keys]
        line = "%-52s %-6s %s" % (title, unit, "  ".join("%12s" % _shown(f, unit) for f in figures))
        for i, _key in enumerate(ratios, 1):
            line += "  %15s" % ("%.2f" % (figures[0] / figures[i]) if figures[0] is not None and figures[i] else "-")
        print(line)
    ws, tcp = results["hutch"]["qos1-ws"], results["hutch"]["qos1"]
    print("hutch's QoS 1 over WebSocket / over TCP: %.2f" % (ws / tcp))
    p99, user, system = floor(size)
    print(
        "the same fan-in against the least a Python process does (bench/mqtt_floor.py: one epoll loop that "
        "PUBACKs and forwards each reading, nothing kept): CPU per reading %.1f µs (user %.1f, system %.1f), "
        "p99 %.1f ms" % (user + system, user, system, p99)
    )
    for key in keys:
        if results[key].get("dropped"):
            print(
                "%s dropped %d of the QoS 0 and QoS 1 rows' messages: their figures count those that came"
                % (key, results[key]["dropped"])
            )
    if "mosquitto" in keys:
        print(
            "hutch PUBACKs a QoS 1 message once its durable queue has it on disk; mosquitto keeps it in "
            "RAM (and drops what is past its max_queued_messages, 1,000 by default)."
        )
    print(
        "Broker CPU: its process's user and system time over the messages published (the fan-out: over the deliveries)."
    )
    return 0
