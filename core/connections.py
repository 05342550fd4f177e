"""Client connections, whatever their protocol: what each is to its port (PortConnection, the
port contract) and what they may cost before they log in (Guard). One module, not two: on a
board every module loaded costs heap, and every front end's connection uses both.

**The port contract.** A port (ports/tcp.py and ports/tcp_cpython.py for TCP and TLS, ports/serial.py for a UART,
emulator/board_in_memory.py in the tests) moves octets between a transport and a connection
made by a front end (amqp091/connection.py, amqp10/connection.py, mqtt/connection.py). It never knows which
protocol it carries: it calls only what PortConnection below describes, and the front end's
connection is a PortConnection. The broker's side of the same object is core/session.py's
"A connection".

    conn = front.open(peer)      # server/frontends.py: peer {"address", "port", "transport"}
    conn.wake = callback         # output appeared (or the connection closed) outside feed():
                                 # called once until the port next takes the output
    front.received(port, data)   # what the port read (b"": the end of the stream); the one
                                 # read rule every port calls (server/frontends.py)
    conn.reading()               # read from the transport only while this is True
    conn.read_wanted()           # octets that complete the frame whose start is pending (0: none)
    conn.pending                 # that start (a port that reads a large frame whole takes it)
    conn.take_parts()            # the buffers to write, in order (None: nothing), or
    conn.take_output()           # the same joined into one bytes object (b"": nothing)
    conn.out_bytes               # what the output waiting holds, as the front end counts it
    conn.closed                  # write what is left, then close the transport
    conn.lost()                  # the transport went away (conn.eof(): its sending side did)
    conn.out_of_memory()         # the heap ran out while the port served this client
    conn.dropped()               # hang up without a word: not even that fits in memory
    conn.name                    # "address:port", for the port's log lines
    conn.tls                     # (only a TLS listener's clients) what the port knows of it

**A connection's life, once for every protocol.** PortConnection.feed is the port's way in:
what a frame's start left pending comes first, a held-back client's octets are kept whole, and
the rest goes to the front end's parse(data), which says how far it read. Whatever parse
raises ends this connection only, in the front end's words (close_for): its own protocol errors
(protocol_errors) as its protocol says them, the heap running out as out of memory (else
dropped: a hang-up with one line in the log), anything else (a bug) logged, and said as an
internal error. A connection ends once, in end(): out of the pre-login guard, the front end's give_back (channels,
sessions, a will), out of the broker's count and list (forget retried after collecting garbage:
a board out of memory must still get rid of it), and the port woken to close the transport.
end(unsaid=True) hangs up without a word (the guard's budget: nothing more is sent). Each front
end gives only its own words and parts:

    parse(data) -> pos           how far it read (-1: nothing more to keep: it kept what it needs)
    protocol_errors              the exceptions that are its protocol's errors (a tuple)
    close_for(e)                 end (or close) the connection for e, in its words: its protocol
                                 error, MemoryError (out of memory: may raise MemoryError again),
                                 or a bug's exception (an internal error)
    give_back()                  what the connection holds, given back, and its state closed
    flush_confirms()             after each feed: its answers that waited for the journal

A front end's connection adds want_read (False while the broker holds the client back, or
once closed), read_wanted() (it knows its frames' sizes) and caught_up() (the client took what
held it past the high-water mark: its sessions deliver again): each front end's own, as a base
method each overrides would cost a board's heap for nothing. A heartbeat is due when
`now - last_send` reaches its interval and nothing waits in out.

The base keeps what is the same for every protocol: the output list and its byte count, the
high-water mark past which the broker stops delivering to a client that does not read
(saturated), the wake debounced to once per take, the pre-login guard's registration, whether
the client is local (is_loopback) and one idle clock: last_recv (the last octets fed) and
last_send (the last output taken by the port), which heartbeats and idle time-outs read.

**The guard.** Nothing a client does before it has logged in may tie the broker up: budgets
per source. A source is a peer's address. Before its login a connection costs the broker a socket and its
buffers, and every failed login the work of the check and a log line. So:

- at most Limits.handshakes_per_source connections of one source are in their handshake at
  once: a new one drops the oldest, so a source that opens sockets and says nothing (a
  slowloris) holds a bounded number of them, and the newest (a real client among them) has
  its turn; each is closed at its handshake deadline anyway;
- a source's failed logins past Limits.failed_logins_per_source in a window of
  GUARD_WINDOW_MS: the next failing connection is dropped at once, without the delayed 403
  that would hold its socket (a login that succeeds is never held back);
- what is said of a source in the log is said once per window, with how many lines were left
  out: a flood does not fill the log (or a board's flash).

Protocol-neutral: a front end reports a connection's arrival, its login's failure and its
end (arrived, login_failed, settled); the guard says what to drop. Bounded itself: it keeps
at most MAX_SOURCES sources' counts.
"""

import gc

from .auth import is_loopback

GUARD_WINDOW_MS = 10000
MAX_SOURCES = 256


TYPE_CHECKING = False
if TYPE_CHECKING:  # read by type checkers only: MicroPython has no typing module
    from typing import Callable


class PortConnection:
    """The base of every front end's connection (see the module's docstring)."""

    # Each front end's own (annotations alone: nothing at run time)
    want_read: bool
    read_wanted: "Callable[[], int]"
    caught_up: "Callable[[], None]"
    parse: "Callable[[bytes], int]"
    protocol_errors: tuple
    close_for: "Callable[[BaseException], None]"
    give_back: "Callable[[], None]"
    flush_confirms: "Callable[[], None]"

    protocol = "?"  # what hutch ctl list connections says it speaks ("AMQP 0-9-1")
    metrics_label = "?"  # its protocol label on /metrics ("amqp091")
    stats = None  # its front end's counters (core/counters.py of); None: Broker.stats, 0-9-1's
    counted = False  # it is open: counted in broker.open_connections
    client = None  # who it logged in as (core/auth.py Login), once it has
    closed = False
    paused = False  # held back (pause): not read until resume_reading
    # what carries its octets inside the transport's, where something does (a WebSocket's
    # frames: ports/websocket.py, given by a listener with `websocket = true`)
    framing = None
    deaf = False  # its login refused: what it sends is dropped unread until the answer goes

    def __init__(self, broker, peer):
        address = peer.get("address", "?")
        self.broker = broker
        self.name = "%s:%s" % (address, peer.get("port", "?"))
        # A serial link is a wire to this device, as local as a loopback socket.
        self.loopback = peer.get("transport") in ("local", "serial") or is_loopback(address)
        self.wake = None
        self.out = []
        self.out_bytes = 0
        self.high_water = broker.limits.output_high_water
        self.pending = b""  # octets fed but not read yet: a frame's start
        self._woken = False
        self.last_recv = self.last_send = broker.now
        self.deadline = broker.now + broker.limits.handshake_timeout_ms
        broker.connections.append(self)
        broker.guarded().arrived(self, address)

    @property
    def source(self):
        """What the pre-login guard counts it by: its peer's address (kept in its name, not an
        attribute of every connection's)."""
        return self.name.rpartition(":")[0]

    # ------------------------------------------------------------ reading

    def feed(self, data, framed=True):
        """The port's octets (bytes, or a memoryview of its read buffer: whatever is kept is
        copied out before feed returns), read as the module's docstring says. framed: still
        in their framing's frames, where the connection has one (what resume_reading feeds
        again is not)."""
        if framed and self.framing is not None:
            data = self.framing.unwrap(data)
            if not data:
                return
        if self.closed or self.deaf:
            return
        self.last_recv = self.broker.now
        if self.pending:
            data = self.pending + data
            self.pending = b""
        if self.paused:
            self.pending = bytes(data)
            return
        try:
            pos = self.parse(data)
        except MemoryError:
            self.out_of_memory()
            pos = len(data)
        except Exception as e:  # a protocol error, or a bug: it must cost one connection, never the broker
            if not isinstance(e, self.protocol_errors):
                self.broker.log("error", "%s: internal error: %r" % (self.name, e), e)
            self.close_for(e)
            pos = len(data)
        if 0 <= pos < len(data) and not self.closed:
            self.pending = bytes(data[pos:])
        self.flush_confirms()

    def reading(self):
        """The read rule: read while the broker wants this client's octets and the client keeps
        up with what it is sent (a client that does not read is not read from)."""
        return self.want_read and self.out_bytes < self.high_water

    # ------------------------------------------------------------ held back (core/flow.py)

    def pause(self):
        """Not read while publishers are blocked or a queue it publishes to is full (pending
        keeps what it sent meanwhile)."""
        if not self.paused:
            self.paused = True
            self.broker.flow.hold_back(self)

    def resume_reading(self):
        """Read again (what it sent meanwhile first), unless publishers are still blocked."""
        flow = self.broker.flow
        if not self.paused or self.closed or flow.blocked:
            return
        self.paused = False
        flow.let_go(self)
        pending = self.pending
        self.pending = b""
        if pending:
            self.feed(pending, False)
        if self.wake is not None:
            self.wake()

    # ------------------------------------------------------------ output

    def output_added(self, nbytes):
        """nbytes more wait in out (appended by the caller): wake the port, once a take."""
        self.out_bytes += nbytes
        if not self._woken:
            self._woken = True
            if self.wake is not None:
                self.wake()

    def saturated(self):
        return self.out_bytes >= self.high_water

    def take_output(self):
        """Everything to send, as one bytes object (b"" if nothing)."""
        parts = self.take_parts()
        return b"".join(parts) if parts else b""

    def take_parts(self):
        """Everything to send, as the list of buffers it was built from (None if nothing): a
        port on a small heap writes them one by one rather than joining them into one large
        (fragmenting) buffer."""
        framing = self.framing
        if not self.out:
            return None if framing is None else framing.wrap(None)  # (what the framing says itself)
        parts = self.out
        self.out = []
        was_saturated = self.out_bytes >= self.high_water
        self.out_bytes = 0
        self._woken = False
        self.last_send = self.broker.now
        if was_saturated and not self.closed:
            self.caught_up()  # (the front end's: deliver to it again)
        return parts if framing is None else framing.wrap(parts)

    # ------------------------------------------------------------ the end

    def end(self, unsaid=False):
        """The connection's end, once (the module's docstring): also after a close the client
        answered, or its transport's loss. unsaid: hung up without a word, what waited to be
        sent dropped."""
        if unsaid:
            self.out = []
        if self.closed:
            return
        try:
            self.closed = True
        except MemoryError:  # (a board: the first write of an attribute can grow the instance's table)
            gc.collect()
            self.closed = True
        broker = self.broker
        if self.paused and self.pending:  # (held back by a full queue or blocked: never read, so never taken)
            broker.log("warning", "%s: went while held back, %d octets it sent unread" % (self.name, len(self.pending)))
        self.pending = b""
        try:
            broker.guard.settled(self, self.source)  # (if it was still in its handshake)
        except MemoryError:  # (a board's heap full: its entry goes when the source's next handshake drops it)
            gc.collect()
        try:
            self.give_back()
        finally:  # even if giving back failed (MemoryError), the port must learn it is closed
            broker.connection_gone(self)
            try:
                broker.forget(self)
            except MemoryError:
                gc.collect()  # what was given back is garbage now: room to forget it
                broker.forget(self)
            if self.wake is not None:
                self.wake()

    lost = end  # the transport went away: the end (0-9-1 says first what its client did not)

    def out_of_memory(self):
        """The heap ran out while serving this client (in the core, or in its port's writing):
        said in the front end's words if they fit, else dropped (and so if not even its log line
        fits): it never raises MemoryError itself, so a port or tick calls it unguarded."""
        try:
            self.broker.log("warning", "%s: out of memory, closing the %s connection" % (self.name, self.protocol))
            self.close_for(MemoryError())
        except MemoryError:
            self.dropped()

    def dropped(self):
        """Hang up without a word: not even the frame that would say why fits in memory. Should
        even the end run out of heap, the connection is closed all the same (end marks it first
        and takes it out of the broker whatever happens) and what it held is garbage for the
        next collection."""
        try:
            self.end(True)
        except MemoryError:
            gc.collect()
        for _ in range(2):  # (what the end gave back is garbage now: room for the line, once collected)
            try:
                self.broker.log("warning", "%s: out of memory, connection dropped" % self.name)
                return
            except MemoryError:
                gc.collect()


class Guard:
    def __init__(self, broker):
        self.broker = broker
        self.handshaking = {}  # source -> its connections in their handshake, oldest first
        self.failures = {}  # source -> [window start ms, failed logins in it]
        self.said = {}  # source -> [window start ms, lines left out]

    def arrived(self, conn, source):
        """A connection from source starts its handshake; the oldest one of that source is
        dropped if there are already as many as the budget allows."""
        waiting = self.handshaking.get(source)
        if waiting is None:
            waiting = self.handshaking[source] = []
        waiting.append(conn)
        if len(waiting) > self.broker.limits.handshakes_per_source:
            oldest = waiting.pop(0)
            self.say(
                source,
                "%s: too many connections from %s still in their handshake: the oldest dropped" % (oldest.name, source),
            )
            oldest.end(True)  # (without a word)

    def settled(self, conn, source):
        """The connection is no longer in its handshake (it opened, or it ended)."""
        waiting = self.handshaking.get(source)
        if waiting is not None and conn in waiting:
            waiting.remove(conn)
            if not waiting:
                del self.handshaking[source]

    def login_failed(self, source):
        """True when source has failed more logins than its budget in this window: the caller
        drops the connection at once instead of answering it later."""
        now = self.broker.now
        counted = self.failures.get(source)
        if counted is None or now - counted[0] >= GUARD_WINDOW_MS:
            if counted is None and len(self.failures) >= MAX_SOURCES:
                self._forget_oldest(self.failures)
            counted = self.failures[source] = [now, 0]
        counted[1] += 1
        return counted[1] > self.broker.limits.failed_logins_per_source

    def say(self, source, line, level="warning"):
        """Log line about source, unless one was said of it in this window already (then it is
        counted, and the next line said says how many were left out)."""
        now = self.broker.now
        said = self.said.get(source)
        if said is not None and now - said[0] < GUARD_WINDOW_MS:
            said[1] += 1
            return
        if said is None and len(self.said) >= MAX_SOURCES:
            self._forget_oldest(self.said)
        if said is not None and said[1]:
            line += " (%d more such lines from %s left out)" % (said[1], source)
        self.said[source] = [now, 0]
        self.broker.log(level, line)

    def _forget_oldest(self, table):
        oldest = None
        for source in table:
            if oldest is None or table[source][0] < table[oldest][0]:
                oldest = source
        del table[oldest]
