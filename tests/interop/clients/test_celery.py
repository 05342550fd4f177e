"""Celery: a real worker subprocess and a client, both talking to the real `hutch serve`.

The worker is `python -m celery -A py_celery_app worker --pool=solo` (the app
in py_celery_app.py), started with HUTCH_BROKER_URL pointing at the broker
fixture; results come back with the rpc:// result backend. Covers: task
results, a task whose exception comes back to the caller, a chain (the worker
publishes the next task), a group, a retry with countdown (re-published with an
ETA, held unacked by the worker), a result larger than frame_max, and the
worker's warm shutdown on SIGTERM. The worker is stopped by its PID.
"""

import os
import subprocess
import sys
import time

import py_celery_app
import pytest
from brokers import terminate
from celery import chain, group
from paths import SUPPORT

# A blocking client waits for ever for a reply that never comes: fail the test instead.
pytestmark = pytest.mark.timeout(90)


class Worker:
    def __init__(self, broker, tmp_path):
        self.log_path = str(tmp_path / "celery-worker.log")
        env = dict(os.environ)
        env["HUTCH_BROKER_URL"] = broker.url
        env["PYTHONPATH"] = SUPPORT + os.pathsep + env.get("PYTHONPATH", "")
        self.log_file = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "py_celery_app",
                "worker",
                "--pool=solo",
                "-c",
                "1",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "--loglevel=INFO",
                "-n",
                "hutch-test@%h",
            ],
            cwd=SUPPORT,
            env=env,
            stdout=self.log_file,
            stderr=subprocess.STDOUT,
        )

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def wait_ready(self, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("celery worker exited with %s:\n%s" % (self.proc.returncode, self.log()))
            if " ready." in self.log():
                return
            time.sleep(0.1)
        raise AssertionError("celery worker not ready within %ds:\n%s" % (timeout, self.log()))

    def stop(self, timeout=15):
        """SIGTERM is Celery's warm shutdown; returns the exit code."""
        code = terminate(self.proc, timeout, "celery worker", self.log)
        self.log_file.close()
        return code


@pytest.fixture
def worker(broker, tmp_path):
    w = Worker(broker, tmp_path)
    try:
        w.wait_ready()
        yield w
    finally:
        code = w.stop()
    assert code == 0, w.log()
    assert "Connection to broker lost" not in w.log(), w.log()


@pytest.fixture
def client(broker):
    app = py_celery_app.make_client(broker.url)
    yield app
    # Close the client's two connections (rpc result consumer, producer pool) with
    # connection.close; app.close() alone leaves them open until the broker stops.
    result_consumer = app.backend.result_consumer
    if result_consumer._consumer is not None:
        result_consumer.stop()
    app.pool.force_close_all()
    app.close()


def test_tasks_and_results_over_rpc(worker, client):
    results = [client.send_task("hutch.add", (i, i * 10)) for i in range(10)]
    assert [r.get(timeout=15) for r in results] == [i * 11 for i in range(10)]
    assert all(r.state == "SUCCESS" for r in results)
    assert client.signature("hutch.add", args=(2, 3)).delay().get(timeout=15) == 5


def test_task_exception_comes_back(worker, client):
    result = client.send_task("hutch.fail", ("sensor offline",))
    with pytest.raises(ValueError, match="sensor offline"):
        result.get(timeout=15)
    assert result.state == "FAILURE"
    assert isinstance(result.result, ValueError)
    # the worker is still serving after a failed task
    assert client.send_task("hutch.add", (1, 1)).get(timeout=15) == 2


def test_chain_group_retry_and_large_result(worker, client):
    def add(*args):
        return client.signature("hutch.add", args=args)

    # a chain: the worker itself publishes each next step to the broker
    assert chain(add(2, 3), add(10), add(100)).apply_async().get(timeout=20) == 115
    # a group: several results collected over the same rpc reply queue
    assert group(add(i, i) for i in range(8)).apply_async().get(timeout=20) == [2 * i for i in range(8)]
    # a retry: the task is re-published with an ETA twice before it succeeds
    assert client.send_task("hutch.flaky", (2,)).get(timeout=20) == 2
    # a result bigger than frame_max (131072) comes back in several body frames
    big = "0123456789abcdef" * 20000
    assert client.send_task("hutch.echo", (big,)).get(timeout=20) == big


def test_worker_warm_shutdown_on_sigterm(broker, tmp_path, client):
    w = Worker(broker, tmp_path)
    try:
        w.wait_ready()
        assert client.send_task("hutch.add", (20, 22)).get(timeout=15) == 42
    finally:
        code = w.stop()
    log = w.log()
    assert code == 0, log
    # the worker never lost its broker connection during the run
    assert "Connection to broker lost" not in log and "Cannot connect" not in log, log
    assert "Connected to amqp://guest:**@127.0.0.1:%d//" % broker.port in log
