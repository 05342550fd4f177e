"""The bridge's three upstream clients speak one vocabulary (codec/upstream.py): the AMQP 0-9-1
client (server/bridges/amqp091.py's BridgeProtocol), the AMQP 1.0 client and the MQTT client,
each made by its driver's connect() from a real [[bridge]] table (server/bridges/config.py),
over a socket to one served hutch that speaks all three. Each connects, is set up (0-9-1: the
steps the up machine asks for), forwards the same three messages, and is ended by the broker's
shutdown: the same list of events comes out of each, in the bridge's words.
"""

import select
import socket
import struct
import time
import types

import pika
import pytest
from brokers import free_port, hutch_serve, wait_for_port

from hutch.codec.upstream import ACCEPTED, ENDED
from hutch.server.bridges.config import bridges_from

pytestmark = [pytest.mark.timeout(60)]

TOPIC = "contract.readings"


def clients(broker, mqtt_port):
    """{name: (its client, connecting), ...}: each driver's connect() on its [[bridge]] table."""
    uris = {
        "0-9-1": "amqp://guest:guest@127.0.0.1:%d/?heartbeat=10" % broker.port,
        "1.0": "amqp10://guest:guest@127.0.0.1:%d/?heartbeat=10" % broker.port,
        "mqtt": "mqtt://guest:guest@127.0.0.1:%d/?heartbeat=10" % mqtt_port,
    }
    tables = [{"name": "c-" + name.replace(".", ""), "uri": uri, "queue": "edge-out"} for name, uri in uris.items()]
    tables[0].update(exchange="amq.topic")
    tables[1].update(exchange="amq.topic", routing_key=TOPIC)
    tables[2].update(topic="contract/readings", mqtt_version="5")
    made = {}
    for name, settings in zip(uris, bridges_from({"bridge": tables}, "contract.toml")):
        bridge = types.SimpleNamespace(
            broker=types.SimpleNamespace(name="contract"),
            machine=types.SimpleNamespace(name=settings["name"], settings=settings),
            node=b"contract-node",
        )
        if name == "0-9-1":
            from hutch.server.bridges import amqp091 as driver
        elif name == "1.0":
            from hutch.server.bridges import amqp10 as driver
        else:
            from hutch.server.bridges import mqtt as driver
        made[name] = driver.connect(bridge, settings["uris"][0], 131072, now())[0]
    return made


def now():
    return int(time.monotonic() * 1000)


class Link:
    """One client over its socket: what it sends written, what comes read into it, its events
    kept in the order they came."""

    def __init__(self, protocol, port):
        self.protocol = protocol
        self.sock = socket.create_connection(("127.0.0.1", port), 5)
        self.sock.setblocking(False)
        self.events = []

    def pump(self, until, timeout=10):
        """Write, read and tick until until(self) holds (or the stream ends)."""
        deadline = time.monotonic() + timeout
        while not until(self):
            assert time.monotonic() < deadline, "waited for %s; events so far %r" % (until.__doc__, self.events)
            while (data := self.protocol.data_to_send()) is not None:
                self.sock.sendall(bytes(data))
            if select.select([self.sock], [], [], 0.05)[0]:
                data = self.sock.recv(65536)
                if not data:
                    self.events.append(("eof",))
                    return
                while data:
                    data = data[self.protocol.receive_data(data) :]
                    self._take()
            self._take()
            self.protocol.tick(now())

    def _take(self):
        while (event := self.protocol.next_event()) is not None:
            self.events.append(event)


def test_the_three_upstream_clients_say_the_same_events_in_the_bridge_s_words(tmp_path):
    mqtt_port = free_port()
    broker = hutch_serve(tmp_path, "[server]\namqp10 = true\nmqtt_port = %d\n" % mqtt_port).start()
    try:
        wait_for_port(mqtt_port, broker.proc, broker.log_path)
        connection = pika.BlockingConnection(pika.URLParameters(broker.url))
        channel = connection.channel()
        channel.queue_declare("contract", durable=True)
        channel.queue_bind("contract", "amq.topic", TOPIC)
        connection.close()
        port = {"0-9-1": broker.port, "1.0": broker.port, "mqtt": mqtt_port}
        links = {name: Link(protocol, port[name]) for name, protocol in clients(broker, mqtt_port).items()}
        for name, link in links.items():
            link.pump(is_open)
            if name == "0-9-1":  # (the up machine's set-up step: the others attach or connect so)
                link.protocol.set_up(("confirm",))
                link.pump(is_open)
            for i in range(3):
                body = b"m%d" % i
                link.protocol.forward(b"amq.topic", TOPIC.encode(), bare_header(len(body)), tail(body), True)
            link.pump(three_confirmed)
        broker.stop()  # (SIGTERM: each client is told the broker goes)
        for link in links.values():
            link.pump(has_ended)
        said = {name: words(link.events) for name, link in links.items()}
        print("events in the bridge's words: %r" % said)
        assert said["0-9-1"] == said["1.0"] == said["mqtt"] == [ACCEPTED, ENDED], said
        for name, link in links.items():
            assert accepted(link.events) == {1, 2, 3}, (name, link.events)
            reason = [event for event in link.events if event[0] == ENDED][0][1]
            assert reason, (name, "an end says why")
            link.sock.close()
    finally:
        if broker.proc.poll() is None:
            broker.stop()


def is_open(link):
    """the client's link open"""
    return link.protocol.channel_open and not link.protocol.awaiting


def three_confirmed(link):
    """three confirms"""
    return len(accepted(link.events)) == 3


def has_ended(link):
    """the link's end"""
    return any(event[0] in (ENDED, "eof") for event in link.events)


def accepted(events):
    """The numbers confirmed by the accepted events (each, or every one up to it with multiple)."""
    out = set()
    for event in events:
        if event[0] == ACCEPTED:
            out |= set(range(1, event[1] + 1)) if event[2] else {event[1]}
    return out


def words(events):
    """The events' words in order, repeats of one word in a row as one."""
    out = []
    for event in events:
        if not out or out[-1] != event[0]:
            out.append(event[0])
    return out


def bare_header(size):
    """A content header tail of a persistent message with no other property."""
    payload = struct.pack(">HHQHB", 60, 0, size, 0x1000, 2)
    return struct.pack(">I", len(payload)) + payload + b"\xce"


def tail(body):
    """A body as a frame tail (its size, the octets, the frame end)."""
    return struct.pack(">I", len(body)) + body + b"\xce"
