"""Milliseconds that only go forward, the same on CPython and MicroPython.

MicroPython's ticks_ms() wraps around (every ~12 days on unix, sooner on some
boards), and the core compares times by subtraction, so the clock
accumulates tick differences into a number that never wraps.
"""

import time

try:
    from time import ticks_diff, ticks_ms  # MicroPython
except ImportError:
    ticks_ms = None
    # CPython only: looked up by name, because the board's type check (tests/typecheck/test_typecheck.py)
    # reads this file against MicroPython's time module, which has no monotonic().
    _monotonic = getattr(time, "monotonic")


class Clock:
    def __init__(self):
        if ticks_ms is not None:
            self._last = ticks_ms()
            self._now = 0

    def now_ms(self):
        if ticks_ms is None:
            return int(_monotonic() * 1000)
        tick = ticks_ms()
        self._now += ticks_diff(tick, self._last)
        self._last = tick
        return self._now

    @staticmethod
    def wall_seconds():
        return int(time.time())


def sleep_ms(ms):
    """An awaitable pause of ms milliseconds, on either asyncio."""
    import asyncio  # here, not at the top: sensor nodes use the Clock without any asyncio

    if hasattr(asyncio, "sleep_ms"):
        return asyncio.sleep_ms(ms)
    return asyncio.sleep(ms / 1000)
