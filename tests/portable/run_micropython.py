"""Run the core test modules under MicroPython (no pytest there).

    micropython tests/portable/run_micropython.py PACKAGE_ROOT [module ...]

PACKAGE_ROOT holds hutch/core (tests/micropython/test_micropython.py lays it out). Every
function named test_* in tests/portable/test_*.py is called; an exception fails it.
Prints one line per failure and a summary "N passed, M failed".
"""

import gc
import os
import sys

here = __file__.rsplit("/", 1)[0] if "/" in __file__ else "."
sys.path.insert(0, here)
sys.path.insert(0, sys.argv[1])

modules = sys.argv[2:] or sorted(
    name[:-3] for name in os.listdir(here) if name.startswith("test_") and name.endswith(".py")
)
passed = failed = 0
for name in modules:
    module = __import__(name)
    for attr in sorted(dir(module)):
        if not attr.startswith("test_"):
            continue
        test = getattr(module, attr)
        # What earlier tests left is collected first: the heap is one process's for the whole
        # suite, and a test that needs one large block (a stream's 64 KiB read buffer) failed
        # with MemoryError in a heap that was large enough but fragmented by garbage.
        gc.collect()
        try:
            test()
            passed += 1
        except Exception as e:
            failed += 1
            print("FAILED %s.%s: %s %s" % (name, attr, type(e).__name__, e))
            sys.print_exception(e)
    del sys.modules[name]  # its module-level state is not kept for the rest of the suite
print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
