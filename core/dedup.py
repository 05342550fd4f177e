"""Repeats dropped on arrival: a bridge's messages sent again, and a sensor's readings sent
again. What makes hutch -> hutch forwarding, and a sensor's reading, exactly once.

Two kinds of identity, one mechanism:

- A bridge (core/bridge/outbox.py) gives every message it forwards x-hutch-origin (the node
  and the bridge) and x-hutch-seq (a number that grows along its queue and is the same when
  the message is sent again). After a lost link or a crash at the edge, it sends again what
  was in flight; what of that this broker already took is a repeat.
- A sensor names itself and numbers its readings: x-sensor-id (a string) and x-sensor-seq (an
  integer that only grows for that sensor; from MQTT, a user property or a JSON field in
  digits). A sensor that lost its link before the confirm (or PUBACK) sends the reading again,
  often under a new packet id: the same (sensor, sequence) is a repeat.

Per origin (bridge or sensor) a Dedup keeps the highest number taken and a window of bits
below it: a message is new if its number is higher, or inside the window and not taken yet
(one that upstream returned, unroutable, and the bridge sends again later). Only a message
some queue took is marked taken. Memory is bounded: at most `most` origins, the one first
heard from longest ago forgotten first (counted). A number further behind than the window:
from a bridge, taken long ago (a bridge numbers along its queue, never backwards); from a
sensor, its count started over (a reflash, a lost boot counter), so it is new and the sensor's
window starts again there (counted, said once per sensor): a sensor is never silenced.

Broker.publish asks, for messages that carry the headers (a sensor's only from a client, not
from a bridge: the edge that took the reading first deduplicated it); a repeat is confirmed
(once the journal holds what was taken before it) and goes nowhere. Sans-IO,
MicroPython-clean; a broker loads it with the first message that carries an identity.

This broker's own crash: a taken number is journalled (a DEDUP_TAKEN or SENSOR_TAKEN record,
after the message's own record, in the same group commit the message's confirm waits for), and
every segment's snapshot holds the whole state (a DEDUP or SENSOR record per origin), so older
segments are never needed for it: a restart replays the state (core/replay.py) and goes on
dropping what is sent again. Only a number taken into a queue that does not survive a restart
can be lost with it, and so can the message: taken again, it is not a repeat.
"""

import struct

WINDOW = 16384  # a bridge's window, in bits (2 KiB per origin)
MAX_ORIGINS = 256
MAX_GAPS = 64  # a state record lists the numbers not taken in the window, up to this many; else the bitmap

ORIGIN = "x-hutch-origin"
SEQ = "x-hutch-seq"
SENSOR_ID = "x-sensor-id"
SENSOR_SEQ = "x-sensor-seq"
MAX_SEQ = (1 << 64) - 1  # (journalled as 8 octets)
MAX_ID = 255  # octets of a sensor id


class Dedup:
    def __init__(self, window=WINDOW, most=MAX_ORIGINS):
        self.window = max(8, (window + 7) & ~7)  # bits, whole octets
        self.most = most
        self.origins = {}  # origin -> [highest number taken, bitmap of the window's numbers up to it]
        self.order = []  # origins, first heard from first (what goes when there are too many)
        self.dropped = 0  # repeats dropped since the start
        self.forgotten = 0  # origins forgotten to make room for another
        self.restarted = 0  # (sensors) counts that started over
        self.said = None  # (sensors) a set of those whose start over was said (once each)

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

    def sensor_key(self, message):
        """(sensor id, number) of a sensor's reading, or None (no identity, or one that is not
        a string and a whole number >= 0: such a reading is routed as it is)."""
        headers = message.properties().get("headers")
        if not headers:
            return None
        sensor = headers.get(SENSOR_ID)
        seq = sequence(headers.get(SENSOR_SEQ))
        if seq is None or not isinstance(sensor, (bytes, bytearray, str)):
            return None
        if isinstance(sensor, str):
            sensor = sensor.encode()
        if not 0 < len(sensor) <= MAX_ID:
            return None
        return bytes(sensor), seq

    def seen(self, origin, seq):
        """True if the message numbered seq from origin was taken before."""
        state = self.origins.get(origin)
        if state is None:
            return False
        high = state[0]
        if seq > high:
            return False
        window = self.window
        if seq <= high - window:
            return True  # too far behind to tell: taken, as everything before the window was
        return bool(state[1][(seq % window) >> 3] & (1 << (seq & 7)))

    def behind(self, origin, seq):
        """True if seq is further behind origin's highest number than the window reaches."""
        state = self.origins.get(origin)
        return state is not None and seq <= state[0] - self.window

    def forget(self, origin):
        """Origin's state gone (a sensor that started its count over)."""
        if self.origins.pop(origin, None) is not None:
            self.order.remove(origin)

    def started_over(self, origin):
        """A sensor's count started over: its state forgotten (its window starts again with the
        reading taken), counted. True the first time for that sensor: to be said once."""
        self.forget(origin)
        self.restarted += 1
        said = self.said
        if said is None:
            said = self.said = set()
        if origin in said or len(said) >= self.most:
            return False
        said.add(origin)
        return True

    def take(self, origin, seq):
        """Mark the message numbered seq from origin as taken."""
        window = self.window
        state = self.origins.get(origin)
        if state is None:
            if len(self.order) >= self.most:
                del self.origins[self.order.pop(0)]
                self.forgotten += 1
            state = self.origins[origin] = [seq, bytearray(window // 8)]
            self.order.append(origin)
        bitmap = state[1]
        high = state[0]
        if seq > high:
            if seq - high >= window:
                bitmap[:] = bytes(window // 8)
            else:
                for n in range(high + 1, seq):  # numbers skipped: not taken (yet)
                    bitmap[(n % window) >> 3] &= ~(1 << (n & 7)) & 0xFF
            state[0] = seq
        bitmap[(seq % window) >> 3] |= 1 << (seq & 7)

    # ------------------------------------------------------------ the journal's records

    def state_records(self):
        """Payloads of state records, one per origin: all a restart needs (core/store/journal.py
        puts them in every snapshot)."""
        return [_state_payload(origin, self.origins[origin], self.window) for origin in self.order]

    def restore(self, p):
        """A state record replayed: that origin's state as the record has it (its window resized
        to this one's if the limits changed: what it cannot tell is taken)."""
        origin, pos = _origin(p)
        high, form = struct.unpack_from(">QB", p, pos)
        pos += 9
        window = self.window
        lowest = max(0, high - window + 1)
        if form == 1 and len(p) - pos == window // 8:
            bitmap = bytearray(p[pos:])
        else:
            bitmap = bytearray(b"\xff" * (window // 8))
            if form == 1:  # written with another window
                old = (len(p) - pos) * 8
                for n in range(max(lowest, high - old + 1), high + 1):
                    if not p[pos + ((n % old) >> 3)] & (1 << (n & 7)):
                        bitmap[(n % window) >> 3] &= ~(1 << (n & 7)) & 0xFF
            else:
                for at in range(pos, len(p), 8):
                    n = struct.unpack_from(">Q", p, at)[0]
                    if n >= lowest:
                        bitmap[(n % window) >> 3] &= ~(1 << (n & 7)) & 0xFF
        if origin not in self.origins:
            if len(self.order) >= self.most:
                del self.origins[self.order.pop(0)]
            self.order.append(origin)
        self.origins[origin] = [high, bitmap]

    def replay_taken(self, p):
        """A taken record replayed."""
        origin, pos = _origin(p)
        seq = struct.unpack_from(">Q", p, pos)[0]
        if self.behind(origin, seq):  # (a sensor's count that started over, as it was taken)
            self.forget(origin)
        self.take(origin, seq)


def sequence(value):
    """A sensor's x-sensor-seq as a whole number >= 0, or None: an integer header, or its
    digits (an MQTT user property, a JSON field written as a string)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value <= MAX_SEQ else None
    if isinstance(value, (bytes, bytearray, str)) and 0 < len(value) <= 20:
        if isinstance(value, str):
            value = value.encode()
        for octet in value:
            if not 48 <= octet <= 57:
                return None
        n = int(value)
        return n if n <= MAX_SEQ else None
    return None


def taken_payload(origin, seq):
    """A taken record's payload: origin (length, 2 bytes, then its bytes) and number."""
    return _origin_bytes(origin) + struct.pack(">Q", seq)


def _state_payload(origin, state, window):
    # origin, highest number taken, then either 0 and the numbers of the window not taken
    # (a bridge's numbers follow one another: there are few), or 1 and the whole bitmap
    high, bitmap = state
    lowest = max(0, high - window + 1)
    gaps = []
    for i in range(window // 8):
        byte = bitmap[i]
        if byte == 255:
            continue
        for bit in range(8):
            if not byte & (1 << bit):
                n = high - ((high - (i * 8 + bit)) % window)  # the number up to high with this bit
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
