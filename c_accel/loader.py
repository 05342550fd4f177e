"""Choosing the frame reader, and the page-ins' message finder, on CPython: the C code when it
was built, else pure Python.

    line, frame_reader = loader.frame_reader()
    log("info", line)
    batch.install(broker, frame_reader, loader.stream_deliveries())  # amqp091/batch.py
    ... journal.find_messages = loader.message_finder()  # page-ins, once the journal is there

HUTCH_PURE_PYTHON=1 in the environment keeps pure Python (to compare the two, or to
rule the C code out when hunting a bug). Any ImportError, such as an install without a
compiler, also leaves pure Python in place: the C code is only ever a faster copy of
amqp091/framing.py (or core/store/paging.py), never something the broker needs. MicroPython has no C accelerator:
server/startup.py does not import this there.
"""

import os

from ..amqp091 import batch


def pure_python_forced():
    return os.environ.get("HUTCH_PURE_PYTHON", "") not in ("", "0")


def frame_reader():
    """(a line for the log saying which, the frame reader factory for Broker: None for pure Python)."""
    if pure_python_forced():
        return "frame scanner: pure Python (HUTCH_PURE_PYTHON is set)", None
    try:
        from . import scanner
    except ImportError as e:
        return "frame scanner: pure Python (C accelerator not available: %s)" % e, None
    from . import runs  # built with the scanner: one extension

    return "frame scanner: C accelerator (cffi)", batch.reader_factory(scanner.scan_frames, scanner.new_records, runs)


def stream_deliveries():
    """The C twin of amqp091/output.py stream_records() (amqp091/batch.py install), or None (pure
    Python forced, or not built): a stream's read buffer into deliveries in one call."""
    if pure_python_forced():
        return None
    try:
        from . import streams
    except ImportError:
        return None
    return streams.deliveries


def message_finder():
    """How page-ins find a run's messages in what they read from a segment (Journal.find_messages):
    the C twin of core/store/paging.py's find_messages, or None for that one."""
    if pure_python_forced():
        return None
    try:
        from . import messages
    except ImportError:
        return None  # frame_reader() has said why
    return messages.find_messages
