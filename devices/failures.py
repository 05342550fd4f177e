"""How a poll or a write of a device fails, whatever its protocol: counted by result
(devices/device.py), said once per change of state, and raised by a line (devices/line.py) and
the protocol's codec that reads its answers (devices/modbus/)."""

RESULTS = ("ok", "timeout", "exception", "error", "gone")


class Failed(Exception):
    """A poll or write that failed: Failed(result, why), result one of RESULTS but "ok":
    "timeout" (no answer after the retries), "exception" (the device said no: a protocol's
    exception answer), "error" (an answer that was none: a bad CRC, noise) or "gone" (no
    connection to it)."""


def garbled(heard, what):
    """The failure of a request whose answer was octets that were no answer."""
    return Failed("error", "%d octets to %s that were no answer (a bad CRC, or noise on the line)" % (heard, what))
