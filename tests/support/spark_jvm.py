"""Quicker Spark starts for the tests that run Spark jobs of their own (the "spark" xdist group:
`hutch pipeline`, the exactly-once kills, the standalone cluster, `hutch bench --spark`).

Each of those jobs starts a JVM that loads some 12,000 classes from pyspark's jars and
compiles them as it goes; on this 2-core machine that start, not the job, was most of a test's
time. Two standard JVM features, handed to every driver through SPARK_SUBMIT_OPTS (which
spark-submit adds to the driver's java command line), take it from about 35 to 17 s of CPU:

- a class-data-sharing archive (JDK 13 and later: -XX:ArchiveClassesAtExit writes the classes
  one job loaded, -XX:SharedArchiveFile maps them into the next JVM already parsed and
  verified), made once per run by a small `hutch pipeline` job against a `hutch serve` of its
  own, so it holds the classes the pipeline's jobs load;
- the client compiler only (-XX:TieredStopAtLevel=1) and the serial collector: jobs of a few
  hundred readings never pay back the server compiler's threads.

What a job computes does not depend on either: the same classes run, loaded from a cache.
"""

import os
import pathlib

from brokers import RunningBroker
from pipeline_support import HUTCH, bodies, declare, first_run_readings, publish, run_pipeline

QUICK_JIT = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def make_class_archive(folder):
    """The archive of the classes a small `hutch pipeline` job loads, written to folder; its
    path. The job's own output is not looked at (the JVM prints warnings about classes it does
    not archive); that the archive is there is."""
    archive = os.path.join(folder, "spark-classes.jsa")
    broker_folder = os.path.join(folder, "hutch")
    os.mkdir(broker_folder)
    broker = RunningBroker([HUTCH, "serve"], pathlib.Path(broker_folder)).start()
    try:
        declare(broker, "archive-a")
        publish(broker, "archive-a", bodies(first_run_readings()["a"]))
        env = dict(os.environ, SPARK_SUBMIT_OPTS="%s -XX:ArchiveClassesAtExit=%s" % (QUICK_JIT, archive))
        args = ["--uri", broker.url, "--streams", "archive-a", "--output", os.path.join(folder, "out"),
                "--checkpoint", os.path.join(folder, "checkpoint"), "--trigger", "available-now"]  # fmt: skip
        code, out, err, _ = run_pipeline(*args, env=env, timeout=300)
    finally:
        broker.stop()
    assert code == 0 and os.path.exists(archive), (code, out[-5:], err[-5:])
    return archive


def quick_start_options(archive):
    """SPARK_SUBMIT_OPTS for the drivers of the run's Spark jobs."""
    return "%s -XX:SharedArchiveFile=%s" % (QUICK_JIT, archive)
