"""What every test process shares: under pytest-xdist each worker draws free ports
(hutch.bench.brokers.free_port) from a range of its own below the kernel's ephemeral ports,
inherited by the brokers and commands its tests start. A test that restarts a broker leaves
its port free meanwhile, and a test on another worker could draw it: two brokers meeting on
one port is a failure of the run, not of hutch."""

import os

from hypothesis import settings

# Property tests assert what the code does, never how long it takes (benchmarks measure speed):
# Hypothesis's 200 ms deadline per example failed a table round trip on CI's loaded machine.
settings.register_profile("hutch", deadline=None)
settings.load_profile("hutch")

_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _WORKER.startswith("gw") and _WORKER[2:].isdigit():
    _LOW = 10000 + (int(_WORKER[2:]) % 8) * 2800  # eight ranges of 2,800 ports: 10000 to 32400
    os.environ["HUTCH_FREE_PORTS"] = "%d-%d" % (_LOW, _LOW + 2800)


# The kinds of test a run may pick or leave out (`pytest -m "not soak and not bench"`); pytest
# refuses a marker not listed here (--strict-markers).
MARKERS = {
    "long": "takes half a minute or more alone, or 15 s and more mostly waiting (timers, lines, restarts); started early in a run",
    "soak": "a fault run that `make soak` lengthens (its module's settings); `make test` runs it short",
    "bench": "`hutch bench` runs that print figures and assert none (tests/interop/bench/, by folder)",
    "system": "the broker as a program: processes, signals, files (tests/interop/system/, by folder)",
}
FOLDER_MARKERS = ("bench", "system")  # tests/interop/FOLDER/: every test in it has the marker


def pytest_configure(config):
    for name, what in MARKERS.items():
        config.addinivalue_line("markers", "%s: %s" % (name, what))


def pytest_collection_modifyitems(items):
    """The order pytest-xdist hands the tests out in (pyproject.toml's --no-loadscope-reorder
    keeps it). A unit is an xdist group (its tests run on one worker, one after another) or a
    single test; a unit with a test marked long goes first, larger units and then groups
    first among them; then the other groups, larger first; then the other single tests.

    A worker is handed the unit it runs and one more, which waits until the first ends. By
    size alone, the bridge soak toward RabbitMQ (a group of one, five minutes) came after the
    small groups and the soak toward hutch (100 s) right behind it on the same worker: that
    started 486 s into a run and ended it, the other workers' cores idle in its last minute
    and a half. A long test handed out last ends a run the same way. So does a test that mostly
    waits (a delayed will, a fleet's confirm_within, a device answering late): the run's first
    eight minutes keep both cores busy, and a test waiting there costs them nothing, while six
    such tests at the end left a third of the cores idle for three minutes; they are marked
    long too. (In each worker alike:
    every worker must collect the same list.)"""

    for item in items:
        parts = item.path.parts
        if "interop" in parts and parts.index("interop") + 1 < len(parts):
            folder = parts[parts.index("interop") + 1]
            if folder in FOLDER_MARKERS:
                item.add_marker(folder)

    def group(item):
        mark = item.get_closest_marker("xdist_group")
        return None if mark is None else (mark.args[0] if mark.args else mark.kwargs.get("name", "default"))

    def long(item):
        return item.get_closest_marker("long") is not None

    sizes, long_groups = {}, set()  # of the groups only
    for item in items:
        name = group(item)
        if name is not None:
            sizes[name] = sizes.get(name, 0) + 1
            if long(item):
                long_groups.add(name)

    def order(item):
        name = group(item)
        if name is None:  # a single test: after the long groups if long, else last
            return (0, 0, 1) if long(item) else (2, 0, 0)
        return (0 if name in long_groups else 1, -sizes[name], 0)

    items.sort(key=order)
