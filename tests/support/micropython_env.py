"""Finding the `micropython` command and laying out hutch as it sits on a board.

Shared by tests/micropython/test_micropython.py (the core suite under MicroPython) and the interop
tests that run hutch under MicroPython. The code lives in hutch.emulator.micropython_host,
which `hutch bench --micropython` uses too.
"""

import os

from hutch.emulator.micropython_host import ROOT, micropython, package_root, serve_env  # noqa: F401 (re-exported)


def node_root(folder, extra=()):
    """A package root holding hutch as a sensor node gets it: the node bundle's staged sources
    (`hutch.firmware.build.build(..., bundle_name="node")["source"]`: exactly the files
    client/manifest.py lists, spec constants folded), plus the files a test itself needs on
    top, as paths in the checkout ("ports/serial.py")."""
    import shutil

    from hutch.firmware import build

    root = os.path.join(str(folder), "node")
    shutil.copytree(build.build(os.path.join(str(folder), "node-bundle"), bundle_name="node")["source"], root)
    for path in extra:
        target = os.path.join(root, "hutch", path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy(os.path.join(ROOT, path), target)
    return root
