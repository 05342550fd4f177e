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
core/bridge/machine.py's (connect_to, tick); the budget's rule between bridges is up.py's
(_outranked).

Sans-IO (the times are given) and MicroPython-clean; loaded only with an [uplink] section.
"""

from .rate import Rate

DAY = 86400


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


def _in_hours(hours, t):
    for start, end in hours:
        if (start <= t < end) if start < end else (t >= start or t < end):  # (past midnight)
            return True
    return False


def time_of_day(t):
    """Seconds of the day as HH:MM:SS (a log line's, `hutch ctl bridges`')."""
    t = int(t) % DAY
    return "%02d:%02d:%02d" % (t // 3600, t // 60 % 60, t % 60)
