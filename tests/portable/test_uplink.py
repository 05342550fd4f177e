"""The [uplink]'s windows (core/bridge/uplink.py): when they open and close, over a day's
seconds given by the test. These tests also run under MicroPython."""

from hutch.core.bridge.uplink import DAY, Uplink, time_of_day

H = 3600


def uplink(hours=None, every=None, open_for=None, max_byte_rate=None):
    return Uplink({"max_byte_rate": max_byte_rate, "hours": hours, "every": every, "open_for": open_for}, 0)


def test_hours_windows_open_and_close_one_past_midnight_too():
    link = uplink(hours=((1 * H, 5 * H), (22 * H + 1800, 30 * 60)))  # 01:00-05:00, 22:30-00:30
    assert not link.is_open(0.5 * H + 1) and link.is_open(0.5 * H - 1) and link.is_open(23 * H)
    assert link.opens_in(3 * H) == 0 and link.closes_in(3 * H) == 2 * H
    assert link.opens_in(6 * H) == 16 * H + 1800, "06:00 -> 22:30"
    assert link.closes_in(23 * H) == 1.5 * H, "22:30-00:30 runs past midnight"
    assert link.opens_in(0.5 * H) == 0.5 * H, "00:30 -> 01:00"
    assert time_of_day(6 * H + link.opens_in(6 * H)) == "22:30:00"


def test_every_n_seconds_for_m_counted_from_midnight():
    link = uplink(every=1800, open_for=300)
    assert link.is_open(7 * H) and link.is_open(7 * H + 299) and not link.is_open(7 * H + 300)
    assert link.opens_in(7 * H + 300) == 1500 and link.closes_in(7 * H + 100) == 200
    assert link.opens_in(DAY - 10) == 10, "a slot at midnight"
    odd = uplink(every=7 * H, open_for=60)  # 00:00, 07:00, 14:00, 21:00, then midnight again
    assert odd.opens_in(21 * H + 60) == 3 * H - 60


def test_hours_and_every_together_open_only_the_slots_within_the_hours():
    link = uplink(hours=((8 * H, 10 * H),), every=1800, open_for=60)
    assert link.opens_in(7 * H) == H, "08:00 is a slot's start"
    assert link.opens_in(8 * H + 61) == 1800 - 61
    assert link.opens_in(9 * H + 1860) == 23 * H - 1860, "after 09:30's slot: tomorrow's 08:00"
    never = uplink(hours=((8 * H + 300, 8 * H + 360),), every=H, open_for=60)  # 08:05-08:06 meets no slot
    assert never.opens_in(0) is None
    assert uplink(max_byte_rate=1000).closes_in(5) is None and not uplink(max_byte_rate=1000).scheduled
