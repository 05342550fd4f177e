"""Start the real broker the way a user does (`hutch serve`) for the interop tests.

The `broker` fixture runs `hutch serve --bind 127.0.0.1 --port FREE --data TMP`
from this virtualenv, waits until it accepts connections, and at the end stops
it with SIGTERM. A broker log line at ERROR level (an internal error, a
traceback) fails the test that caused it, even if the client did not notice.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pika
import pytest

from hutch.bench.brokers import free_port  # below the ephemeral ports: a restarted broker finds its port free

BIN = os.path.dirname(sys.executable)


def wait_until(predicate, timeout=10.0, what=None, interval=0.02, between=None):
    """Poll predicate() until it returns something true, and return that; fail after timeout
    seconds. For conditions another process brings about (a log line, a file, a queue's
    count): the test waits as long as it takes and no longer, instead of sleeping a guess.
    what: what was awaited, said on failure (a string, or a function giving it)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            if callable(what):  # what to say, made only now (a log's tail)
                what = what()
            raise AssertionError("not within %.1fs: %s" % (timeout, what or getattr(predicate, "__name__", predicate)))
        if between is None:
            time.sleep(interval)  # the polling interval, not a guess at how long something takes
        else:
            between()


def pump_until(connection, predicate, timeout=10.0, what=None):
    """As wait_until, for a pika BlockingConnection: its I/O runs while it waits, so the
    callbacks that make predicate() true can fire."""
    return wait_until(predicate, timeout, what, between=lambda: connection.process_data_events(time_limit=0.02))


def pika_connection(broker, heartbeat=10, blocked_connection_timeout=30):
    """A pika BlockingConnection to a test's broker that gives up within seconds, not minutes,
    if the broker stops answering."""
    params = pika.ConnectionParameters(
        broker.host,
        broker.port,
        credentials=pika.PlainCredentials("guest", "guest"),
        heartbeat=heartbeat,
        blocked_connection_timeout=blocked_connection_timeout,
        socket_timeout=10,
        stack_timeout=15,
    )
    return pika.BlockingConnection(params)


def wait_for_port(port, proc, log_path, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError("broker exited with %s:\n%s" % (proc.returncode, read_log(log_path)))
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)  # the polling interval
    raise AssertionError("broker did not listen on %d within %ds:\n%s" % (port, timeout, read_log(log_path)))


def terminate(proc, timeout, what, log):
    """Stop a process we started with SIGTERM; kill it and fail if it ignores that. The exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError("%s did not stop within %ds of SIGTERM:\n%s" % (what, timeout, log()))
    return proc.returncode


def read_log(path):
    with open(path, errors="replace") as f:
        return f.read()


class RunningBroker:
    host = "127.0.0.1"

    def __init__(self, command, tmp_path, env=None):
        self.base_command = command
        self.data = str(tmp_path / "data")
        self.log_path = str(tmp_path / "broker.log")
        self.env = env
        self.proc = None
        self._take_port(free_port())

    def _take_port(self, port):
        self.port = port
        self.command = self.base_command + ["--bind", "127.0.0.1", "--port", str(port), "--data", self.data]

    def start(self):
        """Start the broker (again: on the same port and data folder) and wait until it listens.

        free_port()'s port is only free until the broker binds it: with tests running in
        parallel, another test's client or broker may take it meanwhile. So the listener must
        be this broker (its log says it listens on the port), and if the port was taken
        before the first start, the broker gets another one."""
        first = self.proc is None
        for attempt in range(3):
            fresh_data = not os.path.exists(self.data)
            self.log_file = open(self.log_path, "a")
            offset = self.log_file.tell()
            self.proc = subprocess.Popen(self.command, stdout=self.log_file, stderr=subprocess.STDOUT, env=self.env)
            try:
                self._wait_listening(offset)
                return self
            except AssertionError:
                taken = "cannot listen on" in self.log_since(offset)
                if not (first and taken and attempt < 2):
                    raise
            # the port was taken between free_port() and the broker's bind: start on another
            self.proc.wait(10)
            self.log_file.close()
            os.replace(self.log_path, "%s.port-taken-%d" % (self.log_path, attempt))
            if fresh_data:
                shutil.rmtree(self.data, ignore_errors=True)
            self._take_port(free_port())

    def _wait_listening(self, offset):
        listening = "listening for AMQP 0-9-1 on 127.0.0.1:%d" % self.port
        wait_for_port(self.port, self.proc, self.log_path)
        wait_until(
            lambda: self.proc.poll() is not None or listening in self.log_since(offset),
            30,
            what="%r in the broker's log" % listening,
        )
        if self.proc.poll() is not None:
            raise AssertionError("broker exited with %s:\n%s" % (self.proc.returncode, self.log()))

    def log_since(self, offset):
        """The log from byte offset on (what this start of the broker wrote)."""
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")

    def stop(self, timeout=15):
        """SIGTERM, as a service manager would; returns the exit code."""
        code = terminate(self.proc, timeout, "broker", self.log)
        self.log_file.close()
        return code

    def log(self):
        return read_log(self.log_path)

    def errors(self):
        return [line for line in self.log().splitlines() if " ERROR " in line or "Traceback" in line]

    @property
    def url(self):
        return "amqp://guest:guest@127.0.0.1:%d/" % self.port


def interrupt(running, timeout=15):
    """Ctrl-C to a MicroPython broker (SIGINT by PID: it has no signal module); the exit code."""
    running.proc.send_signal(signal.SIGINT)
    try:
        return running.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError("the broker did not stop within %d s of Ctrl-C:\n%s" % (timeout, running.log()[-3000:]))


def interrupt_between_collections(running, timeout=15):
    """interrupt() a MicroPython broker that logs its stats every second just after a stats
    line is written. Each stats report collects garbage first, and the unix port raises Ctrl-C
    wherever its C code is: one that lands inside a collection leaves the heap locked and the
    broker exits with a traceback (README). Right after a report the next collection is a
    second away on an idle broker."""
    reports = running.log().count(" stats: ")
    wait_until(lambda: running.log().count(" stats: ") > reports, timeout=10, what="a stats line")
    return interrupt(running, timeout)


def blocked_notices(connection):
    """A list that fills with "blocked"/"unblocked" as the broker sends them to this pika connection."""
    notices = []
    connection.add_on_connection_blocked_callback(lambda conn, method: notices.append("blocked"))
    connection.add_on_connection_unblocked_callback(lambda conn, method: notices.append("unblocked"))
    return notices


def drain(channel, queue, count, publisher, timeout=30):
    """basic_get up to count bodies from queue; while it is empty, let the (paused) publisher's
    pika connection run, so the publishes the broker held back come through."""
    received = []
    deadline = time.monotonic() + timeout
    while len(received) < count and time.monotonic() < deadline:
        method, _props, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            publisher.process_data_events(time_limit=0.05)
            continue
        received.append(body)
    return received


# The broker's frame scanner. `broker` runs the default one, the C accelerator: the
# differential tests (tests/test_accel_scanner.py, tests/test_accel_connection.py) prove the
# pure-Python scanner answers byte for byte as the C one does, so running every client test
# against both would show nothing more. The tests that do run against both (the smoke test,
# the real-traffic test) ask for it with
#     @pytest.mark.parametrize("broker", sorted(SCANNERS), indirect=True)
# and every broker started here must log the scanner it was asked for.
SCANNERS = {
    "c": ("0", "frame scanner: C accelerator"),
    "python": ("1", "frame scanner: pure Python"),
}
DEFAULT_SCANNER = "c"


@pytest.fixture
def broker(request, tmp_path):
    scanner = getattr(request, "param", DEFAULT_SCANNER)
    pure_python, log_line = SCANNERS[scanner]
    env = dict(os.environ, HUTCH_PURE_PYTHON=pure_python)
    running = RunningBroker([os.path.join(BIN, "hutch"), "serve"], tmp_path, env=env).start()
    running.scanner = scanner
    running.kind = "hutch"
    if log_line not in running.log():
        running.stop()  # not left running behind a failed test
        raise AssertionError("expected %r in the log:\n%s" % (log_line, running.log()))
    yield running
    code = running.stop()
    assert not running.errors(), "broker logged errors:\n" + running.log()[-5000:]
    assert code == 0, "broker exited with %s:\n%s" % (code, running.log()[-3000:])


@pytest.fixture(autouse=True)
def grouped_by_xdist(request):
    """Under `--dist loadgroup` (pyproject.toml's addopts) pytest-xdist sends the tests of one
    xdist_group to one worker by adding "@group" to their node IDs in each worker. Some pytest
    and pytest-xdist releases together lose that without a word (pytest 9.2 with pytest-xdist
    3.8: pytest-xdist issue 1386): the group's tests would spread over the workers, each
    building the group's shared fixtures. Such a test fails instead."""
    if getattr(request.config.option, "loadgroup", False):  # set in pytest-xdist's workers only
        names = set()
        for mark in request.node.iter_markers("xdist_group"):
            names.add(str(mark.args[0] if mark.args else mark.kwargs.get("name", "default")))
        if names and not request.node.nodeid.endswith("@" + "_".join(sorted(names))):
            pytest.fail(
                "pytest-xdist did not put this test in its xdist_group %s: this pytest and "
                "pytest-xdist do not group tests (see the pin of pytest in pyproject.toml)" % sorted(names)
            )


# ---------------------------------------------------------------- the RabbitMQ of a run


@pytest.fixture(scope="session")
def rabbitmq(tmp_path_factory):
    """Debian's rabbitmq-server, one for the whole run (bench/brokers.py RabbitMQ: its own folder,
    free ports on 127.0.0.1, no plugins), stopped at the end. The tests that use it carry
    xdist_group("rabbitmq"), so one worker runs them all and it starts once; the benchmark
    tests, which start RabbitMQs of their own and count beam processes, are in that group too."""
    from hutch.bench.brokers import RabbitMQ

    server = RabbitMQ(str(tmp_path_factory.mktemp("rabbitmq")))
    try:
        server.start()
    except BaseException:
        server.stop()
        raise
    server.kind = "rabbitmq"
    yield server
    server.stop()


# ---------------------------------------------------------------- the Spark session of a run
#
# Two xdist groups hold what is slow, each run by one worker, one test after another, while
# the other workers take the rest: "rabbitmq" (the run's RabbitMQ, and the Spark session below,
# since some of its tests compare the two) and "spark" (the tests that start Spark jobs of
# their own: `hutch pipeline`, the exactly-once kills, the standalone cluster, `hutch bench
# --spark`). A Spark job keeps both cores busy; several at once on a 2-core machine took five
# times as long each (one CI run), so they go one at a time, beside the RabbitMQ group.


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """One local Spark session for the whole run (starting one takes 10 s and more): two cores,
    quiet, on 127.0.0.1 only, its Python workers running this virtualenv's Python. The tests
    that use it carry xdist_group("rabbitmq") so that one worker runs them all (some compare
    with the run's RabbitMQ), and the session starts once. At the end the session stops, and
    the JVM that PySpark launched for it is stopped by its PID."""
    os.environ["PYSPARK_PYTHON"] = sys.executable  # the executors' Python workers: hutch is installed here
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    scratch = tmp_path_factory.mktemp("spark")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("hutch-tests")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.local.dir", str(scratch))
        .config("spark.sql.warehouse.dir", str(scratch / "warehouse"))
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    jvm = getattr(SparkContext._gateway, "proc", None)
    try:
        yield session
    finally:
        session.stop()
        if jvm is not None:
            SparkContext._gateway.shutdown()
            terminate(jvm, 30, "Spark's JVM", lambda: "")
