"""Only for the C accelerator: everything else about the package is in pyproject.toml.

setuptools reads cffi_modules only from here. On Linux CPython it compiles
c_accel/framing.c, streams.c, messages.c, appends.c and runs.c into hutch.c_accel._accel; the extension is optional (see
c_accel/build.py), so an install without a working C compiler still succeeds
and hutch runs on the pure-Python code in core/.
"""

import platform
import sys

from setuptools import setup

cffi_modules = []
if sys.platform == "linux" and platform.python_implementation() == "CPython":
    cffi_modules.append("c_accel/build.py:ffibuilder")

setup(cffi_modules=cffi_modules)
