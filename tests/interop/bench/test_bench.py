"""`hutch bench` as a user runs it: small counts, real brokers, the printed table and the JSON."""

import csv
import importlib.util
import json
import os
import re
import subprocess

import pytest
from bench_runs import bench, number

# One worker runs these one after another (pytest-xdist): the benchmarks' brokers do not
# compete with each other. (The beam processes a test counts are those of its own folder.)
pytestmark = pytest.mark.xdist_group("bench")

SCENARIO_ROWS = [
    "throughput 16 B, no-ack consumer",
    "throughput 16 B, acks every 100",
    "confirms 16 B, window 1000",
    "persistent confirms 16 B, window 1000",
    "latency p50, one in flight",
    "latency p99, one in flight",
    "fanout to 10 queues",
    "64 KiB bodies, acks every 10",
    "stream: publish with confirms 16 B, window 1000",
    "stream publish with per-message properties",
    "stream: read from first, 1 consumer",
    "stream: 10 consumers at different offsets",
    "sensors at 10 msg/s with confirms: confirm latency p50",
    "sensors at 10 msg/s with confirms: confirm latency p99",
    "sensors at 10 msg/s with confirms: broker CPU, of one core",
    "sensors at 10 msg/s with confirms: broker RSS",
    "queues declared one by one",
    "queues declared: resident memory per queue",
    "consumers on one queue, no-ack",
    "resident memory, idle",
    "resident memory per idle connection",
]
SMALL_SCALE = ("--sensors", "20", "--sensor-seconds", "1", "--queues", "200", "--consumers", "5")
AMQP10_ROWS = [
    "AMQP 1.0 send 16 B, unsettled (rhea)",
    "AMQP 1.0 send 16 B, pre-settled (rhea)",
    "AMQP 1.0 receive 16 B, credit 1000 (rhea)",
    "AMQP 1.0 send -> 0-9-1 consumer 16 B",
]


def rows(table):
    """{scenario: [cells after the unit]} from the printed table."""
    found = {}
    for line in table.splitlines():
        for name in SCENARIO_ROWS + AMQP10_ROWS:
            if line.startswith(name + "  "):
                found[name] = line[len(name) :].split()[1:]
    return found


def running(name):
    """PIDs of the live processes called name (an exited one waiting to be reaped does not count)."""
    pids = set()
    for pid in subprocess.run(["pgrep", "-x", name], capture_output=True, text=True).stdout.split():
        try:
            with open("/proc/%s/stat" % pid) as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue  # gone meanwhile
        if state != "Z":
            pids.add(pid)
    return pids


def started_in(folder):
    """Live beam.smp and epmd processes whose command line or environment names folder: the
    ones a bench run with TMPDIR=folder started (other RabbitMQs on the machine are not ours)."""
    mine = set()
    for name in ("beam.smp", "epmd"):
        for pid in running(name):
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    seen = f.read()
                with open("/proc/%s/environ" % pid, "rb") as f:
                    seen += f.read()
            except OSError:
                continue  # gone meanwhile
            if str(folder).encode() in seen:
                mine.add((name, pid))
    return mine


def test_every_scenario_against_hutch_with_and_without_the_accelerator(tmp_path):
    out = tmp_path / "bench.json"
    done = bench("--count", "4000", "--idle-connections", "30", "--json", str(out), *SMALL_SCALE)
    assert done.returncode == 0, done.stderr
    table = rows(done.stdout)
    assert sorted(table) == sorted(SCENARIO_ROWS), done.stdout
    for name, cells in table.items():
        c, pure = number(cells[0]), number(cells[1])
        if name == "resident memory per idle connection":
            assert c >= 0 and pure >= 0, (name, cells)  # a few KB each: may round into the heap's slack
        elif name in (
            "queues declared: resident memory per queue",
            "sensors at 10 msg/s with confirms: broker CPU, of one core",
        ):
            pass  # (200 queues may fit in freed heap; 20 sensors for a second may take less than a clock tick)
        else:
            assert c > 0 and pure > 0, (name, cells)
    saved = json.loads(out.read_text())
    assert saved["scanners"] == {"c": "C accelerator (cffi)", "pure": "pure Python (HUTCH_PURE_PYTHON is set)"}
    assert saved["results"]["c"]["no-ack"] > 0 and saved["results"]["pure"]["confirms"] > 0
    assert saved["results"]["c"]["persistent"] > 0 and saved["results"]["pure"]["persistent"] > 0


def test_start_rabbitmq_adds_its_column_and_leaves_nothing_running(tmp_path):
    done = bench(
        "--start-rabbitmq",
        "--no-pure",
        "--scenarios",
        "no-ack,confirms,idle-rss",
        "--count",
        "4000",
        "--idle-connections",
        "10",
        env=dict(os.environ, TMPDIR=str(tmp_path)),
    )
    assert done.returncode == 0, done.stderr
    header = done.stdout.splitlines()[0]
    assert "RabbitMQ" in header and "hutch/RabbitMQ" in header
    table = rows(done.stdout)
    for name in ("throughput 16 B, no-ack consumer", "confirms 16 B, window 1000", "resident memory, idle"):
        hutch, rabbitmq, hutch_over_rabbitmq = table[name][0], table[name][1], table[name][2]
        assert number(hutch) > 0 and number(rabbitmq) > 0 and number(hutch_over_rabbitmq) > 0, table[name]
    assert number(table["resident memory, idle"][1]) > 50  # RabbitMQ's node really ran (it idles at ~100+ MB)
    assert started_in(tmp_path) == set()  # its beam.smp and its epmd (tempfile puts its node under TMPDIR) are gone


def test_stream_rows_against_the_runs_rabbitmq(rabbitmq):
    """The stream scenarios, hutch against the RabbitMQ the interop tests share (--rabbitmq)."""
    done = bench(
        "--rabbitmq",
        "%s:%d" % (rabbitmq.host, rabbitmq.port),
        "--no-pure",
        "--scenarios",
        "stream-publish,stream-read,stream-read-10",
        "--count",
        "4000",
        "--repeat",
        "1",
    )
    assert done.returncode == 0, done.stderr
    table = rows(done.stdout)
    for name in (
        "stream: publish with confirms 16 B, window 1000",
        "stream: read from first, 1 consumer",
        "stream: 10 consumers at different offsets",
    ):
        hutch, other, hutch_over_rabbitmq = table[name][0], table[name][1], table[name][2]
        assert number(hutch) > 0 and number(other) > 0 and number(hutch_over_rabbitmq) > 0, table[name]


def test_amqp10_rows_with_rhea_as_the_load_beside_the_runs_rabbitmq(rabbitmq):
    """The 1.0 rows, hutch against the run's RabbitMQ 3.10 with its rabbitmq_amqp1_0 plugin (its
    RabbitMQ 3 addresses), rhea the load for both."""
    done = bench(
        "--rabbitmq", "%s:%d" % (rabbitmq.host, rabbitmq.port), "--amqp10", "--no-pure", "--scenarios", "no-ack",
        "--count", "3000", "--repeat", "1",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    table = rows(done.stdout)
    for name in AMQP10_ROWS:
        hutch, other, hutch_over_rabbitmq = table[name][0], table[name][1], table[name][2]
        assert number(hutch) > 0 and number(other) > 0 and number(hutch_over_rabbitmq) > 0, (name, done.stdout)


def test_the_amqp10_rows_say_what_they_need_without_node_s_rhea():
    done = bench("--amqp10", "--no-pure", env=dict(os.environ, NODE_PATH="/nonexistent", PATH="/nonexistent"))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "hutch bench: the AMQP 1.0 rows need Node.js and rhea: install them (npm install rhea) and set NODE_PATH "
        "to the node_modules folder that holds rhea"
    )


def test_micropython_column():
    done = bench("--micropython", "--no-pure", "--scenarios", "no-ack,acks", "--count", "2000")
    assert done.returncode == 0, done.stderr
    assert "MicroPython" in done.stdout.splitlines()[0]
    for cells in rows(done.stdout).values():
        assert number(cells[0]) > 0 and number(cells[1]) > 0, cells


def test_a_bad_rabbitmq_address_is_one_readable_line():
    for address, says in (("nonsense", "--rabbitmq wants HOST:PORT"), ("127.0.0.1:1", "cannot reach the broker")):
        done = bench("--rabbitmq", address, timeout=60)
        assert done.returncode == 2 and done.stdout == "", done
        assert done.stderr.startswith("hutch bench: " + says) and done.stderr.count("\n") == 1, done.stderr


def test_an_unknown_scenario_is_refused():
    done = bench("--scenarios", "no-ack,warp", timeout=60)
    assert done.returncode == 2 and "unknown scenario warp" in done.stderr


def test_a_cluster_run_of_fewer_than_three_messages_is_refused_in_one_line():
    """(`hutch bench --cluster N` itself starts three RabbitMQ nodes: docs/performance.md has its
    figures; tests/interop/bridge/test_bridge_cluster.py runs the same faults as tests.)"""
    done = bench("--cluster", "2", timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "hutch bench: --cluster wants a number of messages, at least 3\n", done.stderr
    done = bench("--cluster", "10", "--bridge", "10", timeout=60)
    assert done.returncode == 2 and done.stderr.endswith("--dedup and --modbus: pick one\n"), done


def test_the_wasm32_board_refuses_in_one_line():
    """`hutch bench --board wasm32` with another mode, or without its port installed: one line,
    exit 2. (Its scenarios and table run in tests/boards/test_wasm32.py.)"""
    done = bench("--board", "wasm32", "--backlog", "10", timeout=60)
    assert (
        done.returncode == 2
        and done.stderr
        == "hutch bench: --backlog, --bridge, --cluster, --spark, --board, --mqtt, --dedup and --modbus: pick one\n"
    )
    done = bench("--dedup", "--mqtt", timeout=60)
    assert done.returncode == 2 and done.stderr.endswith("--dedup and --modbus: pick one\n"), done
    missing = dict(os.environ, HUTCH_WASM32_PACKAGE="/nonexistent/micropython.mjs")
    done = bench("--board", "wasm32", timeout=120, env=missing)
    assert done.returncode == 2 and done.stdout == "", done
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("hutch bench: no MicroPython WebAssembly port at /nonexistent/micropython.mjs: "), (
        done.stderr
    )


def test_recovery_measures_a_restart_with_queued_persistent_messages(tmp_path):
    out = tmp_path / "bench.json"
    done = bench(
        "--scenarios",
        "confirms",
        "--count",
        "2000",
        "--repeat",
        "1",
        "--no-pure",
        "--recovery",
        "3000",
        "--json",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    assert "hutch c: 3000 persistent messages" in done.stdout, done.stdout
    figures = json.loads(out.read_text())["recovery"]["c"]
    assert figures["messages"] == 3000 and figures["recovery_ms"] >= 0 and 16 < figures["bytes_per_message"] < 200


BACKLOG_ROWS = [
    "publishing the backlog, 4 connections with confirms",
    "resident memory, idle broker before the backlog",
    "resident memory with 2,000 queued",
    "  with the backlog / idle",
    "data folder with 2,000 queued",
    "restart with 2,000 queued, until a handshake succeeds",
    "resident memory after the restart",
    "draining 2,000 from disk, one consumer acking every 100",
    "persistent confirms 100 B, window 1000, empty broker",
    "  the same with 2,000 queued in another queue",
    "  with the backlog / empty",
]
BOARD_ROW = "esp32 profile, 64-bit unix port: heap with 300 queued - with none"


def backlog_rows(table):
    """{row: [unit, target..., hutch's figure]} from the --backlog table (hutch only: the figure
    is the last cell)."""
    found = {}
    for line in table.splitlines():
        for name in BACKLOG_ROWS + [BOARD_ROW]:
            if line.startswith(name + "  "):
                found[name] = line[len(name) :].split()
    return found


def test_backlog_prints_every_row_with_figures(tmp_path):
    samples, out = tmp_path / "rss.csv", tmp_path / "backlog.json"
    done = bench(
        "--backlog", "2000", "--board-backlog", "300", "--repeat", "1", "--csv", str(samples), "--json", str(out)
    )
    assert done.returncode == 0, done.stderr
    # RSS while the backlog builds: a line at least when it is complete
    assert re.search(r"^  hutch +[\d.]+ s +2,000 queued +RSS +[\d.]+ MB +[\d,]+ msg/s$", done.stdout, re.M), done.stdout
    table = backlog_rows(done.stdout)
    assert sorted(table) == sorted(BACKLOG_ROWS + [BOARD_ROW]), done.stdout
    for name in BACKLOG_ROWS:
        assert number(table[name][-1]) > 0, (name, table[name])
    # The board row: its heap figure once the board holds the whole backlog; until then "-", and
    # the note says how many messages it held and why it refused the rest.
    board = table[BOARD_ROW][-1]
    assert board != "-" or re.search(r"held only \d+ of 300 messages \(basic\.nack for \d+ publishes", done.stdout)
    assert re.search(r"heap live [\d,]+ bytes with none queued", done.stdout), done.stdout
    with open(samples) as f:
        rows = list(csv.DictReader(f))
    assert rows and rows[-1]["broker"] == "hutch" and rows[-1]["queued"] == "2000" and float(rows[-1]["rss_mb"]) > 0
    saved = json.loads(out.read_text())
    assert saved["backlog"] == 2000 and saved["results"]["hutch"]["drain"] > 0


def test_backlog_refuses_what_it_cannot_do_in_one_line(tmp_path):
    done = bench("--backlog", "-5", timeout=60)
    assert done.returncode == 2 and done.stderr == "hutch bench: --backlog wants a number of messages, at least 1\n"
    plot = tmp_path / "rss.png"
    done = bench("--backlog", "1000", "--board-backlog", "0", "--repeat", "1", "--plot", str(plot), timeout=300)
    if importlib.util.find_spec("matplotlib") is None:  # not a dependency of hutch: said before anything runs
        assert done.returncode == 2 and done.stdout == "", done
        assert done.stderr.startswith("hutch bench: --plot needs matplotlib") and done.stderr.count("\n") == 1
    else:
        assert done.returncode == 0 and plot.read_bytes().startswith(b"\x89PNG"), done.stderr


def test_dedup_rows_are_the_medians_of_rounds_that_take_turns(tmp_path):
    """--dedup: each round measures both brokers, the other one first each time; the table has
    each row's figure on and off and their ratio, then each memory figure."""
    done = bench("--dedup", "--count", "2000", "--repeat", "2", timeout=300, env=dict(os.environ, TMPDIR=str(tmp_path)))
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if line.startswith("hutch bench: dedup ")]
    assert said == [
        "hutch bench: dedup on, round 1 of 2",
        "hutch bench: dedup off, round 1 of 2",
        "hutch bench: dedup off, round 2 of 2",
        "hutch bench: dedup on, round 2 of 2",
    ], done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["row", "unit", "dedup", "on", "dedup", "off", "on/off"], lines[0]
    figures = [line.split()[-3:] for line in lines[1:4]]
    assert [line.split("  ")[0] for line in lines[1:4]] == [
        "confirms: 2000 persistent readings of 1000 sensors, window 1000",
        "MQTT fan-in: 50 sensors x 2 readings/s, QoS 1, numbered: p99",
        "... broker CPU per reading",
    ], lines
    for on, off, ratio in figures:  # (the ratio of the unrounded figures: p99 is printed to 0.1 ms)
        assert float(on) > 0 and float(off) > 0 and abs(float(ratio) / (float(on) / float(off)) - 1) < 0.1, lines
    assert lines[4].startswith("memory per sensor: ") and lines[5].startswith("memory per sensor: "), lines


def test_mqtt_rows_against_hutch_mosquitto_and_rabbitmq(tmp_path):
    done = bench(
        "--mqtt", "--start-mosquitto", "--start-rabbitmq", "--count", "4000", env=dict(os.environ, TMPDIR=str(tmp_path))
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[-5:] == ["hutch", "mosquitto", "rabbitmq", "hutch/mosquitto", "hutch/rabbitmq"], lines[0]
    # over WebSocket: hutch and RabbitMQ's web-mqtt (Debian's mosquitto has no websockets listener)
    ws = [line for line in lines if line.startswith("... the same over WebSocket (ws://)")]
    assert ws and re.match(r"^\S.* msg/s +[\d,]+ +- +[\d,]+ +- +\d+\.\d\d$", ws[0]), done.stdout
    assert re.search(r"^hutch's QoS 1 over WebSocket / over TCP: \d+\.\d\d$", done.stdout, re.M), done.stdout

    def hutchs(title):
        row = [line for line in lines if line.startswith(title)]
        assert row, done.stdout
        figures = [float(f.replace(",", "")) for f in re.findall(r"[\d,]+\.?\d*", row[0].split("  ", 1)[1])]
        assert figures, row
        return figures[0]  # hutch's figure, the first

    for title in ("MQTT QoS 0, 16 B", "MQTT QoS 1, 16 B", "... to a clean session", "fan-in: 50 sensors", "... broker CPU per message",
                  "fan-out: 1 -> 100", "RSS per idle MQTT connection (500)",
                  "uplink: QoS 1 -> gateway -> its bridge -> mosquitto"):  # fmt: skip
        # (mosquitto's RSS may not move for 500 connections, nor its CPU in 300 messages by the
        # clock's 10 ms ticks: a 0 there has no ratio after it)
        assert hutchs(title) > 0, title
    # the fan-in's CPU split: either part may be under a clock tick (a fast machine's kernel
    # part was), the two add up to the whole (each printed to 0.1 µs)
    user, system = hutchs("... of it user"), hutchs("... of it system")
    assert user >= 0 and system >= 0 and abs(user + system - hutchs("... broker CPU per message")) <= 0.2, done.stdout
    # the QoS 0, QoS 1 (to a persistent and to a clean session) and fan-out rows each with the
    # user and system CPU of both brokers per message (a figure each, 0 allowed: a few thousand
    # messages may take less than a clock tick)
    for kind, count in (("message: user", 3), ("message: system", 3), ("delivery: user", 1), ("delivery: system", 1)):
        row = [line for line in lines if line.startswith("... the broker's CPU per " + kind)]
        assert len(row) == count and all(re.search(r"µs +\d+\.\d +\d+\.\d ", r) for r in row), done.stdout
    # every message hutch PUBACKed was delivered, and every idle connection held
    assert re.search(
        r"^QoS 1, 2 publishers > a 2,000 msg/s subscriber: PUBACKed delivered +% +100\.0 ", done.stdout, re.M
    ), done.stdout
    assert re.search(r"^\.\.\. all 500 still answering PINGREQ +yes=1 +1\.0 +1\.0", done.stdout, re.M), done.stdout
    # the fan-in against bench/mqtt_floor.py, the least a Python process does per reading
    floor = r"^the same fan-in against the least a Python process does .*: CPU per reading (\d+\.\d) µs \(user (\d+\.\d), system (\d+\.\d)\), p99 \d+\.\d ms$"
    found = re.search(floor, done.stdout, re.M)
    assert found and abs(float(found[1]) - float(found[2]) - float(found[3])) <= 0.2, done.stdout


def test_start_mosquitto_is_an_option_of_mqtt():
    done = bench("--start-mosquitto")
    assert done.returncode == 2 and done.stderr.strip() == "hutch bench: --start-mosquitto is an option of --mqtt"


def test_modbus_rows_against_the_line_s_limit():
    """hutch bench --modbus polls its simulated RTU device at 9,600 and 115,200 baud and prints
    each row with the line's limit, the polls hutch made, their ratio and the CPU per poll. Only
    the form is checked (figures are the performance page's): every cell a figure, the limits
    those devices/modbus/rtu.py counts, and polls made at each speed."""
    done = bench("--modbus", "--modbus-seconds", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [
        line.split()
        for line in done.stdout.splitlines()
        if line.split()[:2] in (["9600", "CPython"], ["115200", "CPython"])
    ]
    assert [row[0] for row in rows] == ["9600", "115200"], done.stdout
    for row in rows:
        limit, polls, ratio = float(row[2].rstrip("/s")), float(row[3].rstrip("/s")), float(row[4])
        assert polls > 0 and ratio == pytest.approx(polls / limit, abs=0.01) and float(row[5]) > 0, row
    assert [row[2] for row in rows] == ["24.2/s", "159.5/s"], rows
