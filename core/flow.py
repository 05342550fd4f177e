"""Flow control: whether publishers may go on, and who is held back meanwhile.

Publishers are blocked while an alarm is raised (the broker's budgets and the ports'
watches each raise one):

- "budget": queued messages passed total_max_messages or total_max_bytes (hold() and
  release() count them); cleared once both are under low_water_percent of their limit;
- "memory": the port sees the heap run short (ports/heap.py);
- "disk": the journal (with its streams) is near its disk budget: from 90% of it, cleared
  under 75% (check_disk);
- "disk failure": the journal cannot write (ports/storage.py);
- "disk reserve": the journal wrote its way out of a full disk into its reserve, which is
  not made again yet (ports/reserve.py).

Blocked publishers are told (connection.blocked, to clients that support it); a publisher
in confirm mode is answered basic.nack and still read, since its acks may be what frees
memory; the others are held back, not read (Connection.pause), until every alarm is
cleared. Consumers' acks always go through: they are what frees memory and disk.

The port may also refuse new connections (refuse_connections: a reason, or None) when not
even one more would fit.
"""


class Flow:
    def __init__(self, broker):
        self.broker = broker
        self.limits = broker.limits
        self.held_messages = 0  # messages queued or delivered and not yet settled, in all queues
        self.held_bytes = 0  # the heap they are estimated to take (Message.cost)
        self.over_budget = False  # the "budget" alarm is raised (kept as a flag: hold() asks per message)
        self.alarms = {}  # name -> the reason it was raised
        self.blocked = False  # publishers are blocked: some alarm is raised
        self.reason = ""  # the reason given when they were blocked (connection.blocked carries it)
        self.blocked_at = 0  # (ms, the broker's clock) since when they are
        self.held_back = []  # connections not read until publishers may go on (or a queue has room)
        self.refuse_connections = None  # a reason to refuse connection.open, set by the port

    # ------------------------------------------------------------ the budget of queued messages

    def hold(self, message, count=1):
        """A message is now held by a queue (until settle or drop: release); count: as many
        alike (a stream's run of deliveries, each released on its own)."""
        self.hold_many(count, message.cost * count)

    def hold_many(self, count, cost):
        """count messages, of that cost together, are now held (one publish, or a page-in's)."""
        self.held_messages += count
        self.held_bytes += cost
        if not self.over_budget:
            limits = self.limits
            if self.held_bytes > limits.total_max_bytes or self.held_messages > limits.total_max_messages:
                self.over_budget = True
                self.set_alarm(
                    "budget",
                    "low on memory: queued messages use %d of %d bytes (%d messages)"
                    % (self.held_bytes, limits.total_max_bytes, self.held_messages),
                )

    def release(self, message):
        self.release_many(1, message.cost)

    def release_many(self, count, cost):
        """count messages, of that cost together, are no longer held (settled, dropped)."""
        self.held_messages -= count
        self.held_bytes -= cost
        if self.over_budget:
            limits = self.limits
            percent = limits.low_water_percent
            if (
                self.held_bytes * 100 <= limits.total_max_bytes * percent
                and self.held_messages * 100 <= limits.total_max_messages * percent
            ):
                self.over_budget = False
                self.set_alarm("budget", None, "queued messages back under %d%% of the budget" % percent)

    # ------------------------------------------------------------ alarms

    def check_disk(self, journal):
        """The journal's size (and its streams': core/streams/stream.py) against its disk budget: the
        "disk" alarm from 90%, cleared under 75%."""
        budget = journal.max_bytes
        if budget <= 0:
            return
        total = journal.total + self.broker.stream_bytes
        if "disk" not in self.alarms:
            if total * 10 >= budget * 9:
                self.set_alarm("disk", "low on disk: journal uses %d of %d bytes" % (total, budget))
        elif total * 4 < budget * 3:
            self.set_alarm("disk", None, "journal back under 75%% of its %d bytes" % budget)
        else:  # (the reason says what the journal uses now: hutch ctl status, the status page)
            self.set_alarm("disk", "low on disk: journal uses %d of %d bytes" % (total, budget))

    def set_alarm(self, name, reason, cleared=""):
        """Raise alarm `name` with a reason (what clients and the log are told), or clear it
        (reason None; `cleared` says why, for the log)."""
        alarms = self.alarms
        if reason is None:
            if alarms.pop(name, None) is not None and not alarms and self.blocked:
                self._unblock(cleared)
        elif alarms.get(name) != reason:
            alarms[name] = reason
            if not self.blocked:
                self._block(reason)

    def reasons(self):
        """Why publishers are blocked now: each raised alarm's reason, as its watch last said it
        (the figures of this moment, where the reason given when they were blocked has those
        of then)."""
        return "; ".join(self.alarms.values())

    def _block(self, reason):
        broker = self.broker
        self.blocked = True
        self.reason = reason
        self.blocked_at = broker.now
        broker.log("warning", "publishers blocked: " + reason)
        for conn in broker.connections:
            conn.notify_blocked(reason)

    def _unblock(self, cleared):
        broker = self.broker
        self.blocked = False
        broker.log("info", "publishers unblocked: " + cleared)
        for conn in broker.connections:
            conn.notify_unblocked()
        held_back = self.held_back
        self.held_back = []
        for conn in held_back:
            conn.resume_reading()

    # ------------------------------------------------------------ connections held back

    def hold_back(self, conn):
        if conn not in self.held_back:
            self.held_back.append(conn)

    def let_go(self, conn):
        if conn in self.held_back:
            self.held_back.remove(conn)
