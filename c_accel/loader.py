"""Choosing the frame scanner on CPython: the C accelerator when it was built, else pure Python.

    from hutch.c_accel import loader
    log("info", loader.activate())    # before the broker makes its first connection

HUTCH_PURE_PYTHON=1 in the environment keeps pure Python (to compare the two, or to
rule the C code out when hunting a bug). Any ImportError, such as an install without a
compiler, also leaves pure Python in place: the C code is only ever a faster copy of
core/framing.py, never something the broker needs. MicroPython has no C accelerator:
serve.py does not import this there.
"""

import os

from ..core import framing


def pure_python_forced():
    return os.environ.get("HUTCH_PURE_PYTHON", "") not in ("", "0")


def activate():
    """Install the fastest scanner allowed into core.framing; one line saying which, for the log."""
    if pure_python_forced():
        framing.use_scanner(None, None)
        return "frame scanner: pure Python (HUTCH_PURE_PYTHON is set)"
    try:
        from . import scanner
    except ImportError as e:
        framing.use_scanner(None, None)
        return "frame scanner: pure Python (C accelerator not available: %s)" % e
    framing.use_scanner(scanner.scan_frames, scanner.new_records)
    return "frame scanner: C accelerator (cffi)"
