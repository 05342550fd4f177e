"""hutch.client.simple: a tiny blocking AMQP 0-9-1 client, as micropython-lib's umqtt.simple.

One connection, one channel, no threads, no asyncio: client/protocol.py (the sans-IO client
side of the protocol) driven over a transport (client/transport.py: TCP, or a serial line
through hutch's link layer). It does not record what it declared nor keep unconfirmed
messages; hutch.client.Client (client/robust.py) adds that and reconnect().

    from hutch.client.simple import Client
    c = Client("192.168.1.10", user="sensor", password="...", heartbeat=30)
    c.connect()
    c.declare_queue("readings", durable=True)
    c.confirm()
    c.publish("", "readings", b"21.5", {"delivery_mode": 2})
    c.wait_confirms(5000)                         # True: every publish so far was acked

Client(host=None, port=None (5672; 5671 with ssl), user="guest", password="guest", vhost="/",
heartbeat=30 (seconds, 0 = off), frame_max=4096, transport=None, timeout_ms=10000,
name=None, ssl=None, mechanism="PLAIN"). `transport` replaces host and port. ssl: an
SSLContext (client/tls.py context(cafile, certfile, keyfile) makes one that verifies the
broker), or True (the system's CAs, CPython): TLS, as umqtt's ssl= does. mechanism
"EXTERNAL": over TLS, log in as the user the client's certificate names (no password).

connect(); close(); declare_queue(name="", durable, exclusive, auto_delete, arguments,
passive) -> (name, messages, consumers); declare_exchange(name, type="direct", durable,
auto_delete, arguments, passive); bind(queue, exchange, routing_key="", arguments) (the
three take record=True too, which only the robust client acts on);
delete_queue(name) -> messages; confirm(); publish(exchange, routing_key, body,
properties=None, mandatory=True) -> seq; wait_confirms(timeout_ms) -> bool;
consume(queue, callback, no_ack=False, prefetch=None, arguments=None) -> tag (arguments: the
consumer's, e.g. {"x-stream-offset": "first"} on a stream); cancel(tag); get(queue,
no_ack=False) -> Message or None; check_msg() -> bool; wait_msg(timeout_ms=None) -> bool;
ack(tag, multiple); nack(tag, requeue=True, multiple).

Messages have .body (bytes; a bytearray if it came in several frames), .routing_key,
.exchange, .delivery_tag, .redelivered, .consumer_tag and .properties, a dict with pika's
names: content_type, content_encoding, headers, delivery_mode, priority, correlation_id,
reply_to, expiration, message_id, timestamp, type, user_id, app_id, cluster_id (publish
takes the same dict).

Errors: the broker closing the channel or the connection raises ChannelClosed or
ConnectionClosed (AMQPError: .code, .text, .method = (class id, method id)), e.g. 404 for
a publish to a missing exchange, reported by the next call that reads. Network failures,
timeouts and missed heartbeats raise OSError.

connection.blocked: while the broker is short of memory, publish() raises Blocked at once
rather than stalling a sensor's main loop; `c.blocked` holds the broker's reason or None.

Confirms: wait_confirms() is True once every message published so far is acked, False
if one was nacked or lost with the channel (their sequence numbers wait in
c.protocol.unconfirmed until cleared) or time ran out.

Unroutable messages: publish() is mandatory unless told otherwise (mandatory=False), so a
message no queue takes comes back, to `c.on_return(message)` (with .reply_code, .reply_text)
if it is set, else as a Returned exception from the call that read it (wait_confirms(),
check_msg()...): a sensor learns that its reading went nowhere. (AMQP acks an unroutable
message that is not mandatory and drops it.)

Heartbeats are sent and checked only while the client is called: call check_msg() or
wait_msg() at least every heartbeat/2 seconds, or set heartbeat=0 on a node that sleeps.
"""

import errno

from ..codec import spec
from .clock import ticks_diff, ticks_ms
from .protocol import AMQPError, ConnectionClosed, Message, Protocol

TYPE_CHECKING = False
if TYPE_CHECKING:  # read by type checkers only: MicroPython has no typing module
    from typing import Any


class Returned(AMQPError):
    """A mandatory message came back (basic.return, usually 312 NO_ROUTE); .message holds it."""

    # The message that came back, set by Client._events (whose message the checker sees as
    # Message | None). Declared by an annotation alone, which costs nothing at run time.
    message: "Message | None"


class Blocked(Exception):
    """publish() while the broker has blocked the connection (connection.blocked); args[0]: its reason."""


class Client:
    # The last RPC reply (_call): its arguments, a Message (basic.get-ok) or None
    # (basic.get-empty). Each caller of _call() knows which; a type checker cannot.
    _value: "Any"

    def __init__(
        self,
        host=None,
        port=None,
        user="guest",
        password="guest",
        vhost="/",
        heartbeat=30,
        frame_max=4096,
        transport=None,
        timeout_ms=10000,
        name=None,
        ssl=None,
        mechanism="PLAIN",
        sensor_id=None,
        sequence=None,
    ):
        if transport is None and ssl:  # (client/tls.py: loaded only by a node that uses TLS)
            from .tls import Tls

            transport = Tls(host, 5671 if port is None else port, None if ssl is True else ssl)
        elif transport is None:
            from .transport import Tcp

            transport = Tcp(host, 5672 if port is None else port)
        self.transport = transport
        self.mechanism = mechanism
        # A sensor's id: each publish numbered (client/sensor.py), by `sequence` (a Sequence;
        # default: one counting boots in the file hutch-boot)
        self.sensor_id = sensor_id
        self.sequence = sequence
        self.user = user
        self.password = password
        self.vhost = vhost
        self.heartbeat = heartbeat
        self.timeout_ms = timeout_ms
        self.name = name
        self.on_return = None
        self.frame_max = frame_max  # as negotiated, once connected
        self.blocked = None
        self.protocol = Protocol(frame_max)
        self._rx = self.protocol._rx  # the read buffer: one whole frame
        self._consumers = {}  # consumer tag -> [queue, callback, no_ack, prefetch, arguments]
        self._topology = []
        self._confirming = False
        self._got = 0
        self._value = None

    # -- connection ------------------------------------------------------------------------

    def connect(self):
        """Open the connection and channel 1, afresh. Raises OSError, or ConnectionClosed
        (403: bad login)."""
        self._got = 0
        self._consumers = {}
        self._topology = []  # what this client declared (client/robust.py records it)
        self._confirming = False
        self.blocked = None
        self.transport.open(self.timeout_ms)
        try:
            p = self.protocol
            p.connect(ticks_ms(), self.user, self.password, self.vhost, self.heartbeat, self.name, self.mechanism)
            self._call()  # the handshake, up to channel.open-ok
            self.frame_max = p.frame_max
        except Exception:
            self._drop()
            raise

    def close(self):
        """Close the connection politely (waiting at most timeout_ms); never raises."""
        try:
            if self.protocol.state != "closed":
                self._call(spec.CONNECTION_CLOSE, (200, "bye", 0, 0))
        except Exception:
            pass
        self._drop()

    def _drop(self):
        self.protocol.connection_lost()
        try:
            self.transport.close()
        except Exception:
            pass

    # -- declarations ----------------------------------------------------------------------

    def declare_queue(
        self, name="", durable=False, exclusive=False, auto_delete=False, arguments=None, passive=False, record=True
    ):
        """queue.declare: (name, message count, consumer count); name="" lets the broker name it."""
        r = tuple(self._call(spec.QUEUE_DECLARE, (0, name, passive, durable, exclusive, auto_delete, False, arguments)))
        if record and not passive:
            self._record(["q", r[0], name, durable, exclusive, auto_delete, arguments])
        return r

    def declare_exchange(
        self, name, type="direct", durable=False, auto_delete=False, arguments=None, passive=False, record=True
    ):
        self._call(spec.EXCHANGE_DECLARE, (0, name, type, passive, durable, auto_delete, False, False, arguments))
        if record and not passive:
            self._record(["x", name, type, durable, auto_delete, arguments])

    def bind(self, queue, exchange, routing_key="", arguments=None, record=True):
        self._call(spec.QUEUE_BIND, (0, queue, exchange, routing_key, False, arguments))
        if record:
            self._record(["b", queue, exchange, routing_key, arguments])

    def _record(self, d):
        """What was declared (record=True), for reconnect() to declare again: nothing, here."""

    def delete_queue(self, name):
        """queue.delete: the number of messages deleted with it."""
        return self._call(spec.QUEUE_DELETE, (0, name, False, False, False))[0]

    # -- publishing ------------------------------------------------------------------------

    def confirm(self):
        """Put the channel in confirm mode (confirm.select)."""
        self._call(spec.CONFIRM_SELECT, (False,))
        self._confirming = True  # for reconnect() to restore

    def publish(self, exchange, routing_key, body, properties=None, mandatory=True):
        """basic.publish: the message's sequence number in confirm mode, else 0. Mandatory by
        default: a message no queue takes comes back (Returned, or on_return)."""
        if self.blocked is not None:
            raise Blocked(self.blocked)
        p = self.protocol
        if isinstance(body, str):
            body = body.encode()
        if self.sensor_id is not None:
            properties = self._numbered(properties)
        seq = p.publish(
            exchange,
            routing_key,
            body,
            properties,
            mandatory,
            self._keep(exchange, routing_key, body, properties, mandatory),
        )
        self._flush()
        return seq

    def _numbered(self, properties):
        """properties with the reading's identity (client/sensor.py), unless they have one."""
        from .sensor import Sequence, identified  # (loaded by a client given a sensor id)

        headers = properties.get("headers") if properties else None
        if headers and "x-sensor-seq" in headers:
            return properties
        if self.sequence is None:
            self.sequence = Sequence()
        return identified(properties, self.sensor_id, self.sequence.next())

    def _keep(self, exchange, routing_key, body, properties, mandatory):
        """What the protocol keeps of a message until it is confirmed: here its sequence number."""
        return None

    def _returned(self, message):
        """A mandatory message came back: the simple client keeps nothing of it."""

    def wait_confirms(self, timeout_ms=None):
        """Wait (default: timeout_ms) until every publish so far is confirmed. True if all were
        acked; False if one was nacked or lost, or time ran out."""
        p = self.protocol
        self._until(lambda: not p.in_flight, self.timeout_ms if timeout_ms is None else timeout_ms)
        return not p.in_flight and not p.unconfirmed

    # -- consuming -------------------------------------------------------------------------

    def consume(self, queue, callback, no_ack=False, prefetch=None, arguments=None):
        """basic.consume (after basic.qos if prefetch is given); callback(message). The consumer tag."""
        if prefetch is not None:
            self._call(spec.BASIC_QOS, (0, prefetch, False))
        tag = self._call(spec.BASIC_CONSUME, (0, queue, "", False, no_ack, False, False, arguments))[0]
        self._consumers[tag] = [queue, callback, no_ack, prefetch, arguments]
        return tag

    def cancel(self, tag):
        self._call(spec.BASIC_CANCEL, (tag, False))
        self._consumers.pop(tag, None)

    def get(self, queue, no_ack=False):
        """basic.get: a Message (.message_count: how many are left), or None if the queue is empty."""
        return self._call(spec.BASIC_GET, (0, queue, no_ack))

    def ack(self, tag, multiple=False):
        self.protocol.ack(tag, multiple)
        self._flush()

    def nack(self, tag, requeue=True, multiple=False):
        self.protocol.nack(tag, requeue, multiple)
        self._flush()

    def check_msg(self):
        """Handle what has arrived, without waiting: deliveries, confirms, heartbeats.
        True if a message went to a consumer's callback."""
        got = self._got
        self._until(None, 0)
        return self._got != got

    def wait_msg(self, timeout_ms=None):
        """Wait for a delivery (forever by default) and hand it to its callback; False on timeout."""
        got = self._got
        return self._until(lambda: self._got != got, timeout_ms)

    # -- the loop --------------------------------------------------------------------------

    def _call(self, method_id=0, args=()):
        """Send a synchronous method (or, with none, what is queued) and wait for the reply the
        protocol awaits; the reply's value."""
        p = self.protocol
        if method_id:
            p.call(method_id, args)
        self._value = None
        self._flush()
        if not self._until(lambda: not p.awaiting, self.timeout_ms):
            raise OSError(errno.ETIMEDOUT)
        return self._value

    def _until(self, done, timeout_ms):
        """Handle what comes in until done() (done None: what is there now, waiting for nothing).
        False if timeout_ms ran out first. Heartbeats are sent and checked meanwhile."""
        start = ticks_ms()
        p = self.protocol
        while done is None or not done():
            if p.state == "closed":
                raise OSError(errno.ENOTCONN)
            left = 60000 if timeout_ms is None else timeout_ms - ticks_diff(ticks_ms(), start)
            if done is not None and left <= 0:
                return False
            if not self._events():  # those already read first, else wait for more
                wait = p.tick(ticks_ms())  # a heartbeat may be due
                self._flush()
                try:
                    n = self.transport.readinto(p.read_buffer(), max(0, min(left, wait)))
                except Exception:
                    self._drop()
                    raise
                if n:
                    p.received(n)
                    self._events()
                elif wait < 0:  # nothing from the broker for two heartbeat intervals
                    self._drop()
                    raise OSError(errno.ETIMEDOUT, "missed heartbeats")
            if done is None:
                break
        return True

    def _events(self):
        """Handle the events in what was read. Stops after an RPC reply, so the caller acts on
        it (registers a consumer...) first. True if there was an event."""
        p = self.protocol
        waiting = p.awaiting
        handled = False
        while True:
            try:
                event = p.next_event()
            except Exception:  # bytes that are not AMQP
                self._drop()
                raise
            if event is None:
                return handled
            handled = True
            if isinstance(event, Message):
                if event.kind == spec.BASIC_DELIVER:
                    c = self._consumers.get(event.consumer_tag)
                    if c:
                        self._got += 1
                        c[1](event)
                elif event.kind == spec.BASIC_GET_OK:
                    self._value = event
                else:  # basic.return
                    self._returned(event)
                    if not self.on_return:
                        e = Returned(event.reply_code, event.reply_text)
                        e.message = event
                        raise e
                    self.on_return(event)
            elif isinstance(event, AMQPError):  # the broker closed the channel or the connection
                try:
                    self._flush()  # close-ok
                except OSError:
                    pass  # the broker's reason is what matters
                if isinstance(event, ConnectionClosed):
                    self._drop()
                raise event
            else:
                method_id, args = event
                if method_id == spec.BASIC_CANCEL:  # the broker cancelled a consumer (its queue was deleted)
                    self._consumers.pop(args[0], None)
                self.blocked = p.blocked
                self._value = None if method_id == spec.BASIC_GET_EMPTY else args
            if waiting and not p.awaiting:
                return True

    def _flush(self):
        p = self.protocol
        data = p.data_to_send()
        while data is not None:
            try:
                self.transport.write(data)
            except Exception:
                self._drop()
                raise
            data = p.data_to_send()
