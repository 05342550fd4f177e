"""The core's log callback, on the platform's logging.

The core never prints; it calls log(level, message, exc=None). On CPython this
goes to the standard logging module (the CLI sets its format and level); on
MicroPython, where there is no logging module in the firmware, to print.
"""

import sys
import time

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}

if sys.implementation.name == "micropython":
    logging = None  # some unix builds freeze micropython-lib's logging; 8 KiB of heap for print
else:
    import logging


def make_log(level="info", name="hutch"):
    threshold = LEVELS.get(level, 20)
    if logging is not None:
        logger = logging.getLogger(name)

        def log(lvl, message, exc=None):
            logger.log(LEVELS.get(lvl, 20), message, exc_info=exc)

        return log

    def log(lvl, message, exc=None):
        if LEVELS.get(lvl, 20) >= threshold:
            t = time.localtime()
            print("%02d:%02d:%02d %s %s" % (t[3], t[4], t[5], lvl.upper(), message))
            if exc is not None:
                sys.print_exception(exc)

    return log
