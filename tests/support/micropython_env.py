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


def run_suite(root, modules, heap, test_dirs, least, timeout=600):
    """In-process test modules run under the `micropython` command (tests/portable/run_micropython.py:
    every test_* function of each module; none of pytest), hutch from root (package_root),
    imported from test_dirs and tests/support, with -X heapsize=heap (None: the default). Fails
    unless every test passed and at least `least` ran; the summary line."""
    import re
    import subprocess

    from paths import PORTABLE_TESTS, SUPPORT

    command = [micropython()] + (["-X", "heapsize=" + heap] if heap else [])
    command += [os.path.join(PORTABLE_TESTS, "run_micropython.py"), root] + list(modules)
    env = dict(os.environ, MICROPYPATH=":".join(list(test_dirs) + [SUPPORT, ".frozen"]))
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    output = result.stdout + result.stderr
    summary = re.search(r"(\d+) passed, (\d+) failed", output)
    assert summary, output[-3000:]
    assert result.returncode == 0 and summary.group(2) == "0", output[-5000:]
    assert int(summary.group(1)) >= least, output[-2000:]
    return summary.group(0)
