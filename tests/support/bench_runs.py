"""`hutch bench` run as a user runs it (tests/interop/bench/): the venv's command, its printed
tables read back as figures."""

import os
import subprocess

from brokers import BIN

HUTCH = os.path.join(BIN, "hutch")


def bench(*args, timeout=600, env=None):
    return subprocess.run([HUTCH, "bench"] + list(args), capture_output=True, text=True, timeout=timeout, env=env)


def number(cell):
    return float(cell.replace(",", ""))
