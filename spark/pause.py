"""A fault-injection point for the exactly-once test, off unless HUTCH_SPARK_PAUSE_AT is set.

    HUTCH_SPARK_PAUSE_AT=commit:/tmp/paused.json

makes the source's commit() write that file (JSON: the point, its pid, what it was given) and
then block, so that tests/interop/spark/test_pipeline_exactly_once.py can SIGKILL the Spark job's
process group exactly there: a moment too short to hit from outside. Read once, when the
source is imported; the block ends by itself after BLOCK_SECONDS, so a forgotten setting
only slows a job down.
"""

import json
import os
import time

BLOCK_SECONDS = 300
_POINT, _, _FILE = os.environ.get("HUTCH_SPARK_PAUSE_AT", "").partition(":")


def pause_at(point, detail):
    """Block here if HUTCH_SPARK_PAUSE_AT names this point, after saying so in its file."""
    if point != _POINT or not _FILE:
        return
    with open(_FILE + ".tmp", "w") as f:
        json.dump({"point": point, "pid": os.getpid(), "detail": detail}, f)
    os.replace(_FILE + ".tmp", _FILE)  # whole or not there: the test reads it as it appears
    time.sleep(BLOCK_SECONDS)
