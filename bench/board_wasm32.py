"""`hutch bench --board wasm32`: the esp32 profile's heap on a 32-bit MicroPython.

The board is MicroPython's WebAssembly port under Node (emulator/wasm32.py), running the
firmware bundle (`python -m hutch.firmware.build`) as a board's filesystem, hutch.json with
`"board": "esp32"`, and clients in memory (emulator/board_session.py: real 0-9-1 frames, one
read of at most the profile's read buffer per client per turn of the board's loop). Each
scenario starts a board of its own:

- clients: the idle broker after start; four idle connections (a channel each); then four
  clients each publishing 2,500 messages of 256 bytes with confirms (one at a time, as pika's
  BlockingChannel publishes) to a queue of its own and consuming them with acks (prefetch 4),
  as tests/interop/boards/test_board_memory.py runs them on the 64-bit unix port;
- bridge: an up bridge whose uplink refuses (the network is down) while a client publishes
  20,000 persistent messages of 100 bytes with confirms (a window of 100) to its durable
  source queue: the backlog waits on the in-memory filesystem; then the uplink comes up and
  the bridge forwards all of it to a broker that confirms (hutch's core, in this process);
- stream: a stream with x-max-length-bytes 65536 takes 1,000 records of 256 bytes with
  confirms, then a consumer reads them back from "first" with a prefetch of 10, as
  test_board_memory.py's stream test does;
- mqtt: the board serves MQTT ([server] mqtt_port) with an up bridge from amq.topic's
  `sensors.#`, its uplink up; four MQTT sensors connect as umqtt.simple does (3.1.1, keep alive
  0, clean session), then each publishes 500 readings of 64 bytes at QoS 1, one at a time,
  which the bridge forwards upstream, as tests/interop/boards/test_board_mqtt.py runs them on
  the 64-bit unix port.

The bundle is the one with the MQTT front end (python -m hutch.firmware.build --mqtt): the
scenarios whose config serves no MQTT load none of it.

The heap figure is the live heap after a collection, after every turn of the board's loop
(its peak is the largest of them). Two parts of it, told apart by a code census
(emulator/wasm32.py census()): the code, which this port loads from the .mpy files into the
heap (a board with hutch frozen into its firmware keeps most of it in flash), and the rest,
"beyond the code": the broker's state, its connections, queues, journal and bridge, what a
board's heap holds whatever way its code is stored. A module that loads on the way (paging with
the first backlog, the stream code with the first stream) moves into the code part once it is
loaded.
"""

import concurrent.futures
import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
import time

from ..boards import esp32
from ..codec import spec
from ..emulator import wasm32
from ..emulator.board_session import Session, Stuck, Upstream

READ_SIZE = esp32.READ_SIZE  # octets a board takes in one read: the most a step carries
BODY = 256
CLIENTS = 4
TOTAL = 10000  # messages, all clients together
PREFETCH = 4
QUEUED = 32  # messages left in a queue, to measure what each holds
BACKLOG = 20000
BACKLOG_BODY = 100
BACKLOG_WINDOW = 100
JOURNAL_PER_MESSAGE = 512  # journal bytes a 100-byte message may take, with room (bench/board_backlog.py's)
STREAM_RECORDS = 1000
STREAM_MAX_BYTES = 65536
STREAM_PREFETCH = 10
BRIDGE_QUEUE = b"backlog"
SENSOR_READINGS = 500  # each MQTT sensor's
SENSOR_BODY = 64
SCENARIOS = ("clients", "bridge", "stream", "mqtt")


def body(client, n, size=BODY):
    return (b"%d:%06d:" % (client, n)).ljust(size, b"x")


def board_config(**server):
    config = {"server": dict({"board": "esp32", "data": "/data"}, **server)}
    return config


def mqtt_config():
    """Serving MQTT, with an up bridge from amq.topic's sensors.# (its own durable queue)."""
    config = board_config(mqtt_port=1883)
    config["bridge"] = [
        {
            "name": "uplink",
            "direction": "up",
            "uri": "amqp://guest:guest@central:5672/%2F",
            "source_exchange": "amq.topic",
            "binding_key": "sensors.#",
            "exchange": "amq.topic",
            "declare": {"queue": "readings", "binding_key": "sensors.#"},
        }
    ]
    return config


def bridge_config(backlog):
    config = board_config(journal_max_bytes=max(256 * 1024, backlog * JOURNAL_PER_MESSAGE))
    config["bridge"] = [
        {
            "name": "uplink",
            "direction": "up",
            "uri": "amqp://guest:guest@central:5672/%2F",
            "queue": BRIDGE_QUEUE.decode(),
            "declare": {"queue": BRIDGE_QUEUE.decode()},
        }
    ]
    return config


class Phase:
    """The samples (live heap, modules loaded) of one part of a scenario, taken from the board
    as they come: each part starts and ends with an exact one (Wasm32Board.settle)."""

    def __init__(self, board):
        self.board = board
        board.settle()
        board.samples = []

    def take(self):
        board = self.board
        board.settle()
        samples = board.samples
        board.samples = []
        board.settle()  # the next part's start
        return samples


# ---------------------------------------------------------------- the scenarios' clients


def declare(c, channel, name, durable=False, arguments=None):
    yield from c.call(channel, spec.QUEUE_DECLARE, (0, name, False, durable, False, False, False, arguments or {}))


def load_worker(c, index, count):
    """test_board_memory.py's run_client: publish count messages with confirms to an own queue,
    one at a time, and consume them with acks on a second channel; whether all came in order."""
    yield from c.open(channels=(1, 2))
    yield from c.call(1, spec.CONFIRM_SELECT, (False,))
    queue = b"load-%d" % index
    yield from declare(c, 1, queue)
    yield from c.call(2, spec.BASIC_QOS, (0, PREFETCH, False))
    c.on_delivery = lambda event: c.ack(2, event.args[1])
    yield from c.call(2, spec.BASIC_CONSUME, (0, queue, b"", False, False, False, False, {}))
    for n in range(count):
        c.publish(1, b"", queue, body(index, n))
        yield from c.until(lambda n=n: c.acked > n or c.nacked, "the confirm of message %d" % n)
        if c.nacked:
            raise Stuck("client %d: message %d refused (basic.nack)" % (index, n))
    yield from c.until(lambda: len(c.deliveries) == count, "%d deliveries" % count)
    intact = [event.body for event in c.deliveries] == [body(index, n) for n in range(count)]
    yield from c.close()
    return intact


def idle_worker(c):
    yield from c.open(channels=(1,))


def closing(c):
    yield from c.close()


def publish_more(c, queue, count):
    """count more messages of BODY octets to queue, transient, each confirmed before the next."""
    for n in range(count):
        c.publish(1, b"", queue, body(8, n))
        yield from c.until(lambda: c.acked == c.published or c.nacked, "the confirm of message %d" % n)
    if c.nacked:
        raise Stuck("message refused (basic.nack) after %d confirmed" % c.acked)


def confirmed_publisher(c, queue, count, size, window, durable, persistent=True, close=True):
    """count messages to queue with confirms, window in flight at most."""
    yield from c.open(channels=(1,))
    yield from c.call(1, spec.CONFIRM_SELECT, (False,))
    yield from declare(c, 1, queue, durable=durable)
    properties = {"delivery-mode": 2} if persistent else None
    for n in range(count):
        yield from c.until(lambda n=n: n - c.acked < window or c.nacked, "room in the confirm window")
        if c.nacked:
            raise Stuck("message refused (basic.nack) after %d confirmed" % c.acked)
        c.publish(1, b"", queue, body(9, n, size), properties)
    yield from c.until(lambda: c.acked == count or c.nacked, "the last confirms")
    if c.nacked:
        raise Stuck("message refused (basic.nack) after %d confirmed" % c.acked)
    if close:
        yield from c.close()


def stream_publisher(c, count, marks, phase):
    """The stream's records with confirms, one at a time; the heap after each count in marks."""
    yield from c.open(channels=(1, 2))
    yield from c.call(1, spec.CONFIRM_SELECT, (False,))
    arguments = {"x-queue-type": b"stream", "x-max-length-bytes": STREAM_MAX_BYTES}
    yield from declare(c, 1, b"readings", durable=True, arguments=arguments)
    seen = {}
    for n in range(count):
        c.publish(1, b"", b"readings", body(5, n))
        yield from c.until(lambda n=n: c.acked > n or c.nacked, "the confirm of record %d" % n)
        if n + 1 in marks:
            seen[n + 1] = phase.take()
    return seen


def stream_reader(c, count):
    """Consume the stream from "first" with acks; the offsets and bodies it got."""
    yield from c.call(2, spec.BASIC_QOS, (0, STREAM_PREFETCH, False))
    c.on_delivery = lambda event: c.ack(2, event.args[1])
    yield from c.call(
        2, spec.BASIC_CONSUME, (0, b"readings", b"", False, False, False, False, {"x-stream-offset": b"first"})
    )
    yield from c.until(lambda: c.deliveries and c.deliveries[-1].body == body(5, count - 1), "the stream read back")
    return c.deliveries


def mqtt_sensor(c, index, readings):
    """An MQTT sensor as umqtt.simple runs: its readings at QoS 1, each PUBACKed before the next."""
    topic = b"sensors/sensor-%d/temp" % index
    for n in range(readings):
        yield from c.publish(topic, (b"%d:%06d:" % (index, n)).ljust(SENSOR_BODY, b"x"))


def wait_for(condition, what):
    while not condition():
        yield what


# ---------------------------------------------------------------- the scenarios


def scenario_clients(board, total=TOTAL):
    """{phase: samples}: idle, idle connections, the load (total messages), after it."""
    out = {"idle": [board.started]}
    session = Session(board)
    phase = Phase(board)
    idle = [session.client() for _ in range(CLIENTS)]
    session.run([idle_worker(c) for c in idle])
    out["connections"] = phase.take()
    session.run([closing(c) for c in idle])
    phase.take()
    clients = [session.client() for _ in range(CLIENTS)]
    results = session.run([load_worker(c, i, total // CLIENTS) for i, c in enumerate(clients)])
    if results != [True] * CLIENTS:
        raise Stuck("four clients: messages lost or out of order: %r" % results)
    out["load"] = phase.take()
    out["each"] = total // CLIENTS
    # What a queued message holds: QUEUED of them published with confirms and left in a queue
    # (the profile's budgets bound how many a board keeps in memory)
    holder = session.client()
    session.run([confirmed_publisher(holder, b"held", 0, BODY, 1, False, persistent=False, close=False)])
    out["before queued"] = phase.take()
    session.run([publish_more(holder, b"held", QUEUED)])
    out["queued"] = phase.take()
    return out


def scenario_bridge(board, backlog=BACKLOG):
    """{phase: samples}: idle with the bridge down, the backlog building, held, draining, drained."""
    out = {"idle": [board.started]}
    session = Session(board)
    phase = Phase(board)
    board.call("uplink_refused", session.now)
    out["down"] = phase.take()
    publisher = session.client()
    session.run([confirmed_publisher(publisher, BRIDGE_QUEUE, backlog, BACKLOG_BODY, BACKLOG_WINDOW, True)])
    out["filling"] = phase.take()
    for _ in range(10):  # two seconds of the board's clock: compaction and the like run
        session.turn()
    out["backlog"] = phase.take()
    upstream = session.upstream = Upstream()
    while True:
        wait = board.call("uplink_open", session.now)
        if not wait:
            break
        session.now += wait  # the backoff: the board's clock moves on
    upstream.connect()
    session.run([wait_for(lambda: upstream.queued(BRIDGE_QUEUE) == backlog, "upstream to hold the backlog")])
    out["draining"] = phase.take()
    for _ in range(10):
        session.turn()
    out["drained"] = phase.take()
    return out


def scenario_stream(board):
    """{phase: samples}: idle, after 100 records, after 1,000, reading them back."""
    out = {"idle": [board.started]}
    session = Session(board)
    phase = Phase(board)
    c = session.client()
    [marks] = session.run([stream_publisher(c, STREAM_RECORDS, (100, STREAM_RECORDS), phase)])
    out["100 records"] = marks[100]
    out["1,000 records"] = marks[STREAM_RECORDS]
    [got] = session.run([stream_reader(c, STREAM_RECORDS)])
    bodies = [event.body for event in got]
    kept = len(bodies)
    if not 0 < kept < STREAM_RECORDS or bodies != [body(5, n) for n in range(STREAM_RECORDS - kept, STREAM_RECORDS)]:
        raise Stuck("the stream read back wrong: %d records, from %r" % (kept, bodies[:1]))
    out["read back"] = phase.take()
    out["records kept"] = kept
    return out


def scenario_mqtt(board):
    """{phase: samples}: idle serving MQTT with the bridge up, four idle sensors, their load."""
    out = {"idle": [board.started]}
    session = Session(board)
    upstream = session.upstream = Upstream()
    while True:
        wait = board.call("uplink_open", session.now)
        if not wait:
            break
        session.now += wait
    upstream.connect()
    session.run([wait_for(lambda: upstream.queued(b"readings") == 0 and b"readings" in upstream.broker.queues,
                          "the bridge's declare upstream")])  # fmt: skip
    phase = Phase(board)
    out["bridged"] = phase.take()
    sensors = [session.client("mqtt") for _ in range(CLIENTS)]
    session.run([c.connect(b"sensor-%d" % i) for i, c in enumerate(sensors)])
    out["sensors"] = phase.take()
    session.run([mqtt_sensor(c, i, SENSOR_READINGS) for i, c in enumerate(sensors)])
    total = CLIENTS * SENSOR_READINGS
    session.run([wait_for(lambda: upstream.queued(b"readings") == total, "every reading upstream")])
    out["load"] = phase.take()
    return out


RUNS = {
    "clients": (board_config, scenario_clients),
    "bridge": (lambda: bridge_config(BACKLOG), scenario_bridge),
    "stream": (board_config, scenario_stream),
    "mqtt": (mqtt_config, scenario_mqtt),
}


# ---------------------------------------------------------------- running them, and the figures


def run_one(workdir, name, run, bundle):
    """(name, its result with the module sets and names its board saw, the board's folders,
    seconds) of one scenario, on a board of its own."""
    make_config, scenario = run
    board_dir, harness = wasm32.make_board_dir(os.path.join(workdir, name), make_config(), bundle)
    started = time.monotonic()
    with wasm32.Wasm32Board(board_dir, harness) as board:
        try:
            board.start()
            result = scenario(board)
        except (Stuck, wasm32.Wasm32Error) as e:
            raise wasm32.Wasm32Error("%s: %s; the board's log ends:\n%s" % (name, e, "\n".join(board.log[-20:])))
        result["sets"] = dict(board.module_sets)
        result["qstr_bytes"] = dict(board.qstr_bytes)
    return name, result, (board_dir, harness), time.monotonic() - started


def run_scenarios(workdir, names=SCENARIOS, log=print, runs=None, bundle=None):
    """({scenario: {phase: samples, ...}}, the code census (wasm32.census)), each scenario on a
    board of its own, all at once (a Node process each: every figure comes out the same, the
    board's clock being the harness's), then the census; with the seconds each took. bundle: a
    firmware bundle already built (else built here)."""
    from ..firmware import build

    runs = runs or RUNS
    if bundle is None:
        with contextlib.redirect_stdout(io.StringIO()):  # mpremote prints the ROMFS image's tree
            bundle = build.build(os.path.join(workdir, "firmware"), bundle_name="broker-mqtt")["bundle"]
    log("wasm32 board: %s" % ", ".join(names))
    with concurrent.futures.ThreadPoolExecutor(len(names)) as pool:
        done = list(pool.map(lambda name: run_one(workdir, name, runs[name], bundle), names))
    results = {name: result for name, result, _, _ in done}
    seconds = {name: spent for name, _, _, spent in done}
    module_sets = set()
    for result in results.values():
        module_sets.update(result["sets"].values())
    log("wasm32 board: code census")
    started = time.monotonic()
    board_dir, harness = done[-1][2]
    sizes = wasm32.census(board_dir, harness, module_sets)
    seconds["census"] = time.monotonic() - started
    return results, sizes, seconds


class Figures:
    """What a scenario's samples say, each sample (live heap, modules loaded) in three figures:

    - code: what this port's heap holds of the code of the modules loaded then (the census:
      bytecode, constants, module and function objects), and every name interned since start;
    - beyond the code: the live heap less that, the broker's own state;
    - on a board: beyond the code, plus what the modules' import takes on a board with hutch
      frozen into its firmware (board_in_memory.frozen_ram: an estimate), the figure a 96 KiB
      heap must hold.

    A sample whose module count has no set of its own (two loads within one request) is given
    the code of the largest known set below it: its other figures are then, if anything, high."""

    def __init__(self, result, census):
        sizes, fresh_qstr = census
        self.code = {}
        self.frozen = {}
        for count, modules in result["sets"].items():
            code, frozen = sizes[modules]
            self.code[count] = code + result["qstr_bytes"][count] - fresh_qstr
            self.frozen[count] = frozen

    def _known(self, count):
        known = [c for c in self.code if c <= count]
        return max(known) if known else min(self.code)

    def of(self, sample):
        """(live, code, beyond the code, on a board) of one sample."""
        live, count = sample
        known = self._known(count)
        beyond = live - self.code[known]
        return live, self.code[known], beyond, beyond + self.frozen[known]

    def last(self, samples):
        return self.of(samples[-1])

    def peak(self, samples):
        """The largest of each figure over the samples (code: the last one's)."""
        figures = [self.of(sample) for sample in samples]
        return (
            max(f[0] for f in figures),
            figures[-1][1],
            max(f[2] for f in figures),
            max(f[3] for f in figures),
        )


def apart(after, before, n):
    """Each figure's growth from before to after, per one of n."""
    return [(after[i] - before[i]) // n for i in range(len(after))]


def rows_of(results, census):
    """The table's rows: (what, live, code, beyond the code, on a board), in bytes."""
    rows = []

    def row(what, figures):
        rows.append((what,) + tuple(figures))

    if "clients" in results:
        r = results["clients"]
        f = Figures(r, census)
        idle = f.last(r["idle"])
        conns = f.last(r["connections"])
        row("idle broker after start", idle)
        row("per idle connection (4, a channel each)", apart(conns, idle, CLIENTS))
        row("peak: 4 clients x {:,} messages of 256 B, confirms, acks".format(r["each"]), f.peak(r["load"]))
        before = f.last(r["before queued"])
        queued = f.last(r["queued"])
        row("per message of 256 B queued (%d in a queue)" % QUEUED, apart(queued, before, QUEUED))
    if "bridge" in results:
        r = results["bridge"]
        f = Figures(r, census)
        row("idle broker with an up bridge, uplink down", f.last(r["down"]))
        row("peak while 20,000 persistent messages of 100 B queue up", f.peak(r["filling"]))
        row("the 20,000 waiting in the bridge's outbox, on flash", f.last(r["backlog"]))
        row("peak while the bridge forwards them (upstream confirms)", f.peak(r["draining"]))
        row("after the bridge forwarded them all", f.last(r["drained"]))
    if "stream" in results:
        r = results["stream"]
        f = Figures(r, census)
        row("a stream with 100 records of 256 B", f.last(r["100 records"]))
        row("... with 1,000 (x-max-length-bytes 64 KiB keeps %d)" % r["records kept"], f.last(r["1,000 records"]))
        row("peak while a consumer reads them back (prefetch 10)", f.peak(r["read back"]))
    if "mqtt" in results:
        r = results["mqtt"]
        f = Figures(r, census)
        bridged = f.last(r["bridged"])
        sensors = f.last(r["sensors"])
        row("idle broker serving MQTT, an up bridge linked", bridged)
        row("per idle MQTT sensor (4, keep alive 0)", apart(sensors, bridged, CLIENTS))
        row(
            "peak: 4 MQTT sensors x %d QoS 1 readings of %d B, bridged up" % (SENSOR_READINGS, SENSOR_BODY),
            f.peak(r["load"]),
        )
    return rows


def board_peaks(results, census):
    """{scenario: its largest heap on a board (the last column), over all its phases}: what the
    CI bound reads."""
    out = {}
    for name, r in results.items():
        f = Figures(r, census)
        samples = [s for value in r.values() if isinstance(value, list) for s in value if isinstance(s, tuple)]
        out[name] = f.peak(samples)[3]
    return out


def table(rows):
    def kib(n):
        return "%.1f" % (n / 1024)

    head = ("esp32 profile, KiB", "live heap", "code (.mpy)", "beyond code", "on a board")
    lines = [head] + [(what,) + tuple(kib(n) for n in figures) for what, *figures in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    out = [
        "  ".join(cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(line))
        for line in lines
    ]
    out.insert(1, "-" * len(out[0]))
    return "\n".join(out)


def run(args, log):
    """`hutch bench --board wasm32`: the table, and --json FILE with every sample."""
    workdir = tempfile.mkdtemp(prefix="hutch-bench-wasm32-")
    try:
        results, sizes, seconds = run_scenarios(workdir, log=log)
    except wasm32.Wasm32Error as e:
        print("hutch bench: %s" % e, file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print("MicroPython %s WebAssembly port (32-bit), under Node: the firmware bundle, board esp32" % wasm32.VERSION)
    print(table(rows_of(results, sizes)))
    print(
        "live heap: after a collection, after every turn of the board's loop (peak: the largest). code: what "
        "this port's heap holds of the modules loaded then, from their .mpy files, and the names interned. "
        "on a board: beyond the code, plus what importing those modules takes with hutch frozen into the "
        "firmware (estimated). Seconds: %s (load average %.2f)."
        % (", ".join("%s %.1f" % (name, s) for name, s in seconds.items()), os.getloadavg()[0])
    )
    if getattr(args, "json", None):
        with open(args.json, "w") as f:
            json.dump(
                {
                    "results": {
                        name: {phase: value for phase, value in r.items() if phase not in ("sets", "qstr_bytes")}
                        for name, r in results.items()
                    },
                    "code": [[sorted(modules), code, frozen] for modules, (code, frozen) in sizes[0].items()],
                    "seconds": seconds,
                },
                f,
                indent=1,
            )
    return 0
