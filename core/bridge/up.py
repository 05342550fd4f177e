"""An up bridge's decisions: a local queue (or stream) forwarded to an upstream exchange.

Its local side is core/bridge/outbox.py (a stream's: core/bridge/streamout.py); the state,
URIs and backoff are core/bridge/machine.py's. Per link, after the handshake:

- set-up (codec/upstream.py's steps): `declare` (the destination exchange of its type, a queue
  bound to it: nothing has to be set up upstream by hand), then confirm (ack_mode on-confirm);
- running: `sendable(now)` says how many waiting messages may go now (none while upstream
  blocks the connection or pauses the channel; at most what max_rate and max_byte_rate
  allow: then `wake_ms` says when to ask again), `forward(publish, n)` hands them to the
  driver's publish (persistent, mandatory, with the bridge's headers), numbered as upstream
  confirms them; with ack_mode on-publish or no-ack they are settled once written;
- basic.ack settles, basic.nack and basic.return put back (the Outbox says how); after a
  nack, sending pauses for a backoff (reconnect_delay, doubled while upstream refuses and
  accepts nothing, up to max_reconnect_delay), said in the log: upstream refused for a
  reason (a full queue), and sending again at once would only be refused again;
- the watchdog: a link that confirms nothing for `watchdog` seconds while messages are in
  flight ends (heartbeats alone miss an upstream that answers them but is stuck); so does
  one whose queue's head upstream keeps returning (`check`).

A stream source also says where a restart reads from: `offset_to_save(now)`, written by the
driver to the bridge's offset file (server/bridges/driver.py).

Over AMQP 1.0 (settings["protocol"] "1.0") the driver's client protocol (amqp10/client.py)
attaches its link itself, so there is no set-up here, and it tells the outcomes of its
transfers in the same words: `accepted` as a basic.ack, `rejected`, `released` and `modified`
as a basic.nack with the outcome as its fourth argument.

Sans-IO and MicroPython-clean.
"""

from ...codec.errors import Refused
from ..session import MESSAGE
from ..topology import add_binding, declare_queue
from .classes import MessageClass, classes_of, sending_order, set_policy
from .machine import BLOCKED, OUTAGE_SUMMARY_MS, RUNNING, BridgeError, Machine
from .outbox import Outbox

OUTRANK_POLL_MS = 100  # how often one outranked by another bridge asks again (uplink.py outranking)
SAVE_EVERY_MS = 1000  # a stream source's offset file is written at most this often while it forwards


class UpMachine(Machine):
    def __init__(self, broker, settings, log, random_bits, queues, node=b"hutch", wake=None, saved=None):
        """queues: the source queue of each class (source_queues()); wake: called when messages
        arrive for the driver to send; saved: a stream source's offset file as read at start
        (streamout.py), or None."""
        Machine.__init__(self, broker, settings, log, random_bits)
        window = self.prefetch
        self.stream = None  # a stream source's outbox (the one class's): it keeps an offset
        self.classes = []  # MessageClass, highest priority first (classes.py)
        for one, queue in zip(classes_of(settings), queues):
            if queue.is_stream:
                from .streamout import StreamOutbox  # (loaded with the first stream source)

                outbox = self.stream = StreamOutbox(broker, queue, one["name"], window, wake, node, saved)
            else:
                outbox = Outbox(broker, queue, one["name"], window, wake, node)
            self.classes.append(MessageClass(one, outbox))
        self.classes.sort(key=_by_priority)  # (stable: the config's order within a priority)
        self.outbox = self.classes[0].outbox  # (a bridge without classes: its one outbox)
        self.always_connected = any(one.always_connected for one in self.classes)
        self.seq = 0  # the last number given on this link (the upstream's confirms count them)
        self.floor = -1  # the lowest priority that may send, as sendable() last found (_outranking)
        self.rate = None
        self.flow_stopped = False  # upstream sent channel.flow active=false
        self.progress_at = 0  # when the watchdog last saw progress
        self.progress_mark = 0  # what had been forwarded then
        self.wake_ms = 0  # (a rate) ask sendable() again in this many ms
        self.saved_at = 0  # when offset_to_save last gave an offset
        self.refused = 0  # messages upstream refused (basic.nack) since sendable() last looked
        self.refusal = ""  # why, the last time
        self.refusal_delay = settings["reconnect_delay"]  # the next pause after a refusal (s)
        self.hold_until = -1  # (ms) no sending until then: the pause after a refusal
        self.unconfirmed_links = 0  # links the watchdog ended since upstream last confirmed
        self.unconfirmed_at = None  # (ms, the broker's clock) since when nothing was confirmed
        # After a link was lost, and while upstream refuses, one message at a time until upstream
        # confirms one: a quorum queue that is electing a leader refuses some publishes and takes
        # those sent after them, so a whole window sent meanwhile would come upstream out of
        # order (and be sent again, to come twice)
        self.slow = False
        # Refusals on this link since upstream last took one: at the second the link ends. A
        # quorum queue's leader killed, a RabbitMQ 3.10 channel that published to it during the
        # election went on refusing everything it was sent, while a new connection's was taken
        self.link_refusals = 0
        self.end_link = None  # why the link must end (stalled() says so), or None
        self.refusing_since = None  # (ms, the broker's clock) since when upstream refuses all (_pause)
        self.refusals = 0  # messages it refused since then
        self.said_refusals = 0  # (ms, the driver's clock) when that was last said
        self.budget_held = None  # why a budget holds the link back for long (said once), or None

    # ------------------------------------------------------------ a link's start

    def set_up_steps(self):
        if not self.settings["set_up"]:
            return []  # (the 1.0 client attaches its link, MQTT's connects: each says what it took)
        steps = self._declarations()
        if self.settings["ack_mode"] == "on-confirm":
            steps.append(("confirm",))
        return steps

    def _declarations(self):
        """`declare`: the destination upstream, declared durable at each connect (the exchange
        of that type, a queue bound to it), so forwarding never waits for someone to set it
        up there."""
        declare = self.settings["declare"]
        if declare is None:
            return []
        exchange = self.settings["exchange"] or ""
        steps = []
        if declare["exchange_type"]:
            steps.append(("exchange", exchange, declare["exchange_type"]))
        if declare["queue"]:
            steps.append(("queue", declare["queue"], declare.get("arguments")))  # (a quorum queue: x-queue-type)
            if exchange:
                steps.append(("bind", declare["queue"], exchange, declare["binding_key"]))
        return steps

    def link_opened(self, now):
        for one in self.classes:
            one.outbox.stuck = None  # found again if upstream still returns the head of the queue
        self.flow_stopped = False
        self.link_refusals = 0
        self.end_link = None
        self.progress_at = now
        self.progress_mark = self.forwarded()
        settings = self.settings
        if self.rate is None and (settings["max_rate"] or settings["max_byte_rate"]):
            from .rate import Rate  # (loaded only by a bridge with a rate)

            # made once, kept from link to link: what a large message overdrew is paid on the next
            self.rate = Rate(settings["max_rate"], settings["max_byte_rate"], now)

    def running(self):
        self.seq = 0
        for one in self.classes:
            one.outbox.link_up()

    # ------------------------------------------------------------ what upstream says

    def accepted(self, seq, multiple):
        """Upstream took the message numbered seq (and with multiple, every one before it)."""
        for one in self.classes:
            one.outbox.confirmed(seq, multiple)
        self.slow = False
        self.link_refusals = 0
        if self.unconfirmed_links:  # a confirm at last: some node answers
            self.unconfirmed_links = 0
            self.unconfirmed_at = None
        if self.refusing_since is not None:  # upstream accepts again: said, with what it cost
            self.log(
                "info",
                "bridge %s: upstream accepts again, after refusing %d messages for %d s"
                % (self.name, self.refusals, (self.broker.now - self.refusing_since) // 1000),
            )
            self.refusing_since = None
            self.refusals = 0
        if self.hold_until < 0 and not self.refused:  # accepted since the last pause: no backoff
            self.refusal_delay = self.settings["reconnect_delay"]

    def rejected(self, seq, multiple, why):
        """Upstream refused it (0-9-1's basic.nack; 1.0's rejected): it goes again, after a
        pause that grows while upstream keeps refusing."""
        for one in self.classes:
            one.outbox.nacked(seq, multiple)
        self.refused += 1
        self.refusal = why

    released = rejected  # (1.0's released and modified: not taken now, so sent again alike)

    def flow(self, active):
        """Upstream stops (or lets go on) what this link sends (0-9-1's channel.flow)."""
        self.flow_stopped = not active
        if self.flow_stopped:
            self.set_state(BLOCKED, " by upstream: channel.flow")
        else:
            self.set_state(RUNNING, " (upstream %s)" % self.upstream)

    def returned(self, headers, code, text):
        """basic.return (the bridge publishes mandatory) of a message with these headers: its
        confirm, which follows, puts it back rather than settling it."""
        origin = headers.get("x-hutch-origin")
        if isinstance(origin, str):
            origin = origin.encode()
        for one in self.classes:
            if one.outbox.returned_by(origin, headers.get("x-hutch-seq"), "%d %s" % (code, text)):
                return
        self.log("warning", "bridge %s: upstream returned a message it was not sent" % self.name)

    # ------------------------------------------------------------ what goes upstream

    def sendable(self, now):
        """How many messages may go at now, from the classes in their order (forward takes them
        so): none until the link runs, nor while upstream blocks it; with a rate, what its
        buckets allow (their tokens are spent), and wake_ms is then when to ask again if some
        must wait (0: none must)."""
        self.wake_ms = 0
        if self.refused:
            self._pause(now)
        if self.hold_until >= 0:
            if now < self.hold_until:
                self.wake_ms = self.hold_until - now
                return 0
            self.hold_until = -1
        if not self.outbox.up or self.upstream_blocked or self.flow_stopped or self.draining:
            return 0
        uplink = self.broker.uplink
        shared = uplink.rate if uplink is not None else None  # the gateway's budget
        floor = self.floor = uplink.outranking(self, now) if shared is not None else -1
        order = sending_order(self.classes, self.may_send, floor)
        if not order:
            if floor >= 0:
                self.wake_ms = OUTRANK_POLL_MS
            return 0
        if len(order) == 1:
            waiting = order[0].outbox.waiting
        else:
            waiting = []
            for one in order:
                waiting = waiting + one.outbox.waiting
        n = len(waiting)
        if self.slow:  # one at a time until upstream confirms one (slow, below)
            n = min(n, 0 if self.unsettled() else 1)
        wanted = n
        for rate in (shared, self.rate):  # (each holds to what the ones before allowed)
            if rate is not None:
                n = rate.allowed(waiting, now, n)
        for rate in (shared, self.rate):
            if rate is not None:
                rate.spend(waiting, n)
        if n < wanted:  # a rate holds some back
            self.wake_ms = (self.rate or shared).wait_ms()
            if n == 0:
                held_by = (
                    shared if self.rate is None or (shared and shared.wait_s() > self.rate.wait_s()) else self.rate
                )
                held_by.say_held(self, held_by is shared)
        elif n and self.budget_held is not None:
            self.log("info", "bridge %s: the budget lets it send again" % self.name)
            self.budget_held = None
        return n

    def may_send(self, one):
        """Whether a class may send on this link now: inside the [uplink]'s window, or always."""
        return self.in_window or one.always_connected

    def _pause(self, now):
        """Upstream refused messages (they are back at the head of the queue): sending pauses,
        longer each time while it accepts nothing in between. Refusals of messages sent before
        the pause began only count. Said once when upstream begins to refuse, then summed up
        every OUTAGE_SUMMARY_MS while it accepts nothing (a quorum queue without a majority
        refuses everything it is sent, until it has one again)."""
        refused = self.refused
        self.refused = 0
        self.refusals += refused
        self.slow = True
        if now < self.hold_until:
            return  # (what was in flight when the pause began: refused with it)
        self.link_refusals += 1
        if self.link_refusals >= 2:  # refused again, one message at a time: a new link (stalled)
            self.end_link = "upstream refused what it was sent again, one message at a time: a new link"
        if self.refusing_since is None:
            self.refusing_since = self.broker.now
            self.said_refusals = now
            self.log(
                "warning",
                "bridge %s: upstream refused %d messages (%s): sending again after a pause, longer each time "
                "while it accepts nothing" % (self.name, refused, self.refusal),
            )
        elif now - self.said_refusals >= OUTAGE_SUMMARY_MS:
            self.said_refusals = now
            self.log(
                "warning",
                "bridge %s: upstream still refuses what it is sent: %d messages refused in %d min (%s)"
                % (self.name, self.refusals, (self.broker.now - self.refusing_since) // 60000, self.refusal),
            )
        delay = self.refusal_delay
        self.hold_until = now + int(delay * 1000)
        self.refusal_delay = min(delay * 2, self.settings["max_reconnect_delay"])

    def forward(self, publish, count):
        """Forward the next count messages sendable() allowed, in its order (classes.py), through
        publish(exchange, routing_key, header_tail, body_tail, mandatory) (the driver's
        protocol.forward): to `exchange` and with `routing_key` if set, else the message's own;
        persistent, with the bridge's headers; mandatory, so what upstream cannot route comes
        back. Each is numbered as upstream will confirm it (one count for every class). How
        many went."""
        settings = self.settings
        exchange = settings["exchange"]
        routing_key = settings["routing_key"]
        sent = 0
        for one in sending_order(self.classes, self.may_send, self.floor):
            if sent >= count:
                break
            outbox = one.outbox
            entries = outbox.take(count - sent, self.seq)
            self.seq = outbox.seq
            header_for = outbox.header_for
            for entry in entries:
                message = entry[MESSAGE]
                publish(
                    exchange if exchange is not None else message.exchange,
                    routing_key if routing_key is not None else message.routing_key,
                    header_for(message),
                    message.body_tail,
                    True,
                )
            sent += len(entries)
        if sent and settings["ack_mode"] != "on-confirm":
            self.accepted(self.seq, True)  # on-publish / no-ack: settled once written (the socket has it)
        return sent

    def forwarded(self):
        """Messages upstream confirmed, since start, of every class."""
        total = 0
        for one in self.classes:
            total += one.outbox.forwarded
        return total

    # ------------------------------------------------------------ a link's end

    def stalled(self, now):
        """The watchdog: a link that is up but confirms nothing for `watchdog` seconds while
        messages wait is torn down (heartbeats alone miss an upstream that answers them but
        is stuck)."""
        forwarded = self.forwarded()
        in_flight = self.unsettled()
        if forwarded != self.progress_mark or not in_flight:
            self.progress_mark = forwarded
            self.progress_at = now
        why = self.end_link
        watchdog_ms = self.settings["watchdog"] * 1000
        if why is None and watchdog_ms and now - self.progress_at > watchdog_ms:
            why = "watchdog: no confirm for %.1f s while %d messages wait" % (
                (now - self.progress_at) / 1000,
                in_flight,
            )
        if why is not None:
            # no confirm on one link after another: once every URI has had its turn, the bridge
            # is "unconfirmed" (a cluster without a majority takes publishes and confirms none)
            self.unconfirmed_links += 1
            if self.unconfirmed_at is None:
                self.unconfirmed_at = self.broker.now - (now - self.progress_at)
            self.end_link = None
        return why

    def unconfirmed(self):
        """Whether no node confirms anything: each of the URIs, in turn, ended by the watchdog, or
        upstream refusing everything it is sent for a watchdog's time (at least a second)."""
        if self.unconfirmed_links >= len(self.settings["uris"]):
            return True
        since = self.refusing_since
        return since is not None and self.broker.now - since >= max(1000, self.settings["watchdog"] * 1000)

    def unconfirmed_since(self):
        """(ms, the broker's clock) since when nothing was confirmed, as unconfirmed() saw it."""
        found = [at for at in (self.unconfirmed_at, self.refusing_since) if at is not None]
        return min(found) if found else self.broker.now

    def check(self):
        for one in self.classes:
            if one.outbox.stuck:
                return one.outbox.stuck
        return None

    def link_down(self):
        self.slow = True  # (the next link starts one at a time: see slow)
        for one in self.classes:
            one.outbox.down()  # what was in flight goes back, in order

    def unsettled(self):
        total = 0
        for one in self.classes:
            total += len(one.outbox.in_flight)
        return total

    def close(self):
        for one in self.classes:
            one.outbox.close()

    # ------------------------------------------------------------ a stream source's offset

    def offset_to_save(self, now, force=False):
        """(A stream source) What to write to the bridge's offset file now, (offset, lane,
        stream name): the offset is where a restart must read from, the oldest record upstream
        has not confirmed. None if it has not moved since it was last given, or was given less
        than SAVE_EVERY_MS ago (unless force: at a link's end and at stop), or the source is a
        queue. Lagging is safe: a restart then sends some records again (an upstream hutch
        drops them), never skips one."""
        stream = self.stream
        if stream is None or (not force and now - self.saved_at < SAVE_EVERY_MS):
            return None
        offset = stream.next_offset()
        if offset == stream.saved:
            return None
        stream.saved = offset
        self.saved_at = now
        return (offset, stream.lane, stream.queue.name)


def source_queues(broker, settings):
    """The local queue (or stream) of each class of an up bridge (classes.py classes_of), in
    that order: `queue`, declared durable if it does not exist; or, for `source_exchange`, its
    own durable queue (hutch.bridge.NAME, a class's hutch.bridge.NAME.CLASS) bound there with
    its binding key, a class's with its policy. BridgeError if one cannot be."""
    exchange = settings["source_exchange"]
    check_source(broker, settings)
    queues = []
    for one in classes_of(settings):
        name = one["queue"]
        queue = broker.queues.get(name.encode())
        try:
            if queue is None:
                queue = declare_queue(broker, None, name.encode(), durable=True)
            if exchange is not None:
                add_binding(broker, broker.exchange(exchange.encode()), queue, one["binding_key"].encode(), {}, 0)
        except Refused as e:
            raise BridgeError("bridge %s: cannot set up its queue '%s': %s" % (settings["name"], name, e.text))
        if settings.get("classes"):
            set_policy(broker, queue, one)
        queues.append(queue)
    return queues


def _by_priority(one):
    return -one.priority


def check_source(broker, settings):
    """BridgeError if an up bridge's source exchange is missing (source_queues; a reload asks
    before it stops the bridge it replaces)."""
    exchange = settings["source_exchange"]
    if exchange is not None and broker.exchange(exchange.encode()) is None:
        raise BridgeError(
            "bridge %s: no exchange '%s' to forward from (declare it durable first)" % (settings["name"], exchange)
        )
