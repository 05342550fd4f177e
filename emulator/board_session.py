"""Clients, and an upstream broker, for a board whose connections are in memory (CPython).

A board (emulator/wasm32.py Wasm32Board) takes one read per client per turn of its loop; a
Session moves the octets: each round, every client with something to send gives at most one
read's worth (the board's read buffer: 1 KiB on the esp32 profile), the board takes them in
one request (a turn of its loop each, one millisecond of its clock apart) and what it sent
back goes to each client. Every frame is built and read with codec/wire.py, the codec the
broker speaks, as the core's tests build theirs (tests/portable/harness.py).

Clients are written as generators over a FrameClient, which yield until what they wait for
has come (`yield from client.call(...)`), so a scenario reads in order while the session runs
all of its clients at once:

    def worker(c):
        yield from c.open()                              # handshake, channel 1
        yield from c.call(1, spec.QUEUE_DECLARE, (0, b"q", False, False, False, False, False, {}))
        c.publish(1, b"", b"q", b"hello")

    session = Session(board)
    session.run([worker(session.client())])

An up bridge on the board reaches upstream through the session too: `Upstream` is a hutch
broker (the core, in this process) at the other end of the board's uplink, which confirms what
the bridge forwards.
"""

import struct

from ..amqp091.connection import Connection
from ..codec import spec, wire
from ..core.broker import Broker

CAPABILITIES = {
    "publisher_confirms": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "authentication_failure_close": True,
    "basic.nack": True,
}
IDLE_MS = 200  # a turn with nothing to read: the clock moves on by a broker tick
MAX_IDLE_TURNS = 300  # a minute of the board's clock with nothing happening: the scenario is stuck


class Stuck(Exception):
    """The clients wait for something the board does not send: what each waits for, in one line."""


class Event:
    """One method the board sent (with its content, for basic.deliver, basic.return, get-ok)."""

    def __init__(self, channel, method_id, args):
        self.channel = channel
        self.method_id = method_id
        self.args = args
        self.header = None
        self.body = None
        self.size = 0

    def __repr__(self):
        return "Event(%d, %s, %r)" % (self.channel, wire.method_name(self.method_id), self.args)


class FrameClient:
    """One client connection, sans-IO: frames out (pending), frames in (received), and the
    state a scenario reads: its confirms, what its consumers got, the replies it awaits."""

    def __init__(self, session, index):
        self.session = session
        self.index = index
        self.pending = bytearray()  # octets to send
        self.buf = b""  # octets received, not yet a whole frame
        self.content_for = {}  # channel -> the Event whose content is arriving
        self.replies = []  # synchronous replies, in order
        self.deliveries = []  # basic.deliver events, with their content
        self.acked = 0  # publisher confirms: the highest sequence number acked (multiple or not)
        self.nacked = 0
        self.published = 0
        self.closed = False  # the board closed the connection (connection.close from it, or at the end)
        self.close_reason = None
        self.blocked = False
        self.frame_max = 131072
        self.on_delivery = None  # called with each basic.deliver event as it arrives

    # ------------------------------------------------------------ out

    def send(self, data):
        self.pending += data

    def method(self, channel, method_id, args=()):
        self.send(wire.method_frame(channel, method_id, args))

    def publish(self, channel, exchange, key, body, properties=None):
        self.send(wire.method_frame(channel, spec.BASIC_PUBLISH, (0, exchange, key, False, False)))
        self.send(wire.content_frames(channel, body, properties, self.frame_max))
        self.published += 1

    def ack(self, channel, tag, multiple=False):
        self.method(channel, spec.BASIC_ACK, (tag, multiple))

    # ------------------------------------------------------------ waiting (in a scenario's generator)

    def until(self, condition, what):
        """Yield until condition() holds."""
        while not condition():
            if self.closed:
                raise Stuck(
                    "client %d: the board closed the connection (%s) while waiting for %s"
                    % (self.index, self.close_reason, what)
                )
            yield what

    def call(self, channel, method_id, args=()):
        """A synchronous method and its reply (its arguments)."""
        self.method(channel, method_id, args)
        yield from self.until(lambda: self.replies, wire.method_name(method_id) + "'s reply")
        reply = self.replies.pop(0)
        if reply.method_id in (spec.CHANNEL_CLOSE, spec.CONNECTION_CLOSE):
            raise Stuck(
                "client %d: %s answered %s %r"
                % (self.index, wire.method_name(method_id), wire.method_name(reply.method_id), reply.args)
            )
        return reply.args

    def open(self, channels=(1,), user="guest", password="guest"):
        """The handshake (PLAIN), then channel.open on each channel."""
        self.send(wire.PROTOCOL_HEADER)
        yield from self.until(lambda: self.replies, "connection.start")
        start = self.replies.pop(0)
        assert start.method_id == spec.CONNECTION_START, start
        response = b"\x00" + user.encode() + b"\x00" + password.encode()
        props = {"product": "hutch board session", "capabilities": CAPABILITIES}
        self.method(0, spec.CONNECTION_START_OK, (props, b"PLAIN", response, b"en_US"))
        yield from self.until(lambda: self.replies, "connection.tune")
        tune = self.replies.pop(0)
        if tune.method_id != spec.CONNECTION_TUNE:
            raise Stuck("client %d: login refused: %r" % (self.index, tune.args))
        channel_max, frame_max, _heartbeat = tune.args
        self.frame_max = frame_max
        self.method(0, spec.CONNECTION_TUNE_OK, (channel_max, frame_max, 0))
        yield from self.call(0, spec.CONNECTION_OPEN, (b"/", b"", False))
        for channel in channels:
            yield from self.call(channel, spec.CHANNEL_OPEN, (b"",))

    def close(self):
        """connection.close and its close-ok."""
        yield from self.call(0, spec.CONNECTION_CLOSE, (200, b"bye", 0, 0))

    # ------------------------------------------------------------ in

    def received(self, data):
        self.buf += data
        buf = self.buf
        pos = 0
        while len(buf) - pos >= 8:
            found = wire.frame_at(buf, pos, len(buf))
            if found is None:
                break
            ftype, channel, start, end = found
            pos = end + 1
            if ftype == 1:
                method_id = struct.unpack_from(">I", buf, start)[0]
                args = wire.decode_args(wire.signature(method_id), buf, start + 4, end)
                self._method(Event(channel, method_id, args))
            elif ftype == 2:
                event = self.content_for[channel]
                event.header = bytes(buf[start:end])
                event.size = struct.unpack_from(">Q", buf, start + 4)[0]
                event.body = b""
                if event.size == 0:
                    self._content(self.content_for.pop(channel))
            elif ftype == 3:
                event = self.content_for[channel]
                event.body += buf[start:end]
                if len(event.body) >= event.size:
                    self._content(self.content_for.pop(channel))
        self.buf = buf[pos:]

    def _method(self, event):
        method_id = event.method_id
        if method_id in spec.CONTENT:
            self.content_for[event.channel] = event
        elif method_id == spec.BASIC_ACK:
            self.acked = max(self.acked, event.args[0])  # (multiple or not: the highest so far)
        elif method_id == spec.BASIC_NACK:
            self.nacked += 1
        elif method_id == spec.CONNECTION_BLOCKED:
            self.blocked = True
        elif method_id == spec.CONNECTION_UNBLOCKED:
            self.blocked = False
        elif method_id == spec.CONNECTION_CLOSE:
            self.method(0, spec.CONNECTION_CLOSE_OK)
            self.closed = True
            self.close_reason = "%d %s" % (event.args[0], event.args[1].decode(errors="replace"))
            self.replies.append(event)
        elif method_id == spec.CHANNEL_CLOSE:
            self.method(event.channel, spec.CHANNEL_CLOSE_OK)
            self.replies.append(event)
        else:
            self.replies.append(event)

    def _content(self, event):
        if event.method_id == spec.BASIC_DELIVER:
            self.deliveries.append(event)
            if self.on_delivery is not None:
                self.on_delivery(event)
        else:
            self.replies.append(event)


class MqttClient:
    """One MQTT client connection (a sensor), sans-IO as FrameClient is: packets out (pending),
    packets in, written and read with the front end's own codec (mqtt/packets.py)."""

    def __init__(self, session, index):
        self.session = session
        self.index = index
        self.pending = bytearray()
        self.buf = b""
        self.received_packets = []  # (kind, body) of each packet the board sent
        self.acked = set()  # packet ids PUBACKed
        self.closed = False
        self.close_reason = None
        self.next_id = 1

    def send(self, data):
        self.pending += data

    def until(self, condition, what):
        return FrameClient.until(self, condition, what)

    def connect(self, client_id, keep_alive=0):
        """CONNECT (3.1.1, clean session, as umqtt.simple sends it) and its CONNACK."""
        from ..mqtt import packets

        self.send(packets.connect(client_id, keep_alive=keep_alive, user=b"guest", password=b"guest"))
        yield from self.until(lambda: self.received_packets, "the CONNACK")
        kind, body = self.received_packets.pop(0)
        if kind != packets.CONNACK or body[1] != 0:
            raise Stuck("client %d: CONNECT answered %d %r" % (self.index, kind, body))

    def publish(self, topic, payload):
        """A QoS 1 PUBLISH, and its PUBACK (one at a time, as umqtt.simple publishes)."""
        from ..mqtt import packets

        packet_id = self.next_id
        self.next_id = packet_id % 65535 + 1
        self.send(packets.publish(topic, payload, 1, packet_id=packet_id))
        yield from self.until(lambda: packet_id in self.acked, "the PUBACK of packet %d" % packet_id)
        self.acked.discard(packet_id)

    def received(self, data):
        from ..mqtt import packets

        self.buf += data
        while True:
            found = packets.split(self.buf, 0, 1 << 20)
            if found is None:
                return
            first, start, end = found
            kind, body = first >> 4, self.buf[start:end]
            self.buf = self.buf[end:]
            if kind == packets.PUBACK:
                self.acked.add((body[0] << 8) | body[1])
            else:
                self.received_packets.append((kind, body))


class Upstream:
    """The broker at the other end of a bridge's uplink: hutch's core in this process (no
    journal: what it takes is confirmed at once), fed what the bridge sends."""

    def __init__(self):
        self.broker = Broker()
        self.conn = None

    def connect(self):
        self.conn = Connection(self.broker, {"address": "127.0.0.1", "port": 5672, "transport": "tcp"})

    def feed(self, data):
        self.conn.feed(data)
        return self.conn.take_output()

    def queued(self, name):
        queue = self.broker.queues.get(name)
        return 0 if queue is None else queue.message_count()


class Session:
    """The board and its clients (and, for a bridge, upstream), moved a round at a time."""

    def __init__(self, board):
        self.board = board
        self.clients = []
        self.now = 0
        self.upstream = None
        self.uplink_pending = b""  # what upstream sent the bridge, not yet read by the board
        self.turns = 0

    def client(self, protocol="amqp"):
        """A client of the board's listener of that protocol: an AMQP 0-9-1 FrameClient, or an
        MqttClient."""
        index = self.board.open(protocol)
        client = MqttClient(self, index) if protocol == "mqtt" else FrameClient(self, index)
        self.clients.append(client)
        return client

    def _take(self, answer):
        for index, data in answer["out"].items():
            if index == -1:
                if self.upstream is not None:
                    self.uplink_pending += self.upstream.feed(data)
                continue
            self.clients[index].received(data)
        for index in answer["closed"]:
            client = self.clients[index]
            client.closed = True
            client.close_reason = client.close_reason or "closed"

    def turn(self):
        """One round: a read from every client (and upstream) with something to send, or, if
        none has, a turn with nothing to read a broker tick later. Whether anything was read."""
        size = self.board.read_size
        steps = []
        for client in self.clients:
            if client.pending and not client.closed:
                chunk = bytes(client.pending[:size])
                del client.pending[:size]
                self.now += 1
                steps.append((client.index, chunk, self.now))
        if self.uplink_pending:
            chunk = self.uplink_pending[:size]
            self.uplink_pending = self.uplink_pending[size:]
            self.now += 1
            steps.append((-1, chunk, self.now))
        if not steps:
            self.now += IDLE_MS
            steps.append((-2, b"", self.now))
        self.turns += len(steps)
        self._take(self.board.steps(steps))
        return steps[0][0] != -2

    def run(self, workers):
        """Run scenario generators until each has returned (their return values, in order).
        Stuck if a minute of the board's clock goes by with every client waiting and nothing
        read."""
        workers = list(workers)
        results = [None] * len(workers)
        waiting = {i: None for i in range(len(workers))}
        idle = 0
        while waiting:
            for i in list(waiting):
                try:
                    waiting[i] = next(workers[i])
                except StopIteration as done:
                    results[i] = done.value
                    del waiting[i]
            if not waiting:
                break
            if self.turn():
                idle = 0
            else:
                idle += 1
                if idle > MAX_IDLE_TURNS:
                    raise Stuck(
                        "nothing happens on the board; waiting for: %s" % "; ".join(str(w) for w in waiting.values())
                    )
        return results
