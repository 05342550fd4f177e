"""Bridges inside `hutch serve`: a local queue forwarded to an upstream broker (up), or an
upstream queue brought here (down, for commands).

The local side is core/bridge/outbox.py (up: a consumer of the source queue, no socket) or
core/bridge/inbox.py (down: a publisher through Broker.publish); the upstream side is the sensor
client's sans-IO protocol (client/protocol.py), driven here over an asyncio stream (TLS for
amqps://), on CPython and MicroPython alike. Per link:

    connect (each URI in turn) -> handshake -> set-up (up: declare, confirm.select; down:
    passive declare, qos, consume) -> running
    up: messages the outbox is given are forwarded as they came (basic.publish with the same
    properties, made persistent, mandatory, with the bridge's headers), numbered as upstream
    confirms them; a confirm settles them locally, a nack or a return puts them back.
    down: each delivery is published here and acked upstream once held as promised.
    link lost (EOF, reset, heartbeats missed, upstream closed it, no progress): what was in
    flight goes back (up: to the head of the local queue; down: upstream requeues it); retry
    after reconnect_delay, doubled up to max_reconnect_delay, with jitter.

Status (state, upstream, forwarded, backlog, last error) is `status()`, and each change of
state is one log line.
"""

import asyncio
import binascii
import errno
import os
import random
import struct
import sys

from ..client.protocol import ChannelClosed, ConnectionClosed, Message, Protocol
from ..codec import spec
from ..codec.errors import ChannelException
from ..core.bridge.inbox import DROP, Inbox
from ..core.bridge.inbox import REQUEUE as REQUEUE_UPSTREAM
from ..core.bridge.outbox import Outbox
from ..core.session import MESSAGE
from ..core.topology import add_binding, declare_queue
from ..ports.clock import Clock, sleep_ms
from ..ports.interrupt import guarded
from ..ports.tcp import close_writer

MICROPYTHON = sys.implementation.name == "micropython"
READ_SIZE = 65536
DEFAULT_PREFETCH = 1000  # as RabbitMQ's shovel
TICK_MS = 500
SLICE = 100  # messages forwarded per write to the socket, at most (see _UpLink.send)


class Rate:
    """max_rate (messages/s) and max_byte_rate (body bytes/s), as token buckets that hold a tenth
    of a second's worth: over any second a metered link gets at most 1.1 times its limits
    (and a message larger than that tenth still goes, once the bucket is full)."""

    def __init__(self, messages, byte_count, clock):
        self.limits = (messages, byte_count)
        self.caps = (max(1.0, messages / 10), max(1.0, byte_count / 10))
        self.tokens = list(self.caps)
        self.clock = clock
        self.at = clock.now_ms()

    def _refill(self):
        now = self.clock.now_ms()
        elapsed = now - self.at
        self.at = now
        for i in (0, 1):
            limit = self.limits[i]
            if limit:
                self.tokens[i] = min(self.caps[i], self.tokens[i] + limit * elapsed / 1000)

    def allowed(self, waiting):
        """How many of the waiting entries may go now (the tokens they take are spent)."""
        self._refill()
        messages, byte_count = self.limits
        n = 0
        for entry in waiting:
            size = entry[MESSAGE].body_size
            if (messages and self.tokens[0] < 1) or (byte_count and self.tokens[1] < min(size, self.caps[1])):
                break
            self.tokens[0] -= 1
            self.tokens[1] -= size
            n += 1
        return n

    def wait_ms(self):
        """How long until the next message may go."""
        return max(10, int(1000 / self.limits[0])) if self.limits[0] else 100


class LinkError(Exception):
    """Why a link ended or could not start: logged and kept as the bridge's last error."""


class Bridge:
    """One [[bridge]] (server/bridge_config.py's checked settings): its local side, set up at
    construction (BridgeError if it cannot be), and its retry loop once started."""

    def __init__(self, broker, settings, log, clock=None, node=b"hutch", on_interrupt=None):
        self.broker = broker
        self.on_interrupt = on_interrupt  # Ctrl-C on a board: the broker's stop (ports/interrupt.py)
        self.settings = settings
        self.name = settings["name"]
        self.log = log
        self.clock = clock or Clock()
        self.state = "starting"
        self.upstream = None  # the URI in use (without its password)
        self.last_error = None
        self.stopping = False
        self.output = asyncio.Event()  # something to write: protocol output or messages to forward
        self.task = None
        self.upstream_backlog = None  # a down bridge: the upstream queue's count at the last connect
        if settings["prefetch"] is None:
            # in flight, messages are in memory and count in the broker's budget: a board's
            # (esp32: 96 messages) must keep room for the publishers and the queues' windows
            settings["prefetch"] = max(1, min(DEFAULT_PREFETCH, broker.limits.total_max_messages // 4))
        if settings["direction"] == "up":
            queue = _source_queue(broker, settings)
            self.outbox = Outbox(broker, queue, self.name, settings["prefetch"], self.output.set, node)
            self.inbox = None
        else:
            destination = settings["exchange"]
            if destination is not None and broker.exchange(destination.encode()) is None:
                raise BridgeError("bridge %s: no local exchange '%s' to publish to" % (self.name, destination))
            routing_key = settings["routing_key"]
            self.inbox = Inbox(
                broker,
                destination.encode() if destination is not None else None,
                routing_key.encode() if routing_key is not None else None,
                self.output.set,
            )
            self.outbox = None

    def start(self):
        self.task = self._task(self.run())

    async def stop(self):
        """End the link (what was in flight goes back to the queue) and the retry loop."""
        self.stopping = True
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except asyncio.CancelledError:
                pass
        if self.outbox is not None:
            self.outbox.close()
        self.set_state("stopped")

    def status(self):
        outbox = self.outbox
        inbox = self.inbox
        return {
            "name": self.name,
            "direction": self.settings["direction"],
            "state": self.state,
            "upstream": self.upstream,
            "queue": self.settings["queue"],
            # up: confirmed by upstream; down: taken here from upstream
            "forwarded": outbox.forwarded if outbox is not None else inbox.received,
            "in_flight": len(outbox.in_flight) if outbox is not None else len(inbox.pending),
            # up: waiting here; down: waiting upstream when the link came up
            "backlog": outbox.backlog() if outbox is not None else self.upstream_backlog,
            "last_error": self.last_error,
        }

    def _task(self, coro):
        """A task of this bridge; Ctrl-C on a board ends it as a finished task (ports/interrupt.py)."""
        return asyncio.create_task(guarded(coro, self.on_interrupt))

    def set_state(self, state, detail=""):
        if state != self.state:
            self.state = state
            self.log("info", "bridge %s: %s%s" % (self.name, state, detail))

    # ------------------------------------------------------------ the retry loop

    async def run(self):
        settings = self.settings
        delay = settings["reconnect_delay"]
        while not self.stopping:
            for uri in settings["uris"]:
                if self.stopping:
                    break
                self.upstream = uri["uri"]
                self.set_state("connecting", " to %s" % uri["uri"])
                progressed = False
                try:
                    progressed = await self._link(uri)
                except LinkError as e:
                    self._failed(uri, str(e))
                except OSError as e:
                    self._failed(uri, _os_reason(e))
                except asyncio.TimeoutError:
                    self._failed(uri, "timed out connecting")
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # a bug, or TLS material the ssl module refuses: still retried
                    self._failed(uri, "%s: %s" % (e.__class__.__name__, e))
                    self.log("error", "bridge %s: unexpected error" % self.name, e)
                finally:
                    if self.outbox is not None:
                        self.outbox.down()  # what was in flight goes back, in order
                    else:
                        self.inbox.link_down()  # upstream takes its unacked deliveries back
                if progressed:
                    delay = settings["reconnect_delay"]  # it worked for a while: retry soon
            if self.stopping:
                break
            wait = delay * (0.5 + random.getrandbits(16) / 65536)  # jitter: many gateways do not retry in step
            self.set_state("backoff", " for %.1f s (%s)" % (wait, self.last_error))
            waited = 0
            while waited < wait * 1000 and not self.stopping:
                await sleep_ms(100)
                waited += 100
            delay = min(delay * 2, settings["max_reconnect_delay"])
        self.set_state("stopped")

    def _failed(self, uri, reason):
        self.last_error = "%s: %s" % (uri["uri"], reason)
        if not self.stopping:
            self.log("warning", "bridge %s: %s" % (self.name, self.last_error))

    # ------------------------------------------------------------ one link

    async def _link(self, uri):
        """Connect, then forward until the link ends: True if it ran (was forwarding)."""
        if uri["tls"]:
            tls = self.settings["tls"]
            opening = asyncio.open_connection(
                uri["host"], uri["port"], ssl=tls_context(tls), server_hostname=tls["server_name"] or uri["host"]
            )
        else:
            opening = asyncio.open_connection(uri["host"], uri["port"])
        reader, writer = await asyncio.wait_for(opening, uri["connection_timeout"] / 1000)
        # the largest frame either way: the URI's, else the broker's own (a board's is small:
        # the protocol's receive buffer is that large)
        protocol = Protocol(frame_max=uri["frame_max"] or self.broker.limits.frame_max)
        protocol.connect(
            self.clock.now_ms(),
            uri["user"],
            uri["password"],
            uri["vhost"],
            uri["heartbeat"],
            "hutch bridge " + self.name,
        )
        if self.outbox is not None:
            self.outbox.stuck = None  # found again if upstream still returns the head of the queue
        link = (_UpLink if self.outbox is not None else _DownLink)(self, protocol, reader, writer)
        writing = self._task(link.write_loop())
        try:
            await link.read_loop(uri)
        finally:
            link.ended = True
            self.output.set()
            writing.cancel()
            await close_writer(writer)
        return link.ran


class _Link:
    """One connection upstream: its reader feeds the protocol and hands each event to the
    bridge's direction (_UpLink, _DownLink), its writer sends what the protocol has, and its
    ticker keeps heartbeats and ends a link that went silent."""

    def __init__(self, bridge, protocol, reader, writer):
        self.bridge = bridge
        self.protocol = protocol
        self.reader = reader
        self.writer = writer
        self.settings = bridge.settings
        self.ended = False
        self.ran = False
        self.silent = None  # why the link was closed for its silence
        self.uri = None  # the URI it was opened to (its settings)

    async def read_loop(self, uri):
        bridge = self.bridge
        protocol = self.protocol
        self.uri = uri
        bridge.output.set()  # the protocol header
        ticker = bridge._task(self._tick_loop(uri["connection_timeout"]))
        try:
            while not bridge.stopping:
                try:
                    got = await self._read()
                except OSError:
                    if self.silent:
                        raise LinkError(self.silent)
                    raise
                if not got:
                    if self.silent:
                        raise LinkError(self.silent)
                    raise LinkError("upstream closed the connection")
                self._events(uri)
                if self.ran and not self.ended:
                    # what the confirms just let go is sent now, not when the writer's task gets
                    # its turn: on a busy broker each turn of the event loop is long (publishers'
                    # reads), and a turn more per window held the bridge at half its rate
                    self.send()
                    self.flush()
                bridge.output.set()
                if protocol.channel_open and not self.ran and not protocol.awaiting:
                    if self.set_up():  # the direction's own steps, one reply at a time
                        self.ran = True
                        self.bridge.set_state("running", " (upstream %s)" % uri["uri"])
                        self.running()
                self.check()
        finally:
            ticker.cancel()

    async def _read(self):
        """Read into the protocol (its events are then taken): how many bytes came (0: the end).
        MicroPython reads straight into the protocol's buffer: its read(n) would allocate n
        bytes each time, which a board's heap cannot afford; CPython's streams have no readinto."""
        protocol = self.protocol
        if MICROPYTHON:
            n = await self.reader.readinto(protocol.read_buffer())
            protocol.received(n or 0)
            return n if n is not None else -1  # None: woken without data
        data = await self.reader.read(READ_SIZE)
        size = len(data)
        while data:
            n = protocol.receive_data(data)
            data = data[n:]
            if data:
                self._events(self.uri)  # the buffer was full: take what it holds, then the rest
        return size

    def _events(self, uri):
        protocol = self.protocol
        while True:
            event = protocol.next_event()
            if event is None:
                return
            if isinstance(event, ConnectionClosed):
                raise LinkError(_closed_reason(event, protocol))
            if isinstance(event, ChannelClosed):
                raise LinkError("upstream closed the channel: %d %s" % (event.code, event.text))
            if isinstance(event, Message):
                self.message(event)
                continue
            method_id, args = event
            if method_id == spec.CONNECTION_BLOCKED:
                self.bridge.set_state("blocked", " by upstream: %s" % (args[0] if args else ""))
            elif method_id == spec.CONNECTION_UNBLOCKED:
                self.bridge.set_state("running", " (upstream %s)" % uri["uri"])
            else:
                self.method(method_id, args)

    async def write_loop(self):
        bridge = self.bridge
        writer = self.writer
        while not self.ended and not bridge.stopping:
            await bridge.output.wait()
            bridge.output.clear()
            if self.ran:
                self.send()
            self.flush()
            await writer.drain()

    def flush(self):
        """What the protocol has to send, handed to the transport (which sends at once what the
        socket takes)."""
        protocol = self.protocol
        while True:
            data = protocol.data_to_send()
            if data is None:
                return
            self.writer.write(bytes(data))

    async def _tick_loop(self, handshake_ms):
        """Heartbeats; an end to a handshake that gets no answer (a black-holed route accepts
        the connection and then says nothing, heartbeats not agreed yet); and the direction's
        own check that the link still makes progress (stalled)."""
        bridge = self.bridge
        started = bridge.clock.now_ms()
        while True:
            await sleep_ms(TICK_MS)
            now = bridge.clock.now_ms()
            if self.protocol.tick(now) < 0:
                self.silent = "missed heartbeats: upstream is silent"
            elif not self.ran and now - started > handshake_ms:
                self.silent = "no answer to the handshake within %d ms" % handshake_ms
            else:
                self.silent = self.stalled(now)
            if self.silent:
                # hung up at once (the reader sees the end), dropping what is unsent: CPython's
                # close() waits until that is written, which a peer that takes nothing (a
                # dead route, a stuck upstream) never allows, and the bridge stayed on the
                # link, "running", forwarding nothing (until TCP gave up: minutes, or never
                # while the peer's kernel answers window probes). MicroPython's close()
                # (in close_writer) closes the socket at once.
                transport = getattr(self.writer, "transport", None)
                if transport is not None:
                    transport.abort()
                else:
                    await close_writer(self.writer)
                return
            bridge.output.set()

    # what each direction does (the defaults: nothing)
    def set_up(self):
        """After the handshake, once no reply is awaited: send the next step; True when all are done."""
        return True

    def running(self):
        pass

    def message(self, message):
        pass

    def method(self, method_id, args):
        pass

    def send(self):
        pass

    def check(self):
        pass

    def stalled(self, now):
        return None


class _UpLink(_Link):
    """Up: the outbox's messages published upstream, settled on its confirms."""

    def __init__(self, bridge, protocol, reader, writer):
        super().__init__(bridge, protocol, reader, writer)
        settings = self.settings
        self.outbox = bridge.outbox
        self.confirming = settings["ack_mode"] == "on-confirm"
        self.exchange = settings["exchange"]
        self.routing_key = settings["routing_key"]
        has_rate = settings["max_rate"] or settings["max_byte_rate"]
        self.rate = Rate(settings["max_rate"], settings["max_byte_rate"], bridge.clock) if has_rate else None
        self.watchdog_ms = int(settings["watchdog"] * 1000)
        self.progress_at = bridge.clock.now_ms()
        self.forwarded = self.outbox.forwarded
        self.steps = self._declarations()
        self.flow_stopped = False  # upstream sent channel.flow active=false

    def set_up(self):
        if self.steps:
            method_id, args = self.steps.pop(0)
            self.protocol.call(method_id, args)
            return False
        if self.confirming and not self.protocol.confirming:
            self.protocol.call(spec.CONFIRM_SELECT, (False,))
            return False
        return True

    def _declarations(self):
        """`declare`: the destination upstream, declared durable at each connect (the
        exchange of that type, a queue bound to it), so forwarding never waits for someone
        to set it up there."""
        declare = self.settings["declare"]
        if declare is None:
            return []
        exchange = self.exchange or ""
        steps = []
        if declare["exchange_type"]:
            steps.append(
                (spec.EXCHANGE_DECLARE, (0, exchange, declare["exchange_type"], False, True, False, False, False, None))
            )
        if declare["queue"]:
            steps.append((spec.QUEUE_DECLARE, (0, declare["queue"], False, True, False, False, False, None)))
            if exchange:
                steps.append((spec.QUEUE_BIND, (0, declare["queue"], exchange, declare["binding_key"], False, None)))
        return steps

    def running(self):
        self.outbox.link_up()

    def check(self):
        if self.outbox.stuck:
            raise LinkError(self.outbox.stuck)

    def message(self, message):  # basic.return (mandatory): its confirm follows
        headers = message.properties.get("headers") or {}
        origin = headers.get("x-hutch-origin")
        seq = headers.get("x-hutch-seq")
        if isinstance(origin, str):
            origin = origin.encode()
        reason = "%d %s" % (message.reply_code, message.reply_text)
        if not self.outbox.returned_by(origin, seq, reason):
            self.bridge.log("warning", "bridge %s: upstream returned a message it was not sent" % self.bridge.name)

    def method(self, method_id, args):
        if method_id == spec.BASIC_ACK:
            self.outbox.confirmed(args[0], args[1])
        elif method_id == spec.BASIC_NACK:
            self.outbox.nacked(args[0], args[1])
        elif method_id == spec.CHANNEL_FLOW:  # (flow-ok already answered by the protocol)
            self.flow_stopped = not args[0]
            if self.flow_stopped:
                self.bridge.set_state("blocked", " by upstream: channel.flow")
            else:
                self.bridge.set_state("running", " (upstream %s)" % self.bridge.upstream)

    def send(self):
        outbox = self.outbox
        if not outbox.up or self.protocol.blocked is not None or self.flow_stopped:
            return
        rate = self.rate
        if rate:
            self._forward(outbox.take(rate.allowed(outbox.waiting)))
            if outbox.waiting:
                self.bridge._task(self._wake_in(rate.wait_ms()))
            return
        # A slice at a time, each handed to the socket before the next is encoded: upstream
        # starts on the first while the rest are made. Sent whole, a window of 1000 left only
        # once all was encoded, and upstream confirmed it whole: the two took turns. (Only
        # what waits now: with ack_mode on-publish, each slice sent lets more in at once.)
        left = len(outbox.waiting)
        while left > 0:
            entries = outbox.take(min(SLICE, left))
            left -= len(entries)
            self._forward(entries)
            self.flush()

    async def _wake_in(self, ms):
        await sleep_ms(ms)
        self.bridge.output.set()

    def _forward(self, entries):
        protocol = self.protocol
        outbox = self.outbox
        for entry in entries:
            message = entry[MESSAGE]
            protocol.forward(
                self.exchange if self.exchange is not None else message.exchange,
                self.routing_key if self.routing_key is not None else message.routing_key,
                outbox.header_for(message),
                message.body_tail,
                True,  # mandatory: what upstream cannot route comes back (Outbox.returned_by)
            )
        if not self.confirming and entries:
            # on-publish / no-ack: settled once written (the data is in the socket's hands)
            outbox.confirmed(outbox.seq, True)

    def stalled(self, now):
        """The watchdog: a link that is up but confirms nothing for `watchdog` seconds while
        messages wait is torn down (heartbeats alone miss an upstream that answers them but
        is stuck)."""
        outbox = self.outbox
        if outbox.forwarded != self.forwarded or not outbox.in_flight:
            self.forwarded = outbox.forwarded
            self.progress_at = now
        if self.watchdog_ms and now - self.progress_at > self.watchdog_ms:
            return "watchdog: no confirm for %.1f s while %d messages wait" % (
                (now - self.progress_at) / 1000,
                len(outbox.in_flight),
            )
        return None


class _DownLink(_Link):
    """Down: an upstream queue consumed (passive declare, qos, consume), each delivery published
    here through the inbox and acked upstream once held here as promised."""

    def __init__(self, bridge, protocol, reader, writer):
        super().__init__(bridge, protocol, reader, writer)
        self.inbox = bridge.inbox
        self.steps = [
            (spec.QUEUE_DECLARE, (0, self.settings["queue"], True, False, False, False, False, None)),
            (spec.BASIC_QOS, (0, self.settings["prefetch"], False)),
            (
                spec.BASIC_CONSUME,
                (0, self.settings["queue"], "hutch.bridge." + bridge.name, False, False, False, False, None),
            ),
        ]
        self.acked = 0
        self.refused = None  # why a delivery was sent back: the link then backs off

    def set_up(self):
        if self.steps:
            method_id, args = self.steps.pop(0)
            self.protocol.call(method_id, args)
            return False
        return True

    def method(self, method_id, args):
        if method_id == spec.QUEUE_DECLARE_OK:
            self.bridge.upstream_backlog = args[1]

    def message(self, message):
        if message.kind != spec.BASIC_DELIVER:
            return
        raw = message._raw
        if isinstance(raw, dict) or raw is None:  # no properties (or already decoded): a bare header
            raw = struct.pack(">HHQH", 60, 0, len(message.body), 0)
        body = message.body
        outcome = self.inbox.receive(
            message.delivery_tag,
            _bytes(message.exchange),
            _bytes(message.routing_key),
            struct.pack(">I", len(raw)) + raw + b"\xce",
            struct.pack(">I", len(body)) + bytes(body) + b"\xce" if body else None,
            len(body),
        )
        if outcome == DROP:
            self.bridge.log(
                "warning",
                "bridge %s: no local queue takes a message routed '%s': refused to upstream (its dead-letter exchange, if any)"
                % (self.bridge.name, message.routing_key),
            )
            self.protocol.send(spec.BASIC_NACK, (message.delivery_tag, False, False))
        elif outcome == REQUEUE_UPSTREAM:
            self.protocol.send(spec.BASIC_NACK, (message.delivery_tag, False, True))
            self.refused = "this broker refused a message (memory, disk or a full queue): back to upstream"

    def check(self):
        if self.refused:
            raise LinkError(self.refused)

    def send(self):
        tag = self.inbox.ackable()
        if tag > self.acked:
            self.protocol.send(spec.BASIC_ACK, (tag, True))
            self.acked = tag


def _bytes(text):
    return text.encode() if isinstance(text, str) else text


def tls_context(tls):
    """The TLS client context of an amqps:// link: the peer's certificate checked against
    ca_file (or the system's CAs) and its name unless verify is false; a client certificate
    when cert_file is given. ssl is imported only here: a broker without TLS links never
    loads OpenSSL (tools/cli.py keeps it out of `hutch serve` unless the config has one)."""
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if tls["verify"]:
        context.verify_mode = ssl.CERT_REQUIRED
        if tls["ca_file"]:
            if MICROPYTHON:  # its ssl (mbedTLS) takes the CA as DER bytes
                context.load_verify_locations(cadata=_der(tls["ca_file"]))
            else:
                context.load_verify_locations(cafile=tls["ca_file"])
        elif hasattr(context, "load_default_certs"):  # (CPython; a board names its CA file)
            context.load_default_certs()
    else:
        if hasattr(context, "check_hostname"):  # CPython forbids CERT_NONE while it is on
            context.check_hostname = False  # pyright: ignore[reportAttributeAccessIssue] (not on MicroPython)
        context.verify_mode = ssl.CERT_NONE
    if tls["cert_file"]:
        context.load_cert_chain(tls["cert_file"], tls["key_file"])
    return context


def _der(path):
    """A certificate file's first certificate as DER (a PEM file's base64 decoded)."""
    with open(path, "rb") as f:
        data = f.read()
    if not data.startswith(b"-----BEGIN"):
        return data  # DER already
    lines = data.split(b"\n")
    body = []
    for line in lines[1:]:
        if line.startswith(b"-----END"):
            break
        body.append(line.strip())
    return binascii.a2b_base64(b"".join(body))


def node_id(data_folder):
    """This broker's name in x-hutch-origin: made once, kept in the data folder, so an upstream
    tells this node's messages apart from another's across restarts."""
    path = data_folder + "/node-id"
    try:
        with open(path) as f:
            return f.read().strip().encode()
    except OSError:
        pass
    name = "hutch-" + binascii.hexlify(os.urandom(6)).decode()
    with open(path, "w") as f:
        f.write(name + "\n")
    return name.encode()


class BridgeError(Exception):
    """A bridge that cannot start as configured (its source exchange is missing...): `hutch
    serve` says it in one line and exits with 2."""


def _source_queue(broker, settings):
    """The local queue a bridge forwards: `queue`, declared durable if it does not exist; or, for
    `source_exchange` + `binding_key`, its own durable queue (hutch.bridge.NAME) bound there."""
    exchange = settings["source_exchange"]
    name = settings["queue"] if exchange is None else "hutch.bridge." + settings["name"]
    queue = broker.queues.get(name.encode())
    try:
        if queue is None:
            queue = declare_queue(broker, None, name.encode(), False, True, False, False, {})
        if exchange is not None:
            if broker.exchange(exchange.encode()) is None:
                raise BridgeError(
                    "bridge %s: no exchange '%s' to forward from (declare it durable first)"
                    % (settings["name"], exchange)
                )
            add_binding(broker, broker.exchange(exchange.encode()), queue, settings["binding_key"].encode(), {}, 0)
    except ChannelException as e:
        raise BridgeError("bridge %s: cannot set up its queue '%s': %s" % (settings["name"], name, e.text))
    return queue


def _closed_reason(event, protocol):
    if event.code == spec.ACCESS_REFUSED or (protocol.state != "open" and event.code == 530):
        return "login refused: %d %s" % (event.code, event.text)
    return "upstream closed the connection: %d %s" % (event.code, event.text)


def _os_reason(e):
    """A readable reason for a failed link: connection refused, DNS, TLS, reset..."""
    number = getattr(e, "errno", None)
    if number == errno.ECONNREFUSED:
        return "connection refused"
    if number == errno.ECONNRESET:
        return "connection reset"
    kind = e.__class__.__name__
    if kind == "gaierror":  # socket.gaierror (CPython): the host name did not resolve
        return "DNS: %s" % (getattr(e, "strerror", None) or e)
    if kind.startswith("SSL"):
        return "TLS: %s" % e
    return getattr(e, "strerror", None) or str(e) or kind
