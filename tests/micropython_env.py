"""Finding the `micropython` command and laying out hutch as it sits on a board.

Shared by tests/test_micropython.py (the core suite under MicroPython) and the interop
tests that run hutch under MicroPython. The code lives in hutch.tools.micropython_host,
which `hutch bench --micropython` uses too.
"""

from hutch.tools.micropython_host import ROOT, micropython, package_root, serve_env  # noqa: F401 (re-exported)
