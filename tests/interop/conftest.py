"""The interop tests' fixtures: `broker` runs `hutch serve --bind 127.0.0.1 --port FREE --data
TMP` from this virtualenv, waits until it accepts connections, and at the end stops it with
SIGTERM; a broker log line at ERROR level (an internal error, a traceback) fails the test that
caused it, even if the client did not notice. `rabbitmq` and `spark` are one per run. The
helpers they use (RunningBroker, wait_until, ...) are in tests/support/brokers.py.
"""

import os
import signal
import subprocess

import pytest
from brokers import BIN, DEFAULT_SCANNER, SCANNERS, RunningBroker, free_port, terminate
from micropython_env import micropython, serve_env


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


@pytest.fixture
def mp_broker(tmp_path):
    """hutch serve under MicroPython's unix port (its debug log), stopped with Ctrl-C."""
    env = serve_env(tmp_path)
    running = RunningBroker(
        [micropython(), "-m", "hutch.server.serve", "--log-level", "debug"], tmp_path, env=env
    ).start()
    try:
        yield running
    finally:
        if running.proc.poll() is None:
            running.proc.send_signal(signal.SIGINT)
            try:
                running.proc.wait(15)
            except subprocess.TimeoutExpired:
                running.proc.kill()
                running.proc.wait()
        running.stop()  # the process has exited: this only closes the log
        print(running.log()[-5000:])  # shown by pytest when the test failed


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
    free ports on 127.0.0.1), stopped at the end. Its plugins: rabbitmq_amqp1_0, AMQP 1.0 on the
    same port, for the bridges that forward over 1.0 (it adds no measurable start time: 4.2-4.6 s
    with it and without it, load average 5-7), and rabbitmq_mqtt on mqtt_port, for the MQTT
    tests' AMQP side, and rabbitmq_web_mqtt on web_mqtt_port (path /ws) for MQTT over WebSocket's.
    One per pytest-xdist worker, started by the worker's first test that
    needs one: the tests against RabbitMQ are spread over the workers like any other (one
    worker running them all, one after another, was the run's longest chain: 175 tests, 20
    minutes). Each worker's tests run one at a time, so no two tests meet in its RabbitMQ;
    a start costs about 5 s of CPU."""
    from hutch.bench.brokers import RabbitMQ

    mqtt_port, web_mqtt_port = free_port(), free_port()
    server = RabbitMQ(
        str(tmp_path_factory.mktemp("rabbitmq")),
        conf=(
            "mqtt.listeners.tcp.1 = 127.0.0.1:%d" % mqtt_port,
            "web_mqtt.tcp.ip = 127.0.0.1",
            "web_mqtt.tcp.port = %d" % web_mqtt_port,
        ),
        plugins=("rabbitmq_amqp1_0", "rabbitmq_mqtt", "rabbitmq_web_mqtt"),
    )
    server.mqtt_port = mqtt_port
    server.web_mqtt_port = web_mqtt_port  # (MQTT over WebSocket, path /ws: the oracle of ports/websocket.py)
    try:
        server.start()
    except BaseException:
        server.stop()
        raise
    server.kind = "rabbitmq"
    yield server
    server.stop()


@pytest.fixture(scope="session")
def rabbitmq_cluster(tmp_path_factory):
    """Three Debian rabbitmq-server nodes as one cluster (bench/brokers.py RabbitMQCluster), for
    the tests of the xdist group "cluster", which one worker runs one after another: started
    once, by the first of them (about 13 s, 140 MB a node). Each node's mqtt_port is in its
    config for RabbitMQ's MQTT plugin, which a test starts on the nodes for itself
    (test_bridge_cluster.py mqtt_plugin). A test that kills or stops a node starts it again
    before it ends: the next test finds three nodes."""
    from hutch.bench.brokers import RabbitMQCluster

    mqtt_ports = [free_port() for _ in range(3)]
    cluster = RabbitMQCluster(
        str(tmp_path_factory.mktemp("cluster")),
        conf=lambda i: ("mqtt.listeners.tcp.1 = 127.0.0.1:%d" % mqtt_ports[i],),
    )
    for node, port in zip(cluster.nodes, mqtt_ports):
        node.mqtt_port = port
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


# ---------------------------------------------------------------- the Spark session of a run
#
# Three xdist groups hold what Spark starts, each run by one worker, one test after another,
# while the other workers take the rest: "spark-session" (the tests that use the Spark session
# below, which then starts once), "spark" (the tests that start Spark jobs of their own:
# `hutch pipeline`, the standalone cluster, `hutch bench --spark`) and "spark-kills" (the
# exactly-once kills of test_pipeline_exactly_once.py). A Spark job keeps both cores busy, so
# one chain of them would do as well as two on this 2-core machine, were it not the run's
# longest: alone, "spark" and "spark-kills" were 680 s of a 980 s run.
SPARK_JOB_GROUPS = ("spark", "spark-kills")


@pytest.fixture(autouse=True)
def spark_groups_start_quickly(request):
    """Every test of SPARK_JOB_GROUPS has spark_jvm, wherever it is (one place for the rule)."""
    if any(
        mark.args[:1] in [(name,) for name in SPARK_JOB_GROUPS] for mark in request.node.iter_markers("xdist_group")
    ):
        request.getfixturevalue("spark_jvm")


@pytest.fixture(scope="session")
def spark_jvm(tmp_path_factory):
    """The Spark jobs of the tests that ask for this start from a class-data-sharing archive
    made once per run (tests/support/spark_jvm.py: about half the CPU of each start), by the
    first worker that needs it while any other waits: every driver started after this fixture,
    by any test of the worker, gets it through SPARK_SUBMIT_OPTS, and the standalone cluster's
    master and worker the quicker JIT."""
    from spark_jvm import compiled_pyspark_python, quick_jvm, quick_start_options, shared_class_archive

    archive = shared_class_archive(run_folder(tmp_path_factory))
    scratch = str(tmp_path_factory.mktemp("spark-jvm-tmp"))
    names = ("SPARK_SUBMIT_OPTS", "SPARK_DAEMON_JAVA_OPTS", "PYSPARK_PYTHON")
    saved = {name: os.environ.get(name) for name in names}
    os.environ["SPARK_SUBMIT_OPTS"] = quick_start_options(archive, scratch)
    os.environ["SPARK_DAEMON_JAVA_OPTS"] = quick_jvm(scratch)
    os.environ["PYSPARK_PYTHON"] = compiled_pyspark_python(scratch)
    yield archive
    for name, value in saved.items():  # the run's last test may not be of the group
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def run_folder(tmp_path_factory):
    """The run's temporary folder, shared by its pytest-xdist workers (each has a folder of its
    own in it); without xdist, the process's own."""
    base = tmp_path_factory.getbasetemp()
    return str(base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base)


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """One local Spark session for the whole run (starting one takes 10 s and more): two cores,
    quiet, on 127.0.0.1 only, its Python workers running this virtualenv's Python. The tests
    that use it carry xdist_group("spark-session") so that one worker runs them all, and the
    session starts once. At the end the session stops, and
    the JVM that PySpark launched for it is stopped by its PID."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession
    from spark_jvm import compiled_pyspark_python, quick_driver

    scratch = tmp_path_factory.mktemp("spark")
    # the executors' Python workers: this virtualenv's, where hutch is installed (spark_jvm)
    os.environ["PYSPARK_PYTHON"] = compiled_pyspark_python(str(scratch))
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
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
        # the client compiler, the serial collector and interpreted SQL, as the "spark" group's
        # jobs, and its temporary files in scratch (spark_jvm)
        .config("spark.driver.extraJavaOptions", quick_driver(scratch))
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
