"""One bridge's decisions, sans-IO: the state machine that server/bridges/driver.py (the driver: sockets,
TLS, bytes through client/protocol.py, sleeps and tasks) tells what happened and asks what to
do. Nothing here reads a clock or a socket: the time (ms) and the events come in, and the
answers are values the driver acts on.

    starting -> connecting (each URI in turn; then the handshake) -> setting up -> running
    running <-> blocked (connection.blocked, channel.flow)
    a link lost, or a round of URIs that all failed -> backoff -> connecting ...
    (an [uplink] schedule) outside its windows -> waiting -> connecting ...; a window that
    closes ends the link once what is in flight is settled
    stop() -> stopped

The driver's calls, in the order a link meets them:

    connect_to(now, day_s)   the URI (its settings) to open now; None: first wait wait_ms
                             (backoff: reconnect_delay doubled up to max_reconnect_delay after
                             each failed round, with jitter from the random source given;
                             waiting: until the [uplink]'s next window, day_s being the
                             local time of day in seconds)
    opened(now)              the socket is open: the handshake begins (connection_timeout)
    next_step()              once upstream's channel is open and no reply is awaited: the
                             next set-up step (codec/upstream.py's words), or None: running
    in_cluster(name)         the node the link runs on says its cluster (or None)
    EVENT(...)               each event upstream's client reads, by its word, as the method
                             of that name (codec/upstream.py): accepted, rejected, released,
                             returned, delivered, backlog, flow, blocked, unblocked; a
                             direction that has no use for one ignores it
    tick(now, silent)        every tick: why the link must end now (missed heartbeats, no
                             answer to the handshake, the direction's watchdog), or None
    check()                  after each batch of events: why the link must end, or None
    lost(reason)             the link ended (None: the bridge stops): what it had in flight
                             goes back (up: to the local queue's head; down: upstream
                             requeues it)
    again()                  (after lost) it ended on purpose, to log in anew (a token
                             renewed): the same URI next, without a backoff
    stop()                   the bridge's end

and each direction's own: core/bridge/up.py (what to forward; accepted, rejected, released
and returned: what upstream says of what was sent; flow; the watchdog) and core/bridge/down.py
(delivered and backlog; what to nack and ack upstream), which
also define the hooks this class calls (Machine's annotations: no defaults, each a function
object a board would hold for nothing).

A bridge registers itself on the broker (broker.bridges): core/snapshot.py reads its status
from there. MicroPython-clean; loaded only by a broker with a [[bridge]].
"""

TYPE_CHECKING = False
if TYPE_CHECKING:  # read by type checkers only: MicroPython has no typing module
    from typing import Callable

# The states. Setting up is shown as connecting (status, log): to a user, a link is up once it
# runs.
STARTING = 0
CONNECTING = 1
SETTING_UP = 2
RUNNING = 3
BLOCKED = 4
BACKOFF = 5
STOPPED = 6
WAITING = 7  # for the [uplink]'s next window (core/bridge/uplink.py)
NAMES = ("starting", "connecting", "connecting", "running", "blocked", "backoff", "stopped", "waiting")
WINDOW_CLOSED = "its window closed"  # (lost's reason: logged as news, not as an error)
FAIL_BACK = "moving back to an earlier URI that answers again"  # (prefer_first: news too)
MOVE_DRAIN_MS = 5000  # moving back, what is in flight on the old link may take this long to be confirmed
WINDOW_POLL_MS = 10000  # waiting for a window, the time of day is read again this often (a clock set)
WINDOW_DRAIN_MS = 5000  # a closing window waits at most this long for what is in flight
# While a bridge cannot get a link to run (an outage), its retries are said once, with their
# reason (each new reason once), then summed up this often, until a link runs again: not a
# warning and an info line per retry, thousands a day at max_reconnect_delay
OUTAGE_SUMMARY_MS = 300000

DEFAULT_PREFETCH = 1000  # as RabbitMQ's shovel
SINCE_START = -1  # (down_at) no link has run since the broker started (Broker.started)


class BridgeError(Exception):
    """A bridge that cannot start as configured (its source exchange is missing...): `hutch
    serve` says it in one line and exits with 2."""


class Machine:
    """What both directions decide alike: the state, the URI to try, the backoff, the end of a
    link that stays silent. The directions fill in the hooks."""

    # The hooks each direction defines (annotations alone: nothing at run time).
    set_up_steps: "Callable[[], list]"  # the set-up steps of a new link, in order (codec/upstream.py's words)
    link_opened: "Callable[[int], None]"
    running: "Callable[[], None]"  # the set-up is done
    stalled: "Callable[[int], str | None]"  # the direction's watchdog
    check: "Callable[[], str | None]"  # why the link must end now
    link_down: "Callable[[], None]"
    close: "Callable[[], None]"
    unsettled: "Callable[[], int]"  # messages sent upstream and not yet settled (a stop waits for them)

    draining = False  # (up) stopping, for a reload: nothing new is sent
    window = None  # (an [uplink] schedule) when its window opens or closes, as `hutch ctl bridges` says it
    in_window = True  # whether the [uplink]'s window is open (or it has none), as last seen
    window_left = None  # (s) how long the open window stays open, as last seen (None: no end)
    closed_at = None  # (ms) when the window was seen closed while this link was up
    always_connected = False  # whether (a class of) the bridge sends outside the windows too

    def __init__(self, broker, settings, log, random_bits):
        """settings: server/bridges/config.py's checked [[bridge]]; log(level, text); random_bits:
        n -> an int of n random bits (random.getrandbits), the jitter's source."""
        self.broker = broker
        self.settings = settings  # (never changed: a reload compares it with the config's)
        self.name = settings["name"]
        self.log = log
        self.random_bits = random_bits
        self.state = STARTING
        self.upstream = None  # the URI in use (without its password)
        self.uri = None  # its settings
        self.last_error = None
        self.tried = 0  # URIs of this round tried
        self.delay = settings["reconnect_delay"]  # the next backoff (s), before its jitter
        self.wait_ms = 0  # the backoff connect_to() asked for
        self.progressed = False  # a link of this round ran
        self.ran = False  # this link got through its set-up
        self.opened_at = 0
        self.steps = []  # the set-up steps still to take on this link
        self.upstream_blocked = False  # connection.blocked, until connection.unblocked
        self.always_connected = settings.get("always_connected", False)
        # the outage: links tried that did not run since one last ran, since when (ms), the
        # reasons said (each once), when it was last summed up; quiet once its first backoff
        # is said (connecting and backoff no longer logged, each retry)
        self.failures = 0
        self.down_since = None
        self.said_reasons = []
        self.summed_at = 0
        self.quiet = False
        # (ms, the broker's clock) since when no link runs (None while one does): the health's
        # "down for" (core/health.py); SINCE_START until the first link runs
        self.down_at = SINCE_START
        self.running_at = None  # (ms, the broker's clock) since when this link runs
        self.last_ran = None  # the URI the last link that ran was on: a link on another is a fail-over
        self.cluster = None  # the cluster (0-9-1's cluster_name) the last link that ran was in
        self.failovers = 0  # links that ran on another URI than the one before (hutch_bridge_failovers_total)
        self.ended = None  # why the last link that ran ended
        # prefer_first (fail-back, make-before-break): when the next probe of an earlier URI is
        # due (ms, the driver's clock), which one, the one being probed, the one to move back to
        # (once what is in flight is confirmed, since move_began), and how often it moved back
        self.probe_at = 0
        self.probe_next = 0
        self.probing = None
        self.moving_to = None
        self.move_began = None
        self.failbacks = 0
        self.probe_said = {}  # a URI's index -> why its last probe failed, as said (server/bridges/probe.py)
        # in flight, messages are in memory and count in the broker's budget: a board's (esp32:
        # 48 messages) must keep room for the publishers and the queues' windows
        self.prefetch = settings["prefetch"] or max(1, min(DEFAULT_PREFETCH, broker.limits.total_max_messages // 4))
        if not broker.bridges:  # the first: the broker's own list (a class-level () until then)
            broker.bridges = []
        broker.bridges.append(self)

    def set_state(self, state, detail=""):
        """Each change a user can see is one log line; in an outage, once its first backoff was
        said, its retries (connecting, backoff) are not (outage())."""
        if NAMES[state] != NAMES[self.state] and not (self.quiet and state in (CONNECTING, BACKOFF)):
            self.log("info", "bridge %s: %s%s" % (self.name, NAMES[state], detail))
        self.state = state

    def outage(self, now):
        """(connect_to, at a round's end) The outage said: when it began, and every
        OUTAGE_SUMMARY_MS how many attempts it has cost and the last reason."""
        if self.down_since is None:
            self.down_since = self.summed_at = now
        elif now - self.summed_at >= OUTAGE_SUMMARY_MS:
            self.summed_at = now
            self.log(
                "warning",
                "bridge %s: still down after %d attempts in %s; last error: %s; retrying every %s s at most"
                % (self.name, self.failures, _minutes(now - self.down_since), self.last_error,
                   _seconds(self.settings["max_reconnect_delay"])),
            )  # fmt: skip

    # ------------------------------------------------------------ between links

    def connect_to(self, now=0, day_s=None):
        """The URI to connect to now (its settings), each in turn; None when the round is over
        (then wait wait_ms: the state is backoff), the [uplink]'s window is closed (waiting)
        or the bridge stopped. day_s: the local time of day (s), for the windows."""
        if self.state == STOPPED:
            return None
        settings = self.settings
        wait = self.see_window(day_s)
        if wait and not self.always_connected:
            self.tried = 0
            self.wait_ms = WINDOW_POLL_MS if wait < 0 else min(WINDOW_POLL_MS, max(100, int(wait * 1000)))
            self.set_state(WAITING, " for its window (%s)" % self.window)
            return None
        uris = settings["uris"]
        if self.tried < len(uris):
            uri = self.uri = uris[self.tried]
            self.tried += 1
            self.upstream = uri["uri"]
            self.set_state(CONNECTING, " to %s" % uri["uri"])
            return uri
        self.tried = 0
        if self.progressed:  # it worked for a while: retry soon
            self.delay = settings["reconnect_delay"]
            self.progressed = False
        # jitter (many gateways do not retry in step) within the delay, which is within the most
        wait = self.delay * (1 - self.random_bits(16) / 131072)
        self.wait_ms = int(wait * 1000)
        self.delay = min(self.delay * 2, settings["max_reconnect_delay"])
        self.set_state(BACKOFF, " for %.1f s (%s)" % (wait, self.last_error))
        if self.failures:
            self.outage(now)
            self.quiet = True  # (said: its retries are summed up from here on)
        return None

    def see_window(self, day_s):
        """Where the [uplink]'s windows are at day_s (the local time of day in seconds; None: not
        read), as the broker has them now (a reload may have changed them): in_window, window
        (its text), window_left. The seconds until a window opens (-1: none ever does), or 0
        while one is open (or there is none)."""
        uplink = self.broker.uplink
        if uplink is None or not uplink.scheduled:
            self.in_window = True
            self.window = self.window_left = None
            return 0
        if day_s is None:
            return 0 if self.in_window else -1
        wait, self.window, self.window_left = uplink.window_at(day_s)
        self.in_window = wait == 0
        return wait

    # ------------------------------------------------------------ one link

    def opened(self, now):
        """The socket is open (TLS too): the handshake starts, and connection_timeout with it."""
        self.opened_at = now
        self.draining = False
        self.closed_at = None
        self.ran = False
        self.upstream_blocked = False
        self.steps = self.set_up_steps()
        self.link_opened(now)

    def next_step(self):
        """(The channel is open, no reply awaited) The next set-up step (codec/upstream.py's
        words); None once all are done: the link runs."""
        if self.state == CONNECTING:
            self.state = SETTING_UP
        if self.steps:
            return self.steps.pop(0)
        self.ran = True
        after = ""
        if self.failures:  # the outage's end: what it cost
            after = ", after %d failed attempts" % self.failures
            if self.down_since is not None:
                after += " in %s" % _minutes(self.opened_at - self.down_since)
        self.failures = 0
        self.down_since = None
        self.said_reasons = []
        self.quiet = False
        self.down_at = None
        self.running_at = self.broker.now
        self.set_state(RUNNING, " (upstream %s)%s" % (self.upstream, after))
        if self.last_ran is not None and self.last_ran != self.upstream:  # one line per fail-over or back
            if self.ended == FAIL_BACK:
                self.failbacks += 1
                self.log("info", "bridge %s: moved back from %s to %s" % (self.name, self.last_ran, self.upstream))
            else:
                self.failovers += 1
                self.log(
                    "warning",
                    "bridge %s: failed over from %s to %s (it ended: %s)"
                    % (self.name, self.last_ran, self.upstream, self.ended),
                )
        self.last_ran = self.upstream
        self.probe_at = 0  # (prefer_first: the first probe of this link at its first tick)
        self.running()
        return None

    def in_cluster(self, cluster):
        """(A link that runs) Its node says which cluster it is in (0-9-1's cluster_name, or
        None): a list of one cluster's nodes that led into another cluster is said, once per
        change, as what goes there is in that cluster's queues and not where the pipeline reads
        the first's. (A primary and its standby elsewhere, prefer_first, are two by design.) A
        RabbitMQ cluster that was given no name says each node's own (name@host): not a cluster's."""
        if cluster and "@" in cluster:
            cluster = None
        if cluster and self.cluster and cluster != self.cluster and not self.settings.get("prefer_first"):
            self.log(
                "warning",
                "bridge %s: %s is in cluster '%s', not '%s' as the node before: what it sends now is in"
                " that cluster's queues (list one cluster's nodes in uri; a standby elsewhere wants"
                " prefer_first)" % (self.name, self.upstream, cluster, self.cluster),
            )
        self.cluster = cluster or self.cluster

    def _ignored(self, *_):
        """An event of the bridge's words (codec/upstream.py: each is the method that takes it)
        that this direction has no use for: a down link's confirms, an up link's backlog."""

    accepted = rejected = released = returned = flow = delivered = backlog = _ignored

    def blocked(self, why):
        """Upstream holds its publishers back (0-9-1's connection.blocked)."""
        self.upstream_blocked = True
        self.set_state(BLOCKED, " by upstream: %s" % why)

    def unblocked(self):
        self.upstream_blocked = False
        self.set_state(RUNNING, " (upstream %s)" % self.upstream)

    def tick(self, now, silent, day_s=None):
        """Why the link must end at now, or None. silent: heartbeats were missed (the protocol's
        tick said so). A black-holed route accepts the connection and then says nothing,
        before heartbeats are agreed: the handshake has connection_timeout ms. day_s: the local
        time of day, where the [uplink] has windows: once its window closes, a link that sends
        only inside it ends, when what it has in flight is settled (WINDOW_DRAIN_MS at most;
        meanwhile it sends nothing new)."""
        self.see_window(day_s)
        if self.in_window or self.always_connected:
            self.closed_at = None
        elif self.closed_at is None:
            self.closed_at = now
        if self.closed_at is not None and (not self.unsettled() or now - self.closed_at > WINDOW_DRAIN_MS):
            return WINDOW_CLOSED
        if self.moving_to is not None:  # an earlier URI answered a probe: once this link drained
            if self.move_began is None:
                self.move_began = now
            if not self.unsettled() or now - self.move_began > MOVE_DRAIN_MS:
                return FAIL_BACK
        if silent:
            return "missed heartbeats: upstream is silent"
        timeout = self.uri["connection_timeout"]
        if not self.ran and now - self.opened_at > timeout:
            return "no answer to the handshake within %d ms" % timeout
        return self.stalled(now)

    def lost(self, reason):
        """The link ended: why (logged, and kept as the last error), or None when the bridge
        stops. What it had in flight goes back."""
        self.link_down()
        self.running_at = None
        if self.ran:
            self.progressed = True
            self.down_at = self.broker.now  # (a link that ran ended: down from now)
        elif reason is not None and reason != WINDOW_CLOSED:
            self.failures += 1  # a link that never ran: an attempt of the outage
        self.ran = False
        moving_to = self.moving_to
        self.moving_to = self.move_began = None  # (a link that ends otherwise meanwhile: no move)
        if reason == FAIL_BACK and moving_to is not None:
            self.tried = moving_to  # (connect_to gives it next, without a backoff)
        elif reason == WINDOW_CLOSED:
            self.log("info", "bridge %s: %s" % (self.name, reason))
        elif reason is not None:
            self.last_error = "%s: %s" % (self.upstream, reason)
            if self.progressed and self.upstream == self.last_ran:
                self.ended = reason  # (why the link that ran ended: what a fail-over says)
            # each reason once an outage (two URIs that fail alike, or apart, in turn)
            if self.state != STOPPED and self.last_error not in self.said_reasons:
                if len(self.said_reasons) < 8:
                    self.said_reasons.append(self.last_error)
                self.log("warning", "bridge %s: %s" % (self.name, self.last_error))

    def probe_due(self, now):
        """(prefer_first) An earlier URI to try on a second connection now, as (its index, its
        settings), or None: while a link runs on a later URI, every max_reconnect_delay, the
        earlier ones in turn, one probe at a time."""
        if not self.settings.get("prefer_first") or self.state not in (RUNNING, BLOCKED):
            return None
        current = self.tried - 1  # (the URI this link is on)
        if current <= 0 or self.probing is not None or self.moving_to is not None:
            return None
        if self.probe_at == 0:
            self.probe_at = now + int(self.settings["max_reconnect_delay"] * 1000)
        if now < self.probe_at:
            return None
        self.probe_at = now + int(self.settings["max_reconnect_delay"] * 1000)
        index = self.probe_next % current
        self.probe_next = index + 1
        self.probing = index
        return index, self.settings["uris"][index]

    def probe_ended(self, index, answered, why=None):
        """The probe of URI index answered (its set-up went through), or not (why): if it did,
        this link sends nothing new and, once what it has in flight is confirmed (MOVE_DRAIN_MS at
        most: tick), ends, and the next link is on that URI. A probe that gets no answer changes
        nothing: the working link goes on."""
        self.probing = None
        if answered:
            self.probe_said.pop(index, None)
        if not answered or self.state not in (RUNNING, BLOCKED) or index >= self.tried - 1:
            return
        self.moving_to = index
        self.draining = True
        self.ended = FAIL_BACK
        self.log(
            "info",
            "bridge %s: %s answers again: moving back to it once what is in flight on %s is confirmed"
            % (self.name, self.settings["uris"][index]["uri"], self.upstream),
        )

    def again(self):
        """The link was ended on purpose, to log in anew (its token renewed): connect_to() gives
        the same URI next, without a backoff."""
        if self.tried:
            self.tried -= 1

    def stop(self):
        """The bridge ends (after its last link): its local side lets go."""
        self.close()
        self.set_state(STOPPED)


def _minutes(ms):
    """A stretch of time as the log says it: seconds under two minutes, else minutes or hours."""
    if ms < 120000:
        return "%d s" % (ms // 1000)
    if ms < 7200000:
        return "%d min" % (ms // 60000)
    return "%.1f h" % (ms / 3600000)


def _seconds(value):
    return "%g" % value
