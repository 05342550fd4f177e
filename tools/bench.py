"""`hutch bench`: hutch against RabbitMQ (and against itself without the C accelerator).

    hutch bench                          hutch with the C scanner and in pure Python
    hutch bench --start-rabbitmq         ... and Debian's rabbitmq-server, started here
    hutch bench --rabbitmq HOST:PORT     ... and a RabbitMQ already running
    hutch bench --micropython            ... and the unix-port MicroPython broker (throughput)
    hutch bench --backlog N [--start-rabbitmq]   instead: a backlog of N queued (tools/backlog_bench.py)
    hutch bench --bridge N --start-rabbitmq      instead: a bridge forwarding N to RabbitMQ (tools/bridge_bench.py)
    hutch bench --spark [N]                      instead: Spark reading a hutch stream (tools/spark_bench.py)

Every broker runs the same scenarios (tools/loadgen.py): all of them are started, their
memory is measured while they are fresh, then each scenario runs in rounds, one broker
after the other, and the table gives the median of the rounds with the ratios
hutch/RabbitMQ and C/pure Python. The brokers this command starts are stopped by their
PID when it ends, whatever happens.
"""

import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from . import loadgen, recovery_bench
from .micropython_host import micropython, serve_env

# name: (what it measures, its unit, whether more is better, the loadgen call)
SCENARIOS = {
    "no-ack": (
        "throughput 16 B, no-ack consumer",
        "msg/s",
        True,
        lambda host, port, n: loadgen.throughput(host, port, n)["msgs_per_s"],
    ),
    "acks": (
        "throughput 16 B, acks every 100",
        "msg/s",
        True,
        lambda host, port, n: loadgen.throughput(host, port, n, ack_every=100)["msgs_per_s"],
    ),
    "confirms": (
        "confirms 16 B, window 1000",
        "msg/s",
        True,
        lambda host, port, n: loadgen.confirms(host, port, n)["msgs_per_s"],
    ),
    "persistent": (
        "persistent confirms 16 B, window 1000",
        "msg/s",
        True,
        lambda host, port, n: loadgen.confirms(host, port, n // 4, persistent=True)["msgs_per_s"],
    ),
    "latency-p50": ("latency p50, one in flight", "µs", False, None),
    "latency-p99": ("latency p99, one in flight", "µs", False, None),
    "fanout": (
        "fanout to 10 queues",
        "deliveries/s",
        True,
        lambda host, port, n: loadgen.fanout(host, port, n // 4)["deliveries_per_s"],
    ),
    "64k": (
        "64 KiB bodies, acks every 10",
        "msg/s",
        True,
        lambda host, port, n: loadgen.throughput(host, port, max(200, n // 40), size=65536, ack_every=10, prefetch=100)[
            "msgs_per_s"
        ],
    ),
    "stream-publish": (
        "stream: publish with confirms 16 B, window 1000",
        "msg/s",
        True,
        lambda host, port, n: loadgen.stream_publish(host, port, n // 4)["msgs_per_s"],
    ),
    "stream-read": (
        "stream: read from first, 1 consumer",
        "msg/s",
        True,
        lambda host, port, n: loadgen.stream_read(host, port, n // 2)["msgs_per_s"],
    ),
    "stream-read-10": (
        "stream: 10 consumers at different offsets",
        "msg/s",
        True,
        lambda host, port, n: loadgen.stream_read(host, port, n // 2, consumers=10)["msgs_per_s"],
    ),
    "idle-rss": ("resident memory, idle", "MB", False, None),
    "per-conn": ("resident memory per idle connection", "KB", False, None),
}
MICROPYTHON_SCENARIOS = ("no-ack", "acks")


class BenchError(Exception):
    """Something the user can fix: one line for the terminal."""


def free_port():
    """A free port on 127.0.0.1 below the kernel's ephemeral range. A broker stopped or
    SIGKILLed and started again on its port must find it free, and a port the kernel hands
    out itself (bind to port 0, connect) may meanwhile be handed to another process: a
    test's proxy, a Spark listener, a client. A restart then fails with "address already in
    use" (the bridge soak's edge did once, and later its RabbitMQ, taking the rest of the
    run's RabbitMQ tests with it)."""
    low = _ephemeral_ports_start()
    while True:
        port = random.randrange(10000, low) if low > 11000 else 0
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]


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


class Hutch:
    """`hutch serve` started here (CPython, C scanner or pure Python; or the MicroPython unix port)."""

    def __init__(self, kind, workdir, folder=None, config=None):
        """folder: a previous run's (its data folder is used again: a restart); config: a config file."""
        self.kind = kind
        self.host, self.port = "127.0.0.1", free_port()
        folder = folder or tempfile.mkdtemp(prefix="hutch-bench-%s-" % kind, dir=workdir)
        self.folder = folder
        common = ["--bind", self.host, "--port", str(self.port), "--log-level", "info"]
        if config is not None:
            common += ["--config", config]
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
        """Until it accepts AMQP connections; timeout: seconds (a restart with a backlog needs more)."""
        wait_for_amqp(self.host, self.port, self.proc, "hutch (%s)" % self.kind, timeout)
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

    def __init__(self, workdir, previous=None):
        """previous: a stopped RabbitMQ of this run, started again as the same node on the same
        folder and ports (a restart: its durable queues and messages come back)."""
        if not os.path.exists(self.SERVER):
            raise BenchError(
                "rabbitmq-server is not installed (%s is missing): apt-get install rabbitmq-server" % self.SERVER
            )
        if previous is not None:
            self.host, self.port, self.home, self.env = previous.host, previous.port, previous.home, previous.env
            self._launch()
            return
        self.host, self.port = "127.0.0.1", free_port()
        self.home = home = tempfile.mkdtemp(prefix="rabbitmq-bench-", dir=workdir)
        config = os.path.join(home, "rabbitmq")
        with open(config + ".conf", "w") as f:
            f.write("listeners.tcp.1 = 127.0.0.1:%d\nloopback_users = none\n" % self.port)
        with open(os.path.join(home, "enabled_plugins"), "w") as f:
            f.write("[].\n")
        open(os.path.join(home, "rabbitmq-env.conf"), "w").close()
        self.env = dict(
            os.environ,
            HOME=home,
            RABBITMQ_NODENAME="bench%d@localhost" % self.port,
            RABBITMQ_NODE_IP_ADDRESS=self.host,
            RABBITMQ_NODE_PORT=str(self.port),
            RABBITMQ_DIST_PORT=str(free_port()),
            ERL_EPMD_ADDRESS=self.host,
            ERL_EPMD_PORT=str(free_port()),
            RABBITMQ_MNESIA_BASE=os.path.join(home, "mnesia"),
            RABBITMQ_LOG_BASE=os.path.join(home, "log"),
            RABBITMQ_CONF_ENV_FILE=os.path.join(home, "rabbitmq-env.conf"),
            RABBITMQ_CONFIG_FILE=config,
            RABBITMQ_ENABLED_PLUGINS_FILE=os.path.join(home, "enabled_plugins"),
            RABBITMQ_ENABLED_PLUGINS="",
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

    def restart(self):
        """Stopped and started again as the same node, on the same port and data (a fault test's
        upstream going away and coming back)."""
        self.stop()
        self._launch()
        return self.start()

    def stop(self, timeout=600):
        try:
            # (a node holding millions of messages may take minutes to write its indexes out)
            subprocess.run([self.CTL, "stop"], env=self.env, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            pass  # killed below
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
        # epmd was started by the node and outlives it: stop the one on this run's port
        epmd = shutil.which("epmd") or "/usr/lib/erlang/bin/epmd"
        subprocess.run([epmd, "-kill"], env=self.env, capture_output=True, timeout=30)
        self.log.close()


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


def memory(broker, names, idle_connections, log):
    """Resident memory idle and per idle connection, measured first, while the broker is fresh:
    after the load scenarios its heap has grown, and idle connections would fill freed room."""
    if broker.pid is None or not ("idle-rss" in names or "per-conn" in names):
        return {}
    log("  idle connections")
    time.sleep(1)
    before = rss_kb(broker.pid)
    connections = loadgen.idle(broker.host, broker.port, idle_connections)
    time.sleep(1)
    after = rss_kb(broker.pid)
    loadgen.close_all(connections)
    return {"idle-rss": round(before / 1024, 1), "per-conn": round((after - before) / idle_connections, 1)}


def load(broker, name, count):
    """{scenario: figure} of one run of scenario `name` (latency gives p50 and p99 at once)."""
    if name == "latency":
        result = loadgen.latency(broker.host, broker.port, max(1000, count // 20))
        return {"latency-p50": result["p50_us"], "latency-p99": result["p99_us"]}
    return {name: SCENARIOS[name][3](broker.host, broker.port, count)}


def load_scenarios(names):
    """The runs to make: each name with a loadgen call, and "latency" once for p50 and p99."""
    runs = [n for n in names if SCENARIOS[n][3] is not None]
    if "latency-p50" in names or "latency-p99" in names:
        runs.append("latency")
    return runs


def median(values):
    middle = statistics.median(values)
    return round(middle) if all(isinstance(v, int) for v in values) else round(middle, 1)


def ratio(a, b):
    return "%.2f" % (a / b) if a is not None and b else "-"


def table(results, names):
    """The printed table: one row per scenario, one column per broker, then the ratios."""
    columns = [("hutch C", "c"), ("hutch pure", "pure"), ("RabbitMQ", "rabbitmq"), ("MicroPython", "micropython")]
    columns = [(title, key) for title, key in columns if key in results]
    head = ["scenario", "unit"] + [title for title, _ in columns] + ["hutch/RabbitMQ", "C/pure"]
    rows = [head]
    for name in names:
        what, unit, _higher, _ = SCENARIOS[name]
        cells = [what, unit]
        for _, key in columns:
            value = results[key].get(name)
            cells.append("-" if value is None else ("{:,}".format(value) if isinstance(value, int) else str(value)))
        c = results.get("c", {}).get(name)
        cells.append(ratio(c, results.get("rabbitmq", {}).get(name)))
        cells.append(ratio(c, results.get("pure", {}).get(name)))
        rows.append(cells)
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = [
        "  ".join(cell.ljust(widths[i]) if i < 2 else cell.rjust(widths[i]) for i, cell in enumerate(row))
        for row in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    lines.append("Ratios are hutch (C) over the other. For latency and memory, lower is better.")
    return "\n".join(lines)


def add_options(parser):
    parser.add_argument("--rabbitmq", metavar="HOST:PORT", help="also run against this RabbitMQ (guest/guest)")
    parser.add_argument("--rabbitmq-pid", type=int, help="its broker process, to measure its memory")
    parser.add_argument("--start-rabbitmq", action="store_true", help="start Debian's rabbitmq-server for the run")
    parser.add_argument(
        "--micropython",
        action="store_true",
        help="also run the throughput scenarios against the unix-port MicroPython broker (with a tenth of --count)",
    )
    parser.add_argument("--no-pure", action="store_true", help="skip hutch in pure Python")
    parser.add_argument(
        "--scenarios", default=",".join(SCENARIOS), help="comma-separated subset of: %s" % ", ".join(SCENARIOS)
    )
    parser.add_argument("--count", type=int, default=200000, help="messages per throughput scenario (default 200000)")
    parser.add_argument(
        "--repeat", type=int, default=3, help="rounds of each scenario; the table shows the median (default 3)"
    )
    parser.add_argument("--idle-connections", type=int, default=500, help="connections for the memory figures")
    parser.add_argument("--json", metavar="FILE", help="also write every figure to FILE")
    parser.add_argument(
        "--recovery",
        type=int,
        metavar="N",
        default=0,
        help="also measure hutch's restart with N queued persistent messages (e.g. 1000000)",
    )
    backlog = parser.add_argument_group("backlogs (--backlog N: only these, see tools/backlog_bench.py)")
    backlog.add_argument(
        "--backlog",
        type=int,
        metavar="N",
        default=0,
        help="instead of the scenarios: memory, restart, drain and confirms with N queued persistent messages",
    )
    backlog.add_argument(
        "--rabbitmq-queue-version",
        choices=("1", "2", "both"),
        default="both",
        help="RabbitMQ's classic queue storage for the backlog (lazy queues; default: both, one after the other)",
    )
    backlog.add_argument(
        "--board-backlog",
        type=int,
        metavar="M",
        default=20000,
        help="the esp32 row: the board broker's heap with M queued (default 20000; 0: skip it)",
    )
    backlog.add_argument(
        "--csv", metavar="FILE", help="write the RSS samples taken while the backlog builds (and, --bridge, drains)"
    )
    backlog.add_argument("--plot", metavar="FILE", help="plot them to a PNG (needs matplotlib)")
    spark = parser.add_argument_group("Spark (--spark N: only these, see tools/spark_bench.py)")
    spark.add_argument(
        "--spark",
        type=int,
        nargs="?",
        const=200000,
        metavar="N",
        help="N JSON readings into a hutch stream, read by Spark (local[*]) into a no-op sink and through "
        "`hutch pipeline`'s job into Parquet, with the batch latency, beside Spark's rate source (N default 200000: about 2 minutes)",
    )
    bridge = parser.add_argument_group("bridges (--bridge N: only these, see tools/bridge_bench.py)")
    bridge.add_argument(
        "--bridge",
        type=int,
        metavar="N",
        default=0,
        help="instead of the scenarios: an up bridge forwarding N persistent messages to RabbitMQ (needs "
        "--start-rabbitmq or --rabbitmq), live and after an outage; e.g. 100000, or 1000000",
    )


def brokers_to_run(args, workdir):
    """[(result key, a callable that makes the broker)] in the order they run."""
    if args.rabbitmq and args.start_rabbitmq:
        raise BenchError("--rabbitmq and --start-rabbitmq: pick one")
    plan = [("c", lambda: Hutch("c", workdir))]
    if not args.no_pure:
        plan.append(("pure", lambda: Hutch("pure", workdir)))
    if args.rabbitmq:
        plan.append(("rabbitmq", lambda: External(args.rabbitmq, args.rabbitmq_pid)))
    elif args.start_rabbitmq:
        plan.append(("rabbitmq", lambda: RabbitMQ(workdir)))
    if args.micropython:
        plan.append(("micropython", lambda: Hutch("micropython", workdir)))
    return plan


def run(args):
    if sum(1 for mode in (args.backlog, args.bridge, args.spark) if mode) > 1:
        print("hutch bench: --backlog, --bridge and --spark: pick one", file=sys.stderr)
        return 2
    if args.spark:
        return _spark(args)
    if args.backlog:
        return _backlog(args)
    if args.bridge:
        return _bridge(args)
    names = [n.strip() for n in args.scenarios.split(",") if n.strip()]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        print(
            "hutch bench: unknown scenario %s (choose from %s)" % (", ".join(unknown), ", ".join(SCENARIOS)),
            file=sys.stderr,
        )
        return 2

    def log(line):
        print(line, file=sys.stderr, flush=True)

    results = {}
    scanners = {}
    brokers = []
    workdir = tempfile.mkdtemp(prefix="hutch-bench-")
    try:
        plan = brokers_to_run(args, workdir)
        if args.rabbitmq:
            External(args.rabbitmq, None).start()  # a wrong address is said at once, not after hutch's run
        for key, make in plan:
            brokers.append((key, make()))
            log("%s on %s:%d" % (key, brokers[-1][1].host, brokers[-1][1].port))
            brokers[-1][1].start()
        for key, broker in brokers:
            # (the micropython command hosts the unix port in a CPython process: its RSS says nothing)
            results[key] = memory(broker, names, args.idle_connections, log) if key != "micropython" else {}
            if isinstance(broker, Hutch):
                scanners[key] = broker.scanner()
        # Round by round, every broker in turn: on a shared machine a busy spell then slows them
        # all alike, and the median of the rounds leaves out the worst of it.
        samples = {}
        for name in load_scenarios(names):
            for round_number in range(args.repeat):
                for key, broker in brokers:
                    if key == "micropython" and name not in MICROPYTHON_SCENARIOS:
                        continue
                    log("  %s %s, round %d" % (key, name, round_number + 1))
                    count = args.count // 10 if key == "micropython" else args.count  # ~20x slower
                    for figure, value in load(broker, name, count).items():
                        samples.setdefault(key, {}).setdefault(figure, []).append(value)
        for key in samples:
            for figure, values in samples[key].items():
                results[key][figure] = median(values)
    except (BenchError, loadgen.LoadError) as e:
        print("hutch bench: %s" % e, file=sys.stderr)
        for line in broker_trouble(brokers):
            print("  " + line, file=sys.stderr)
        return 2
    finally:
        for _, broker in brokers:
            broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    print(table(results, names))
    recovery = {}
    if args.recovery:
        code = _recovery(args, recovery, log)
        if code:
            return code
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "count": args.count,
                    "repeat": args.repeat,
                    "scanners": scanners,
                    "results": results,
                    "samples": samples,
                    "recovery": recovery,
                },
                f,
                indent=1,
            )
    return 0


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


def _backlog(args):
    """--backlog N: its own table (tools/backlog_bench.py)."""
    from . import backlog_bench  # it builds on this module's brokers: imported once this one is

    if args.rabbitmq and args.start_rabbitmq:
        print("hutch bench: --rabbitmq and --start-rabbitmq: pick one", file=sys.stderr)
        return 2
    try:
        if args.rabbitmq:
            External(args.rabbitmq, None).start()  # a wrong address is said at once, not after hutch's run
        return backlog_bench.run(args, lambda line: print(line, file=sys.stderr, flush=True))
    except (BenchError, loadgen.LoadError) as e:
        print("hutch bench: %s" % e, file=sys.stderr)
        return 2


def _bridge(args):
    """--bridge N: its own table (tools/bridge_bench.py)."""
    from . import bridge_bench  # it builds on this module's brokers: imported once this one is

    if args.rabbitmq and args.start_rabbitmq:
        print("hutch bench: --rabbitmq and --start-rabbitmq: pick one", file=sys.stderr)
        return 2
    try:
        return bridge_bench.run(args, lambda line: print(line, file=sys.stderr, flush=True))
    except (BenchError, loadgen.LoadError) as e:
        print("hutch bench: %s" % e, file=sys.stderr)
        return 2


def _spark(args):
    """--spark N: Spark reading a hutch stream, and Spark's rate source (tools/spark_bench.py)."""
    from . import spark_bench  # pyspark (through hutch.spark): only for this mode

    try:
        return spark_bench.run(args, lambda line: print(line, file=sys.stderr, flush=True))
    except (BenchError, loadgen.LoadError) as e:
        print("hutch bench: %s" % e, file=sys.stderr)
        return 2


def _recovery(args, out, log):
    """hutch's restart with --recovery N queued persistent messages (tools/recovery_bench.py)."""
    workdir = tempfile.mkdtemp(prefix="hutch-bench-recovery-")
    try:
        for kind in ["c"] if args.no_pure else ["c", "pure"]:
            figures = recovery_bench.measure(
                lambda folder, kind=kind: Hutch(kind, workdir, folder).start(), args.recovery, log
            )
            out[kind] = figures
            print(recovery_bench.report(kind, figures))
    except (BenchError, loadgen.LoadError) as e:
        print("hutch bench: %s" % e, file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0
