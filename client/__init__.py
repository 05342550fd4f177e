"""hutch.client: a tiny blocking AMQP 0-9-1 client for sensor nodes.

Runs on MicroPython (ESP32, RP2040, the unix port) and CPython, in the spirit of
micropython-lib's umqtt.simple: one channel, no threads, no asyncio, nothing
from hutch's broker. Over TCP it needs only this package.

    from hutch.client import Client
    c = Client("192.168.1.10", user="sensor", password="...", heartbeat=30)
    c.connect()
    c.declare_queue("readings", durable=True)
    c.confirm()                                   # publisher confirms
    c.publish("", "readings", b"21.5", {"delivery_mode": 2})
    c.wait_confirms(5000)                         # True: every publish so far was acked

    def command(m):                               # m.body .routing_key .delivery_tag
        print(m.body, m.properties)               # .redelivered .exchange .properties
        c.ack(m.delivery_tag)
    c.consume("sensor-7.cmd", command, prefetch=1)
    while True:
        c.wait_msg(1000)      # or check_msg() in a loop; both keep heartbeats going

Client(host=None, port=5672, user="guest", password="guest", vhost="/",
heartbeat=30 (seconds, 0 = off), frame_max=4096, transport=None,
timeout_ms=10000, name=None). `transport` replaces host and port:
hutch.client.transport.Serial(uart) runs the connection over a serial line.

connect(); close(); declare_queue(name="", durable, exclusive, auto_delete,
arguments, passive) -> (name, messages, consumers); declare_exchange(name,
type="direct", durable, auto_delete, arguments, passive); bind(queue, exchange,
routing_key="", arguments); delete_queue(name) -> messages; confirm();
publish(exchange, routing_key, body, properties=None, mandatory=False) -> seq;
wait_confirms(timeout_ms) -> bool; consume(queue, callback, no_ack=False,
prefetch=None) -> tag; cancel(tag); get(queue, no_ack=False) -> Message or None;
check_msg() -> bool; wait_msg(timeout_ms=None) -> bool; ack(tag, multiple);
nack(tag, requeue=True, multiple); republish(); reconnect(republish=False).

Messages have .body (bytes; a bytearray if it came in several frames),
.routing_key, .exchange, .delivery_tag, .redelivered, .consumer_tag and
.properties, a dict with pika's names: content_type, content_encoding, headers,
delivery_mode, priority, correlation_id, reply_to, expiration, message_id,
timestamp, type, user_id, app_id, cluster_id (publish takes the same dict).

Errors: the broker closing the channel or the connection raises ChannelClosed or
ConnectionClosed (AMQPError: .code, .text, .method = (class id, method id)), e.g.
404 for a publish to a missing exchange, reported by the next call that reads
(wait_confirms, check_msg...). Network failures, timeouts and missed heartbeats
raise OSError. After either, reconnect() restores what this client set up:
queues, exchanges and bindings it declared, confirm mode, qos and consumers.

connection.blocked: while the broker is short of memory, publish() raises
Blocked at once - the reading stays with the caller, who may keep or drop it -
rather than stalling a sensor's main loop. `c.blocked` holds the broker's reason
or None; the notices arrive whenever the client reads.

Confirms: wait_confirms() is True once every message published so far is acked.
Messages not acked - nacked, or in flight when the channel or connection was
lost - wait in `c.unconfirmed` as (exchange, routing_key, body, properties,
mandatory) until republish() sends them again (so does reconnect(republish=True))
or the caller clears the list.

Mandatory messages the broker cannot route come back to `c.on_return(message)`
(with .reply_code, .reply_text) if it is set, else as a Returned exception from
the call that read them.

Heartbeats are sent and checked only while the client is called: call
check_msg() or wait_msg() at least every heartbeat/2 seconds, or set heartbeat=0
on a node that sleeps longer.
"""

import errno
import struct
import sys

try:
    from time import ticks_diff, ticks_ms

    from micropython import const
except ImportError:  # CPython
    import time

    # MicroPython's time has no monotonic(), and the board's type check (tests/test_typecheck.py)
    # reads this file against MicroPython's modules: looked up by name, as only CPython gets here.
    _monotonic = getattr(time, "monotonic")

    def _const(x):
        return x

    def _ticks_ms():
        return int(_monotonic() * 1000)

    def _ticks_diff(a, b):
        return a - b

    # Bound by assignment rather than defined under these names: a `def` would declare its own
    # signature, which MicroPython's functions (positional-only, opaque tick values) do not match.
    const = _const
    ticks_ms = _ticks_ms
    ticks_diff = _ticks_diff

TYPE_CHECKING = False
if TYPE_CHECKING:  # read by type checkers only: MicroPython has no typing module
    from typing import Any

pack_into = struct.pack_into

# (class id << 16) | method id
_START = const(0x000A000A)
_START_OK = const(0x000A000B)
_TUNE = const(0x000A001E)
_TUNE_OK = const(0x000A001F)
_OPEN = const(0x000A0028)
_OPEN_OK = const(0x000A0029)
_CLOSE = const(0x000A0032)
_CLOSE_OK = const(0x000A0033)
_BLOCKED = const(0x000A003C)
_UNBLOCKED = const(0x000A003D)
_CH_OPEN = const(0x0014000A)
_CH_OPEN_OK = const(0x0014000B)
_CH_FLOW = const(0x00140014)
_CH_FLOW_OK = const(0x00140015)
_CH_CLOSE = const(0x00140028)
_X_DECLARE = const(0x0028000A)
_X_DECLARE_OK = const(0x0028000B)
_Q_DECLARE = const(0x0032000A)
_Q_DECLARE_OK = const(0x0032000B)
_Q_BIND = const(0x00320014)
_Q_BIND_OK = const(0x00320015)
_Q_DELETE = const(0x00320028)
_Q_DELETE_OK = const(0x00320029)
_QOS = const(0x003C000A)
_QOS_OK = const(0x003C000B)
_CONSUME = const(0x003C0014)
_CONSUME_OK = const(0x003C0015)
_CANCEL = const(0x003C001E)
_CANCEL_OK = const(0x003C001F)
_PUBLISH = const(0x003C0028)
_RETURN = const(0x003C0032)
_DELIVER = const(0x003C003C)
_GET = const(0x003C0046)
_GET_OK = const(0x003C0047)
_GET_EMPTY = const(0x003C0048)
_ACK = const(0x003C0050)
_NACK = const(0x003C0078)
_SELECT = const(0x0055000A)
_SELECT_OK = const(0x0055000B)

_TX_SIZE = const(1024)  # method and header frames are built here; bigger body chunks go out in place
_HEARTBEAT = b"\x08\x00\x00\x00\x00\x00\x00\xce"
_PROPS = (
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
_KINDS = "ssTBBssssQssss"  # their types: shortstr, field table, octet, 64-bit timestamp


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


class Returned(AMQPError):
    """A mandatory message came back (basic.return, usually 312 NO_ROUTE); .message holds it."""

    # The message that came back, set by Client._done (whose message the checker sees as
    # Message | None). Declared by an annotation alone, which costs nothing at run time.
    message: "Message | None"


class Blocked(Exception):
    """publish() while the broker has blocked the connection (connection.blocked); args[0]: its reason."""


def _u16(b, p):
    return b[p] << 8 | b[p + 1]


def _u32(b, p):
    return b[p] << 24 | b[p + 1] << 16 | b[p + 2] << 8 | b[p + 3]


def _u64(b, p):
    return _u32(b, p) << 32 | _u32(b, p + 4)


def _str(b, p):
    return str(b[p + 1 : p + 1 + b[p]], "utf-8")


def _value(b, p):
    """The field-table value at p: (value, next p)."""
    k = chr(b[p])
    p += 1
    i = "bBsuIilLT".find(k)  # integers: width 1, 1, 2, 2, 4, 4, 8, 8, 8; even positions before L signed
    if i >= 0:
        w = 1 << (i >> 1) if i < 8 else 8
        v = int.from_bytes(bytes(b[p : p + w]), "big")
        if i & 1 == 0 and i < 8 and v >> (w * 8 - 1):
            v -= 1 << (w * 8)
        return v, p + w
    if k == "t":
        return b[p] != 0, p + 1
    if k == "S" or k == "x":
        end = p + 4 + _u32(b, p)
        v = bytes(b[p + 4 : end])
        if k == "S":
            try:
                v = str(v, "utf-8")
            except UnicodeError:
                pass
        return v, end
    if k == "F" or k == "A":
        end = p + 4 + _u32(b, p)
        if k == "F":
            return _table(b, p + 4, end), end
        items = []
        p += 4
        while p < end:
            v, p = _value(b, p)
            items.append(v)
        return items, end
    if k == "d" or k == "f":
        w = 8 if k == "d" else 4
        return struct.unpack(">" + k, bytes(b[p : p + w]))[0], p + w
    if k == "D":  # decimal: (scale, unscaled value)
        return (b[p], _u32(b, p + 1)), p + 5
    if k == "V":
        return None, p
    raise ValueError("field type " + k)


def _table(b, p, end):
    d = {}
    while p < end:
        key = _str(b, p)
        d[key], p = _value(b, p + 1 + b[p])
    return d


class Message:
    """A delivery (consume, get) or a returned message (on_return)."""

    # Only some kinds of message have these (Client._method sets them). Annotations without a
    # value create no attribute - on MicroPython not even an __annotations__ entry - so they
    # cost nothing per message; they tell readers and type checkers what may be there.
    reply_code: int  # a returned message: why the broker sent it back (312 NO_ROUTE...)
    reply_text: str
    message_count: int  # basic.get: how many messages the queue still holds

    def __init__(self, kind, exchange, routing_key):
        self._kind = kind
        self.exchange = exchange
        self.routing_key = routing_key
        self.delivery_tag = 0
        self.redelivered = False
        self.consumer_tag = None  # type: str | None
        self.body = b""  # type: bytes | bytearray
        # the content header's flags and properties (bytes), decoded into a dict on first use
        self._raw = None  # type: bytes | dict | None
        self._size = self._at = 0

    @property
    def properties(self):
        raw = self._raw
        if raw is None or isinstance(raw, dict):
            return raw or {}
        flags = _u16(raw, 0)
        p = 2
        d = {}
        for i in range(14):
            if flags & (0x8000 >> i):
                k = _KINDS[i]
                if k == "s":
                    v = _str(raw, p)
                    p += 1 + raw[p]
                elif k == "B":
                    v = raw[p]
                    p += 1
                elif k == "Q":
                    v = _u64(raw, p)
                    p += 8
                else:
                    end = p + 4 + _u32(raw, p)
                    v = _table(raw, p + 4, end)
                    p = end
                d[_PROPS[i]] = v
        self._raw = d
        return d


class Client:
    # The last RPC reply's value (_method, _done): a tuple, a str, an int, a Message or None,
    # depending on the method. Each caller of _call() knows which; a type checker cannot.
    _value: "Any"

    def __init__(
        self,
        host=None,
        port=5672,
        user="guest",
        password="guest",
        vhost="/",
        heartbeat=30,
        frame_max=4096,
        transport=None,
        timeout_ms=10000,
        name=None,
    ):
        if transport is None:
            from .transport import Tcp

            transport = Tcp(host, port)
        self.transport = transport
        self.user = user
        self.password = password
        self.vhost = vhost
        self.heartbeat = heartbeat
        self.frame_max = frame_max
        self.timeout_ms = timeout_ms
        self.name = name
        self.on_return = None
        self.blocked = None
        self.unconfirmed = []
        self._rx = bytearray(frame_max)  # a whole incoming frame: the broker honours our frame_max
        self._rxm = memoryview(self._rx)
        self._tx = bytearray(min(_TX_SIZE, frame_max))
        self._txm = memoryview(self._tx)
        self._topology = []  # what reconnect() declares again
        self._consumers = {}  # consumer tag -> [queue, callback, no_ack, prefetch]
        self._confirming = self._open = self._ch = self._closing = False
        self._out = []  # (seq, exchange, routing_key, body, properties, mandatory) awaiting a confirm

    # -- connection ------------------------------------------------------------------------

    def connect(self):
        """Open the connection and channel 1, afresh (reconnect() restores what was set up).
        Raises OSError, or ConnectionClosed (403: bad login)."""
        self._pos = self._n = self._tn = self._hb = self._reply = self._got = 0
        self._msg = self.blocked = None
        self._ch = self._confirming = self._closing = False
        self._topology = []
        self._consumers = {}
        self.transport.open(self.timeout_ms)
        self._open = True
        self._rx_at = self._tx_at = ticks_ms()
        try:
            self.transport.write(b"AMQP\x00\x00\x09\x01")
            self._call(_START, send=False)
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
            if self.name:
                props["connection_name"] = self.name
            login = b"\x00" + self.user.encode() + b"\x00" + self.password.encode()
            fmax, hb = self._call(_TUNE, _START_OK, "TsSs", props, "PLAIN", login, "en_US")
            self.frame_max = min(fmax or self.frame_max, self.frame_max)
            hb = min(hb, self.heartbeat) if hb and self.heartbeat else self.heartbeat
            self._hb = hb * 1000
            self._send(_TUNE_OK, "HIH", 1, self.frame_max, hb)
            self._call(_OPEN_OK, _OPEN, "sBB", self.vhost, 0, 0)
            self._call(_CH_OPEN_OK, _CH_OPEN, "B", 0)
            self._ch = True
        except Exception:
            self._drop()
            raise

    def close(self):
        """Close the connection politely (waiting at most timeout_ms); never raises."""
        self._closing = True  # what arrives now is not handed to callbacks (the broker requeues it)
        try:
            if self._open:
                self._call(_CLOSE_OK, _CLOSE, "HsHH", 200, "bye", 0, 0)
        except Exception:
            pass
        self._drop()

    def _drop(self):
        self._open = False
        self._lost()
        try:
            self.transport.close()
        except Exception:
            pass

    def reconnect(self, republish=False):
        """Connect again - or only reopen the channel after a channel error - and restore the
        declarations, confirm mode and consumers. Messages in flight move to `unconfirmed`;
        republish=True sends them again. Raises like connect() if that fails; what to restore
        is kept for the next attempt."""
        saved = topology, consumers, confirming = self._topology, self._consumers, self._confirming
        self._lost()
        try:
            renamed = {}
            if self._open and not self._ch:
                self._call(_CH_OPEN_OK, _CH_OPEN, "B", 0)
                self._ch = True
                self._consumers = {}
            else:
                self.close()
                self.connect()
                for d in topology:
                    if d[0] == "q":
                        name = self.declare_queue(*d[2:], record=False)[0]
                        if name != d[1]:  # server-named: it has a new name now
                            renamed[d[1]] = d[1] = name
                    elif d[0] == "x":
                        self.declare_exchange(*d[1:], record=False)
                    else:
                        d[1] = renamed.get(d[1], d[1])
                        self.bind(*d[1:], record=False)
            self._topology = topology
            if confirming:
                self.confirm()
            for c in consumers.values():
                c[0] = renamed.get(c[0], c[0])
                self.consume(*c)
        except Exception:
            self._topology, self._consumers, self._confirming = saved
            raise
        if republish:
            self.republish()

    def _lost(self):
        """The channel is gone: what awaited a confirm is unconfirmed now."""
        self._ch = False
        self.unconfirmed += [m[1:] for m in self._out]
        self._out = []

    # -- declarations ----------------------------------------------------------------------

    def declare_queue(
        self, name="", durable=False, exclusive=False, auto_delete=False, arguments=None, passive=False, record=True
    ):
        """queue.declare: (name, message count, consumer count); name="" lets the broker name it."""
        bits = passive | durable << 1 | exclusive << 2 | auto_delete << 3
        r = self._call(_Q_DECLARE_OK, _Q_DECLARE, "HsBT", 0, name, bits, arguments)
        if record and not passive:
            self._record(["q", r[0], name, durable, exclusive, auto_delete, arguments])
        return r

    def declare_exchange(
        self, name, type="direct", durable=False, auto_delete=False, arguments=None, passive=False, record=True
    ):
        bits = passive | durable << 1 | auto_delete << 2
        self._call(_X_DECLARE_OK, _X_DECLARE, "HssBT", 0, name, type, bits, arguments)
        if record and not passive:
            self._record(["x", name, type, durable, auto_delete, arguments])

    def bind(self, queue, exchange, routing_key="", arguments=None, record=True):
        self._call(_Q_BIND_OK, _Q_BIND, "HsssBT", 0, queue, exchange, routing_key, 0, arguments)
        if record:
            self._record(["b", queue, exchange, routing_key, arguments])

    def _record(self, d):
        if d not in self._topology:
            self._topology.append(d)

    def delete_queue(self, name):
        """queue.delete: the number of messages deleted with it."""
        n = self._call(_Q_DELETE_OK, _Q_DELETE, "HsB", 0, name, 0)
        self._topology = [d for d in self._topology if d[0] == "x" or d[1] != name]
        return n

    # -- publishing ------------------------------------------------------------------------

    def confirm(self):
        """Put the channel in confirm mode (confirm.select)."""
        self._call(_SELECT_OK, _SELECT, "B", 0)
        self._confirming = True
        self._seq = 0

    def publish(self, exchange, routing_key, body, properties=None, mandatory=False):
        """basic.publish: the message's sequence number in confirm mode, else 0."""
        if self.blocked is not None:
            raise Blocked(self.blocked)
        if isinstance(body, str):
            body = body.encode()
        self._put(_PUBLISH, "HssB", 0, exchange, routing_key, mandatory)
        tx = self._tx
        self._fs = self._tn
        size = len(body)
        pack_into(">BHIHHQH", tx, self._tn, 2, 1, 0, 60, 0, size, 0)  # content header frame
        self._tn += 21
        if properties:
            flags = 0
            for i in range(14):
                v = properties.get(_PROPS[i])
                if v is not None:
                    flags |= 0x8000 >> i
                    self._field(_KINDS[i], v)
            pack_into(">H", tx, self._fs + 19, flags)
        self._end()
        step = self.frame_max - 8
        mv = body if size <= step else memoryview(body)
        i = 0
        while i < size:  # body frames; a chunk too big for the buffer goes out without a copy
            k = min(step, size - i)
            if self._tn + 8 > len(tx):
                self._flush()
            pack_into(">BHI", tx, self._tn, 3, 1, k)
            self._tn += 7
            if self._tn + k < len(tx):
                tx[self._tn : self._tn + k] = mv if k == size else mv[i : i + k]
                self._tn += k
            else:
                self._flush()
                self.transport.write(mv[i : i + k])
            tx[self._tn] = 0xCE
            self._tn += 1
            i += k
        self._flush()
        if not self._confirming:
            return 0
        self._seq += 1
        self._out.append((self._seq, exchange, routing_key, body, properties, mandatory))
        return self._seq

    def wait_confirms(self, timeout_ms=None):
        """Wait (default: timeout_ms) until every publish so far is confirmed. True if all were
        acked; False if one was nacked (it waits in `unconfirmed`) or time ran out."""
        self._until(lambda: not self._out, self.timeout_ms if timeout_ms is None else timeout_ms)
        return not self._out and not self.unconfirmed

    def republish(self):
        """Publish the messages in `unconfirmed` again (with new sequence numbers)."""
        todo = self.unconfirmed
        self.unconfirmed = []
        for i in range(len(todo)):
            try:
                self.publish(*todo[i])
            except Exception:
                self.unconfirmed += todo[i:]
                raise

    # -- consuming -------------------------------------------------------------------------

    def consume(self, queue, callback, no_ack=False, prefetch=None):
        """basic.consume (after basic.qos if prefetch is given); callback(message). The consumer tag."""
        if prefetch is not None:
            self._call(_QOS_OK, _QOS, "IHB", 0, prefetch, 0)
        tag = self._call(_CONSUME_OK, _CONSUME, "HssBT", 0, queue, "", no_ack << 1, None)
        self._consumers[tag] = [queue, callback, no_ack, prefetch]
        return tag

    def cancel(self, tag):
        self._call(_CANCEL_OK, _CANCEL, "sB", tag, 0)
        self._consumers.pop(tag, None)

    def get(self, queue, no_ack=False):
        """basic.get: a Message (.message_count: how many are left), or None if the queue is empty."""
        return self._call(_GET_OK, _GET, "HsB", 0, queue, no_ack, alt=_GET_EMPTY)

    def ack(self, tag, multiple=False):
        self._send(_ACK, "QB", tag, multiple)

    def nack(self, tag, requeue=True, multiple=False):
        self._send(_NACK, "QB", tag, multiple | requeue << 1)

    def check_msg(self):
        """Handle what has arrived, without waiting: deliveries, confirms, heartbeats.
        True if a message went to a consumer's callback."""
        got = self._got
        self._pump(0)
        return self._got != got

    def wait_msg(self, timeout_ms=None):
        """Wait for a delivery (forever by default) and hand it to its callback; False on timeout."""
        got = self._got
        return self._until(lambda: self._got != got, timeout_ms)

    # -- reading ---------------------------------------------------------------------------

    def _until(self, done, timeout_ms):
        start = ticks_ms()
        while not done():
            left = 60000 if timeout_ms is None else timeout_ms - ticks_diff(ticks_ms(), start)
            if left <= 0:
                return False
            self._pump(left)
        return True

    def _call(self, expect, cm=0, fmt="", *args, alt=-1, send=True):
        """Send method cm and wait for its reply; the reply's value. Frames meanwhile are handled."""
        self._reply = 0
        if send:
            self._send(cm, fmt, *args)
        if not self._until(lambda: self._reply == expect or self._reply == alt, self.timeout_ms):
            raise OSError(errno.ETIMEDOUT)
        self._reply = 0
        return self._value

    def _pump(self, ms):
        """Handle the complete frames already read; if there were none, wait up to ms for input."""
        if not self._open:
            raise OSError(errno.ENOTCONN)
        if self._frames():
            return
        hb = self._hb
        silent = False
        if hb:
            now = ticks_ms()
            idle = ticks_diff(now, self._tx_at)
            if idle >= hb // 2:
                self._write(_HEARTBEAT)
                idle = 0
            ms = min(ms, hb // 2 - idle)
            if ticks_diff(now, self._rx_at) > 2 * hb:  # unless something is waiting to be read
                silent = True
                ms = 0
        if self._pos:  # move the start of the next frame to the front
            rest = self._n - self._pos
            self._rx[0:rest] = self._rxm[self._pos : self._n]
            self._pos = 0
            self._n = rest
        try:
            n = self.transport.readinto(self._rxm[self._n :], ms)
        except Exception:
            self._drop()
            raise
        if n:
            self._n += n
            self._rx_at = ticks_ms()
            self._frames()
        elif silent:
            self._drop()
            raise OSError(errno.ETIMEDOUT, "missed heartbeats")

    def _frames(self):
        """Handle the complete frames in the read buffer. Each is consumed before it is acted on,
        so callbacks may call the client again. Stops after an RPC reply. True if there was one."""
        rx = self._rx
        handled = False
        while self._n - self._pos >= 8:
            p = self._pos
            size = _u32(rx, p + 3)
            end = p + 8 + size
            if end > self._n:
                if size + 8 <= len(rx):
                    break
                self._drop()
                raise ValueError("frame larger than frame_max")
            if rx[end - 1] != 0xCE:
                self._drop()
                raise ValueError("frame end missing")
            self._pos = end
            handled = True
            typ = rx[p]
            p += 7
            m = self._msg
            if typ == 1:
                self._method(_u32(rx, p), p + 4)
                if self._reply:  # let the caller act on it (register a consumer...) first
                    break
            elif typ == 2:
                m._size = _u64(rx, p + 4)
                if _u16(rx, p + 12):
                    m._raw = bytes(rx[p + 12 : end - 1])
                if not m._size:
                    self._done()
            elif typ == 3:
                if not m._at and m._size == size:  # the whole body in one frame
                    m.body = bytes(self._rxm[p : end - 1])
                else:
                    body = m.body
                    if not isinstance(body, bytearray):  # the first of several frames: assemble in place
                        body = m.body = bytearray(m._size)
                    body[m._at : m._at + size] = self._rxm[p : end - 1]
                m._at += size
                if m._at >= m._size:
                    self._done()
            elif typ != 8:  # 8: a heartbeat
                self._drop()
                raise ValueError("not an AMQP 0-9-1 frame")
        return handled

    def _done(self):
        m = self._msg
        self._msg = None
        if self._closing:
            return
        if m._kind == _DELIVER:
            c = self._consumers.get(m.consumer_tag)
            if c:
                self._got += 1
                c[1](m)
        elif m._kind == _GET_OK:
            self._value = m
            self._reply = _GET_OK
        elif self.on_return:
            self.on_return(m)
        else:
            e = Returned(m.reply_code, m.reply_text)
            e.message = m
            raise e

    def _method(self, cm, p):
        rx = self._rx
        if cm == _DELIVER or cm == _GET_OK or cm == _RETURN:
            if cm == _RETURN:
                code = _u16(rx, p)
                text = _str(rx, p + 2)
                p += 3 + rx[p + 2]
            else:
                if cm == _DELIVER:
                    ctag = _str(rx, p)
                    p += 1 + rx[p]
                tag = _u64(rx, p)
                red = rx[p + 8] & 1 == 1
                p += 9
            m = self._msg = Message(cm, _str(rx, p), _str(rx, p + 1 + rx[p]))
            if cm == _RETURN:
                m.reply_code = code
                m.reply_text = text
            else:
                m.delivery_tag = tag
                m.redelivered = red
                if cm == _DELIVER:
                    m.consumer_tag = ctag
                else:
                    p += 1 + rx[p]
                    m.message_count = _u32(rx, p + 1 + rx[p])
        elif cm == _ACK or cm == _NACK:
            tag = _u64(rx, p)
            multiple = rx[p + 8] & 1
            out = []
            for m in self._out:
                if m[0] == tag or multiple and m[0] < tag:
                    if cm == _NACK:
                        self.unconfirmed.append(m[1:])
                else:
                    out.append(m)
            self._out = out
        elif cm == _CLOSE or cm == _CH_CLOSE:
            code = _u16(rx, p)
            text = _str(rx, p + 2)
            p += 3 + rx[p + 2]
            method = (_u16(rx, p), _u16(rx, p + 2))
            if cm == _CLOSE:
                try:
                    self._write(b"\x01\x00\x00\x00\x00\x00\x04\x00\x0a\x00\x33\xce")  # close-ok
                except OSError:
                    pass  # the broker's reason is what matters
                self._drop()
                raise ConnectionClosed(code, text, method)
            self._lost()
            self._msg = None
            self._write(b"\x01\x00\x01\x00\x00\x00\x04\x00\x14\x00\x29\xce")  # channel.close-ok
            raise ChannelClosed(code, text, method)
        elif cm == _BLOCKED:
            self.blocked = _str(rx, p)
        elif cm == _UNBLOCKED:
            self.blocked = None
        elif cm == _CANCEL:  # the broker cancelled a consumer (its queue was deleted)
            self._consumers.pop(_str(rx, p), None)
        elif cm == _CH_FLOW:
            self._send(_CH_FLOW_OK, "B", rx[p])
        else:  # an RPC reply
            if cm == _TUNE:
                self._value = (_u32(rx, p + 2), _u16(rx, p + 6))
            elif cm == _Q_DECLARE_OK:
                n = p + 1 + rx[p]
                self._value = (_str(rx, p), _u32(rx, n), _u32(rx, n + 4))
            elif cm == _CONSUME_OK:
                self._value = _str(rx, p)
            elif cm == _Q_DELETE_OK:
                self._value = _u32(rx, p)
            else:
                self._value = None
            self._reply = cm

    # -- writing ---------------------------------------------------------------------------

    def _put(self, cm, fmt, *args):
        """Build a method frame in the (empty) send buffer: connection methods on channel 0."""
        ch = 0 if cm >> 16 == 10 else 1
        if not self._open or ch and not self._ch and cm != _CH_OPEN:
            raise OSError(errno.ENOTCONN)
        pack_into(">BHII", self._tx, 0, 1, ch, 0, cm)
        self._fs = 0
        self._tn = 11
        for i in range(len(fmt)):
            self._field(fmt[i], args[i])
        self._end()

    def _send(self, cm, fmt, *args):
        self._put(cm, fmt, *args)
        self._flush()

    def _end(self):
        if self._tn >= len(self._tx):
            raise ValueError("frame larger than the send buffer")
        pack_into(">I", self._tx, self._fs + 3, self._tn - self._fs - 7)
        self._tx[self._tn] = 0xCE
        self._tn += 1

    def _flush(self):
        n = self._tn
        self._tn = 0
        self._write(self._txm[:n])

    def _write(self, data):
        try:
            self.transport.write(data)
        except Exception:
            self._drop()
            raise
        self._tx_at = ticks_ms()

    def _field(self, k, v):
        """Append one value: B octet, H short, I long, Q longlong (unsigned, as struct spells them),
        s shortstr, S longstr, T field table."""
        if k == "B":
            self._pack(">B", 1, v)
        elif k == "H":
            self._pack(">H", 2, v)
        elif k == "I":
            self._pack(">I", 4, v)
        elif k == "Q":
            self._pack(">Q", 8, v)
        elif k == "T":
            start = self._tn
            self._pack(">I", 4, 0)
            if v:
                for key in v:
                    self._field("s", key)
                    self._item(v[key])
            pack_into(">I", self._tx, start, self._tn - start - 4)
        else:
            if isinstance(v, str):
                v = v.encode()
            n = len(v)
            if k == "s":
                self._pack(">B", 1, n)
            else:
                self._pack(">I", 4, n)
            if self._tn + n >= len(self._tx):
                raise ValueError("frame larger than the send buffer")
            self._tx[self._tn : self._tn + n] = v
            self._tn += n

    def _item(self, v):
        """A field-table value: its type letter, then the value."""
        if isinstance(v, bool):
            self._pack(">H", 2, 116 << 8 | v)  # t
        elif isinstance(v, int):
            if -1 << 31 <= v < 1 << 31:
                self._pack(">B", 1, 73)  # I
                self._pack(">i", 4, v)
            else:
                self._pack(">B", 1, 108)  # l
                self._pack(">q", 8, v)
        elif isinstance(v, float):
            self._pack(">B", 1, 100)  # d
            self._pack(">d", 8, v)
        elif isinstance(v, str):
            self._pack(">B", 1, 83)  # S
            self._field("S", v)
        elif isinstance(v, (bytes, bytearray)):
            self._pack(">B", 1, 120)  # x
            self._field("S", v)
        elif isinstance(v, dict):
            self._pack(">B", 1, 70)  # F
            self._field("T", v)
        elif isinstance(v, (list, tuple)):
            self._pack(">B", 1, 65)  # A
            start = self._tn
            self._pack(">I", 4, 0)
            for x in v:
                self._item(x)
            pack_into(">I", self._tx, start, self._tn - start - 4)
        elif v is None:
            self._pack(">B", 1, 86)  # V
        else:
            raise TypeError("field value %r" % (v,))

    def _pack(self, fmt, n, v):
        pack_into(fmt, self._tx, self._tn, v)
        self._tn += n
