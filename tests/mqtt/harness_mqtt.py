"""An MQTT client for driving the broker's MQTT front end with bytes, no sockets: it writes
packets with hutch's own codec (mqtt/packets.py) and reads the broker's output packet by
packet. The interop tests check the same behaviour with real clients (paho-mqtt, mosquitto's,
umqtt)."""

from hutch.core.broker import Broker
from hutch.core.limits import Limits
from hutch.mqtt import packets
from hutch.mqtt.connection import Connection

LOCAL = {"address": "127.0.0.1", "port": 40000, "transport": "tcp"}


class Packet:
    def __init__(self, first, body):
        self.kind = first >> 4
        self.flags = first & 0x0F
        self.body = body
        self.name = packets.NAMES[self.kind]

    def __repr__(self):
        return "<%s %r>" % (self.name, self.body[:40])


class Client:
    def __init__(self, broker=None, peer=LOCAL, limits=None, level=packets.V311):
        self.broker = broker if broker is not None else Broker(limits or Limits())
        self.conn = Connection(self.broker, peer)
        self.level = level
        self.buf = b""

    def send(self, data):
        self.conn.feed(data)
        return self.read()

    def read(self):
        self.buf += self.conn.take_output()
        out = []
        while True:
            found = packets.split(self.buf, 0, 1 << 30)
            if found is None:
                return out
            first, start, end = found
            out.append(Packet(first, self.buf[start:end]))
            self.buf = self.buf[end:]

    def connect(self, client_id=b"sensor-1", **kw):
        kw.setdefault("user", b"guest")
        kw.setdefault("password", b"guest")
        return self.send(packets.connect(client_id, level=self.level, **kw))

    def subscribe(self, packet_id, *filters, qos=1):
        return self.send(packets.subscribe(packet_id, [(f, qos) for f in filters], self.level))

    def publish(self, topic, payload, qos=0, packet_id=0, **kw):
        return self.send(packets.publish(topic, payload, qos, packet_id=packet_id, level=self.level, **kw))


def published(packet, level=packets.V311):
    """(topic, payload, qos, dup, packet id, properties) of a PUBLISH the broker sent."""
    first = packet.kind << 4 | packet.flags
    topic, packet_id, props, payload = packets.read_publish(first, packet.body, 0, len(packet.body), level)
    return topic, payload, (first >> 1) & 3, bool(first & 8), packet_id, props
