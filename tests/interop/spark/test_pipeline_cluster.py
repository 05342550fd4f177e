"""`hutch pipeline --master spark://...` on a real standalone Spark cluster: a master and one
worker started here from the installed pyspark (`spark-class ...deploy.master.Master` and
`...deploy.worker.Worker`, on 127.0.0.1), against a real `hutch serve`.

The readings aggregated on the cluster equal the aggregates computed in Python (what the
command's own local[*] Spark writes for them is test_pipeline.py's: the same comparison). That
the streams were read on the worker's executor, not in the driver, is shown by the cluster
itself: the master lists the application as finished, the worker lists its executor, and the
executor's log in the worker's work dir has the Python tasks it ran (the source's reads are
Python tasks: a driver has no executor of its own on a standalone cluster).

The executor runs this virtualenv's Python (PYSPARK_PYTHON, set by conftest.py's spark_jvm,
which the driver hands to the executors), where hutch is installed. The master and the worker
are stopped by their PIDs at the end, and no process of theirs (the executor's JVM, its Python
workers) may be left.
"""

import json
import os
import signal
import subprocess
import urllib.request

import pytest
from brokers import BIN, RunningBroker, free_port, wait_until
from pipeline_support import (
    assert_same,
    batch_lines,
    bodies,
    declare,
    expected_aggregates,
    first_run_readings,
    fresh,
    outlived,
    publish,
    run_pipeline,
    written_aggregates,
)

SPARK_CLASS = os.path.join(os.path.dirname(__import__("pyspark").__file__), "bin", "spark-class")


def spark_env():
    """The master, the worker and the driver on loopback; the executors' Python is this one,
    their JVM as quick to start as the drivers' (the client compiler; PySpark hands
    PYSPARK_SUBMIT_ARGS to the driver's spark-submit). (Read when used: conftest.py's spark_jvm
    sets the other JVMs' options before the test, the master's and worker's the executors'.)"""
    submit = "--conf spark.executor.extraJavaOptions='%s' pyspark-shell" % os.environ["SPARK_DAEMON_JAVA_OPTS"]
    return dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_SUBMIT_ARGS=submit)


class StandaloneCluster:
    """A Spark standalone master and one worker (1 core, 1 GiB), each in a process group of
    its own, their output in log files under folder."""

    def __init__(self, folder):
        self.folder = folder
        self.port, self.ui, self.worker_ui = free_port(), free_port(), free_port()
        self.url = "spark://127.0.0.1:%d" % self.port
        self.work_dir = os.path.join(folder, "work")
        self.processes = []

    def start(self):
        self._launch("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
                     str(self.port), "--webui-port", str(self.ui))  # fmt: skip
        wait_until(lambda: (self.master_state() or {}).get("status") == "ALIVE", 120, what="the master up")
        self._launch("worker", "org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
                     "--cores", "1", "--memory", "1g", "--webui-port", str(self.worker_ui),
                     "--work-dir", self.work_dir)  # fmt: skip
        wait_until(lambda: (self.master_state() or {}).get("aliveworkers") == 1, 120, what="the worker registered")
        return self

    def _launch(self, name, main_class, *args):
        log = open(os.path.join(self.folder, name + ".log"), "wb")
        proc = subprocess.Popen(
            [SPARK_CLASS, main_class, *args], stdout=log, stderr=subprocess.STDOUT, env=spark_env(),
            start_new_session=True,
        )  # fmt: skip
        log.close()
        self.processes.append((name, proc))

    def master_state(self):
        return _json("http://127.0.0.1:%d/json/" % self.ui)

    def worker_state(self):
        return _json("http://127.0.0.1:%d/json/" % self.worker_ui)

    def stop(self):
        """SIGTERM to the worker, then the master, by PID (the worker stops its executors);
        the names of those whose process group outlived them (then killed)."""
        left = []
        for name, proc in reversed(self.processes):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
            if outlived(proc.pid, 30):
                left.append(name)
        return left

    def log(self, name):
        with open(os.path.join(self.folder, name + ".log"), errors="replace") as f:
            return f.read()


def _json(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return json.load(answer)
    except (OSError, ValueError):
        return None


@pytest.fixture
def cluster(tmp_path):
    running = StandaloneCluster(str(tmp_path))
    try:
        yield running.start()
    finally:
        left = running.stop()
        assert not left, "processes of the Spark %s outlived it" % " and ".join(left)


@pytest.mark.xdist_group("spark")  # conftest.py: the Spark jobs of a run, one after another
@pytest.mark.timeout(600)
def test_the_pipeline_on_a_standalone_cluster_writes_the_aggregates_python_computes(cluster, tmp_path):
    (tmp_path / "hutch").mkdir()
    hutch = RunningBroker([os.path.join(BIN, "hutch"), "serve"], tmp_path / "hutch").start()
    try:
        a, b = fresh("cluster-a"), fresh("cluster-b")
        declare(hutch, a, b)
        readings = first_run_readings()
        publish(hutch, a, bodies(readings["a"]))
        publish(hutch, b, bodies(readings["b"], 1))
        expected = expected_aggregates([("",) + one for one in readings["a"] + readings["b"]])

        def pipeline(where, *more):
            command = ["--uri", hutch.url, "--streams", "%s,%s" % (a, b), "--output", str(tmp_path / where / "out"),
                       "--checkpoint", str(tmp_path / where / "checkpoint"), "--window", "1 minute",
                       "--watermark", "2 minutes", "--trigger", "available-now", *more]  # fmt: skip
            code, out, err, seconds = run_pipeline(*command, env=spark_env(), timeout=420)
            print("%s: %.1f s\n%s" % (where, seconds, "\n".join(out)))
            assert (code, err) == (0, []), (code, err, out)
            rows_in = [batch[1] for batch in batch_lines(out)]
            assert rows_in == [len(readings["a"]) + len(readings["b"])], rows_in
            return written_aggregates(str(tmp_path / where / "out"))[0]

        assert_same(pipeline("cluster", "--master", cluster.url), expected)
    finally:
        code = hutch.stop()
    assert code == 0 and not hutch.errors(), hutch.log()[-3000:]

    # the cluster ran it: the application finished on the master, its executor on the worker
    apps = [app for app in cluster.master_state()["completedapps"] if app["name"] == "hutch-pipeline"]
    assert [app["state"] for app in apps] == ["FINISHED"], apps
    app_id = apps[0]["id"]
    executors = [e for e in cluster.worker_state()["finishedexecutors"] if e["appid"] == app_id]
    assert len(executors) == 1, cluster.worker_state()
    # ... and the executor ran Python tasks (the source's reads, the parsing of the readings)
    with open(os.path.join(cluster.work_dir, app_id, str(executors[0]["id"]), "stderr"), errors="replace") as f:
        executor_log = f.read()
    python_tasks = [line for line in executor_log.splitlines() if "Starting Python task execution" in line]
    finished = [line for line in executor_log.splitlines() if "Executor: Finished task" in line]
    assert python_tasks and finished, executor_log[-3000:]
    print("the executor's Python tasks:\n%s" % "\n".join(python_tasks))
