"""Quicker Spark starts for the tests that run Spark jobs of their own (the "spark" and
"spark-kills" xdist groups: `hutch pipeline`, the exactly-once kills, the standalone cluster,
`hutch bench --spark`; and the end-to-end tests that run `hutch pipeline` beside their faults).

Each of those jobs starts a JVM that loads some 12,000 classes from pyspark's jars and
compiles them as it goes; on this 2-core machine that start, not the job, was most of a test's
time. Two standard JVM features, handed to every driver through SPARK_SUBMIT_OPTS (which
spark-submit adds to the driver's java command line), take it from about 35 to 17 s of CPU:

- a class-data-sharing archive (JDK 13 and later: -XX:ArchiveClassesAtExit writes the classes
  one job loaded, -XX:SharedArchiveFile maps them into the next JVM already parsed and
  verified), made once per run (by the first worker that needs it) by a small `hutch pipeline`
  job against a `hutch serve` of its own, so it holds the classes the pipeline's jobs load;
- the client compiler only (-XX:TieredStopAtLevel=1) and the serial collector: jobs of a few
  hundred readings never pay back the server compiler's threads.

What a job computes does not depend on either: the same classes run, loaded from a cache.

And Spark SQL's expressions evaluated as they are, not compiled (INTERPRETED_SQL): by default
Spark writes Java source for each query's expressions and stages and compiles it with Janino,
which pays back over millions of rows, not over a test's hundreds; interpreted, a job takes
about 12 % less CPU (17.6 against 20.0 CPU-s for one small `hutch pipeline` job, 25.0
against 28.5 for seven batches). Spark's interpreted path is the one it falls back on whenever
compiling fails, and gives the same results: the tests compare every aggregate with Python's.

And their Python workers, every test's that runs Spark: Spark puts its own pyspark.zip first on
a Python worker's PYTHONPATH, and Python keeps no compiled modules for a zip, so each of the
run's hundred and more workers compiled PySpark from source again (0.5 s of CPU each). The
same PySpark, compiled, is installed in this virtualenv: the workers' Python
(`compiled_pyspark_python`) leaves the zip out and imports that one.
"""

import fcntl
import os
import pathlib
import subprocess
import sys
import tempfile

from brokers import RunningBroker
from pipeline_support import HUTCH, bodies, declare, first_run_readings, publish

QUICK_JIT = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# Spark reads the spark.* system properties of its driver's JVM as its configuration
INTERPRETED_SQL = "-Dspark.sql.codegen.wholeStage=false -Dspark.sql.codegen.factoryMode=NO_CODEGEN"


# PYSPARK_PYTHON: this virtualenv's Python, without Spark's zip of the PySpark sources
PYSPARK_PYTHON_SCRIPT = """#!/bin/sh
PYTHONPATH=$(printf '%%s' "$PYTHONPATH" | tr ':' '\\n' | grep -v '/pyspark\\.zip$' | paste -sd:)
export PYTHONPATH
exec %s "$@"
"""


def compiled_pyspark_python(folder):
    """The path of a script, written to folder, to run as Spark's Python workers (PYSPARK_PYTHON):
    this virtualenv's Python, importing its installed, compiled PySpark (module docstring)."""
    path = os.path.join(folder, "pyspark-python")
    with open(path, "w") as f:
        f.write(PYSPARK_PYTHON_SCRIPT % sys.executable)
    os.chmod(path, 0o755)
    return path


def quick_jvm(scratch):
    """QUICK_JIT, and the JVM's temporary files (Spark's block manager and scratch folders,
    the native libraries it unpacks) in scratch, a folder of the test run, not in /tmp: for
    every JVM of Spark's (a standalone cluster's master, worker and executors too)."""
    return "%s -Djava.io.tmpdir=%s" % (QUICK_JIT, scratch)


def quick_driver(scratch):
    """quick_jvm and INTERPRETED_SQL: for a driver's JVM (Spark refuses spark.* properties in an
    executor's Java options: they come from the driver)."""
    return "%s %s" % (quick_jvm(scratch), INTERPRETED_SQL)


# `hutch pipeline` as a script spark-submit runs: its JVM, not PySpark's, is then the parent,
# and ends by itself once the script has (stop_session's wait for a JVM it started bounds a
# dump that a loaded machine makes slowly: it was killed before the archive was written).
JOB = """import sys
from hutch.tools.cli import main
sys.argv = ["hutch", "pipeline"] + sys.argv[1:]
main()
"""
SPARK_SUBMIT = os.path.join(os.path.dirname(__import__("pyspark").__file__), "bin", "spark-submit")


def make_class_archive(folder):
    """The archive of the classes a small `hutch pipeline` job loads, written to folder; its
    path. The job's own output is not looked at (the JVM prints warnings about classes it does
    not archive); that the archive is there is."""
    archive = os.path.join(folder, "spark-classes.jsa")
    broker_folder = os.path.join(folder, "hutch")
    os.mkdir(broker_folder)
    job = os.path.join(folder, "archive_job.py")
    with open(job, "w") as f:
        f.write(JOB)
    broker = RunningBroker([HUTCH, "serve"], pathlib.Path(broker_folder)).start()
    try:
        declare(broker, "archive-a")
        publish(broker, "archive-a", bodies(first_run_readings()["a"]))
        env = dict(
            os.environ,
            SPARK_SUBMIT_OPTS="%s -XX:ArchiveClassesAtExit=%s" % (quick_driver(folder), archive),
            PYSPARK_PYTHON=compiled_pyspark_python(folder),
            SPARK_LOCAL_IP="127.0.0.1",
        )
        args = ["--uri", broker.url, "--streams", "archive-a", "--output", os.path.join(folder, "out"),
                "--checkpoint", os.path.join(folder, "checkpoint"), "--trigger", "available-now"]  # fmt: skip
        done = subprocess.run(
            [SPARK_SUBMIT, "--master", "local[2]", job, *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
    finally:
        broker.stop()
    assert done.returncode == 0 and os.path.exists(archive), (done.returncode, done.stdout[-800:], done.stderr[-800:])
    return archive


def shared_class_archive(run_folder):
    """The run's class archive (make_class_archive), in run_folder: made by the first of the
    run's workers to ask, under a lock the others wait on; its path."""
    folder = os.path.join(run_folder, "spark-jvm")
    with open(folder + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        archive = os.path.join(folder, "spark-classes.jsa")
        if not os.path.exists(archive):  # (a worker whose attempt failed leaves it to the next)
            os.makedirs(folder, exist_ok=True)
            os.rename(make_class_archive(tempfile.mkdtemp(prefix="attempt-", dir=folder)), archive)
    return archive


def quick_start_options(archive, scratch):
    """SPARK_SUBMIT_OPTS for the drivers of the run's Spark jobs."""
    return "%s -XX:SharedArchiveFile=%s" % (quick_driver(scratch), archive)
