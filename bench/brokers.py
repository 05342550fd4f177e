"""The brokers `hutch bench` runs and measures: hutch (`Hutch`, started here), Debian's
rabbitmq-server (`RabbitMQ`, started here in a folder of its own), or one already running
(`External`); free ports, waiting for a broker to answer AMQP, resident memory, stopping by PID.
The tests start their RabbitMQ with this module too (tests/interop/conftest.py).
"""

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from ..emulator.micropython_host import micropython, serve_env
from . import loadgen


class BenchError(Exception):
    """Something the user can fix: one line for the terminal."""


def free_port():
    """A free port on 127.0.0.1 below the kernel's ephemeral range. A broker stopped or
    SIGKILLed and started again on its port must find it free, and a port the kernel hands
    out itself (bind to port 0, connect) may meanwhile be handed to another process: a
    test's proxy, a Spark listener, a client. A restart then fails with "address already in
    use" (the bridge soak's edge did once, and later its RabbitMQ, taking the rest of the
    run's RabbitMQ tests with it).

    Nor is a port handed out twice by one process, and HUTCH_FREE_PORTS ("LOW-HIGH") narrows
    the range: tests/conftest.py gives each pytest-xdist worker a range of its own, since a
    port free while its broker restarts may be drawn by another worker's test (a soak's
    RabbitMQ came back to find a hutch on its port, and the soak read that hutch's queues)."""
    low, high = _free_port_range()
    if len(_handed_out) > (high - low) // 2:
        _handed_out.clear()  # (a long run has drawn half the range: the oldest are long gone)
    while True:
        port = random.randrange(low, high) if high > low + 1000 else 0
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            port = s.getsockname()[1]
        _handed_out.add(port)
        return port


_handed_out = set()  # the ports free_port gave in this process


def _free_port_range():
    bounds = os.environ.get("HUTCH_FREE_PORTS", "").partition("-")
    if bounds[0].isdigit() and bounds[2].isdigit():
        return int(bounds[0]), int(bounds[2])
    return 10000, _ephemeral_ports_start()


def _ephemeral_ports_start():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def wait_for_amqp(host, port, proc, what, timeout):
    """Until a handshake succeeds (or proc dies, or time runs out)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise BenchError("%s exited with code %s while starting" % (what, proc.returncode))
        try:
            loadgen.Connection(host, port, 5).close()
            return
        except (OSError, loadgen.LoadError):
            time.sleep(0.05)  # the polling interval: a restart's time is measured by this loop
    raise BenchError("%s did not accept AMQP connections on %s:%d within %ds" % (what, host, port, timeout))


def wait_for_port(host, port, proc, what, timeout):
    """Until a TCP connection to port succeeds (a listener that is not AMQP's: MQTT, WebSocket)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline or (proc is not None and proc.poll() is not None):
                raise BenchError("%s did not listen on %s:%d" % (what, host, port))
            time.sleep(0.05)


def cpu_seconds(pid):
    """CPU time (user and system) process pid has used so far, or None without a pid (an
    --rabbitmq broker given without --rabbitmq-pid)."""
    if pid is None:
        return None
    user, system = cpu_times(pid)
    return user + system


def cpu_times(pid):
    """(user, system) CPU seconds process pid has used so far."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise BenchError("no VmRSS for process %d" % pid)


def stop_process(proc, timeout=20):
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)  # hutch and micropython both stop cleanly on Ctrl-C
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def tls_certificate(folder):
    """A certificate and key (PEM files) for 127.0.0.1 and localhost, made by the openssl command
    for the TLS rows (ECDSA P-256, as a device's broker would have): (cert, key). The clients
    check the brokers against the certificate itself (tls_client)."""
    cert, key = os.path.join(folder, "bench-tls.pem"), os.path.join(folder, "bench-tls.key")
    command = ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    command += ["-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=localhost"]
    command += ["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"]
    try:
        subprocess.run(command, capture_output=True, check=True, timeout=60)
    except (OSError, subprocess.CalledProcessError) as e:
        raise BenchError("the TLS rows need the openssl command to make a certificate: %s" % e)
    return cert, key


def tls_client(cert):
    """The client side of the TLS rows: the broker's certificate checked against itself."""
    import ssl

    return ssl.create_default_context(cafile=cert)


class Hutch:
    """`hutch serve` started here (CPython, C scanner or pure Python; or the MicroPython unix port)."""

    tls_port = None  # a TLS listener's port (the TLS rows), or None

    mqtt_port = None  # its MQTT listener's port (hutch bench --mqtt), or None
    mqtt_ws_port = None  # its MQTT over WebSocket listener's port (beside the MQTT one), or None

    def __init__(self, kind, workdir, folder=None, config=None, tls=None, mqtt=False):
        """folder: a previous run's (its data folder is used again: a restart); config: a config
        file; tls: (certificate, key) files for a TLS listener beside the plain one; mqtt: an
        MQTT listener too, and one of MQTT over WebSocket."""
        self.kind = kind
        self.host, self.port = "127.0.0.1", free_port()
        folder = folder or tempfile.mkdtemp(prefix="hutch-bench-%s-" % kind, dir=workdir)
        self.folder = folder
        common = ["--bind", self.host, "--port", str(self.port), "--log-level", "info"]
        self.metrics_port = None
        if kind != "micropython":  # (scraped by the scraped-no-ack scenario only)
            self.metrics_port = free_port()
            common += ["--metrics-port", str(self.metrics_port)]
        if config is not None:
            common += ["--config", config]
        if mqtt:
            self.mqtt_port, self.mqtt_ws_port = free_port(), free_port()
            common += ["--mqtt-port", str(self.mqtt_port), "--mqtt-ws-port", str(self.mqtt_ws_port)]
        if tls is not None:
            self.tls_port = free_port()
            common += ["--tls-port", str(self.tls_port), "--certfile", tls[0], "--keyfile", tls[1]]
        if kind == "micropython":
            command = [micropython(), "-m", "hutch.server.serve"] + common
            env = serve_env(folder)
        else:
            command = [
                sys.executable,
                "-m",
                "hutch.tools.cli",
                "serve",
                "--data",
                os.path.join(folder, "data"),
            ] + common
            env = dict(os.environ, HUTCH_PURE_PYTHON="1" if kind == "pure" else "0")
        self.log = open(os.path.join(folder, "broker.log"), "a+")
        self.proc = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=folder)
        self.pid = self.proc.pid

    def start(self, timeout=30):
        """Until it accepts AMQP connections (and MQTT ones, with MQTT listeners: they come up
        after the AMQP one); timeout: seconds (a restart with a backlog needs more)."""
        wait_for_amqp(self.host, self.port, self.proc, "hutch (%s)" % self.kind, timeout)
        for port in (self.mqtt_port, self.mqtt_ws_port):
            if port is not None:
                wait_for_port(self.host, port, self.proc, "hutch (%s)" % self.kind, timeout)
        return self

    def scanner(self):
        """What the broker's log says of its frame scanner (None on MicroPython: it has one)."""
        self.log.seek(0)
        for line in self.log:
            if "frame scanner: " in line:
                return line.split("frame scanner: ", 1)[1].strip()
        return None

    def stop(self, timeout=20):
        """SIGINT; killed if it has not stopped within timeout seconds (freeing millions of
        queued messages on the way out takes a while)."""
        stop_process(self.proc, timeout)
        self.log.close()


class RabbitMQ:
    """Debian's rabbitmq-server, started in a folder of its own on ports of its own.

    The node, its distribution port and its epmd all listen on 127.0.0.1 only, on free
    ports, so a system RabbitMQ (on 5672/25672, epmd 4369) is neither used nor disturbed.
    The wrapper script is bypassed (as root it would switch to the rabbitmq user)."""

    SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"
    CTL = "/usr/lib/rabbitmq/bin/rabbitmqctl"
    tls_port = None  # its TLS listener's port (the TLS rows), or None

    def __init__(self, workdir, previous=None, tls=None, conf=(), plugins=(), cluster=None):
        """previous: a stopped RabbitMQ of this run, started again as the same node on the same
        folder and ports (a restart: its durable queues and messages come back); tls:
        (certificate, key) files for a TLS listener (listeners.ssl) beside the plain one, which
        verifies no client certificate unless conf says otherwise; conf: more lines of
        rabbitmq.conf; plugins: the plugins to enable (none by default); cluster: (a HOME
        shared with the cluster's other nodes, for its one Erlang cookie, their epmd's port,
        this node's name), for RabbitMQCluster."""
        if not os.path.exists(self.SERVER):
            raise BenchError(
                "rabbitmq-server is not installed (%s is missing): apt-get install rabbitmq-server" % self.SERVER
            )
        if previous is not None:
            self.host, self.port, self.home, self.env = previous.host, previous.port, previous.home, previous.env
            self.tls_port = previous.tls_port
            self._launch()
            return
        self.host, self.port = "127.0.0.1", free_port()
        self.home = home = tempfile.mkdtemp(prefix="rabbitmq-bench-", dir=workdir)
        shared_home, epmd_port, self.node = cluster or (home, free_port(), "bench%d@localhost" % self.port)
        config = os.path.join(home, "rabbitmq")
        with open(config + ".conf", "w") as f:
            f.write("listeners.tcp.1 = 127.0.0.1:%d\nloopback_users = none\n" % self.port)
            if tls is not None:
                self.tls_port = free_port()
                # TLS 1.3 and 1.2, as hutch (3.10 on OTP 25 would offer 1.0 and 1.1 too); the
                # client negotiates the same protocol and suite with both brokers
                f.write(
                    "listeners.ssl.1 = 127.0.0.1:%d\nssl_options.certfile = %s\nssl_options.keyfile = %s\n"
                    "ssl_options.versions.1 = tlsv1.3\nssl_options.versions.2 = tlsv1.2\n"
                    % (self.tls_port, tls[0], tls[1])
                )
                if not any(line.startswith("ssl_options.verify") for line in conf):
                    f.write("ssl_options.verify = verify_none\nssl_options.fail_if_no_peer_cert = false\n")
            for line in conf:
                f.write(line + "\n")
        with open(os.path.join(home, "enabled_plugins"), "w") as f:
            f.write("[%s].\n" % ",".join(plugins))
        open(os.path.join(home, "rabbitmq-env.conf"), "w").close()
        self.env = dict(
            os.environ,
            HOME=shared_home,
            RABBITMQ_NODENAME=self.node,
            RABBITMQ_NODE_IP_ADDRESS=self.host,
            RABBITMQ_NODE_PORT=str(self.port),
            RABBITMQ_DIST_PORT=str(free_port()),
            ERL_EPMD_ADDRESS=self.host,
            ERL_EPMD_PORT=str(epmd_port),
            RABBITMQ_MNESIA_BASE=os.path.join(home, "mnesia"),
            RABBITMQ_LOG_BASE=os.path.join(home, "log"),
            RABBITMQ_CONF_ENV_FILE=os.path.join(home, "rabbitmq-env.conf"),
            RABBITMQ_CONFIG_FILE=config,
            RABBITMQ_ENABLED_PLUGINS_FILE=os.path.join(home, "enabled_plugins"),
            RABBITMQ_ENABLED_PLUGINS=",".join(plugins),
            RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}",
        )
        self._launch()

    def _launch(self):
        self.log = open(os.path.join(self.home, "stdout.log"), "a+")
        self.proc = subprocess.Popen(
            [self.SERVER], stdout=self.log, stderr=subprocess.STDOUT, env=self.env, cwd=self.home
        )
        self.pid = None

    def start(self, timeout=90):
        wait_for_amqp(self.host, self.port, self.proc, "rabbitmq-server", timeout)
        # the wrapper is a shell script; the broker (whose memory counts) is its beam.smp child
        children = subprocess.run(["pgrep", "-P", str(self.proc.pid), "beam.smp"], capture_output=True, text=True)
        self.pid = int(children.stdout.split()[0]) if children.stdout.split() else None
        return self

    def relaunch(self, timeout=90):
        """Started again after a SIGKILL as the same node (its data, ports and name: a cluster's
        node rejoins its cluster)."""
        self.proc.wait(30)  # (the wrapper script follows its beam)
        self.log.close()
        self._launch()
        return self.start(timeout)

    def restart(self):
        """Stopped and started again as the same node, on the same port and data (a fault test's
        upstream going away and coming back)."""
        self.stop()
        self._launch()
        return self.start()

    def stop(self, timeout=600, epmd=True):
        """SIGTERM to the node, which stops as `rabbitmqctl stop` stops it (its queues and
        messages written out: "SIGTERM received - shutting down") without the second Erlang VM
        rabbitmqctl starts, a second of CPU each; killed if it has not ended within timeout s
        (a node holding millions of messages may take minutes to write its indexes out)."""
        try:
            if self.pid is not None:
                os.kill(self.pid, signal.SIGTERM)
                self.proc.wait(timeout)
            else:  # (not started as far as start() saw: no node of its own to signal)
                subprocess.run([self.CTL, "stop"], env=self.env, capture_output=True, timeout=timeout)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            pass  # killed below, or gone already
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            if self.pid is not None:
                try:
                    os.kill(self.pid, signal.SIGKILL)  # the beam.smp this node started, not only its wrapper
                except ProcessLookupError:
                    pass
            self.proc.kill()
            self.proc.wait()
        # epmd was started by the node and outlives it: stop the one on this run's port (not while
        # the other nodes of its cluster use it: epmd=False)
        if epmd:
            tool = shutil.which("epmd") or "/usr/lib/erlang/bin/epmd"
            subprocess.run([tool, "-kill"], env=self.env, capture_output=True, timeout=30)
        self.log.close()


class RabbitMQCluster:
    """Debian's rabbitmq-server nodes (three by default) on this machine, as one cluster: one
    HOME for their one Erlang cookie, one epmd, each node its own name, folder and ports (AMQP,
    distribution, and its plugins' listeners: conf(i) gives node i's lines), all on 127.0.0.1.
    They form the cluster as they boot, one after another (RabbitMQ's classic_config peer
    discovery: each blank node joins the first it reaches of the list, as `rabbitmqctl
    join_cluster` would make it, without the Erlang VM each rabbitmqctl call starts). About
    140 MB each. Stopped by the PIDs started here."""

    def __init__(self, workdir, count=3, conf=lambda i: (), plugins=()):
        self.folder = tempfile.mkdtemp(prefix="rabbitmq-cluster-", dir=workdir)
        home = os.path.join(self.folder, "home")
        os.mkdir(home)
        cookie = os.path.join(home, ".erlang.cookie")
        with open(cookie, "w") as f:
            f.write("hutch%d" % random.getrandbits(64))
        os.chmod(cookie, 0o400)
        epmd = free_port()
        names = ["hutch-n%d-%d@localhost" % (i + 1, epmd) for i in range(count)]
        # (named: unnamed, each node says its own node name as its cluster_name)
        peers = ["cluster_name = hutch-cluster", "cluster_formation.peer_discovery_backend = classic_config"]
        peers += ["cluster_formation.classic_config.nodes.%d = %s" % (i + 1, name) for i, name in enumerate(names)]
        self.nodes = [
            RabbitMQ(self.folder, conf=tuple(peers) + tuple(conf(i)), plugins=plugins, cluster=(home, epmd, names[i]))
            for i in range(count)
        ]
        self.ctl_env = self.nodes[0].env

    def start(self, timeout=120):
        """The nodes, one after another (each joins those before it)."""
        for node in self.nodes:
            node.start(timeout)
        return self

    def ctl(self, *args, node=0, timeout=60):
        """rabbitmqctl (or another of its tools, args[0] a path) against node i: its stdout."""
        tool = args[0] if args and args[0].startswith("/") else RabbitMQ.CTL
        args = args[1:] if tool != RabbitMQ.CTL else args
        done = subprocess.run(
            [tool, "-n", self.nodes[node].node, *args], env=self.nodes[node].env, capture_output=True, text=True,
            timeout=timeout,
        )  # fmt: skip
        if done.returncode != 0:
            raise BenchError("%s %s on %s: %s" % (os.path.basename(tool), " ".join(args), self.nodes[node].node,
                                                  (done.stderr or done.stdout).strip()[-500:]))  # fmt: skip
        return done.stdout

    def stop(self):
        for node in reversed(self.nodes):  # (the last one stopped, the first, stops the cluster's epmd)
            node.stop(epmd=node is self.nodes[0])


class External:
    """A broker someone else runs (--rabbitmq HOST:PORT)."""

    def __init__(self, address, pid):
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise BenchError("--rabbitmq wants HOST:PORT, got %r" % address)
        self.host, self.port, self.pid = host, int(port), pid

    def start(self, timeout=None):
        try:
            loadgen.Connection(self.host, self.port, 10).close()
        except (OSError, loadgen.LoadError) as e:
            raise BenchError("cannot reach the broker at %s:%d: %s" % (self.host, self.port, e))
        return self

    def stop(self, timeout=None):
        pass


def failed(error, brokers, doing=""):
    """A run that failed, said on stderr: what hutch's brokers said that may explain it, then
    the error (last: where a terminal or a folded CI log shows it). The exit code, 2."""
    for line in broker_trouble(brokers):
        print("  " + line, file=sys.stderr)
    print("hutch bench: %s%s" % (doing + ": " if doing else "", error), file=sys.stderr, flush=True)
    return 2


def broker_trouble(brokers, most=20):
    """What hutch's brokers said that may explain a failed run: whether each still runs, and
    the last of its warnings, errors and tracebacks (the logs go with the run's folder)."""
    out = []
    for key, broker in brokers:
        if not isinstance(broker, Hutch):
            continue
        code = broker.proc.poll()
        out.append("%s broker: %s" % (key, "running" if code is None else "exited with %s" % code))
        broker.log.flush()
        broker.log.seek(0)
        lines = broker.log.read().splitlines()
        worth = [i for i, line in enumerate(lines) if "WARNING" in line or "ERROR" in line or "Traceback" in line]
        if worth:
            out.extend(lines[max(0, worth[-1] - most + 1) : worth[-1] + 8][-most:])
    return out
