"""Bridges inside `hutch serve`: a local queue forwarded to an upstream broker (up), or an
upstream queue brought here (down, for commands). This is the driver: its decisions are the
core's, sans-IO (core/bridge/machine.py and its directions, up.py and down.py, over the local
sides outbox.py and inbox.py), and it does the I/O they ask for, on CPython and MicroPython
alike:

- it opens the socket to the URI the machine names (TLS for amqps://), feeds what it reads to
  the sensor client's sans-IO protocol (client/protocol.py), or for an AMQP 1.0 URI to the
  1.0 client (amqp10/client.py, loaded only then), and hands each event to the machine,
  calls the set-up methods it gives one at a time, forwards what it says may go (through
  protocol.forward; over 1.0, no more than the link's credit) and sends the acks and nacks
  it returns, and writes what the protocol has to send;
- an IoT Hub uplink (sas_key) logs in with a SAS token made from the device key; at half the
  token's lifetime it puts a new one on $cbs (cbs = true), or else lets what is in flight
  settle, closes the connection and logs in again at once with a new one;
- it ticks the machine (heartbeats, the handshake's timeout, the watchdog) and ends a link
  the machine gives a reason to end, then sleeps the backoff the machine asks for;
- for a stream source, it keeps the bridge's offset file (DATA/bridge-NAME.offset): where a
  restart reads the stream from, written when the machine says (offset_to_save).

Each change of state is one log line; the status is the broker's snapshot (core/snapshot.py).
"""

import asyncio
import binascii
import errno
import os
import random
import sys
import time

from ...codec.upstream import ENDED
from ...core.bridge.machine import WAITING, BridgeError  # noqa: F401 (server/startup.py reads BridgeError here)
from ...ports.clock import Clock, sleep_ms
from ...ports.interrupt import guarded
from ...ports.tcp import close_writer

MICROPYTHON = sys.implementation.name == "micropython"
READ_SIZE = 65536
TICK_MS = 500
ALARM_CHECK_MS = 1000
SLICE = 100  # messages forwarded per write to the socket, at most (see _Link.send)


def fits(broker, settings):
    """BridgeError if a bridge's table does not fit this broker (what Bridge() would refuse)."""
    if settings["direction"] == "up":
        from ...core.bridge.up import check_source

        check_source(broker, settings)
    else:
        from ...core.bridge.down import check_destination

        check_destination(broker, settings)


class LinkError(Exception):
    """Why a link ended or could not start: logged and kept as the bridge's last error."""


class Renewed(Exception):
    """The link was closed to log in anew with a new token (server/bridges/amqp10.py): reconnect at once."""


class Bridge:
    """One [[bridge]] (server/bridges/config.py's checked settings): its machine and local side,
    set up at construction (BridgeError if they cannot be), and its retry loop once started."""

    def __init__(self, broker, settings, log, clock=None, node=b"hutch", on_interrupt=None, data_folder=None):
        self.broker = broker
        self.on_interrupt = on_interrupt  # Ctrl-C on a board: the broker's stop (ports/interrupt.py)
        self.node = node  # this broker's name: an MQTT link's client id is made from it
        self.clock = clock or Clock()
        self.stopping = False
        self.output = asyncio.Event()  # something to write: protocol output or messages to forward
        self.task = None
        self.up = settings["direction"] == "up"
        self.prefers_first = settings.get("prefer_first", False)  # (its probes: server/bridges/probe.py)
        self.offsets = None  # a stream source's offset file
        self.stream_source = None  # and its machine
        if self.up:  # (each direction's decisions are loaded only by a bridge of that direction)
            from ...core.bridge.up import UpMachine, source_queues

            queues = source_queues(self.broker, settings)
            if data_folder is not None and broker.journal is not None and broker.bridge_runs is None:
                broker.bridge_runs = run_starts(data_folder, broker.journal.next_id)  # once per start
            saved = None
            if queues[0].is_stream and data_folder is not None:
                from . import offsets  # (loaded only by a stream source)

                self.offsets = offsets.offset_path(data_folder, settings["name"])
                saved = offsets.read_offset(self.offsets)
            machine = UpMachine(broker, settings, log, random.getrandbits, queues, node, self.output.set, saved)
            self.machine = machine
            thresholds = settings["alarm_backlog"] or settings["alarm_age"] or settings["alarm_bytes"]
            if thresholds or any(one.drops() for one in machine.classes):
                self.watched = (machine, bool(thresholds))
            if self.offsets is not None:
                self.stream_source = machine
                self.save_offset(True)  # a new lane is on disk before anything is forwarded in it
        else:
            from ...core.bridge.down import DownMachine

            self.machine = DownMachine(broker, settings, log, random.getrandbits, self.output.set)

    def start(self):
        self.task = self._task(self.run())
        if self.watched is not None:
            self.watch = self._task(self._watch(*self.watched))

    watched = None  # (an up machine, whether it has alarm thresholds): what _watch watches, if anything
    watch = None  # the task that checks the alarms' thresholds and says the classes' drops

    async def _watch(self, machine, thresholds):
        """Every second, link or no link: the alarms' thresholds, and what the classes dropped by
        their policies (core/bridge/alarms.py, loaded only with either)."""
        from ...core.bridge.alarms import check, say_drops

        broker = self.broker
        while not self.stopping:
            if thresholds:
                check(machine, broker.now + broker.wall_offset)
            say_drops(machine)
            await sleep_ms(ALARM_CHECK_MS)

    async def stop(self, drain_ms=0):
        """End the link (what was in flight goes back to the queue) and the retry loop. drain_ms:
        first, sending nothing new, wait at most that long for what is in flight to be confirmed
        (a reload: server/reload.py)."""
        machine = self.machine
        # Nothing new is sent from here on, drained or not: a message sent while the link's task
        # ends would reach upstream and, unconfirmed, go back to the queue for the next link.
        machine.draining = True
        if drain_ms:
            until = self.clock.now_ms() + drain_ms
            while machine.unsettled() and self.clock.now_ms() < until:
                await sleep_ms(20)
                machine.draining = True  # (a link opened again meanwhile starts undrained)
        self.stopping = True
        if self.watch is not None:
            self.watch.cancel()
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except asyncio.CancelledError:
                pass
        self.save_offset(True)
        self.machine.stop()

    def _task(self, coro):
        """A task of this bridge; Ctrl-C on a board ends it as a finished task (ports/interrupt.py)."""
        return asyncio.create_task(guarded(coro, self.on_interrupt))

    def save_offset(self, force=False):
        """A stream source: its offset file, when the machine says it has moved (force: at the
        end of a link and at stop)."""
        machine = self.stream_source
        if machine is None or self.offsets is None:
            return
        saving = machine.offset_to_save(self.clock.now_ms(), force)
        if saving is None:
            return
        from .offsets import write_offset  # (a stream source's: loaded with it)

        try:
            write_offset(self.offsets, saving[0], saving[1], saving[2])
        except OSError as e:  # said, and written again at the next move: a lag only resends
            machine.log("warning", "bridge %s: cannot write %s: %s" % (machine.name, self.offsets, e))

    # ------------------------------------------------------------ the retry loop

    async def run(self):
        machine = self.machine
        broker = self.broker
        while not self.stopping:
            uplink = broker.uplink
            uri = machine.connect_to(self.clock.now_ms(), day_seconds() if uplink is not None else None)
            if uri is None:  # backoff, waiting for a window (a reload may open it), or stopped
                waited = 0
                jumps = broker.clock_jumps  # (the wall clock set: a window's wait is read again)
                while waited < machine.wait_ms and not self.stopping and broker.uplink is uplink:
                    await sleep_ms(100)
                    waited += 100
                    if broker.clock_jumps != jumps and machine.state == WAITING:
                        break
                continue
            addresses = await self.addresses(uri)
            while True:  # each address of the URI's host, until a link runs on one (or none does)
                address = addresses.pop(0)
                reason = None
                unexpected = None
                renewed = False
                try:
                    await self._link(uri, address)
                except Renewed:
                    renewed = True
                except LinkError as e:
                    reason = str(e)
                except asyncio.TimeoutError:  # (before OSError: CPython's is a subclass of it)
                    reason = "timed out connecting"
                except OSError as e:
                    reason = _os_reason(e)
                except asyncio.CancelledError:
                    machine.lost(None)  # what was in flight goes back, in order
                    raise
                except Exception as e:  # a bug, or TLS material the ssl module refuses: still retried
                    reason = "%s: %s" % (e.__class__.__name__, e)
                    unexpected = e
                if not addresses or machine.ran or renewed or unexpected or self.stopping:
                    break
                machine.log(
                    "info",
                    "bridge %s: %s at %s: %s; trying its next address, %s"
                    % (machine.name, uri["host"], address[0], reason, addresses[0][0]),
                )
            machine.lost(None if self.stopping else reason)
            if renewed:
                machine.again()
            if unexpected is not None:
                machine.log("error", "bridge %s: unexpected error" % machine.name, unexpected)
            self.save_offset(True)

    # ------------------------------------------------------------ one link

    def start_protocol(self, uri, now):
        """(the client protocol of a link just opened to uri, its handshake queued; an IoT Hub
        login to renew, or None), and the machine told (its connection_timeout counts from now).
        Each protocol's driver is loaded only by a bridge that speaks it."""
        # the largest frame either way: the URI's, else the broker's own (a board's is small:
        # the protocol's receive buffer is that large)
        frame_max = uri["frame_max"] or self.broker.limits.frame_max
        protocol, login = self.protocol_driver(uri).connect(self, uri, frame_max, now)
        self.machine.opened(now)
        return protocol, login

    def protocol_driver(self, uri):
        """The module that speaks uri's protocol upstream (server/bridges/upstreams.py DRIVERS:
        amqp091, amqp10 or mqtt), imported now: a board loads only its bridges'."""
        return __import__(__name__[: -len("driver")] + uri["driver"], None, None, ("connect",))

    async def addresses(self, uri):
        """The addresses of the URI's host, each tried in turn before the next URI (a name with
        several A or AAAA records: a node's), as (host, port); on a board the name itself, which
        its socket resolves. A name that does not resolve: itself (the connection says why)."""
        if MICROPYTHON:
            return [(uri["host"], uri["port"])]
        import socket

        try:
            found = await asyncio.get_event_loop().getaddrinfo(uri["host"], uri["port"], type=socket.SOCK_STREAM)
        except OSError:
            return [(uri["host"], uri["port"])]
        out = []
        for _family, _kind, _proto, _name, where in found:
            if where[:2] not in out:
                out.append(where[:2])
        return out or [(uri["host"], uri["port"])]

    def open(self, uri, address=None):
        """The connection to uri (TLS for amqps://, its name checked against the URI's host), at
        address (host, port) if given, as a coroutine: (reader, writer)."""
        host, port = address or (uri["host"], uri["port"])
        if uri["tls"]:
            tls = self.machine.settings["tls"]
            from ...ports.tls import client_context  # (ssl loaded only by a broker with TLS links)

            context = client_context(tls["ca_file"], tls["cert_file"], tls["key_file"], tls["verify"])
            return asyncio.open_connection(host, port, ssl=context, server_hostname=tls["server_name"] or uri["host"])
        return asyncio.open_connection(host, port)

    async def _link(self, uri, address=None):
        """Connect (at address, one of its host's), then forward until the link ends."""
        reader, writer = await asyncio.wait_for(self.open(uri, address), uri["connection_timeout"] / 1000)
        protocol, login = self.start_protocol(uri, self.clock.now_ms())
        link = _Link(self, protocol, reader, writer, login, self.machine.settings["credit"])
        writing = self._task(link.write_loop())
        try:
            await link.read_loop()
        finally:
            link.ended = True
            self.output.set()
            writing.cancel()
            await close_writer(writer)


class _Link:
    """One connection upstream: its reader feeds the protocol and hands each event to the
    machine, its writer sends what the protocol has, and its ticker asks the machine whether
    the link must end."""

    def __init__(self, bridge, protocol, reader, writer, login=None, credit=False):
        self.bridge = bridge
        self.machine = bridge.machine
        self.protocol = protocol
        self.reader = reader
        self.writer = writer
        self.ended = False
        self.silent = None  # why the ticker hung up
        self.credit = credit  # (AMQP 1.0, MQTT) forward no more than its protocol's room()
        self.login = login  # an IoT Hub login (server/bridges/amqp10.py Login), or None
        self.renewing = 0  # (ms) since when this link winds down to log in with a new token
        self.closed_at = 0  # (ms) when it sent its close for that

    async def read_loop(self):
        bridge = self.bridge
        machine = self.machine
        bridge.output.set()  # the protocol header
        ticker = bridge._task(self._tick_loop())
        try:
            while not bridge.stopping:
                try:
                    got = await self._read()
                except OSError:
                    if self.closed_at:
                        raise Renewed()
                    if self.silent:
                        raise LinkError(self.silent)
                    raise
                if not got:
                    if self.closed_at:
                        raise Renewed()
                    if self.silent:
                        raise LinkError(self.silent)
                    raise LinkError("upstream closed the connection")
                self._events()
                if machine.ran and not self.ended:
                    # what the confirms just let go is sent now, not when the writer's task gets
                    # its turn: on a busy broker each turn of the event loop is long (publishers'
                    # reads), and a turn more per window held the bridge at half its rate
                    self.send()
                    self.flush()
                bridge.output.set()
                self.set_up_next()
                reason = machine.check()
                if reason:
                    raise LinkError(reason)
        finally:
            ticker.cancel()

    def set_up_next(self):
        """(Upstream's channel open, no reply awaited, the link not running yet) The machine's
        next set-up step to the protocol; none left: the link runs, in the cluster its node
        names."""
        protocol = self.protocol
        machine = self.machine
        if protocol.channel_open and not machine.ran and not protocol.awaiting:
            step = machine.next_step()
            if step is not None:
                protocol.set_up(step)
            else:
                machine.in_cluster(getattr(protocol, "server_cluster", None))

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
                self._events()  # the buffer was full: take what it holds, then the rest
        return size

    def _events(self):
        """Each event the protocol has, in the bridge's words (codec/upstream.py), handed to the
        machine's method of that word; the link's end raised."""
        protocol = self.protocol
        machine = self.machine
        while True:
            event = protocol.next_event()
            if event is None:
                return
            kind = event[0]
            if kind == ENDED:
                if self.closed_at:  # the answer to the close of a renewal (server/bridges/amqp10.py)
                    raise Renewed()
                raise LinkError(event[1])
            refused = getattr(machine, kind)(*event[1:])
            if refused is not None:  # (delivered: what the machine refuses goes back upstream)
                protocol.nack(refused[0], refused[1])

    def send(self):
        """What the machine says goes upstream now: up, the messages that may go, a slice at a
        time, each handed to the socket before the next is encoded (upstream starts on the
        first while the rest are made: sent whole, a window of 1000 left only once all was
        encoded, and upstream confirmed it whole, the two taking turns); down, the ack."""
        machine = self.machine
        if not self.bridge.up:
            tag = machine.to_ack()
            if tag:
                self.protocol.ack(tag, True)
            return
        left = machine.sendable(self.bridge.clock.now_ms())
        if machine.wake_ms:  # a rate holds the rest back: ask again then
            self.bridge._task(self._wake_in(machine.wake_ms))
        if self.credit:
            if self.renewing:
                return  # (winding down: the rest goes on the next connection)
            left = min(left, self.protocol.room())
        forward = self.protocol.forward
        while left > 0:
            sent = machine.forward(forward, min(SLICE, left))
            if not sent:
                return
            left -= sent
            self.flush()

    async def _wake_in(self, ms):
        await sleep_ms(ms)
        self.bridge.output.set()

    async def write_loop(self):
        bridge = self.bridge
        writer = self.writer
        while not self.ended and not bridge.stopping:
            await bridge.output.wait()
            bridge.output.clear()
            if self.machine.ran:
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

    async def _tick_loop(self):
        """Heartbeats, and the machine's tick: an end to a link that went silent, whose
        handshake gets no answer or that makes no progress. A stream source's offset file is
        written here too, when it moved."""
        bridge = self.bridge
        while True:
            await sleep_ms(TICK_MS)
            now = bridge.clock.now_ms()
            day_s = day_seconds() if bridge.broker.uplink is not None else None
            self.silent = self.machine.tick(now, self.protocol.tick(now) < 0, day_s)
            bridge.save_offset()
            probe = self.machine.probe_due(now) if bridge.prefers_first else None
            if probe is not None:  # (prefer_first: an earlier URI tried on a second connection)
                from .probe import probe_uri

                bridge._task(probe_uri(bridge, probe[0], probe[1]))
            if self.login is not None and not self.silent:
                self.silent = self.login.renew(self, now)
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


def day_seconds():
    """The local time of day in seconds, with its fraction where the port has one (a board's:
    its RTC's, which NTP sets as UTC): what the [uplink]'s windows count in."""
    now = time.time()
    whole = int(now)
    t = time.localtime(whole)
    return t[3] * 3600 + t[4] * 60 + t[5] + (now - whole)


def run_starts(data_folder, first_id):
    """The journal id each start of this broker numbered from, this start's last (DATA/bridge-runs,
    one line each, appended and synced before any bridge forwards).

    A persistent message goes upstream as (origin, journal id) and upstream drops a number it has
    taken (core/dedup.py). A message may be forwarded before its journal record is synced; if a
    crash then loses the record, the restart numbers a new message with the same id. So the
    origin names the start that numbered the message (core/bridge/outbox.py): a number reused
    by a later start is a new number upstream, and a message recovered from an earlier start
    keeps the origin it was first sent with."""
    path = data_folder + "/bridge-runs"
    starts = []
    try:
        with open(path) as f:
            starts = [int(line) for line in f.read().split() if line.isdigit()]
    except OSError:
        pass  # the first start with a bridge
    starts.append(first_id)
    with open(path, "a") as f:
        f.write("%d\n" % first_id)
        f.flush()
        if hasattr(os, "fsync"):  # (a board's file is on flash once closed)
            os.fsync(f.fileno())
    if len(starts) == 1 and hasattr(os, "fsync"):  # a new file: durable once its folder is
        from ...ports.files import sync_dir  # (CPython; a board's LittleFS commits it closed)

        sync_dir(data_folder)
    return starts


def node_id(data_folder):
    """This broker's name in x-hutch-origin: made once, kept in the data folder, so an upstream
    tells this node's messages apart from another's across restarts."""
    path = data_folder + "/node-id"
    try:
        with open(path) as f:
            kept = f.read().strip()
        if kept and "\x00" not in kept:  # (empty or zeros: a power cut took it; made again)
            return kept.encode()
    except OSError:
        pass
    name = "hutch-" + binascii.hexlify(os.urandom(6)).decode()
    if hasattr(os, "fsync"):  # CPython: whole or not there after a power cut
        from ...ports.files import replace_file

        replace_file(path, (name + "\n").encode())
    else:  # a board: LittleFS commits a file whole when it is closed
        with open(path, "w") as f:
            f.write(name + "\n")
    return name.encode()


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
