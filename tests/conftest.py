"""What every test process shares: under pytest-xdist each worker draws free ports
(hutch.bench.brokers.free_port) from a range of its own below the kernel's ephemeral ports,
inherited by the brokers and commands its tests start. A test that restarts a broker leaves
its port free meanwhile, and a test on another worker could draw it: two brokers meeting on
one port is a failure of the run, not of hutch."""

import os

_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _WORKER.startswith("gw") and _WORKER[2:].isdigit():
    _LOW = 10000 + (int(_WORKER[2:]) % 8) * 2800  # eight ranges of 2,800 ports: 10000 to 32400
    os.environ["HUTCH_FREE_PORTS"] = "%d-%d" % (_LOW, _LOW + 2800)


def pytest_configure(config):
    config.addinivalue_line("markers", "long: takes half a minute or more alone; started early in a run")


def pytest_collection_modifyitems(items):
    """The tests of an xdist_group first, then those marked long, each kind's order kept.
    pytest-xdist hands out its groups largest first, then single tests in this order: the
    bridge soak toward RabbitMQ (a group of one, five minutes) came after hundreds of single
    tests and started four minutes into the run, the last to end by a minute and a half, and
    a long test handed out last leaves the other workers' cores idle while it ends the run.
    (In each worker alike: every worker must collect the same list.)"""

    def kind(item):
        if item.get_closest_marker("xdist_group") is not None:
            return 0
        return 1 if item.get_closest_marker("long") is not None else 2

    items.sort(key=kind)
