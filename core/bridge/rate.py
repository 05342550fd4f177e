"""An up bridge's max_rate (messages/s) and max_byte_rate (body bytes/s), and the gateway's
[uplink] max_byte_rate all its up bridges share (uplink.py), as token buckets that hold a tenth
of a second's worth: over any second a metered link gets at most 1.1 times its
limits (and a message larger than that tenth still goes, once the bucket is full).

Sans-IO (the time is given) and MicroPython-clean; loaded only by a bridge that sets a rate, or an [uplink] budget.
"""

from ..session import MESSAGE


class Rate:
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
            self.tokens[0] -= 1
            self.tokens[1] -= waiting[i][MESSAGE].body_size

    def wait_ms(self):
        """How long until the next message may go."""
        return max(10, int(1000 / self.limits[0])) if self.limits[0] else 100
