"""The AMQP 1.0 client a board's bridge forwards with (amqp10/client.py, amqp10/sas.py), its
in-process tests (tests/amqp10/test_client.py, test_sas.py) run again under the `micropython`
command, with a board-sized heap too."""

import os
import re
import subprocess

import pytest
from micropython_env import micropython, package_root
from paths import CORE_TESTS, SUPPORT, TESTS

AMQP10_TESTS = os.path.join(TESTS, "amqp10")


@pytest.mark.parametrize("heap", [None, "512k"])
def test_the_1_0_client_under_micropython(tmp_path, heap):
    command = [micropython()]
    if heap:
        command += ["-X", "heapsize=" + heap]
    root = package_root(tmp_path, ("codec", "core", "amqp10"))
    # (the client against hutch's own front end in the default heap: a board's bridge holds the
    # client, not the front end)
    modules = ["test_client", "test_sas"] + ([] if heap else ["test_client_upstream"])
    command += [os.path.join(CORE_TESTS, "run_micropython.py"), root] + modules
    env = dict(os.environ, MICROPYPATH=AMQP10_TESTS + ":" + SUPPORT + ":.frozen")
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    output = result.stdout + result.stderr
    summary = re.search(r"(\d+) passed, (\d+) failed", output)
    assert summary, output[-3000:]
    assert result.returncode == 0 and summary.group(2) == "0", output[-5000:]
    assert int(summary.group(1)) >= 18, output[-2000:]
    print(summary.group(0))
