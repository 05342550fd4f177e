"""Duplicates from bridges dropped on arrival: what makes hutch -> hutch forwarding exactly once.

A bridge (core/bridge/outbox.py) gives every message it forwards x-hutch-origin (the node and the
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

This broker's own crash: a taken number is journalled (a DEDUP_TAKEN record, after the
message's own record, in the same group commit the message's confirm waits for), and every
segment's snapshot holds the whole state (a DEDUP record per origin), so older segments are
never needed for it: a restart replays the state (core/replay.py) and goes on dropping what a
bridge sends again. Only a number taken into a queue that does not survive a restart can be
lost with it, and so can the message: taken again, it is not a duplicate.
"""

import struct

WINDOW = 16384  # bits (2 KiB per origin)
MAX_ORIGINS = 256
MAX_GAPS = 64  # a DEDUP record lists the numbers not taken in the window, up to this many; else the bitmap

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
        if isinstance(origin, str):
            origin = origin.encode()  # one key whichever way the header was typed (and as replayed)
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

    # ------------------------------------------------------------ the journal's records

    def state_records(self):
        """Payloads of DEDUP records, one per origin: all a restart needs (core/store/journal.py
        puts them in every snapshot)."""
        return [_state_payload(origin, self.origins[origin]) for origin in self.order]

    def restore(self, p):
        """A DEDUP record replayed: that origin's state as the record has it."""
        origin, pos = _origin(p)
        high, form = struct.unpack_from(">QB", p, pos)
        pos += 9
        if form == 1:
            bitmap = bytearray(p[pos : pos + WINDOW // 8])
        else:
            bitmap = bytearray(b"\xff" * (WINDOW // 8))
            for at in range(pos, len(p), 8):
                n = struct.unpack_from(">Q", p, at)[0]
                bitmap[(n % WINDOW) >> 3] &= ~(1 << (n & 7)) & 0xFF
        if origin not in self.origins:
            if len(self.order) >= MAX_ORIGINS:
                del self.origins[self.order.pop(0)]
            self.order.append(origin)
        self.origins[origin] = [high, bitmap]

    def replay_taken(self, p):
        """A DEDUP_TAKEN record replayed."""
        origin, pos = _origin(p)
        self.take(origin, struct.unpack_from(">Q", p, pos)[0])


def taken_payload(origin, seq):
    """A DEDUP_TAKEN record's payload: origin (length, 2 bytes, then its bytes) and number."""
    return _origin_bytes(origin) + struct.pack(">Q", seq)


def _state_payload(origin, state):
    # origin, highest number taken, then either 0 and the numbers of the window not taken
    # (a bridge's numbers follow one another: there are few), or 1 and the whole bitmap
    high, bitmap = state
    lowest = max(1, high - WINDOW + 1)
    gaps = []
    for i in range(WINDOW // 8):
        byte = bitmap[i]
        if byte == 255:
            continue
        for bit in range(8):
            if not byte & (1 << bit):
                n = high - ((high - (i * 8 + bit)) % WINDOW)  # the number up to high with this bit
                if n >= lowest:
                    gaps.append(n)
        if len(gaps) > MAX_GAPS:
            return _origin_bytes(origin) + struct.pack(">QB", high, 1) + bytes(bitmap)
    return _origin_bytes(origin) + struct.pack(">QB", high, 0) + b"".join(struct.pack(">Q", n) for n in gaps)


def _origin_bytes(origin):
    if isinstance(origin, str):
        origin = origin.encode()
    return struct.pack(">H", len(origin)) + origin


def _origin(p):
    n = struct.unpack_from(">H", p, 0)[0]
    return bytes(p[2 : 2 + n]), 2 + n
