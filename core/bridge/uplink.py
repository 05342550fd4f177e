"""The gateway's one link upstream, shared by all of its bridges (the config's [uplink]): a byte
budget that every up bridge and class draws from by priority, and the windows in which bridges
connect at all (a cellular gateway on a metered plan, or one that must keep its radio quiet).

    uplink = Uplink(settings, now)   # server/options.py's checked [uplink]; now: ms
    uplink.rate                      # the shared budget, a Rate (rate.py), or None
    uplink.scheduled                 # whether it has windows
    uplink.opens_in(t)               # t: seconds since local midnight; 0: open now, else the
                                     # seconds until a window opens (None: none ever does)
    uplink.closes_in(t)              # (open at t) the seconds until it closes (None: never)

A window is open when the time of day is inside one of `hours` (HH:MM-HH:MM pairs, as seconds
of the day; one may run past midnight) and, with `every`, within `open_for` seconds of a
multiple of `every` counted from midnight (every 1800 for 300: from :00 to :05 and from :30
to :35 each hour). Either alone is a schedule too. What a bridge does with it is
core/bridge/machine.py's (connect_to, see_window, tick); the budget's rule between bridges is
`outranking`.

Sans-IO (the times are given) and MicroPython-clean; loaded only with an [uplink] section.
"""

from .machine import BACKOFF, STOPPED, WAITING
from .rate import Rate

DAY = 86400
OUTRANK_GRACE_MS = 3000  # how long a link that is up waits for a higher bridge backing off


class Uplink:
    def __init__(self, settings, now):
        budget = settings["max_byte_rate"]
        self.rate = Rate(0, budget, now) if budget else None
        self.hours = settings["hours"] or ()  # ((start, end) seconds of the day), or none
        self.every = settings["every"] or 0
        self.open_for = settings["open_for"] or 0
        self.scheduled = bool(self.hours or self.every)
        self.settings = settings

    def is_open(self, t):
        """Whether a window is open at t (seconds; taken modulo a day)."""
        t %= DAY
        if self.hours and not _in_hours(self.hours, t):
            return False
        return not self.every or t % self.every < self.open_for

    def opens_in(self, t):
        """0 if a window is open at t, else the seconds until one opens; None if none ever
        does (hours that no slot of `every` meets)."""
        at = t
        for _ in range(4 * len(self.hours) + 8):  # each turn reaches an hour's start or a slot's
            if self.is_open(at):
                return at - t
            at = self._next_start(at)
        return None

    def _next_start(self, at):
        """The next time after at that a window may open: outside the hours, the next hours'
        start; inside them, the next slot of `every` (or midnight, where slots count anew)."""
        day = at - at % DAY
        now = at % DAY
        if self.hours and not _in_hours(self.hours, now):
            return min(day + start if start > now else day + DAY + start for start, end in self.hours)
        return min(day + (now // self.every + 1) * self.every, day + DAY)

    def closes_in(self, t):
        """(A window open at t) The seconds until it closes; None without a schedule or if it
        never does."""
        if not self.scheduled:
            return None
        at = t
        for _ in range(4 * len(self.hours) + 8):
            at = self._next_end(at)
            if not self.is_open(at):
                return at - t
        return None

    def _next_end(self, at):
        """The next time after at that a window may close: an hours' end, a slot's end, midnight."""
        day = at - at % DAY
        now = at % DAY
        ends = [day + DAY]
        for _start, end in self.hours:
            ends.append(day + end if end > now else day + DAY + end)
        if self.every:
            slot_end = now - now % self.every + self.open_for
            ends.append(day + (slot_end if slot_end > now else slot_end + self.every))
        return min(ends)

    def window_at(self, t):
        """Where the windows are at t: (the seconds until one opens: 0 while one is open, -1 if
        none ever does; that as `hutch ctl bridges` says it; while one is open, the seconds
        until it closes, or None)."""
        wait = self.opens_in(t)
        if wait is None:
            return -1, "never opens", None
        if wait:
            return wait, "opens at %s" % time_of_day(t + wait), None
        closes = self.closes_in(t)
        return 0, "open" if closes is None else "open, closes at %s" % time_of_day(t + closes), closes

    def outranking(self, machine, now):
        """The highest priority of another up bridge that holds machine back (-1: none): all
        share this budget, so one with messages of a higher priority to send and its link up
        or coming up goes first. One that backs off or waits for a window holds it back for
        OUTRANK_GRACE_MS after machine's link came up at most: it is only a moment behind, or
        its upstream is away."""
        floor = -1
        for other in machine.broker.bridges:
            if other is machine or other.settings["direction"] != "up" or other.state == STOPPED:
                continue
            top = _top_priority(other)
            if top is None or top <= floor:
                continue
            if (other.state != BACKOFF and other.state != WAITING) or now - machine.opened_at < OUTRANK_GRACE_MS:
                floor = top
        return floor


def _top_priority(machine):
    """The highest priority of an up machine's classes that have messages to send and may send
    (None: none has)."""
    for one in machine.classes:
        if machine.may_send(one) and one.unsent():
            return one.priority
    return None


def _in_hours(hours, t):
    for start, end in hours:
        if (start <= t < end) if start < end else (t >= start or t < end):  # (past midnight)
            return True
    return False


def time_of_day(t):
    """Seconds of the day as HH:MM:SS (a log line's, `hutch ctl bridges`')."""
    t = int(t) % DAY
    return "%02d:%02d:%02d" % (t // 3600, t // 60 % 60, t % 60)
