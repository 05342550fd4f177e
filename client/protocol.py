"""The client side of AMQP 0-9-1, sans-IO: bytes in, events and bytes out.

In the style of h11 and wsproto: no sockets, no clock of its own (time comes in as an
argument, in milliseconds: MicroPython's ticks_ms or any monotonic count), no blocking.
The blocking sensor client (client/simple.py, client/robust.py) drives it over a
transport; an asyncio bridge can drive it the same way. Every frame is built and read
with codec/wire.py, with a client's value mapping (strings as str, bytes as 'x').

    p = Protocol(frame_max=4096)
    p.connect(now, "guest", "guest", "/", heartbeat=30)  # queues the protocol header
    loop:
        send every p.data_to_send() (a view into the send buffer, valid until the next call)
        n = sock.readinto(p.read_buffer()); p.received(n)   # or p.receive_data(data)
        while (event := p.next_event()) is not None: handle it
        wait = p.tick(now)   # heartbeats: how long to wait for input at most; -1: broker silent

The handshake (start/start-ok with PLAIN or EXTERNAL, tune/tune-ok, open/open-ok) runs by itself and
opens channel `channel`; p.awaiting is the method whose reply is due (channel.open during
the handshake), 0 once it came; p.server_product is the broker's "product" (None until it
said). Events, from next_event():

- a Message: basic.deliver, basic.get-ok or basic.return (m.kind) with its content;
- ChannelClosed or ConnectionClosed (not raised: returned), the broker closed the channel
  or the connection; the close-ok is already queued;
- (method id, [arguments]) for any other method: RPC replies (queue.declare-ok...,
  basic.get-empty), basic.ack/nack (after the confirm bookkeeping below),
  connection.blocked/unblocked (p.blocked), basic.cancel from the broker, channel.flow
  (flow-ok already queued), channel.open-ok, connection.close-ok.

Calls: call(method id, args) sends a synchronous method (p.awaiting until its reply);
send(method id, args) one that has no reply (basic.ack, basic.nack...); publish(...);
connection_lost() when the transport is gone. Arguments are laid out by the spec's
signature of the method (wire.signature): queue.declare takes (ticket, queue, passive,
durable, exclusive, auto_delete, nowait, arguments).

Publisher confirms: after confirm.select-ok, publish() numbers messages from 1; acks and
nacks (with `multiple`) settle them. p.in_flight lists the sequence numbers awaiting one;
p.unconfirmed lists the `record` of every message nacked, or in flight when the channel or
connection was lost (the record publish() was given, else its sequence number).
"""

import errno
import sys

from ..codec import spec, wire
from ..codec.readbuffer import ReadBuffer
from .clock import ticks_diff

TYPE_CHECKING = False
if TYPE_CHECKING:  # read by type checkers only: MicroPython has no typing module
    from typing import Any

# basic properties by pika's names, in the spec's order (wire.put_properties' `names`)
NAMES = (
    "content_type",
    "content_encoding",
    "headers",
    "delivery_mode",
    "priority",
    "correlation_id",
    "reply_to",
    "expiration",
    "message_id",
    "timestamp",
    "type",
    "user_id",
    "app_id",
    "cluster_id",
)
_UNOPENED = (spec.CHANNEL_OPEN, spec.CHANNEL_CLOSE_OK)  # what may be sent on a channel not open
_SIGS = {}  # method id -> its signature, looked up in the spec once


def _sig(method_id):
    sig = _SIGS.get(method_id)
    if sig is None:
        sig = wire.signature(method_id)
        if sig is None:  # (a method the broker may not send: what came is not AMQP 0-9-1)
            raise wire.DecodeError("unknown method %d.%d" % (method_id >> 16, method_id & 0xFFFF))
        _SIGS[method_id] = sig
    return sig


class AMQPError(Exception):
    """The broker closed the channel or the connection: .code, .text, .method (class id, method id)."""

    def __init__(self, code, text, method=(0, 0)):
        super().__init__("%d %s" % (code, text))
        self.code = code
        self.text = text
        self.method = method


class ChannelClosed(AMQPError):
    pass


class ConnectionClosed(AMQPError):
    pass


class Message:
    """A delivery (basic.deliver, basic.get-ok) or a returned message (basic.return): m.kind."""

    # Only some kinds of message have these (Protocol._method sets them). Annotations without a
    # value create no attribute - on MicroPython not even an __annotations__ entry - so they
    # cost nothing per message; they tell readers and type checkers what may be there.
    reply_code: int  # a returned message: why the broker sent it back (312 NO_ROUTE...)
    reply_text: str
    message_count: int  # basic.get: how many messages the queue still holds

    def __init__(self, kind, exchange, routing_key):
        self.kind = kind
        self.exchange = exchange
        self.routing_key = routing_key
        self.delivery_tag = 0
        self.redelivered = False
        self.consumer_tag = None  # type: str | None
        self.body = b""  # type: bytes | bytearray
        # the content header's payload (bytes), decoded into a dict on first use
        self._raw = None  # type: bytes | dict | None
        self._size = self._at = 0

    @property
    def properties(self):
        raw = self._raw
        if raw is None or isinstance(raw, dict):
            return raw or {}
        self._raw = raw = wire.decode_properties(raw, True, NAMES)
        return raw


class Protocol(ReadBuffer):
    # What wire.read_args put there: str, int or bool by the method's signature. Declared by an
    # annotation alone, which costs nothing at run time.
    _args: "list[Any]"

    def __init__(self, frame_max=4096, channel=1):
        self.channel = channel
        self.frame_max = frame_max
        self._rx = bytearray(frame_max)  # a whole incoming frame: the broker honours our frame_max
        self._rxm = memoryview(self._rx)
        self._tx = bytearray(min(1024, frame_max))  # grows (wire.put_*) only for a bigger frame
        # a view of it, kept where a bytearray may grow while viewed (MicroPython): data_to_send()
        # then costs one slice. CPython refuses to resize a viewed bytearray: a view per call there.
        self._txm = memoryview(self._tx) if sys.implementation.name == "micropython" else None
        self._args = [None] * 5  # the last content method's arguments (wire.read_args)
        self.unconfirmed = []
        self.in_flight = []  # the sequence numbers of the messages awaiting a confirm
        self._records = []  # and what publish() keeps of each
        self._forwarding = None  # (forward) the last (exchange, routing key, mandatory), its method frame...
        self.connect(0)  # every per-connection field as connect() sets it, then closed
        self.connection_lost()
        self._tn = 0
        self._login = ()

    # -- the connection ---------------------------------------------------------------------

    def connect(self, now, user="guest", password="guest", vhost="/", heartbeat=30, name=None, mechanism="PLAIN"):
        """Start a connection (the protocol header is queued): PLAIN login, or EXTERNAL (over
        TLS: the broker takes the user from the client certificate; user and password are not
        sent), heartbeat in seconds (0: none; the broker may ask for less), then channel
        `channel` is opened. p.awaiting is channel.open until it is."""
        self.connection_lost()
        self.state = "opening"
        self._pos = self._n = self.seq = 0
        self._body = self.blocked = self.server_product = self.server_cluster = None
        self._spoke = self._heard = False
        self._rx_at = self._tx_at = self._tick_at = now
        props = {
            "product": "hutch.client",
            "platform": sys.implementation.name,
            "capabilities": {
                "publisher_confirms": True,
                "basic.nack": True,
                "connection.blocked": True,
                "consumer_cancel_notify": True,
                "authentication_failure_close": True,
            },
        }
        if name:
            props["connection_name"] = name
        if mechanism == "EXTERNAL":
            response = b""  # (an authorization identity: none, the certificate's user)
        else:
            response = b"\x00" + user.encode() + b"\x00" + password.encode()
        self._login = (props, mechanism, response, "en_US")
        self._vhost = vhost
        self.heartbeat = heartbeat
        self._tn = wire.put_bytes(self._tx, 0, wire.PROTOCOL_HEADER)
        self.awaiting = spec.CHANNEL_OPEN

    def connection_lost(self):
        """The transport is gone (or the connection closed): what awaited a confirm is unconfirmed."""
        self.state = "closed"
        self._hb = 0  # no heartbeats either
        self.channel_lost()

    def channel_lost(self):
        """The channel is gone: what awaited a confirm is unconfirmed."""
        self.channel_open = self.confirming = False
        self._msg = None
        self.awaiting = 0
        self.unconfirmed += self._records
        self.in_flight = []
        self._records = []

    def call(self, method_id, args=()):
        """Send a synchronous method; p.awaiting is method_id until its reply is read."""
        self.send(method_id, args)
        self.awaiting = method_id
        if method_id == spec.CONNECTION_CLOSE:
            self.state = "closing"  # deliveries that arrive now are dropped (the broker requeues them)

    def ack(self, tag, multiple=False):
        """basic.ack: the delivery of tag (and every one before it, multiple) is done with."""
        self.send(spec.BASIC_ACK, (tag, multiple))

    def nack(self, tag, requeue=True, multiple=False):
        """basic.nack: the delivery of tag (and every one before it, multiple) refused, back to
        its queue (requeue) or to its dead-letter exchange, if any."""
        self.send(spec.BASIC_NACK, (tag, multiple, requeue))

    def send(self, method_id, args=()):
        """Send a method frame (connection methods on channel 0). OSError ENOTCONN if the
        connection, or the channel, is not open."""
        ch = 0 if method_id >> 16 == 10 else self.channel
        if self.state == "closed" or ch and not self.channel_open and method_id not in _UNOPENED:
            raise OSError(errno.ENOTCONN)
        self._chunk(True)  # a message's frames go out whole, before this one
        tx = self._tx
        start = self._tn
        pos = wire.put_args(
            tx, wire.put_long(tx, wire.start_frame(tx, start, 1, ch), method_id), _sig(method_id), args, True
        )
        self._tn = wire.end_frame(tx, start, pos)

    def tick(self, now):
        """Heartbeats: queues one when nothing was sent for half the interval. Returns how long
        (ms) the caller may wait for input before calling again; -1 when nothing came from the
        broker for two intervals (it is gone, unless input is waiting to be read)."""
        if self._spoke:  # sent since the last tick: at that tick at the earliest
            self._spoke = False
            self._tx_at = self._tick_at
        if self._heard:
            self._heard = False
            self._rx_at = now
        self._tick_at = now
        hb = self._hb
        if not hb:
            return 1 << 29  # no limit (and a small int on every port)
        idle = ticks_diff(now, self._tx_at)
        if idle >= hb // 2:
            self._chunk(True)
            self._tn = wire.put_bytes(self._tx, self._tn, wire.HEARTBEAT_FRAME)
            idle = 0
        if ticks_diff(now, self._rx_at) > 2 * hb:
            return -1
        return hb // 2 - idle

    # -- output -----------------------------------------------------------------------------

    def data_to_send(self):
        """The next bytes to write, or None: a view into the send buffer or, for a body too big
        for it, into the body itself. Valid until the next call on the protocol: write it
        before, or copy it (an asyncio transport may keep what it is given)."""
        n = self._tn
        self._tn = 0
        if n:
            self._spoke = True
            mv = self._txm
            if mv is None or len(mv) != len(self._tx):  # CPython, or the buffer grew
                mv = memoryview(self._tx)
                if self._txm is not None:
                    self._txm = mv
            return mv[:n]
        if self._body is not None:
            return self._chunk()
        return None

    def _chunk(self, copy=False):
        """The pending body's next chunk, its frame-end octet and the next frame's header put in
        the send buffer after it. copy: the chunk too, and so for the rest of the body (another
        frame is to follow the message)."""
        while self._body is not None:
            body = self._body
            at = self._at
            self._at = end = min(at + self.frame_max - 8, len(body))
            chunk = body[at:end]
            tx = self._tx
            pos = wire.put_bytes(tx, self._tn, chunk) if copy else self._tn
            pos = wire.put_octet(tx, pos, spec.FRAME_END)
            if end < len(body):
                k = min(end + self.frame_max - 8, len(body)) - end
                pos = wire.put_long(tx, wire.put_short(tx, wire.put_octet(tx, pos, 3), self.channel), k)
            else:
                self._body = None
            self._tn = pos
            if not copy:
                return chunk
        return None

    def publish(self, exchange, routing_key, body, properties=None, mandatory=False, record=None):
        """basic.publish with its content (body: bytes-like). In confirm mode the message's
        sequence number, and `record` (or that number) is kept until it is confirmed; else 0.
        ValueError for a property name that is not one (pika's names: "delivery_mode"), before
        anything is written."""
        if properties:
            wire.check_properties(properties, NAMES)
        pos = self._publish_method(exchange, routing_key, mandatory)
        size = len(body)
        pos = wire.put_content_header(self._tx, pos, self.channel, size, properties, True, NAMES)
        return self._publish_body(pos, body, record)

    def forward(self, exchange, routing_key, header_tail, body_tail, mandatory=False, record=None):
        """publish() of a message as a broker keeps it (core/message.py): its content header and
        body as frame tails (size, payload, frame-end; body_tail None for an empty body). A
        bridge forwards it as it came, properties byte for byte, without decoding them; a body
        that fits one frame goes as it is kept, behind the frame type and channel, and the
        method frame of the last exchange and routing key forwarded to is made once."""
        if body_tail is not None and len(body_tail) - 5 > self.frame_max - 8:  # more than one frame
            pos = self._publish_method(exchange, routing_key, mandatory)
            pos = wire.put_bytes(
                self._tx, wire.put_short(self._tx, wire.put_octet(self._tx, pos, 2), self.channel), header_tail
            )
            return self._publish_body(pos, memoryview(body_tail)[4:-1], record)
        if not self.channel_open:
            raise OSError(errno.ENOTCONN)
        self._chunk(True)
        if self._forwarding is None or self._forwarding[0] != (exchange, routing_key, mandatory):
            start = self._tn
            end = self._publish_method(exchange, routing_key, mandatory)  # (made where it would go)
            self._tn = start
            ch = bytes((self.channel >> 8, self.channel & 255))
            self._forwarding = (
                (exchange, routing_key, mandatory),
                bytes(self._tx[start:end]),
                b"\x02" + ch,
                b"\x03" + ch,
            )
        _, method_frame, header_type, body_type = self._forwarding
        if body_tail is None:
            frames = b"".join((method_frame, header_type, header_tail))
        else:
            frames = b"".join((method_frame, header_type, header_tail, body_type, body_tail))
        self._tn = wire.put_bytes(self._tx, self._tn, frames)
        return self._published(record)

    def _publish_method(self, exchange, routing_key, mandatory):
        if not self.channel_open:
            raise OSError(errno.ENOTCONN)
        self._chunk(True)
        tx = self._tx
        start = self._tn
        # basic.publish's arguments (hssbb) put one by one: no tuple of them per message
        pos = wire.put_long(tx, wire.start_frame(tx, start, 1, self.channel), spec.BASIC_PUBLISH)
        pos = wire.put_shortstr(tx, wire.put_shortstr(tx, wire.put_short(tx, pos, 0), exchange), routing_key)
        return wire.end_frame(tx, start, wire.put_octet(tx, pos, 1 if mandatory else 0))

    def _publish_body(self, pos, body, record):
        tx = self._tx
        ch = self.channel
        size = len(body)
        if size and size <= self.frame_max - 8 and pos + size + 8 <= len(tx):  # one body frame, copied
            pos = wire.end_frame(tx, pos, wire.put_bytes(tx, wire.start_frame(tx, pos, 3, ch), body))
        elif size:  # body frames straight from the caller's buffer (data_to_send)
            pos = wire.put_long(tx, wire.put_short(tx, wire.put_octet(tx, pos, 3), ch), min(size, self.frame_max - 8))
            self._body = memoryview(body)
            self._at = 0
        self._tn = pos
        return self._published(record)

    def _published(self, record):
        """A publish is in the send buffer: in confirm mode, its number (kept with record)."""
        if not self.confirming:
            return 0
        self.seq += 1
        self.in_flight.append(self.seq)
        self._records.append(self.seq if record is None else record)
        return self.seq

    # -- input ------------------------------------------------------------------------------

    def next_event(self):
        """The next event in what was received, or None until more comes in. Each frame is
        consumed before its event is returned, so the caller may call the protocol again."""
        rx = self._rx
        while True:
            p = self._pos
            stop = wire.frame_end(rx, p, self._n)
            if stop < 0:
                if self._n - p >= 7 and wire.get_long(rx, p + 3) + 8 > len(rx):
                    raise wire.DecodeError("frame larger than frame_max")
                return None
            self._pos = stop + 1
            kind = rx[p]
            p += 7
            m = self._msg
            if kind == 1:
                event = self._method(wire.get_long(rx, p), p + 4, stop)
                if event is not None:
                    return event
                continue
            if kind != 8 and (kind < 2 or kind > 3):
                raise wire.DecodeError("not an AMQP 0-9-1 frame")
            if m is None:
                continue  # a heartbeat; or content of a message dropped with its channel
            if kind == 2:
                m._size = wire.get_longlong(rx, p + 4)
                if wire.get_short(rx, p + 12):
                    m._raw = bytes(self._rxm[p:stop])
            else:
                n = stop - p
                if not m._at and m._size == n:  # the whole body in one frame
                    m.body = bytes(self._rxm[p:stop])
                else:
                    body = m.body
                    if not isinstance(body, bytearray):  # the first of several frames: assemble in place
                        body = m.body = bytearray(m._size)
                    body[m._at : m._at + n] = self._rxm[p:stop]
                m._at += n
            if m._at >= m._size:
                self._msg = None
                if m.kind == spec.BASIC_GET_OK:
                    self.awaiting = 0
                if self.state != "closing":
                    return m

    def _method(self, method_id, p, stop):
        if method_id == spec.BASIC_DELIVER or method_id == spec.BASIC_GET_OK or method_id == spec.BASIC_RETURN:
            a = self._args
            wire.read_args(_sig(method_id), self._rxm, p, stop, a, True)
            if method_id == spec.BASIC_RETURN:
                m = Message(method_id, a[2], a[3])
                m.reply_code = a[0]
                m.reply_text = a[1]
            elif method_id == spec.BASIC_DELIVER:
                m = Message(method_id, a[3], a[4])
                m.consumer_tag = a[0]
                m.delivery_tag = a[1]
                m.redelivered = a[2]
            else:
                m = Message(method_id, a[2], a[3])
                m.delivery_tag = a[0]
                m.redelivered = a[1]
                m.message_count = a[4]
            self._msg = m
            return None
        args = wire.decode_args(_sig(method_id), self._rxm, p, stop, True)
        if method_id == spec.BASIC_ACK or method_id == spec.BASIC_NACK:
            # settle what it confirms: a nacked message's record goes to unconfirmed
            seqs = self.in_flight
            i = 0
            while i < len(seqs) and seqs[i] <= args[0]:
                if seqs[i] == args[0] or args[1]:
                    seqs.pop(i)
                    record = self._records.pop(i)
                    if method_id == spec.BASIC_NACK:
                        self.unconfirmed.append(record)
                else:
                    i += 1
        elif method_id == spec.CONNECTION_START:
            # the broker's name ("hutch", "RabbitMQ"): what a client may rely on differs (README:
            # "Finding a stream's ends"); only the name is kept, not the whole table
            server = args[2] if isinstance(args[2], dict) else {}
            self.server_product = server.get("product")
            self.server_cluster = server.get("cluster_name")  # (a bridge's list: one cluster's nodes)
            self.send(spec.CONNECTION_START_OK, self._login)
            return None
        elif method_id == spec.CONNECTION_TUNE:
            self.frame_max = min(args[1] or len(self._rx), len(self._rx))
            hb = args[2]
            hb = min(hb, self.heartbeat) if hb and self.heartbeat else self.heartbeat
            self.send(spec.CONNECTION_TUNE_OK, (1, self.frame_max, hb))
            self.send(spec.CONNECTION_OPEN, (self._vhost, "", False))
            self._hb = hb * 1000
            return None
        elif method_id == spec.CONNECTION_OPEN_OK:
            self.state = "open"
            self.send(spec.CHANNEL_OPEN, ("",))
            return None
        elif method_id == spec.CHANNEL_OPEN_OK:
            self.channel_open = True
        elif method_id == spec.CONFIRM_SELECT_OK:
            self.confirming = True
            self.seq = 0
        elif method_id == spec.CONNECTION_CLOSE or method_id == spec.CHANNEL_CLOSE:
            self.send(method_id + 1, ())  # close-ok
            if method_id == spec.CHANNEL_CLOSE:
                self.channel_lost()
                return ChannelClosed(args[0], args[1], (args[2], args[3]))
            self.connection_lost()
            return ConnectionClosed(args[0], args[1], (args[2], args[3]))
        elif method_id == spec.CONNECTION_CLOSE_OK:
            self.connection_lost()
        elif method_id == spec.CONNECTION_BLOCKED or method_id == spec.CONNECTION_UNBLOCKED:
            self.blocked = args[0] if args else None
        elif method_id == spec.CHANNEL_FLOW:
            self.send(spec.CHANNEL_FLOW_OK, args)
        if self.awaiting and (method_id == self.awaiting + 1 or method_id == spec.BASIC_GET_EMPTY):
            self.awaiting = 0
        return (method_id, args)
