"""A sensor's reading numbered so the broker can tell it from a repeat (core/dedup.py).

A client given a sensor id (Client(..., sensor_id="greenhouse-3")) sets two headers on each
publish: x-sensor-id, the id, and x-sensor-seq, a number that only grows for that sensor, even
across the board's reboots. A reading the client sends again (republish() after a lost link)
keeps both, so the broker confirms and drops it if it took it already.

The number: the board's boot count in the high 32 bits, the readings since boot in the low
32. The boot count lives in a small file on the board's flash, read and written once at start
(a flash write per boot, not per reading). A board without a file system, or a file lost with
a reflash, starts over: the broker takes a count that goes back as the sensor's start again
(and says so in its log), so nothing is lost; only a reading sent again across that reboot
could be taken twice.
"""

BOOT_FILE = "hutch-boot"


class Sequence:
    """The numbers of one sensor's readings: next() for each."""

    def __init__(self, path=BOOT_FILE):
        boot = 0
        if path is not None:
            try:
                with open(path) as f:
                    boot = int(f.read().strip() or 0)
            except (OSError, ValueError):
                boot = 0  # none yet (or unreadable): the first boot
            boot = (boot + 1) & 0xFFFFFFFF
            with open(path, "w") as f:
                f.write("%d\n" % boot)
        self.boot = boot
        self.high = boot << 32
        self.count = 0

    def next(self):
        self.count += 1
        return self.high | self.count


def identified(properties, sensor_id, seq):
    """A copy of properties whose headers name the reading (the caller's dict is not changed:
    the robust client keeps the copy, with its number, to send again)."""
    found = dict(properties) if properties else {}
    headers = dict(found.get("headers") or {})
    headers["x-sensor-id"] = sensor_id
    headers["x-sensor-seq"] = seq
    found["headers"] = headers
    return found
