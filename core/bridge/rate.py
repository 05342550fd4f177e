"""An up bridge's max_rate (messages/s) and max_byte_rate (body bytes/s), and the gateway's
[uplink] max_byte_rate all its up bridges share (uplink.py), as token buckets that hold a tenth
of a second's worth: over any second a metered link gets at most 1.1 times its
limits. A message larger than that tenth still goes, once the bucket is full, and its bytes
are owed: nothing more goes until they are paid, so the average holds (`over` and `wait_s` say
so to the bridge, which shows it).

Sans-IO (the time is given) and MicroPython-clean; loaded only by a bridge that sets a rate, or an [uplink] budget.
"""

from ..session import MESSAGE

SAY_S = 60  # a bucket that holds a bridge back longer than this (or than its window) is said


class Rate:
    over = 0  # the size of the last message larger than the bucket (what it overdrew is paid after)

    def __init__(self, messages, byte_count, now):
        self.limits = (messages, byte_count)
        self.caps = (max(1.0, messages / 10), max(1.0, byte_count / 10))
        self.tokens = list(self.caps)  # full at the start of each link
        self.at = now

    def _refill(self, now):
        elapsed = now - self.at
        self.at = now
        for i in (0, 1):
            limit = self.limits[i]
            if limit:
                self.tokens[i] = min(self.caps[i], self.tokens[i] + limit * elapsed / 1000)

    def allowed(self, waiting, now, most):
        """How many of the first `most` waiting entries may go at now (ms). Nothing is spent: the
        caller spends what goes (spend), which another Rate may hold to fewer."""
        self._refill(now)
        messages, byte_count = self.limits
        tokens, byte_tokens = self.tokens
        n = 0
        while n < most:
            size = waiting[n][MESSAGE].body_size
            if (messages and tokens < 1) or (byte_count and byte_tokens < min(size, self.caps[1])):
                break
            tokens -= 1
            byte_tokens -= size
            n += 1
        return n

    def spend(self, waiting, n):
        """The tokens of the first n waiting entries, spent."""
        for i in range(n):
            size = waiting[i][MESSAGE].body_size
            self.tokens[0] -= 1
            self.tokens[1] -= size
            if self.limits[1] and size > self.caps[1]:
                self.over = size

    def wait_s(self):
        """Seconds until the bucket is full again, when any message may go (0: it is)."""
        wait = 0
        for i in (0, 1):
            limit = self.limits[i]
            if limit:
                wait = max(wait, (self.caps[i] - self.tokens[i]) / limit)
        return wait

    def wait_ms(self):
        """How long until the next message may go."""
        return max(10, int(1000 / self.limits[0])) if self.limits[0] else 100

    def say_held(self, machine, shared):
        """This bucket holds machine's link back (shared: it is the [uplink]'s): for longer than
        SAY_S, or than what is left of its window, it is said once and shown (machine's
        budget_held: `hutch ctl bridges`, the alarm) with the message that overdrew it, until it
        lets go (up.py sendable)."""
        wait = self.wait_s()
        long = wait > SAY_S or (machine.window_left is not None and wait > machine.window_left)
        if machine.budget_held is None and not long:
            return
        why = self._holding(wait, shared)
        if machine.budget_held is None:
            machine.log("warning", "bridge %s: %s" % (machine.name, why))
        machine.budget_held = why

    def _holding(self, wait, shared):
        """This bucket holding the link back for wait seconds, in a line."""
        budget = "the [uplink]'s %s bytes/s" if shared else "its max_byte_rate of %s bytes/s"
        budget = budget % _whole(self.limits[1]) if self.limits[1] else "its max_rate"
        if self.over:
            return "waiting %s s for budget: a %s-byte message went over %s" % (_whole(wait), _whole(self.over), budget)
        return "waiting %s s for budget: %s is spent" % (_whole(wait), budget)


def _whole(number):
    return "{:,}".format(int(number))
