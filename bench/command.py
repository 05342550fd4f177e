"""`hutch bench`: hutch against RabbitMQ (and against itself without the C accelerator).

    hutch bench                          hutch with the C scanner and in pure Python
    hutch bench --start-rabbitmq         ... and Debian's rabbitmq-server, started here
    hutch bench --rabbitmq HOST:PORT     ... and a RabbitMQ already running
    hutch bench --micropython            ... and the unix-port MicroPython broker (throughput)
    hutch bench --tls [--start-rabbitmq] ... and the TLS rows: throughput and latency over TLS
    hutch bench --amqp10 [--start-rabbitmq]  ... and the AMQP 1.0 rows, rhea the load (bench/amqp10.py)
    hutch bench --backlog N [--start-rabbitmq]   instead: a backlog of N queued (bench/backlog.py)
    hutch bench --bridge N --start-rabbitmq      instead: a bridge forwarding N to RabbitMQ (bench/bridges.py)
    hutch bench --cluster N                      instead: a bridge into a 3-node RabbitMQ cluster, nodes killed (bench/cluster.py)
    hutch bench --spark [N]                      instead: Spark reading a hutch stream (bench/pipeline.py)
    hutch bench --board wasm32                   instead: the esp32 profile's heap on a 32-bit MicroPython (bench/board_wasm32.py)
    hutch bench --modbus                         instead: polling a Modbus RTU device against the line's limit (bench/modbus.py)

Every broker runs the same scenarios (bench/loadgen.py): all of them are started, their
memory is measured while they are fresh, then each scenario runs in rounds, one broker
after the other, and the table gives the median of the rounds with the ratios
hutch/RabbitMQ and C/pure Python. The brokers this command starts are stopped by their
PID when it ends, whatever happens.
"""

import json
import os
import shutil
import statistics
import sys
import tempfile
import time

from . import amqp10, loadgen, scale
from . import recovery as recovery_bench
from .brokers import BenchError, External, Hutch, RabbitMQ, failed, rss_kb, tls_certificate, tls_client

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
    "stream-publish-props": (
        "stream publish with per-message properties",
        "msg/s",
        True,
        lambda host, port, n: loadgen.stream_publish(host, port, n // 4, readings=True)["msgs_per_s"],
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
    # The scale rows (bench/scale.py): --sensors sensor connections at 10 readings a second with
    # confirms for --sensor-seconds; --queues queues declared; --consumers consumers on one queue.
    "sensors-p50": ("sensors at 10 msg/s with confirms: confirm latency p50", "ms", False, None),
    "sensors-p99": ("sensors at 10 msg/s with confirms: confirm latency p99", "ms", False, None),
    "sensors-cpu": ("sensors at 10 msg/s with confirms: broker CPU, of one core", "%", False, None),
    "sensors-rss": ("sensors at 10 msg/s with confirms: broker RSS", "MB", False, None),
    "queues-rate": ("queues declared one by one", "declares/s", True, None),
    "queues-rss": ("queues declared: resident memory per queue", "KB", False, None),
    "consumers-100": ("consumers on one queue, no-ack", "msg/s", True, None),
    "idle-rss": ("resident memory, idle", "MB", False, None),
    "per-conn": ("resident memory per idle connection", "KB", False, None),
    # Over TLS (--tls, or named in --scenarios): each broker gets a TLS listener with a
    # certificate made for the run, and the client speaks TLS 1.3 to it (hutch's TLS listener:
    # ports/tls.py). Beside the rows above, they say what TLS costs. The loadgen call takes
    # the client's ssl.SSLContext too.
    "tls-no-ack": (
        "throughput 16 B, no-ack consumer, over TLS",
        "msg/s",
        True,
        lambda host, port, n, tls: loadgen.throughput(host, port, n, tls=tls)["msgs_per_s"],
    ),
    "tls-64k": (
        "64 KiB bodies, acks every 10, over TLS",
        "msg/s",
        True,
        lambda host, port, n, tls: loadgen.throughput(
            host, port, max(200, n // 40), size=65536, ack_every=10, prefetch=100, tls=tls
        )["msgs_per_s"],
    ),
    "tls-latency-p50": ("latency p50 over TLS, one in flight", "µs", False, None),
    "tls-latency-p99": ("latency p99 over TLS, one in flight", "µs", False, None),
}
# hutch only, when named: no-ack throughput while /metrics is scraped every second
SCENARIOS["scraped-no-ack"] = ("throughput 16 B, no-ack, /metrics scraped every second", "msg/s", True, None)
TLS_SCENARIOS = ("tls-no-ack", "tls-64k", "tls-latency-p50", "tls-latency-p99")
# AMQP 1.0 (--amqp10, or named): rhea's load, RabbitMQ with its 1.0 plugin
SCENARIOS.update((name, entry[:3] + (None,)) for name, entry in amqp10.SCENARIOS.items())
SCENARIOS.update(amqp10.CPU_ROWS)
AMQP10_SCENARIOS = tuple(amqp10.SCENARIOS)
AMQP10_ROWS = tuple(name for pair in zip(amqp10.SCENARIOS, amqp10.CPU_ROWS) for name in pair)
NAMED_ONLY = TLS_SCENARIOS + AMQP10_ROWS + ("scraped-no-ack",)
DEFAULT_SCENARIOS = [name for name in SCENARIOS if name not in NAMED_ONLY]
MICROPYTHON_SCENARIOS = ("no-ack", "acks", "tls-no-ack")


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


# The scale runs (bench/scale.py), each giving the rows whose names start so.
SCALE_RUNS = {"sensors": "sensors-", "queues": "queues-", "consumers": "consumers-"}


def load(broker, name, count, tls=None, args=None):
    """{scenario: figure} of one run of scenario `name` (latency gives p50 and p99 at once, the
    scale runs their rows); the TLS ones on the broker's TLS port with tls, the client's
    ssl.SSLContext ({} if the broker has no TLS listener: an --rabbitmq one). args: the command's
    options (the scale rows' sizes)."""
    if name == "sensors":
        return scale.sensors(broker, getattr(args, "sensors", 1000), seconds=getattr(args, "sensor_seconds", 10))
    if name == "queues":
        return scale.many_queues(broker, getattr(args, "queues", 10000))
    if name == "consumers":
        return scale.many_consumers(broker, count, getattr(args, "consumers", 100))
    if name in ("tls-latency",) + TLS_SCENARIOS:
        if broker.tls_port is None:
            return {}
        if name == "tls-latency":
            result = loadgen.latency(broker.host, broker.tls_port, max(1000, count // 20), tls=tls)
            return {"tls-latency-p50": result["p50_us"], "tls-latency-p99": result["p99_us"]}
        return {name: SCENARIOS[name][3](broker.host, broker.tls_port, count, tls)}
    if name in AMQP10_SCENARIOS:
        rate, cpu = amqp10.SCENARIOS[name][3](broker, count)
        return {name: rate, name + "-cpu": cpu} if cpu is not None else {name: rate}
    if name == "scraped-no-ack":
        if getattr(broker, "metrics_port", None) is None:
            return {}
        with loadgen.Scraper("http://%s:%d/metrics" % (broker.host, broker.metrics_port), 1.0):
            return {name: loadgen.throughput(broker.host, broker.port, count)["msgs_per_s"]}
    if name == "latency":
        result = loadgen.latency(broker.host, broker.port, max(1000, count // 20))
        return {"latency-p50": result["p50_us"], "latency-p99": result["p99_us"]}
    return {name: SCENARIOS[name][3](broker.host, broker.port, count)}


def load_scenarios(names):
    """The runs to make: each name with a loadgen call, and "latency" once for p50 and p99 (and
    "tls-latency" for the TLS ones)."""
    runs = [n for n in names if SCENARIOS[n][3] is not None or n == "scraped-no-ack" or n in AMQP10_SCENARIOS]
    for run, prefix in SCALE_RUNS.items():
        if any(n.startswith(prefix) for n in names):
            runs.append(run)
    if "latency-p50" in names or "latency-p99" in names:
        runs.append("latency")
    if "tls-latency-p50" in names or "tls-latency-p99" in names:
        runs.append("tls-latency")
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
    lines.extend(tls_cost(results, columns))
    lines.extend(scrape_cost(results, columns))
    return "\n".join(lines)


def tls_cost(results, columns):
    """A line per broker with both: the share of its plain no-ack throughput it keeps over TLS,
    and what TLS adds to its p50 latency."""
    out = []
    for title, key in columns:
        figures = results[key]
        plain, over_tls = figures.get("no-ack"), figures.get("tls-no-ack")
        if plain and over_tls:
            line = "Over TLS, %s keeps %d %% of its plain no-ack throughput" % (title, round(100 * over_tls / plain))
            if figures.get("64k") and figures.get("tls-64k"):
                line += ", %d %% with 64 KiB bodies" % round(100 * figures["tls-64k"] / figures["64k"])
            if figures.get("latency-p50") and figures.get("tls-latency-p50"):
                line += "; p50 latency %+.0f µs" % (figures["tls-latency-p50"] - figures["latency-p50"])
            out.append(line + ".")
    return out


def scrape_cost(results, columns):
    """A line per broker with both: what scraping /metrics every second costs its no-ack throughput."""
    out = []
    for title, key in columns:
        plain, scraped = results[key].get("no-ack"), results[key].get("scraped-no-ack")
        if plain and scraped:
            out.append(
                "Scraping /metrics every second, %s keeps %d %% of its no-ack throughput."
                % (title, round(100 * scraped / plain))
            )
    return out


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
        "--scenarios",
        default=",".join(DEFAULT_SCENARIOS),
        help="comma-separated subset of: %s (the tls- ones only when named, or with --tls; scraped-no-ack only when named)"
        % ", ".join(SCENARIOS),
    )
    parser.add_argument(
        "--tls",
        action="store_true",
        help="also the TLS rows (%s): each broker with a TLS listener, RabbitMQ's too" % ", ".join(TLS_SCENARIOS),
    )
    parser.add_argument(
        "--amqp10",
        action="store_true",
        help="also the AMQP 1.0 rows (%s), with rhea as the load (Node.js and rhea needed: NODE_PATH); RabbitMQ "
        "with its AMQP 1.0 plugin" % ", ".join(AMQP10_SCENARIOS),
    )
    parser.add_argument("--count", type=int, default=200000, help="messages per throughput scenario (default 200000)")
    parser.add_argument(
        "--repeat", type=int, default=3, help="rounds of each scenario; the table shows the median (default 3)"
    )
    parser.add_argument("--idle-connections", type=int, default=500, help="connections for the memory figures")
    parser.add_argument(
        "--sensors", type=int, default=1000, help="sensor connections of the sensors rows (default 1000)"
    )
    parser.add_argument("--sensor-seconds", type=float, default=10.0, help="how long the sensors publish (default 10)")
    parser.add_argument("--queues", type=int, default=10000, help="queues of the queues rows (default 10000)")
    parser.add_argument("--consumers", type=int, default=100, help="consumers of the consumers-100 row (default 100)")
    parser.add_argument("--json", metavar="FILE", help="also write every figure to FILE")
    parser.add_argument(
        "--recovery",
        type=int,
        metavar="N",
        default=0,
        help="also measure hutch's restart with N queued persistent messages (e.g. 1000000)",
    )
    backlog = parser.add_argument_group("backlogs (--backlog N: only these, see bench/backlog.py)")
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
    spark = parser.add_argument_group("Spark (--spark N: only these, see bench/pipeline.py)")
    spark.add_argument(
        "--spark",
        type=int,
        nargs="?",
        const=200000,
        metavar="N",
        help="N JSON readings into a hutch stream, read by Spark (local[*]) into a no-op sink and through "
        "`hutch pipeline`'s job into Parquet, with the batch latency, beside Spark's rate source (N default 200000: about 2 minutes)",
    )
    bridge = parser.add_argument_group("bridges (--bridge N: only these, see bench/bridges.py)")
    bridge.add_argument(
        "--bridge",
        type=int,
        metavar="N",
        default=0,
        help="instead of the scenarios: an up bridge forwarding N persistent messages to RabbitMQ (needs "
        "--start-rabbitmq or --rabbitmq), live and after an outage; e.g. 100000, or 1000000",
    )
    bridge.add_argument(
        "--uplink-budget",
        type=int,
        metavar="BYTES",
        default=None,
        help="the drain after the outage under an [uplink] max_byte_rate of BYTES body bytes a second",
    )

    parser.add_argument(
        "--cluster",
        type=int,
        metavar="N",
        default=0,
        help="instead of the scenarios: an up bridge forwarding N persistent messages a phase into a quorum "
        "queue on three Debian rabbitmq-server nodes started as one cluster, live, with the bridge's node "
        "SIGKILLed and with the queue's leader SIGKILLed (bench/cluster.py); e.g. 30000",
    )

    mqtt = parser.add_argument_group("MQTT (--mqtt: only these, see bench/mqtt.py)")
    mqtt.add_argument(
        "--mqtt",
        action="store_true",
        help="instead of the scenarios: MQTT QoS 0 and QoS 1 throughput (--count messages, a quarter of "
        "them at QoS 1) and memory per idle MQTT connection",
    )
    mqtt.add_argument("--start-mosquitto", action="store_true", help="also run them against Debian's mosquitto")
    parser.add_argument(
        "--dedup",
        action="store_true",
        help="instead of the scenarios: what deduplicating sensors' readings costs, on and off in one run "
        "(confirms of --count numbered readings, an MQTT fan-in of 1,000 numbered sensors; --repeat rounds, "
        "the medians) and its memory per sensor (bench/dedup.py)",
    )

    modbus = parser.add_argument_group("Modbus (--modbus: only these, see bench/modbus.py)")
    modbus.add_argument(
        "--modbus",
        action="store_true",
        help="instead of the scenarios: polls a second of a simulated Modbus RTU device at 9,600 and 115,200 "
        "baud beside the line's own limit, and CPU per poll (--micropython: the board's RTU master too)",
    )
    modbus.add_argument("--modbus-seconds", type=float, default=10.0, help="how long each row polls (default 10)")

    board = parser.add_argument_group("boards (--board wasm32: only these, see bench/board_wasm32.py)")
    board.add_argument(
        "--board",
        choices=("wasm32",),
        help="instead of the scenarios: the esp32 profile's heap on MicroPython's 32-bit WebAssembly port "
        "under Node (npm's @micropython/micropython-webassembly-pyscript, tests/node): idle, per connection, "
        "4 clients under load, an up bridge's 20,000-message backlog held and forwarded, a stream (about a minute)",
    )


def scale_config(args, workdir):
    """A config file for hutch with room for the scale rows (bench/scale.py), or None: hutch
    serve's default budgets would refuse the 1001st connection and the 10,001st queue, and
    RabbitMQ has none of them."""
    if not any(name.startswith(tuple(SCALE_RUNS.values())) for name in args.scenarios.split(",")):
        return None
    path = os.path.join(workdir, "scale.toml")
    with open(path, "w") as f:
        f.write(
            "[limits]\nmax_connections = %d\nmax_queues = %d\nmax_consumers = %d\n"
            % (args.sensors + args.consumers + 100, args.queues + 1000, args.consumers + 10000)
        )
    return path


def brokers_to_run(args, workdir, tls=None, plugins=()):
    """[(result key, a callable that makes the broker)] in the order they run. tls: (certificate,
    key) files: each broker started here gets a TLS listener with them; plugins: RabbitMQ's to
    enable (its AMQP 1.0 plugin for the 1.0 rows)."""
    if args.rabbitmq and args.start_rabbitmq:
        raise BenchError("--rabbitmq and --start-rabbitmq: pick one")
    config = scale_config(args, workdir)
    plan = [("c", lambda: Hutch("c", workdir, tls=tls, config=config))]
    if not args.no_pure:
        plan.append(("pure", lambda: Hutch("pure", workdir, tls=tls, config=config)))
    if args.rabbitmq:
        plan.append(("rabbitmq", lambda: External(args.rabbitmq, args.rabbitmq_pid)))
    elif args.start_rabbitmq:
        plan.append(("rabbitmq", lambda: RabbitMQ(workdir, tls=tls, plugins=plugins)))
    if args.micropython:
        plan.append(("micropython", lambda: Hutch("micropython", workdir, tls=tls)))
    return plan


def run(args):
    modes = (args.backlog, args.bridge, args.cluster, args.spark, args.board, args.mqtt, args.dedup, args.modbus)
    if sum(1 for mode in modes if mode) > 1:
        print(
            "hutch bench: --backlog, --bridge, --cluster, --spark, --board, --mqtt, --dedup and --modbus: pick one",
            file=sys.stderr,
        )
        return 2
    if args.start_mosquitto and not args.mqtt:
        print("hutch bench: --start-mosquitto is an option of --mqtt", file=sys.stderr)
        return 2
    if args.mqtt:
        from . import mqtt  # (the MQTT rows only)

        try:
            return mqtt.run(args)
        except BenchError as e:
            print("hutch bench: %s" % e, file=sys.stderr)
            return 1
    if args.dedup:
        from . import dedup  # (these rows only)

        try:
            return dedup.run(args)
        except (BenchError, loadgen.LoadError) as e:
            print("hutch bench: %s" % e, file=sys.stderr)
            return 1
    if args.modbus:
        from . import modbus  # (these rows only: pymodbus)

        return modbus.run(args)
    if args.board:
        return _board(args)
    if args.spark:
        return _spark(args)
    if args.backlog:
        return _backlog(args)
    if args.bridge:
        return _bridge(args)
    if args.cluster:
        from . import cluster  # (these rows only: three RabbitMQ nodes)

        try:
            return cluster.run(args, lambda line: print(line, file=sys.stderr, flush=True))
        except (BenchError, loadgen.LoadError) as e:
            print("hutch bench: %s" % e, file=sys.stderr)
            return 2
    names = [n.strip() for n in args.scenarios.split(",") if n.strip()]
    if args.tls:
        names += [n for n in TLS_SCENARIOS if n not in names]
    if args.amqp10:
        names += [n for n in AMQP10_SCENARIOS if n not in names]
    for name in [n for n in names if n in AMQP10_SCENARIOS and n + "-cpu" not in names]:
        names.insert(names.index(name) + 1, name + "-cpu")  # (each 1.0 row with its broker's CPU a message)
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
    doing = None  # the run under way, named by a failure (none while the brokers start)
    try:
        tls = tls_certificate(workdir) if any(n in TLS_SCENARIOS for n in names) else None
        client = tls_client(tls[0]) if tls is not None else None
        wants_10 = any(n in AMQP10_SCENARIOS for n in names)
        if wants_10:
            amqp10.node_environment()  # (no Node.js or rhea: said now, not after the other rows)
        plan = brokers_to_run(args, workdir, tls, (amqp10.PLUGIN,) if wants_10 else ())
        if args.rabbitmq:
            External(args.rabbitmq, None).start()  # a wrong address is said at once, not after hutch's run
        for key, make in plan:
            brokers.append((key, make()))
            log("%s on %s:%d" % (key, brokers[-1][1].host, brokers[-1][1].port))
            brokers[-1][1].start()
        for key, broker in brokers:
            doing = "%s idle connections" % key
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
                    if key == "micropython" and name not in MICROPYTHON_SCENARIOS:  # (1.0: not on a board)
                        continue
                    doing = "%s %s, round %d" % (key, name, round_number + 1)
                    log("  " + doing)
                    count = args.count // 10 if key == "micropython" else args.count  # ~20x slower
                    for figure, value in load(broker, name, count, client, args).items():
                        samples.setdefault(key, {}).setdefault(figure, []).append(value)
        for key in samples:
            for figure, values in samples[key].items():
                results[key][figure] = median(values)
    except (BenchError, loadgen.LoadError) as e:
        return failed(e, brokers, doing)
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


def _backlog(args):
    """--backlog N: its own table (bench/backlog.py)."""
    from . import backlog as backlog_bench  # it builds on this module's brokers: imported once this one is

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
    """--bridge N: its own table (bench/bridges.py)."""
    from . import bridges as bridge_bench  # it builds on this module's brokers: imported once this one is

    if args.rabbitmq and args.start_rabbitmq:
        print("hutch bench: --rabbitmq and --start-rabbitmq: pick one", file=sys.stderr)
        return 2
    try:
        return bridge_bench.run(args, lambda line: print(line, file=sys.stderr, flush=True))
    except (BenchError, loadgen.LoadError) as e:
        print("hutch bench: %s" % e, file=sys.stderr)
        return 2


def _board(args):
    """--board wasm32: the board's own table (bench/board_wasm32.py; Node and its npm package)."""
    from . import board_wasm32  # the WebAssembly board: only for this mode

    return board_wasm32.run(args, lambda line: print(line, file=sys.stderr, flush=True))


def _spark(args):
    """--spark N: Spark reading a hutch stream, and Spark's rate source (bench/pipeline.py)."""
    from . import pipeline as spark_bench  # pyspark (through hutch.spark): only for this mode

    try:
        return spark_bench.run(args, lambda line: print(line, file=sys.stderr, flush=True))
    except (BenchError, loadgen.LoadError) as e:
        print("hutch bench: %s" % e, file=sys.stderr)
        return 2


def _recovery(args, out, log):
    """hutch's restart with --recovery N queued persistent messages (bench/recovery.py)."""
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
