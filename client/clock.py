"""The clock of hutch.client: MicroPython's ticks_ms, ticks_diff and sleep_ms, or CPython's
stand-ins for them. The one place the client package gets its time from."""

try:
    from time import sleep_ms, ticks_diff, ticks_ms  # noqa: F401 (the client imports them from here)
except ImportError:  # CPython
    import time

    # MicroPython's time has no monotonic(), and the board's type check (tests/typecheck/test_typecheck.py)
    # reads this file against MicroPython's modules: looked up by name, as only CPython gets here.
    _monotonic = getattr(time, "monotonic")

    def _ticks_ms():
        return int(_monotonic() * 1000)

    def _ticks_diff(a, b):
        return a - b

    def _sleep_ms(ms):
        time.sleep(ms / 1000)

    # Bound by assignment rather than defined under these names: a `def` would declare its own
    # signature, which MicroPython's functions (positional-only, opaque tick values) do not match.
    ticks_ms = _ticks_ms
    ticks_diff = _ticks_diff
    sleep_ms = _sleep_ms
