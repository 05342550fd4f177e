"""Running the real broker the way a user does (`hutch serve`, this virtualenv's), and the
helpers every system test shares: waiting for a condition another process brings about, a pika
connection that gives up quickly, stopping a process by its PID, Ctrl-C to a MicroPython
broker. The interop tests' fixtures (tests/interop/conftest.py) are built on these."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pika

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


def wait_for_port(port, proc, log_path, timeout=30, host="127.0.0.1"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError("broker exited with %s:\n%s" % (proc.returncode, read_log(log_path)))
        try:
            socket.create_connection((host, port), timeout=0.5).close()
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


def stop_all(*running):
    """Each of running stopped (.stop()), in order, even when one before it fails to stop: the
    first failure is raised once all were tried. (A broker left running by a failed test holds
    its port and CPU for the rest of the run.)"""
    failure = None
    for one in running:
        try:
            one.stop()
        except Exception as e:  # noqa: BLE001 (raised below, after the others)
            failure = failure or e
    if failure is not None:
        raise failure


def delete_users(rabbitmq, names):
    """Users deleted from a RabbitMQ in one rabbitmqctl call: each call starts an Erlang node of
    its own (about 2 s of CPU), and the permission tests made dozens of them."""
    listed = ",".join('<<"%s"/utf8>>' % name.replace("\\", "\\\\").replace('"', '\\"') for name in names)
    expression = '[rabbit_auth_backend_internal:delete_user(U, <<"tests">>) || U <- [%s]], ok.' % listed
    done = subprocess.run([rabbitmq.CTL, "eval", expression], env=rabbitmq.env, capture_output=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == b"ok", (done.stdout, done.stderr)


def says_listening(log, port, tls=False, host="127.0.0.1"):
    """Whether a broker's log says it listens on host:port (for AMQP 0-9-1, and 1.0 where it
    serves it: a CPython broker by default, a board's when its config asks)."""
    over = " over TLS" if tls else ""
    return any(
        "listening for %s%s on %s:%d" % (what, over, host, port) in log for what in ("AMQP 0-9-1", "AMQP 0-9-1 and 1.0")
    )


def read_log(path):
    with open(path, errors="replace") as f:
        return f.read()


class RunningBroker:
    def __init__(self, command, tmp_path, env=None, host="127.0.0.1"):
        self.host = host  # the address it listens on (--bind)
        self.base_command = command
        self.data = str(tmp_path / "data")
        self.log_path = str(tmp_path / "broker.log")
        self.env = env
        self.proc = None
        self._take_port(free_port())

    def _take_port(self, port):
        self.port = port
        self.command = self.base_command + ["--bind", self.host, "--port", str(port), "--data", self.data]

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
        wait_for_port(self.port, self.proc, self.log_path, host=self.host)
        wait_until(
            lambda: self.proc.poll() is not None or says_listening(self.log_since(offset), self.port, host=self.host),
            30,
            what="listening on port %d in the broker's log" % self.port,
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
        return "amqp://guest:guest@%s:%d/" % (self.host, self.port)


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
# differential tests (tests/accel/test_accel_scanner.py, tests/accel/test_accel_connection.py) prove the
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


def hutch_serve(tmp_path, config=None):
    """`hutch serve` on tmp_path's data folder (not started), with this config file's text."""
    command = [os.path.join(BIN, "hutch"), "serve"]
    if config is not None:
        path = tmp_path / "hutch.toml"
        path.write_text(config)
        command += ["--config", str(path)]
    return RunningBroker(command, tmp_path)


def failed_attempts(running, name):
    """How many links the broker's bridge `name` tried that did not run since one last ran, as
    `hutch ctl bridges --json` shows it (0 before it has said)."""
    done = subprocess.run(
        [os.path.join(BIN, "hutch"), "ctl", "bridges", "--json", "--data", running.data],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if done.returncode != 0 or not done.stdout.strip().startswith("{"):
        return 0
    found = [b for b in json.loads(done.stdout).get("bridges", []) if b["name"] == name]
    return found[0].get("failed_attempts", 0) if found else 0


def connect_retrying(running):
    """A pika connection to a broker that is (re)starting: a few attempts, 0.2 s apart."""
    return pika.BlockingConnection(
        pika.ConnectionParameters(
            "127.0.0.1", running.port, connection_attempts=3, retry_delay=0.2, blocked_connection_timeout=30
        )
    )


def sigkill(running):
    """SIGKILL a broker by its PID, as a power cut would end it, and close its log."""
    running.proc.send_signal(signal.SIGKILL)
    running.proc.wait()
    running.log_file.close()


def fresh_status(broker):
    """status.json as this start of the broker wrote it from now on (the one its killed
    predecessor left may still be there)."""
    since = time.time()
    wait_until(
        lambda: status(broker).get("pid") == broker.proc.pid and status(broker)["written_at"] > since,
        timeout=30,
        what="status.json",
    )
    return status(broker)


def status(broker):
    """The broker's status.json (what `hutch ctl status` reads), {} before it is written."""
    try:
        with open(os.path.join(broker.data, "status.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}
