"""Duplicates from bridges dropped on arrival: what makes hutch -> hutch forwarding exactly once.

A bridge (core/outbox.py) gives every message it forwards x-hutch-origin (the node and the
bridge) and x-hutch-seq (a number that grows along its queue and is the same when the
message is sent again). After a lost link or a crash at the edge, it sends again what was
in flight; what of that this broker already took is a duplicate.

Per origin this keeps the highest number taken and a window of WINDOW bits below it: a
message is new if its number is higher, or inside the window and not taken yet (one that
upstream returned, unroutable, and the bridge sends again later); anything further behind
counts as taken. Only a message some queue took is marked taken. Memory is bounded: at
most MAX_ORIGINS origins, the oldest forgotten first.

Broker.publish asks, for messages that carry the headers; a duplicate is confirmed (once
the journal holds what was taken before it) and goes nowhere. Sans-IO, MicroPython-clean;
a broker loads it with the first bridged message.

What this does not cover yet: this broker's own crash. The numbers taken live in memory,
so messages a bridge sends again after this broker restarts are taken again.
"""

WINDOW = 16384  # bits (2 KiB per origin)
MAX_ORIGINS = 256

ORIGIN = "x-hutch-origin"
SEQ = "x-hutch-seq"


class Dedup:
    def __init__(self):
        self.origins = {}  # origin -> [highest number taken, bitmap of the WINDOW numbers up to it]
        self.order = []  # origins, oldest first (what goes when there are too many)
        self.dropped = 0  # duplicates dropped since the start

    def key(self, message):
        """(origin, number) of a bridged message, or None."""
        headers = message.properties().get("headers")
        if not headers:
            return None
        origin = headers.get(ORIGIN)
        seq = headers.get(SEQ)
        if not isinstance(origin, (bytes, str)) or not isinstance(seq, int) or seq <= 0:
            return None
        return origin, seq

    def seen(self, origin, seq):
        """True if the message numbered seq from origin was taken before."""
        state = self.origins.get(origin)
        if state is None:
            return False
        high = state[0]
        if seq > high:
            return False
        if seq <= high - WINDOW:
            return True  # too far behind to tell: taken, as everything before the window was
        return bool(state[1][(seq % WINDOW) >> 3] & (1 << (seq & 7)))

    def take(self, origin, seq):
        """Mark the message numbered seq from origin as taken."""
        state = self.origins.get(origin)
        if state is None:
            if len(self.order) >= MAX_ORIGINS:
                del self.origins[self.order.pop(0)]
            state = self.origins[origin] = [seq, bytearray(WINDOW // 8)]
            self.order.append(origin)
        bitmap = state[1]
        high = state[0]
        if seq > high:
            if seq - high >= WINDOW:
                bitmap[:] = bytes(WINDOW // 8)
            else:
                for n in range(high + 1, seq):  # numbers skipped: not taken (yet)
                    bitmap[(n % WINDOW) >> 3] &= ~(1 << (n & 7)) & 0xFF
            state[0] = seq
        bitmap[(seq % WINDOW) >> 3] |= 1 << (seq & 7)
