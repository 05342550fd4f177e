"""Board profiles: what each board can afford.

A profile is a small module (boards/esp32.py, ...) with:

    HEAP      bytes of heap the profile is sized for
    LIMITS    fields of hutch.core.limits.Limits (frame_max, connections, queue budgets...)
    READ_SIZE bytes of the transport read buffer (one per server, reused)
    STORAGE   {"path": data folder, "max_bytes": what the journal may use (publishers are
              blocked near it), "segment_bytes": the size of one journal segment file, and
              optionally "max_segment_bytes": the largest it grows to when a config raises
              the journal's budget (default 8 MiB; server/options.py) and
              "disk_free_limit": publishers are blocked while less is free on the data
              folder's disk (ports/disk_free.py; a host's profile, none on a board)}
    SERIAL    UARTs wired for AMQP links: [{"uart": id, "tx": pin, "rx": pin, "baudrate": n}]

`hutch serve --board NAME` (or "board" in the config's [server] section) picks
one; the config file's [limits] still override single values. Only the chosen
module is imported, so a board pays for its own profile alone.
"""

NAMES = ("esp32", "esp32s3-psram", "rp2-pico-w", "rpi", "unix")


def load(name):
    """The profile module for a board name; ValueError names the known boards."""
    if name not in NAMES:
        raise ValueError("unknown board %r (known: %s)" % (name, ", ".join(NAMES)))
    module = name.replace("-", "_")
    package = __import__("hutch.boards." + module)  # returns the top package, hutch
    return getattr(package.boards, module)


def serial_link(profile, device, baud=None):
    """What to open for `--serial DEVICE` on this board: the profile's SERIAL entry that
    DEVICE names ("uart2" or "2" for {"uart": 2, ...}, or the entry's device path), so the
    UART comes up on the pins the profile wires; DEVICE itself when no entry matches.
    A baud rate given explicitly (--baud, [server] baud) replaces the entry's."""
    name = device.lower()
    for entry in profile.SERIAL:
        if "uart" in entry:
            matches = name in ("uart%d" % entry["uart"], "%d" % entry["uart"])
        else:
            matches = device == entry.get("device")
        if matches:
            return entry if baud is None else dict(entry, baudrate=baud)
    return device
