"""A board whose clients and uplink are in memory: runs inside MicroPython, on any port.

emulator/wasm32_host.mjs loads this module into MicroPython's WebAssembly port (32-bit, under
Node), next to the firmware bundle laid out as a board's filesystem (hutch/ as .mpy files,
main.py, hutch.json, the data folder), and calls its functions from JavaScript, one step at a
time. It is a port, as ports/tcp.py is one, with memory where that one has sockets:

- start() starts the broker as a board does: firmware/main.py reads hutch.json, then the
  steps of server/startup.py start() (the broker, the journal read back, the bridges, the heap
  monitor's fit). Left out: the listeners (no sockets: clients come through open()) and the
  asyncio tasks (the runtime's ticker, the journal's writer, a bridge's link loop), whose
  work each step() does instead, in the same order, on a clock the host moves.
- open() makes a client's connection through server/frontends.py's FrontEnds, as a listener
  does at accept; feed() hands it what the client sent, at most the profile's read size at a
  time, through one read buffer the host fills in place (as a board's socket fills its own
  with readinto); what the broker sends comes out of take(), part by part (ports/tcp.py writes
  conn.take_parts() so too), every connection's after every step (so none needs a wake).
- A bridge ([[bridge]] in hutch.json) is made by server/bridges/driver.py's Bridge, as startup does;
  its link upstream is driven here as server/bridges/driver.py's _Link drives it (the same methods for
  the upstream's events, what to forward and what to write), over the uplink the host serves.

So the heap holds what a board's holds: the broker, its connections, the journal's and the
streams' state, a bridge's outbox. The host's clients and the upstream broker live outside it.

Written for MicroPython: no typing, no asyncio, nothing a board's port lacks. Not in the
firmware bundle (no manifest names it): the host copies it beside the bundle.
"""

import gc
import os
import sys

TICK_MS = 200  # server/runtime.py's: the broker's tick
LINK_TICK_MS = 500  # server/bridges/driver.py's: a link's heartbeats and watchdog


class VirtualClock:
    """The runtime's clock (server/runtime.py Clock's now_ms and wall_seconds), moved by the host:
    a step takes no time unless the host says so, and every run of a scenario is the same."""

    def __init__(self):
        self.now = 0

    def now_ms(self):
        return self.now

    def wall_seconds(self):
        return 1700000000 + self.now // 1000


class _Client:
    """One client, as ports/tcp.py's _Client holds it: its connection, and its protocol header
    until it is known (FrontEnds.first_octets, which attach()es the connection it chooses)."""

    front = None  # its listener's FrontEnds, where it is not the AMQP one (a class default: held by MQTT's alone)

    def __init__(self, index, front, peer):
        self.index = index
        self.greeting = (peer, b"")
        self.conn = front.open(peer)

    def attach(self, conn):
        self.conn = conn


class _Uplink:
    """The bridge's socket upstream, as _Link's writer sees it: what it writes waits for take()."""

    def __init__(self):
        self.out = []

    def write(self, data):
        self.out.append(data)


class Board:
    def __init__(self):
        self.clock = VirtualClock()
        self.runtime = None
        self.broker = None
        self.fronts = {}  # a listener's protocol ("amqp", "mqtt") -> its server/frontends.py FrontEnds
        self.clients = []
        self.read_buffer = None
        self.sending = []  # the parts take() handed out, held until sent() (the host copies them)
        self.peak = 0  # the largest live heap measured since settle() (see sent())
        self.used = None  # the heap in use that sent() saw, when it asked for no collection
        self.next_tick = 0
        self.bridge = None
        self.link = None  # server/bridges/driver.py's _Link while the uplink is up
        self.uplink = None
        self.next_link_tick = 0

    # ------------------------------------------------------------ start

    def start(self):
        """The broker, as firmware/main.py and server/startup.py start it on a board."""
        import main  # the board's main.py, from the bundle: it reads hutch.json

        found = main.read_settings()
        if found is None:
            raise RuntimeError("hutch.json: see the line above")
        opts = found[0]
        del main, found
        sys.modules.pop("main", None)
        from hutch.server import serve

        serve.forget_settings()
        from hutch.core.broker import Broker
        from hutch.ports.log import make_log
        from hutch.server import startup
        from hutch.server.frontends import FrontEnds
        from hutch.server.runtime import Runtime, forget

        log = make_log(opts["log_level"])
        startup.claim_data_folder(opts["data"])
        entropy = os.urandom(6) if hasattr(os, "urandom") else b"hutch"
        broker = Broker(opts["limits"], opts["users"], log, startup.platform_name(), entropy)
        journal = startup.recover_journal(opts, broker, log)
        runtime = Runtime(broker, log, opts["stats_interval"] * 1000)
        runtime.clock = self.clock  # (before anything reads it: the bridges keep it)
        if opts["bridges"] and not hasattr(os, "urandom"):
            # A port difference papered over: the WebAssembly port has no os.urandom, which
            # server/bridges/driver.py's node_id() takes the bridge's node name from at a first start
            # (ESP32 and RP2040 ports have it). The node-id file that start writes is put in
            # the data folder first, as after an earlier start.
            write_node_id(opts["data"])
        if opts["bridges"]:
            from hutch.server.bridges.setup import make_bridges

            runtime.bridges = make_bridges(opts["bridges"], runtime, opts["data"])
        journal.commit()  # what journal.start() does first; then its task's work is each step's
        runtime.journal = journal
        runtime.monitor.fit(broker.limits)
        self.read_buffer = bytearray(opts["read_size"])  # one for every client, as ports/tcp.py's
        self.runtime = runtime
        self.broker = broker
        self.fronts["amqp"] = FrontEnds(runtime)
        startup.serve_front_ends(broker, opts["front_ends"])  # (as a board whose config serves MQTT starts it)
        if "mqtt" in opts["front_ends"]:
            self.fronts["mqtt"] = FrontEnds(runtime, "mqtt")
        if runtime.bridges:
            self.bridge = runtime.bridges[0]
        log("info", "hutch on %s, in memory (board profile %s)" % (startup.platform_name(), opts["board"]))
        startup = None
        forget("hutch.server.startup")

    # ------------------------------------------------------------ clients

    def open(self, protocol="amqp"):
        """A new client (its index) of the listener of that protocol: what it does at accept."""
        port = 40000 + len(self.clients)
        peer = {"address": "127.0.0.1", "port": port, "transport": "tcp"}
        self.broker.now = self.clock.now
        front = self.fronts[protocol]
        client = _Client(len(self.clients), front, peer)
        if protocol != "amqp":
            client.front = front
        self.clients.append(client)
        return len(self.clients) - 1

    def feed(self, index, n):
        """The client sent the first n octets of the read buffer (0: it closed its side)."""
        client = self.clients[index]
        data = memoryview(self.read_buffer)[:n]
        (client.front or self.fronts["amqp"]).received(client, data)
        monitor = self.runtime.monitor
        if monitor.measures:
            monitor.fed(n)

    # ------------------------------------------------------------ the bridge's uplink

    def uplink_refused(self):
        """The bridge tries its uplink, which refuses (the network is down): server/bridges/driver.py's
        retry loop with a link that raised ECONNREFUSED. 0 if it tried; while the machine backs
        off, how many milliseconds it waits."""
        machine = self.bridge.machine
        if machine.connect_to() is None:
            return machine.wait_ms
        machine.lost("connection refused")
        self.bridge.save_offset(True)
        return 0

    def uplink_open(self):
        """The uplink connects: server/bridges/driver.py Bridge._link, with the host as the socket.
        0 once it did; while the machine backs off, how many milliseconds it waits (the host
        moves the clock on, then asks again)."""
        from hutch.server.bridges.driver import _Link

        bridge = self.bridge
        uri = bridge.machine.connect_to()
        if uri is None:
            return bridge.machine.wait_ms
        protocol, login = bridge.start_protocol(uri, self.clock.now)
        self.uplink = _Uplink()
        self.link = _Link(bridge, protocol, None, self.uplink, login, bridge.machine.settings["credit"])
        self.link.flush()  # the protocol header
        return 0

    def uplink_feed(self, n):
        """Upstream sent the first n octets of the read buffer: what _Link.read_loop does with
        a read (the events to the machine, what may go upstream now, the next set-up step)."""
        link = self.link
        protocol = link.protocol
        machine = link.machine
        data = memoryview(self.read_buffer)[:n]
        try:
            while True:  # (as _Link._read on CPython: what does not fit waits for the events' room)
                taken = protocol.receive_data(data)
                data = data[taken:]
                link._events()
                if not data:
                    break
        except Exception as e:  # server/bridges/driver.py's LinkError: the link ends
            self._link_ended(str(e))
            return
        if machine.ran and not link.ended:
            link.send()
            link.flush()
        link.set_up_next()
        reason = machine.check()
        if reason:
            self._link_ended(reason)

    def _link_ended(self, reason):
        self.link.ended = True
        self.link = None
        self.bridge.machine.lost(reason)
        self.bridge.save_offset(True)

    # ------------------------------------------------------------ a step's end

    def after_read(self):
        """What a board's tasks do between reads: the bridge's writer sends what its outbox
        holds, the journal's writer writes and syncs (a confirm waits on it), the runtime
        ticks the broker (every TICK_MS of the clock) and the link ticks (every LINK_TICK_MS)."""
        link = self.link
        if link is not None:
            if link.machine.ran:
                link.send()
            link.flush()
        writer = self.runtime.journal  # (ports/storage.py: what its task does, written and synced at once)
        journal = writer.journal
        if journal.chunks or journal.marks or journal.seq > journal.synced:
            writer.commit()
        now = self.clock.now
        if now >= self.next_tick:
            self.next_tick = now + TICK_MS
            self.broker.tick(now, self.clock.wall_seconds())
            self.runtime.monitor.sample(now)
        if link is not None and now >= self.next_link_tick:
            self.next_link_tick = now + LINK_TICK_MS
            reason = link.machine.tick(now, link.protocol.tick(now) < 0)
            self.bridge.save_offset()
            if reason:
                self._link_ended(reason)

    def take(self):
        """What to send now, as "INDEX ADDRESS LENGTH" lines, one per part (INDEX -1: upstream),
        and "INDEX closed" for a client whose connection is closed and flushed. ADDRESS is the
        part's bytes in this port's memory (the host copies them out, then calls sent())."""
        self.sending = sending = []
        lines = []
        for client in self.clients:
            if client is None:
                continue
            parts = client.conn.take_parts()
            if parts:
                for part in parts:
                    if type(part) is memoryview:  # (bytes and bytearray share a layout: see address())
                        part = bytes(part)
                    sending.append(part)
                    lines.append("%d %d %d" % (client.index, address(part), len(part)))
            if client.conn.closed:
                self.clients[client.index] = None
                lines.append("%d closed" % client.index)
        if self.uplink is not None and self.uplink.out:
            for part in self.uplink.out:
                sending.append(part)
                lines.append("-1 %d %d" % (address(part), len(part)))
            self.uplink.out = []
        return "\n".join(lines)

    def sent(self):
        """The host has copied what take() gave: its parts are garbage now, as a socket's
        written bytes are. The garbage is collected when this call returns if the heap in use,
        garbage and all, is above the largest live heap measured since settle(): the next
        step's figure is then the live heap; else that figure, garbage and all, is still no
        more than that largest one, which a collection could only lower (collecting after every
        step took half the harness's time, and so did gc.mem_alloc(), which walks the heap's
        whole table: it is read once per step)."""
        self.sending = []
        used = gc.mem_alloc()
        if used > self.peak:
            gc.collect()
            self.used = None  # measured again once collected: the next step's figure
        else:
            self.used = used

    def measured(self):
        """A step's figure: what the heap holds at its start (see sent())."""
        used = self.used
        if used is None:
            used = gc.mem_alloc()
            if used > self.peak:
                self.peak = used
        return used

    def settle(self):
        """A collection when this call returns, and the largest live heap forgotten: the next
        figure is exact, and so is every one from then on that can be a new largest."""
        self.sending = []
        self.peak = 0
        self.used = None
        gc.collect()


def write_node_id(folder):
    """DATA/node-id, as server/bridges/driver.py node_id() writes it (unless there is one)."""
    try:
        os.stat(folder + "/node-id")
    except OSError:
        with open(folder + "/node-id", "w") as f:
            f.write("hutch-wasm32board\n")


def address(data):
    """Where a bytes or bytearray object's octets are, on a 32-bit port: both objects are
    (type, hash or typecode, length, pointer to the octets), four words, and id() is the
    object's address. The host reads the length at +8 and the pointer at +12 (and checks the
    layout once at start: check_layout)."""
    return id(data)


BOARD = Board()
LAYOUT_PROBE = b"hutch: in memory"  # the octets check_layout()'s host expects


def check_layout():
    """(address of LAYOUT_PROBE, address of the read buffer) for the host to check its reading
    of this port's objects against octets it knows, before it trusts any."""
    return "%d %d" % (address(LAYOUT_PROBE), address(BOARD.read_buffer))


def open_client(protocol="amqp"):
    """BOARD.open(), for the host (a function of the module: a bound method made for each call
    from JavaScript would stay referenced by the port's proxies, in the heap being measured)."""
    return BOARD.open(protocol)


def sent():
    BOARD.sent()


def settle():
    BOARD.settle()


def call(name, now):
    """BOARD.NAME() at clock time now (uplink_open, uplink_refused): its result."""
    BOARD.clock.now = now
    return getattr(BOARD, name)()


def read_buffer_head(n):
    """The read buffer's first n octets, as text: the host wrote them (check_layout's second half)."""
    return bytes(BOARD.read_buffer[:n]).decode()


def step(index, n, now):
    """One turn of a board's loop at clock time now: a read of n octets from client index
    (-1: from upstream; -2: no read, time passing), then what the board's tasks do after it.
    Returns the heap in use before it (the live heap after the collection that ended the host's
    last call, or a figure no higher than the largest such: see sent()) and how many modules are
    loaded (the host asks which when it changes: the code census), then take()'s lines."""
    board = BOARD
    before = board.measured()
    board.clock.now = now
    if index >= 0:
        board.feed(index, n)
    elif index == -1 and board.link is not None:
        board.uplink_feed(n)
    board.after_read()
    return "%d %d\n%s" % (before, len(sys.modules), board.take())


def status():
    """The live heap and how many modules are loaded ("LIVE MODULES"), read in a call of its
    own after a call whose end collected the garbage. (The WebAssembly port collects only when
    a call from JavaScript returns, when no stack holds a pointer; gc.collect() inside a call
    only asks for that collection.)"""
    return "%d %d" % (gc.mem_alloc(), len(sys.modules))


# ---------------------------------------------------------------- the code's heap on a board
#
# This port loads hutch's .mpy files into the heap: their bytecode, constants and names, which
# a board with hutch frozen into its firmware keeps in flash. What such a board still makes in
# its heap at import is estimated here, object by object, with this port's sizes (32-bit words,
# 16-byte heap blocks): each module's object and globals, its functions, its classes with their
# dictionaries, and the containers and instances its import builds. Constants (numbers, strings,
# bytes, tuples) are frozen into flash with the code and count nothing. Measured against the
# port's own frozen modules (asyncio, binascii, collections: frozen into its firmware, so their
# import takes only that), the estimate comes to about nine tenths of what their import takes.

DICT_SIZES = (0, 2, 4, 6, 8, 10, 12, 17, 23, 29, 37, 47, 59, 73, 97, 127, 167, 223, 293, 389, 521, 691, 919, 1223)
FROZEN_CONSTANTS = (int, str, bytes, float, bool, type(None), tuple)


def _blocks(n):
    return (n + 15) // 16 * 16


def _dict_bytes(n):
    """A dict of n entries: the object, and its table (key and value per slot) at the size
    MicroPython's dicts grow to (py/map.c's allocation sizes: a table fills before it grows)."""
    for size in DICT_SIZES:
        if size >= n:
            return 16 + _blocks(size * 8)
    return 16 + _blocks(n * 8)


def _closure():
    kept = []
    return lambda: kept


class _Probe:
    def method(self):
        pass


# Objects of these kinds a module's globals may hold are in the heap even with the code frozen
# (a function with a closure, a bound method, a view); a function written in C, or a type,
# is in the firmware.
HEAP_KINDS = (type(_closure()), type(_Probe().method), memoryview)


def _ram(value, seen, depth=0):
    if isinstance(value, FROZEN_CONSTANTS) or depth > 8 or id(value) in seen:
        return 0
    seen.add(id(value))
    kind = type(value)
    if kind is type(_blocks) or kind in (staticmethod, classmethod, property):
        return 16
    if kind is type(sys):  # another module: counted as itself
        return 0
    if kind is list:
        return 16 + _blocks(4 * len(value)) + sum(_ram(item, seen, depth + 1) for item in value)
    if kind is set:
        return _dict_bytes(len(value)) + sum(_ram(item, seen, depth + 1) for item in value)
    if kind is dict:
        return _dict_bytes(len(value)) + sum(
            _ram(k, seen, depth + 1) + _ram(v, seen, depth + 1) for k, v in value.items()
        )
    if kind is bytearray:
        return 16 + _blocks(len(value))
    own = getattr(value, "__dict__", None)
    if not isinstance(own, dict):
        return 16 if kind in HEAP_KINDS else 0
    if kind is type:
        if "__module__" not in own:  # a type written in C: in the firmware
            return 0
        head = 64  # a class's type object
    else:
        head = 16  # an instance
    return head + _dict_bytes(len(own)) + sum(_ram(v, seen, depth + 1) for v in own.values())


def frozen_ram(names):
    """Estimated heap the modules named take at import on a board with them frozen."""
    seen = set()
    total = 0
    for name in names:
        module = sys.modules.get(name)
        if module is None:
            continue
        seen.add(id(module))
        own = module.__dict__
        total += 16 + _dict_bytes(len(own)) + sum(_ram(v, seen) for v in own.values())
    return total
