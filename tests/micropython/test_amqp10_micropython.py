"""The AMQP 1.0 client a board's bridge forwards with (amqp10/client.py, amqp10/sas.py), its
in-process tests (tests/amqp10/test_client.py, test_sas.py) run again under the `micropython`
command, with a board-sized heap too."""

import os

import pytest
from micropython_env import package_root, run_suite
from paths import TESTS

AMQP10_TESTS = os.path.join(TESTS, "amqp10")


@pytest.mark.parametrize("heap", [None, "512k"])
def test_the_1_0_client_under_micropython(tmp_path, heap):
    root = package_root(tmp_path, ("codec", "core", "amqp10"))
    # (the client against hutch's own front end in the default heap: a board's bridge holds the
    # client, not the front end)
    modules = ["test_client", "test_sas"] + ([] if heap else ["test_client_upstream"])
    print(run_suite(root, modules, heap, [AMQP10_TESTS], 18, timeout=300))
