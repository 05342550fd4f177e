"""What the tests of `hutch pipeline` share (test_pipeline.py, test_pipeline_cluster.py,
test_pipeline_exactly_once.py): readings as JSON bodies published with pika, the aggregates
they must give computed in plain Python, the aggregates the pipeline wrote read back from the
Parquet files its sink committed, and the command run as an operator runs it: the venv's
`hutch`, in a process group of its own, with its progress lines read back.
"""

import calendar
import datetime
import json
import os
import random
import re
import signal
import subprocess
import threading
import time
import uuid

import pika
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from brokers import BIN, pika_connection

HUTCH = os.path.join(BIN, "hutch")
WINDOW_S = 60
WATERMARK_S = 120
# readings around midnight UTC: the windows fall on two dates (two partitions)
T0 = calendar.timegm((2024, 5, 1, 23, 55, 0))


def fresh(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:8])


def declare(broker, *names):
    connection = pika_connection(broker)
    channel = connection.channel()
    for name in names:
        channel.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    connection.close()


def publish(broker, stream, bodies, headers=None):
    """bodies published with confirms; headers: each one's headers (a list as long), or None."""
    connection = pika_connection(broker)
    channel = connection.channel()
    channel.confirm_delivery()
    for i, body in enumerate(bodies):
        properties = pika.BasicProperties(delivery_mode=2, headers=headers[i] if headers else None)
        channel.basic_publish("", stream, body, properties)
    connection.close()


# ---------------------------------------------------------------- readings, and what they aggregate to


def iso(seconds, offset_hours=0):
    """ISO-8601 text of an epoch time, in a zone offset_hours from UTC."""
    zone = datetime.timezone(datetime.timedelta(hours=offset_hours))
    moment = datetime.datetime.fromtimestamp(seconds, zone)
    return moment.isoformat().replace("+00:00", "Z")


def ts_text(seconds, i):
    """The formats the README promises, in turn: ISO with Z, with an offset, with a space and no
    zone (UTC), epoch seconds as an integer, and as a decimal number."""
    kind = i % 5
    if kind == 0:
        return iso(seconds)
    if kind == 1:
        return iso(seconds, 2)
    if kind == 2:
        return iso(seconds).replace("T", " ").replace("Z", "")
    if kind == 3:
        return int(seconds) if seconds == int(seconds) else seconds
    return float(seconds)


def reading(sensor, seconds, value, i):
    return json.dumps({"sensor": sensor, "ts": ts_text(seconds, i), "value": value, "unit": "C"}).encode()


def first_run_readings():
    """Per stream, readings of three sensors from 23:55:00 to 00:03:30 (a new date at 00:00),
    each with a distinct ts (so `last` has one answer), shuffled: out of order in each stream."""
    readings = {"a": [], "b": []}
    rng = random.Random(7)
    for i in range(51):
        seconds = T0 + i * 10 + (i % 3)  # 23:55:00 .. 00:03:20 and a bit
        sensor = "s%d" % (i % 3)
        readings["a" if sensor != "s2" else "b"].append((sensor, seconds, round(i * 0.5 - 7, 1)))
    readings["b"].append(("s2", T0 + 510, 99.0))  # 00:03:30: the latest of the first run
    for stream in readings.values():
        rng.shuffle(stream)
    return readings


def bodies(readings, start=0):
    return [reading(sensor, seconds, value, start + i) for i, (sensor, seconds, value) in enumerate(readings)]


def expected_aggregates(readings, delay=WATERMARK_S):
    """What the pipeline's rows, merged, hold once it has read these readings, however they were
    cut into batches and however late each came: (gateway, sensor, ts, value) each counted once
    (repeats left out by the caller), a window's figures there once its gateway's latest ts is
    past its end by the delay (its final row then written; a reading for it that came after is a
    correction row of it), the others still open. {(gateway, window start, sensor): (count, min,
    max, mean, last)}; last is the value of the latest ts (the readings' ts differ)."""
    latest = {}
    for gateway, _sensor, seconds, _value in readings:
        latest[gateway] = max(latest.get(gateway, seconds), seconds)
    windows = {}
    for gateway, sensor, seconds, value in readings:
        start = seconds // WINDOW_S * WINDOW_S
        if start + WINDOW_S <= latest[gateway] - delay:
            windows.setdefault((gateway, start, sensor), []).append((seconds, value))
    result = {}
    for key, values in windows.items():
        numbers = [v for _, v in values]
        result[key] = (len(numbers), min(numbers), max(numbers), sum(numbers) / len(numbers), max(values)[1])
    return result


# ---------------------------------------------------------------- reading what the pipeline wrote


def committed_files(output):
    """The files the Parquet sink's commit log lists (what a Spark reader sees), not a glob."""
    log = os.path.join(output, "_spark_metadata")
    added, deleted = set(), set()
    for name in os.listdir(log):
        if name.startswith("."):
            continue
        with open(os.path.join(log, name)) as f:
            lines = f.read().splitlines()
        assert lines[0] == "v1", (name, lines[:1])
        for entry in map(json.loads, lines[1:]):
            path = entry["path"].replace("file://", "", 1)
            (added if entry["action"] == "add" else deleted).add(path)
    return sorted(added - deleted)


def written_rows(output, window=WINDOW_S):
    """Every committed row, as a dict with its window's start and end in epoch seconds and its
    date partition; each row's partition checked against its window's start, its length against
    window (seconds)."""
    rows = []
    for path in committed_files(output):
        date = re.search(r"/date=(\d{4}-\d{2}-\d{2})/", path).group(1)
        table = pq.read_table(path)
        starts = table.column("window_start").cast(pa.timestamp("us", "UTC")).cast(pa.int64()).to_pylist()
        ends = table.column("window_end").cast(pa.timestamp("us", "UTC")).cast(pa.int64()).to_pylist()
        lasts = table.column("last_ts").cast(pa.timestamp("us", "UTC")).cast(pa.int64()).to_pylist()
        for row, start_us, end_us, last_us in zip(table.to_pylist(), starts, ends, lasts):
            row.update(start=start_us // 1000000, end=end_us // 1000000, last_us=last_us, date=date)
            assert row["end"] == row["start"] + window and row["kind"] in ("final", "correction"), row
            assert datetime.datetime.fromtimestamp(row["start"], datetime.timezone.utc).date().isoformat() == date
            rows.append(row)
    return rows


def written_aggregates(output, window=WINDOW_S):
    """{(gateway, window start, sensor): (count, min, max, mean, last)} of the committed rows,
    merged as docs/pipeline.md says to read them (counts and sums summed, min of mins, max of
    maxes, the last of the latest), and the date partitions. A window with two final rows fails,
    and so does a correction of a window with no final row."""
    merged = {}
    finals = set()
    dates = set()
    for row in written_rows(output, window):
        dates.add(row["date"])
        key = (row["gateway"], row["start"], row["sensor"])
        if row["kind"] == "final":
            assert key not in finals, "window written twice: %r" % (key,)
            finals.add(key)
        have = merged.setdefault(key, [0, 0.0, row["min"], row["max"], -1, None])
        have[0] += row["count"]
        have[1] += row["sum"]
        have[2], have[3] = min(have[2], row["min"]), max(have[3], row["max"])
        if row["last_us"] > have[4]:
            have[4], have[5] = row["last_us"], row["last"]
    assert set(merged) == finals, "corrections of windows never written: %r" % (set(merged) - finals)
    return {key: (c, low, high, total / c, last) for key, (c, total, low, high, _, last) in merged.items()}, dates


def assert_same(written, expected):
    assert sorted(written) == sorted(expected)
    for key, (count, low, high, mean, last) in expected.items():
        assert written[key][:3] == (count, low, high), key
        assert written[key][3] == pytest.approx(mean), key
        assert written[key][4] == last, key


# ---------------------------------------------------------------- running the command


def pipeline_args(uri, streams, output, checkpoint, *more):
    """`hutch pipeline`'s arguments for the tests' readings: windows of WINDOW_S, a watermark
    of WATERMARK_S, what the streams hold now (available-now), and more."""
    return [
        "--uri",
        uri,
        "--streams",
        streams,
        "--output",
        output,
        "--checkpoint",
        checkpoint,
        "--window",
        "1 minute",  # WINDOW_S
        "--watermark",
        "2 minutes",  # WATERMARK_S
        "--trigger",
        "available-now",
        *more,
    ]


def run_pipeline(*args, env=None, timeout=240):
    """`hutch pipeline ...` in a process group of its own; (exit code, stdout lines, stderr
    lines, seconds). Whatever is left of the group afterwards (a JVM, a Python worker) fails
    the test, and is killed."""
    started = time.monotonic()
    proc = subprocess.Popen(
        [HUTCH, "pipeline", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    assert_group_ends(proc.pid)
    return proc.returncode, out.splitlines(), err.splitlines(), time.monotonic() - started


def assert_group_ends(pgid, what="hutch pipeline"):
    """The process group pgid is gone, or goes within seconds: Spark's Python workers end by
    themselves once the JVM that started them is gone (on a loaded machine one outlived the
    command by a moment). What is left after that fails the test, and is killed."""
    assert not outlived(pgid, 15), "%s left processes behind" % what


def outlived(pgid, seconds):
    """Whether the process group pgid is still there after `seconds`; if so it is SIGKILLed."""
    deadline = time.monotonic() + seconds
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if not group_alive(pgid):
        return False
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # it ended just now
    return True


def group_alive(pgid):
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


BATCH_LINE = re.compile(
    r"^batch (\d+): (\d+) rows in, (\d+) rows out(?: \((?:\d+ final, )?(\d+) correction\))?, (\d+\.\d\d) s, "
    r"lag (\d+) offsets$"
)


WAITING_LINES = (
    "hutch pipeline: starting Spark (",
    "hutch pipeline: Spark started in ",
    "hutch pipeline: no window has closed yet: ",
    "hutch pipeline: this batch's windows are still open: ",
)


def batch_lines(lines):
    """[(batch id, rows in, rows out, corrections among them, lag)] of the progress lines; any
    other line but the first (the start line) and the lines that say what the command waits for
    (Spark starting, no window closed yet) fails."""
    assert lines[0].startswith("hutch pipeline: "), lines
    found = []
    for line in lines[1:]:
        if line.startswith(WAITING_LINES):
            continue
        match = BATCH_LINE.match(line)
        assert match, "not a progress line: %r" % line
        batch, rows_in, rows_out, corrections, _, lag = match.groups()
        found.append((int(batch), int(rows_in), int(rows_out), int(corrections or 0), int(lag)))
    return found


# ---------------------------------------------------------------- a pipeline beside a live gateway
# (test_sensor_to_parquet.py, test_field_day.py)


class Pipeline:
    """`hutch pipeline` over upstream's stream (upstream.url, upstream.stream) in a process group
    of its own, its output kept: 1-minute windows, each written once its gateway's readings are
    1000 days past it (publish_end() closes them), unless window and watermark say otherwise;
    the readings' dedup unless dedup is false."""

    def __init__(self, upstream, output, checkpoint, dedup=True, window="1 minute", watermark="1000 days"):
        self.args = [
            "--uri", upstream.url, "--streams", upstream.stream, "--output", output, "--checkpoint", checkpoint,
            "--window", window, "--watermark", watermark,  # (by default no reading is ever a correction)
            "--dedup", "sensor" if dedup else "none",
        ]  # fmt: skip
        self.checkpoint = checkpoint
        self.lines = []
        self.proc = None

    def start(self, *more):
        self.committed = self.commits()  # (what the runs before this one committed)
        self.proc = subprocess.Popen(
            [HUTCH, "pipeline", *self.args, *more],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            env=self.quick_env(),
        )
        threading.Thread(target=self._read, args=(self.proc,), daemon=True).start()
        return self

    def quick_env(self):
        """Outside the "spark" group (whose drivers start from its class archive: conftest.py
        spark_jvm), the same quick JIT and compiled PySpark for this test's drivers and Python
        workers (tests/support/spark_jvm.py): about a third of a driver's start, each run."""
        if "SPARK_SUBMIT_OPTS" in os.environ:
            return None
        from spark_jvm import compiled_pyspark_python, quick_driver  # (it imports this module)

        scratch = os.path.join(os.path.dirname(self.checkpoint), "spark-tmp")
        os.makedirs(scratch, exist_ok=True)
        return dict(
            os.environ, SPARK_SUBMIT_OPTS=quick_driver(scratch), PYSPARK_PYTHON=compiled_pyspark_python(scratch)
        )

    def _read(self, proc):
        for line in proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def commits(self):
        try:
            return len([n for n in os.listdir(os.path.join(self.checkpoint, "commits")) if not n.startswith(".")])
        except OSError:
            return 0

    def went_on(self):
        """Whether this run committed a batch (or ended by itself)."""
        return self.commits() > self.committed or self.proc.poll() is not None

    def kill(self):
        """SIGKILL to its group (unless it ended by itself: a run that lost its broker fails)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        assert_group_ends(self.proc.pid)

    def finish(self, timeout=600):
        code = self.proc.wait(timeout)
        assert_group_ends(self.proc.pid)
        return code

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.kill()


def logged(logs):
    """{(sensor, seq): (ts, value)} of every reading the sensors logged; a number logged twice
    fails (a sensor's numbers only grow)."""
    found = {}
    for path in logs:
        with open(path) as f:
            for line in f:
                sensor, seq, ts, value = line.split()
                key = (sensor, int(seq))
                assert key not in found, "a sensor logged one number twice: %r" % (key,)
                found[key] = (int(ts), float(value))
    return found


def expected_windows(readings, gateway):
    """{(gateway, window start, sensor): (count, min, max)} of the logged readings, all from that
    gateway."""
    windows = {}
    for (sensor, _seq), (ts, value) in readings.items():
        windows.setdefault((gateway, ts // 60 * 60, sensor), []).append(value)
    return {key: (len(values), min(values), max(values)) for key, values in windows.items()}


def publish_end(url, stream, gateway, ts):
    """A reading of the sensor "~end" from gateway, stamped ts, published straight to the stream:
    it moves that gateway's progress past every window before ts (their rows are written)."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.confirm_delivery()
    body = json.dumps({"sensor": "~end", "ts": ts, "value": 0}).encode()
    channel.basic_publish("", stream, body, pika.BasicProperties(delivery_mode=2, headers={"x-hutch-gateway": gateway}))
    connection.close()


EVERY = 0.1  # s between a sensor's readings


class Sensor:
    """s-1 on a gateway: a reading every EVERY s to amq.topic (sensors.s-1), numbered
    (x-sensor-id, x-sensor-seq), stamped with the wall clock, in confirm mode; what was
    confirmed is kept: {seq: (ts, value)}. A publish that fails (its gateway restarting) is sent
    again with the same number."""

    def __init__(self, broker):
        self.broker = broker
        self.confirmed = {}
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", self.broker.port))
        channel = connection.channel()
        channel.confirm_delivery()
        seq = 0
        while not self.stopping.is_set():
            seq += 1
            ts, value = round(time.time(), 3), float(seq % 50)
            body = json.dumps({"sensor": "s-1", "ts": ts, "value": value}).encode()
            headers = {"x-sensor-id": "s-1", "x-sensor-seq": seq}
            channel.basic_publish(
                "amq.topic", "sensors.s-1", body, pika.BasicProperties(delivery_mode=2, headers=headers)
            )
            self.confirmed[seq] = (ts, value)
            time.sleep(EVERY)
        connection.close()

    def stop(self):
        self.stopping.set()
        self.thread.join(30)


def stream_readings(url, stream):
    """{(gateway, sensor, seq): (ts, value)} of the stream's records, and how many records (a
    reading the bridge sent again is in the stream twice)."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=1000)
    found, records = {}, 0
    for method, properties, body in channel.consume(
        stream, arguments={"x-stream-offset": "first"}, inactivity_timeout=2
    ):
        if method is None:
            break
        records += 1
        headers = properties.headers or {}
        reading = json.loads(body)
        key = (headers.get("x-hutch-gateway"), reading["sensor"], headers.get("x-sensor-seq"))  # (~end has none)
        found[key] = (float(reading["ts"]) if not isinstance(reading["ts"], str) else reading["ts"], reading["value"])
        channel.basic_ack(method.delivery_tag)
    connection.close()
    return found, records


def counted_in_parquet(readings, output, window):
    """(expected, counted, missing, twice): the readings upstream ({(gateway, sensor, seq): (ts,
    value)}) counted per (gateway, window start, sensor), beside the counts of the windows
    committed to output (windows of that many seconds); how many of them are missing from it, and how many counted twice."""
    expected = {}
    for (gateway, sensor, _seq), (ts, _value) in readings.items():
        if sensor != "~end":
            start = int(epoch(ts)) // window * window
            expected[(gateway, start, sensor)] = expected.get((gateway, start, sensor), 0) + 1
    written, _ = written_aggregates(output, window)
    counted = {key: figures[0] for key, figures in written.items() if key[2] != "~end"}
    missing = sum(max(0, n - counted.get(key, 0)) for key, n in expected.items())
    twice = sum(max(0, n - expected.get(key, 0)) for key, n in counted.items())
    return expected, counted, missing, twice


def epoch(ts):
    if isinstance(ts, float):
        return ts
    import datetime

    return datetime.datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def drained(broker):
    done = subprocess.run(
        [os.path.join(BIN, "hutch"), "ctl", "bridges", "--json", "--data", broker.data],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    bridges = json.loads(done.stdout)["bridges"] if done.returncode == 0 else []
    return bridges and all(b["state"] == "running" and b["backlog"] == 0 and b["in_flight"] == 0 for b in bridges)


def descendants(pid):
    """The pids of pid's living descendants (Spark's Python daemon makes a process group of its
    own: a process group alone does not find its workers)."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(entry)
            if stat and stat[0] != "Z":
                children.setdefault(int(stat[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _stat(pid, path="/proc/%s/stat"):
    """(state, parent pid, process group) of a process (or a thread), None if it is gone."""
    try:
        with open(path % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], fields[1], fields[2]


def command_line(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def is_executor_worker(pid):
    """A Python worker running a Spark task (forked by `python -m pyspark.daemon pyspark.worker`),
    not the driver's source runner nor a planning worker."""
    return command_line(pid).endswith("pyspark.daemon pyspark.worker")
