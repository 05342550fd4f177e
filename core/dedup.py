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

from ..codec.errors import DecodeError
from ..codec.wire import decode_value, text

WINDOW = 16384  # a bridge's window, in bits (2 KiB per origin)
MAX_ORIGINS = 256
MAX_GAPS = 64  # a state record lists the numbers not taken in the window, up to this many; else the bitmap

ORIGIN = "x-hutch-origin"
SEQ = "x-hutch-seq"
SENSOR_ID = "x-sensor-id"
SENSOR_SEQ = "x-sensor-seq"
# (as shortstrs: header_value and Message.has_header find them so; Broker.publish has the two
# numbers' too, as its own constant and literal: a board's idle broker does not load this module)
SENSOR_ID_KEY = b"\x0bx-sensor-id"
SENSOR_SEQ_KEY = b"\x0cx-sensor-seq"
BRIDGE_SEQ_KEY = b"\x0bx-hutch-seq"
MAX_SEQ = (1 << 64) - 1  # (journalled as 8 octets)
MAX_ID = 255  # octets of a sensor id


class Dedup:
    def __init__(self, window=WINDOW, most=MAX_ORIGINS, sensors=False):
        self.window = max(8, (window + 7) & ~7)  # bits, whole octets
        self.most = most
        self.sensors = sensors  # sensors' readings (x-sensor-id), else bridged messages (x-hutch-origin)
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
        """(sensor id, number) of a sensor's reading, from its headers (reading_key's), or None."""
        seq = sequence(header_value(message, SENSOR_SEQ, SENSOR_SEQ_KEY))
        if seq is None:
            return None
        return reading_key(header_value(message, SENSOR_ID, SENSOR_ID_KEY), seq)

    def numbered(self, message, identity=None):
        """Broker.publish's question for a message that carries a number: True if it is a repeat
        (counted), else its (origin, number) to mark once a queue took it (took()), or None (no
        usable identity). A sensor's number further behind than the window is new: its count
        started over. identity: a sensor reading's headers {x-sensor-id, x-sensor-seq} as its
        publisher read them (mqtt/identity.py from_json), instead of from the message's headers."""
        if identity is not None:
            key = reading_key(identity[SENSOR_ID], identity[SENSOR_SEQ])
        else:
            key = self.sensor_key(message) if self.sensors else self.key(message)
        if key is None:
            return None
        if self.seen(*key) and not (self.sensors and self.behind(*key)):
            self.dropped += 1
            return True
        message.paired |= 16  # (core/store/journal.py NUMBERED: its number's record follows its own)
        return key

    def took(self, broker, key, journalled):
        """A numbered message some queue took (key: numbered()'s): its number marked, and
        journalled with it (journalled: the message is in the journal). A sensor's number further
        behind than its window: its count started over (said once a sensor)."""
        origin, seq = key
        if self.sensors and self.behind(origin, seq):
            high = self.origins[origin][0]
            if self.started_over(origin):
                broker.log(
                    "warning",
                    "sensor '%s' numbered a reading %d after %d: taken as a count that started over "
                    "(its readings are deduplicated from there)" % (text(origin), seq, high),
                )
        self.take(origin, seq)
        if journalled and broker.journal is not None:  # kept through a restart: so is its number
            broker.journal.dedup_taken(taken_payload(origin, seq), self.sensors)

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
        """A taken record replayed: its numbers, one after another (taken_payload's)."""
        pos = 0
        while pos < len(p):
            n = struct.unpack_from(">H", p, pos)[0]
            origin = bytes(p[pos + 2 : pos + 2 + n])
            seq = struct.unpack_from(">Q", p, pos + 2 + n)[0]
            pos += 10 + n
            if self.behind(origin, seq):  # (a sensor's count that started over, as it was taken)
                self.forget(origin)
            self.take(origin, seq)


def dedup_of(holder, sensor):
    """holder's Dedup of sensors (sensor True) or of bridges, made here with the first: holder
    is the broker, or the replay of its journal (core/replay.py); each has dedup, sensors and
    limits."""
    dedup = holder.sensors if sensor else holder.dedup
    if dedup is None:
        if sensor:
            dedup = holder.sensors = for_sensors(holder.limits)
        else:
            dedup = holder.dedup = Dedup()
    return dedup


def retake(broker, messages):
    """At start after a crash, the messages of a stream's newest records (core/replay.py): each
    identity not yet taken is taken. A group commit writes a stream's records before the
    journal's record of their numbers (ports/storage.py): a crash between the two leaves records
    the journal does not know were taken, and the bridge or sensor, never confirmed, sends them
    again. Only what is not seen is taken: a sensor's reading from before its count started over
    lifts its window again (its next reading is taken as a new start: nothing is dropped)."""
    for message in messages:
        if message.has_header(BRIDGE_SEQ_KEY):
            sensor = False
        elif message.has_header(SENSOR_SEQ_KEY) and broker.limits.max_sensors:
            sensor = True
        else:
            continue
        dedup = dedup_of(broker, sensor)
        key = dedup.sensor_key(message) if sensor else dedup.key(message)
        if key is not None and not dedup.seen(*key):
            dedup.take(*key)


def for_sensors(limits):
    """A Dedup of sensors within the limits' bounds (None: the defaults')."""
    if limits is None:
        from .limits import Limits

        limits = Limits()
    return Dedup(limits.sensor_window, limits.max_sensors, True)


def header_value(message, key, key_shortstr):
    """The value of message's header key (key_shortstr: its shortstr encoding), or None, read
    from the bytes where its key is (the rest of the properties left undecoded: asked of every
    numbered reading); decoded whole when the key's bytes appear twice (a value may hold them)."""
    tail = message.header_tail
    if not tail[16] & 0x20:
        return None
    at = tail.find(key_shortstr)
    if at < 0:
        return None
    if message._properties is None and tail.find(key_shortstr, at + 1) < 0:
        try:
            return decode_value(tail, at + len(key_shortstr), len(tail) - 1)[0]
        except DecodeError:
            pass
    return (message.properties().get("headers") or {}).get(key)


def reading_key(sensor, seq):
    """(sensor id, number) of a sensor's reading whose id is sensor and whose number is seq
    (sequence()'s), or None: no number, or an id that is not a string of 1 to MAX_ID octets
    (such a reading is routed as it is)."""
    if seq is None or not isinstance(sensor, (bytes, bytearray, str)):
        return None
    if isinstance(sensor, str):
        sensor = sensor.encode()
    if not 0 < len(sensor) <= MAX_ID:
        return None
    return bytes(sensor), seq


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
    # (a bridge's and a sensor's numbers follow one another: there are few), or 1 and the
    # whole bitmap
    high, bitmap = state
    gaps = _gaps(high, bitmap, window)
    if gaps is None:
        return _origin_bytes(origin) + struct.pack(">QB", high, 1) + bytes(bitmap)
    return _origin_bytes(origin) + struct.pack(">QB", high, 0) + b"".join(struct.pack(">Q", n) for n in gaps)


def _gaps(high, bitmap, window):
    """The numbers of the window up to high not taken, in order; None past MAX_GAPS. A whole
    octet taken is stepped over at once: every snapshot asks this of every origin."""
    gaps = []
    n = max(0, high - window + 1)
    while n <= high:
        byte = bitmap[(n % window) >> 3]
        if byte == 255 and not n & 7 and n + 7 <= high:
            n += 8
            continue
        if not byte & (1 << (n & 7)):
            gaps.append(n)
            if len(gaps) > MAX_GAPS:
                return None
        n += 1
    return gaps


def _origin_bytes(origin):
    if isinstance(origin, str):
        origin = origin.encode()
    return struct.pack(">H", len(origin)) + origin


def _origin(p):
    n = struct.unpack_from(">H", p, 0)[0]
    return bytes(p[2 : 2 + n]), 2 + n
