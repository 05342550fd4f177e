"""A client for driving the sans-IO core with bytes, no sockets.

Used by the core tests under both pytest and the micropython runner, so it
uses nothing MicroPython lacks. It encodes client frames with hutch's wire
module and decodes the broker's output frame by frame (the interop tests check the
same bytes against real clients).
"""

import struct

from hutch.amqp091.connection import Connection
from hutch.codec import spec
from hutch.codec.wire import (
    PROTOCOL_HEADER,
    content_frames,
    decode_args,
    decode_properties,
    encode_table,
    frame,  # noqa: F401 (the core tests build raw frames with it)
    frame_at,
    method_frame,
    method_name,
    signature,
)
from hutch.core.broker import Broker
from hutch.core.limits import Limits

LOCAL = {"address": "127.0.0.1", "port": 40000, "transport": "tcp"}
REMOTE = {"address": "192.0.2.7", "port": 40000, "transport": "tcp"}
CAPABILITIES = {
    "publisher_confirms": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "authentication_failure_close": True,
    "basic.nack": True,
}


method = method_frame
content = content_frames


class Event:
    """One thing the broker sent: a method (with its content, if any) or a heartbeat."""

    def __init__(self, channel, name, args):
        self.channel = channel
        self.name = name
        self.args = args
        self.properties = None
        self.body = None
        self.header = None

    def __repr__(self):
        return "Event(%d, %s, %r)" % (self.channel, self.name, self.args)


class Client:
    def __init__(self, broker=None, peer=LOCAL, limits=None):
        self.broker = broker if broker is not None else Broker(limits or Limits())
        self.conn = Connection(self.broker, peer)
        self.buf = b""
        self.events = []
        self._content_for = {}
        self.frame_max = 131072

    # --------------------------------------------------------- raw I/O

    def send(self, data):
        self.conn.feed(data)

    def read(self):
        """Everything the broker has written since the last read, as Events."""
        self.buf += self.conn.take_output()
        new = []
        while len(self.buf) >= 8:
            if self.buf[:4] == b"AMQP":
                new.append(Event(0, "protocol-header", self.buf[:8]))
                self.buf = self.buf[8:]
                continue
            found = frame_at(self.buf, 0, len(self.buf))  # DecodeError: the broker wrote a bad frame end
            if found is None:
                break
            ftype, channel, start, end = found
            payload = self.buf[start:end]
            self.buf = self.buf[end + 1 :]
            if ftype == 1:
                method_id = struct.unpack_from(">I", payload)[0]
                event = Event(
                    channel, method_name(method_id), decode_args(signature(method_id), payload, 4, len(payload))
                )
                if method_id in spec.CONTENT:
                    self._content_for[channel] = event
                else:
                    new.append(event)
            elif ftype == 2:
                event = self._content_for[channel]
                event.header = payload
                event.properties = decode_properties(payload)
                event.size = struct.unpack_from(">Q", payload, 4)[0]
                event.body = b""
                if event.size == 0:
                    new.append(self._content_for.pop(channel))
            elif ftype == 3:
                event = self._content_for[channel]
                event.body += payload
                assert len(payload) <= self.frame_max - 8, "body frame larger than frame_max"
                if len(event.body) >= event.size:
                    new.append(self._content_for.pop(channel))
            elif ftype == 8:
                new.append(Event(channel, "heartbeat", ()))
            else:
                raise AssertionError("broker wrote frame type %d" % ftype)
        self.events += new
        return new

    def call(self, channel, method_id, args=()):
        self.send(method(channel, method_id, args))
        return self.read()

    def expect(self, channel, method_id, args=(), reply=None):
        """Send a method; assert the single reply is `reply` (default: the -ok) and return it."""
        events = self.call(channel, method_id, args)
        want = reply or method_name(method_id + 1)
        assert len(events) == 1 and events[0].name == want, "wanted %s, got %r" % (want, events)
        return events[0]

    # --------------------------------------------------------- handshake

    def handshake(
        self,
        user="guest",
        password="guest",
        capabilities=CAPABILITIES,
        mechanism=b"PLAIN",
        channel_max=0,
        frame_max=0,
        heartbeat=0,
    ):
        self.send(PROTOCOL_HEADER)
        start = self.read()
        assert start[0].name == "connection.start", start
        if mechanism == b"PLAIN":
            response = b"\x00" + user.encode() + b"\x00" + password.encode()
        else:
            response = encode_table({"LOGIN": user, "PASSWORD": password})[4:]
        props = {"product": "harness", "capabilities": capabilities}
        self.send(method(0, spec.CONNECTION_START_OK, (props, mechanism, response, b"en_US")))
        tune = self.read()
        if not tune:
            return None
        assert tune[0].name == "connection.tune", tune
        server_channels, server_frame_max, server_heartbeat = tune[0].args
        self.frame_max = frame_max or server_frame_max
        self.send(method(0, spec.CONNECTION_TUNE_OK, (channel_max or server_channels, self.frame_max, heartbeat)))
        return tune[0]

    def open(self, vhost=b"/", **kw):
        self.handshake(**kw)
        events = self.call(0, spec.CONNECTION_OPEN, (vhost, b"", False))
        return events

    def channel(self, number=1):
        self.expect(number, spec.CHANNEL_OPEN, (b"",))
        return number

    def reopen(self, number=1):
        """Answer the broker's channel.close with close-ok, then open the channel again."""
        self.send(method(number, spec.CHANNEL_CLOSE_OK))
        return self.channel(number)

    # --------------------------------------------------------- convenience

    def declare_queue(
        self,
        ch,
        name=b"",
        passive=False,
        durable=False,
        exclusive=False,
        auto_delete=False,
        arguments=None,
        nowait=False,
    ):
        return self.call(
            ch, spec.QUEUE_DECLARE, (0, name, passive, durable, exclusive, auto_delete, nowait, arguments or {})
        )

    def queue(self, ch, name=b"", **kw):
        """Declare a queue, assert declare-ok, return its name."""
        events = self.declare_queue(ch, name, **kw)
        assert events[0].name == "queue.declare-ok", events
        return events[0].args[0]

    def declare_exchange(
        self, ch, name, kind=b"direct", passive=False, durable=False, auto_delete=False, internal=False, arguments=None
    ):
        return self.call(
            ch, spec.EXCHANGE_DECLARE, (0, name, kind, passive, durable, auto_delete, internal, False, arguments or {})
        )

    def bind(self, ch, queue, exchange, key=b"", arguments=None):
        return self.call(ch, spec.QUEUE_BIND, (0, queue, exchange, key, False, arguments or {}))

    def publish(self, ch, exchange, key, body, properties=None, mandatory=False, immediate=False):
        self.send(
            method(ch, spec.BASIC_PUBLISH, (0, exchange, key, mandatory, immediate))
            + content(ch, body, properties, self.frame_max)
        )
        return self.read()

    def consume(self, ch, queue, tag=b"", no_ack=False, exclusive=False, arguments=None):
        return self.call(ch, spec.BASIC_CONSUME, (0, queue, tag, False, no_ack, exclusive, False, arguments or {}))

    def get(self, ch, queue, no_ack=False):
        return self.call(ch, spec.BASIC_GET, (0, queue, no_ack))

    def ack(self, ch, tag, multiple=False):
        return self.call(ch, spec.BASIC_ACK, (tag, multiple))

    def tick(self, now):
        self.broker.tick(now)
        return self.read()


def names(events):
    return [e.name for e in events]


def opened(broker=None, limits=None, **kw):
    """A client with an open connection and channel 1."""
    client = Client(broker, limits=limits)
    events = client.open(**kw)
    assert names(events) == ["connection.open-ok"], events
    client.channel(1)
    return client


def closed_with(events, code, name="channel.close"):
    """Assert that events end with `name` carrying reply `code`; return its reply text."""
    assert events and events[-1].name == name, "wanted %s %d, got %r" % (name, code, events)
    assert events[-1].args[0] == code, "wanted %s %d, got %r" % (name, code, events[-1].args)
    return events[-1].args[1]
