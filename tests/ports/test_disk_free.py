"""ports/disk_free.py's rule on the broker's own flow control: publishers blocked below
disk_free_limit, let go once a tenth more is free (not at the limit: a disk at the edge of it
would block and unblock them at each look). tests/interop/system/test_full_disk.py measures a
real disk."""

from hutch.core.broker import Broker
from hutch.core.limits import Limits
from hutch.ports import disk_free

LIMIT = 50 * 1000 * 1000


def test_publishers_are_blocked_below_the_limit_and_let_go_a_tenth_above_it():
    flow = Broker(Limits(), None, lambda *a: None).flow
    disk_free.check(flow, LIMIT, LIMIT)
    assert not flow.blocked
    disk_free.check(flow, LIMIT - 1, LIMIT)
    assert flow.blocked and flow.reason.startswith("low on disk: 49999999 bytes free for the data folder")
    for free in (LIMIT, LIMIT * 11 // 10 - 1):
        disk_free.check(flow, free, LIMIT)
        assert flow.blocked, free
    disk_free.check(flow, LIMIT * 11 // 10, LIMIT)
    assert not flow.blocked and "disk free" not in flow.alarms
