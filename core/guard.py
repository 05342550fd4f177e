"""Nothing a client does before it has logged in may tie the broker up: budgets per source.

A source is a peer's address. Before its login a connection costs the broker a socket and its
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

GUARD_WINDOW_MS = 10000
MAX_SOURCES = 256


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
            oldest.dropped_quietly()

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
