"""Exactly once through crashes: `hutch pipeline` SIGKILLed at four points and its broker once,
restarted from the same checkpoint each time, writes the aggregates Python computes from what
was published: every window, none twice, every offset in exactly one committed batch.

Readings (four sensors, two streams, about eight minutes across midnight UTC so there are
two date partitions, out of order within the watermark, and some so late their window was
written long before) are published with confirms to a real `hutch serve`. The pipeline
reads them through tests/support/tcp_proxy.py, in its own process group, trigger
available-now in batches of 20. The kills, in the order (a), (c), (b), (b), (d), each of the
pipeline's whole process group with SIGKILL (Spark's Python daemon, which makes a group of
its own, and its workers must then end by themselves: kill_group checks every descendant),
each landed deterministically and checked before it is made:

(a) inside the source's read() on an executor, in the first batch: the proxy looks up which
    process opened each link it accepts (/proc/net/tcp: the socket's inode, then the pid
    holding it among the pipeline's descendants) and black-holes the first link of a Spark
    executor's Python worker (`pyspark.daemon pyspark.worker`, not the driver's source
    runner): read() is stuck connecting, before its first record. The kill comes once that
    worker is seen alive, holding the dead link, with offsets/0 written and commits/0 not.
    The restart replays batch 0, so Spark calls the source's initialOffset() again: the
    comparison shows it gave the same start.
(b) after the sink wrote a batch N and before Spark's commit of it (commits/N), twice: once at
    N's first new part file, before the sink's own commit log (_spark_metadata) has N (the
    files are orphans a reader never sees), and once with N in that log (the replay must
    not write N again). The test polls every 2 ms (the moments last tens of milliseconds)
    and freezes the whole group with SIGSTOP at the first sign; once every thread is
    stopped, it checks commits/N is absent and _spark_metadata/N absent or present as
    wanted, and kills. A freeze that came too late is let go (SIGCONT) and the next batch
    is waited for.
(c) in the source's commit(): the one fault-injection hook (hutch/spark/pause.py,
    HUTCH_SPARK_PAUSE_AT=commit:FILE, off by default) writes FILE with its pid and the
    offsets it was given and blocks. The kill comes once the file says the driver's source
    runner is there, with offsets/N and commits/N-1 written, commits/N not, and the offsets
    given those of offsets/N-1.
(d) the broker: SIGKILLed two batches into a run; the pipeline fails on its own (exit 1, one
    line), the broker restarts on the same port and data folder, and the pipeline from the
    checkpoint.

A last run goes to the end. Spark's checkpoint (offsets/ and commits/) then says which
offsets each committed batch read; what Python computes from the published readings batch by
batch (pipeline_support.expected_aggregates: the watermark's rules) must equal what the
Parquet files the sink committed hold.

The test can fail: acked_source.py is a source that acks on receipt (what Spark's RabbitMQ
receivers did); kill (b) with it, before the sink's commit, gives aggregates that differ
(a batch's readings are lost). And read() and
initialOffset() are shown deterministic on their own: a reader pickled as Spark ships it to
executors reads a range the same way twice.
"""

import calendar
import json
import os
import pickle
import random
import signal
import subprocess
import sys
import time

import pytest
from brokers import RunningBroker, pika_connection, wait_until
from paths import SUPPORT
from pipeline_support import (
    HUTCH,
    _stat,
    assert_group_ends,
    assert_same,
    bodies,
    command_line,
    committed_files,
    declare,
    descendants,
    expected_aggregates,
    is_executor_worker,
    pipeline_args,
    publish,
    written_aggregates,
    written_rows,
)
from tcp_proxy import TcpProxy

# conftest.py: the kills' Spark jobs, one after another, beside the other Spark jobs' group. The time bound is wide: under CI's
# load a run of the pipeline (Spark's start included) has taken minutes.
pytestmark = [pytest.mark.xdist_group("spark-kills"), pytest.mark.timeout(900)]

BATCH = 20  # --max-offsets-per-trigger: many batches (10 of each stream)
T0 = calendar.timegm((2024, 5, 1, 23, 56, 0))
RUN_TIMEOUT = 300  # a run of the pipeline, Spark's start included, on a loaded 2-core machine


@pytest.fixture
def hutch(tmp_path):
    """A broker of the test's own: it is SIGKILLed and started again."""
    folder = tmp_path / "hutch"
    folder.mkdir()
    running = RunningBroker([HUTCH, "serve"], folder).start()
    yield running
    if running.proc.poll() is None:
        running.stop()


# ---------------------------------------------------------------- the readings


def published_readings():
    """{stream: [(sensor, ts, value)]} in publish order (offset i is the i-th). Stream a has
    sensors s0 and s1, stream b s2 and s3; a reading every 4 s per stream, shuffled in groups
    of five (out of order by up to 16 s, well within the 2-minute watermark); and past the
    middle, readings of the first two minutes: late, their windows long written."""
    rng = random.Random(13)
    streams = {}
    for stream, sensors, shift in (("a", ("s0", "s1"), 0), ("b", ("s2", "s3"), 2)):
        readings = [(sensors[i % 2], T0 + shift + i * 4, round(rng.uniform(-5, 30), 2)) for i in range(120)]
        groups = [readings[i : i + 5] for i in range(0, len(readings), 5)]
        for group in groups:
            rng.shuffle(group)
        readings = [r for group in groups for r in group]
        for position, late in ((70, 30), (85, 75), (100, 10)):
            readings.insert(position, (sensors[position % 2], T0 + shift + late, 99.5))
        streams[stream] = readings
    return streams


# ---------------------------------------------------------------- Spark's checkpoint


def log_entries(folder):
    """{batch id: the entry's last line, parsed} of a Spark metadata log (offsets/, commits/)."""
    entries = {}
    for name in os.listdir(folder):
        if name.isdigit():
            with open(os.path.join(folder, name)) as f:
                entries[int(name)] = json.loads(f.read().splitlines()[-1])
    return entries


def latest_batch(checkpoint):
    """The newest batch planned: its entry's name in offsets/ (Spark writes an entry whole, then
    renames it). Names only, not contents: the kills poll this every 2 ms."""
    offsets = os.path.join(checkpoint, "offsets")
    batches = [int(name) for name in os.listdir(offsets) if name.isdigit()] if os.path.isdir(offsets) else []
    return max(batches) if batches else None


def committed(checkpoint, batch):
    return os.path.exists(os.path.join(checkpoint, "commits", str(batch)))


def committed_batches(checkpoint, names):
    """[[(stream, offset)...] per batch] from offsets/ and commits/: every planned batch is
    committed, and each starts where the one before ended (the first at 0: earliest)."""
    offsets = log_entries(os.path.join(checkpoint, "offsets"))
    commits = log_entries(os.path.join(checkpoint, "commits"))
    assert sorted(offsets) == list(range(len(offsets))) and sorted(commits) == sorted(offsets), (offsets, commits)
    batches, start = [], dict((name, 0) for name in names)
    for batch in sorted(offsets):
        end = offsets[batch]
        assert all(end[name] >= start[name] for name in names), (batch, start, end)
        batches.append([(name, offset) for name in names for offset in range(start[name], end[name])])
        start = end
    return batches


def not_once(batches, counts):
    """The published offsets that are not in exactly one committed batch: {(stream, offset): n}."""
    times = dict(((name, i), 0) for name in counts for i in range(counts[name]))
    for batch in batches:
        for key in batch:
            times[key] = times.get(key, 0) + 1
    return dict((key, n) for key, n in times.items() if n != 1)


# ---------------------------------------------------------------- the pipeline's processes


def running_threads(pgid):
    """[(pid, command line, thread, state)] of the threads of the group not stopped. A thread
    in uninterruptible sleep (D) counts as stopped: it runs no code of its own before it
    stops, and one stays there for good (the JVM's thread that spawns a command waits in
    vfork for a child the signal stopped before its exec)."""
    running = []
    for pid in os.listdir("/proc"):
        stat = pid.isdigit() and _stat(pid)
        if stat and int(stat[2]) == pgid and stat[0] != "Z":
            try:
                tasks = os.listdir("/proc/%s/task" % pid)
            except OSError:
                continue
            for task in tasks:
                thread = _stat(task, "/proc/%s/task/%%s/stat" % pid)
                if thread and thread[0] not in "TtZXD":
                    running.append((pid, command_line(int(pid))[:80], task, thread[0]))
    return running


def freeze(pgid):
    """SIGSTOP the group, and wait until every thread of it is stopped: a process the group
    made as the signal came (the JVM runs small commands) gets it again."""

    def again():
        time.sleep(0.01)
        os.killpg(pgid, signal.SIGSTOP)

    os.killpg(pgid, signal.SIGSTOP)
    wait_until(lambda: not running_threads(pgid), 10, lambda: "frozen: %r" % running_threads(pgid), between=again)
    time.sleep(0.1)  # a write a thread in D was making when the signal came is done by now


def alive(pid):
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def socket_owner(local_port, remote_port, pids):
    """Which of pids holds the TCP socket 127.0.0.1:local_port -> remote_port, or None."""
    inodes = set()
    with open("/proc/net/tcp") as f:
        for line in f.read().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].split(":")[1], 16) == local_port and int(fields[2].split(":")[1], 16) == remote_port:
                inodes.add("socket:[%s]" % fields[9])
    for pid in pids:
        try:
            for fd in os.listdir("/proc/%d/fd" % pid):
                if os.readlink("/proc/%d/fd/%s" % (pid, fd)) in inodes:
                    return pid
        except OSError:
            continue
    return None


def kill_group(proc):
    """SIGKILL the pipeline's process group; then every process that descended from it (Spark's
    Python daemon and its workers, which end once the JVM is gone) must end."""
    left_over = descendants(proc.pid)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    assert_group_ends(proc.pid)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(alive(pid) for pid in left_over):
        time.sleep(0.05)
    stuck = [pid for pid in left_over if alive(pid)]
    for pid in stuck:
        os.kill(pid, signal.SIGKILL)
    assert not stuck, "processes of the killed pipeline did not end: %r" % [command_line(p) for p in stuck]


# ---------------------------------------------------------------- the kills


class Kills:
    """One pipeline command (its output and checkpoint) run through the kills (a) to (d) and a
    last run to the end; what each kill found is in .landed."""

    def __init__(self, broker, proxy, command, env, tmp_path):
        self.broker = broker
        self.proxy = proxy
        self.command = command  # the argv of `hutch pipeline`, or of the ack-on-receive one
        self.env = env
        self.output = str(tmp_path / "aggregates")
        self.checkpoint = str(tmp_path / "checkpoint")
        self.marker = str(tmp_path / "paused.json")
        self.stderr = str(tmp_path / "pipeline.err")
        self.landed = {}

    def args(self):
        uri = "amqp://guest:guest@127.0.0.1:%d/" % self.proxy.port
        return pipeline_args(uri, "a,b", self.output, self.checkpoint, "--max-offsets-per-trigger", str(BATCH))

    def start(self, **env):
        with open(self.stderr, "w") as err:
            return subprocess.Popen(
                self.command + self.args(),
                stdout=subprocess.DEVNULL,
                stderr=err,
                env=dict(self.env, **env),
                start_new_session=True,
            )

    def run_all(self, only=None):
        """The kills in their order (or only those named), then a last run to the end."""
        kills = (self.in_read, self.in_commit, self.files_written, self.sink_committed, self.broker_dies)
        for kill in kills:
            if only is not None and kill.__name__ not in only:
                continue
            started = time.monotonic()
            kill()
            print("%s: %.1f s" % (kill.__name__, time.monotonic() - started))
        started = time.monotonic()
        proc = self.start()
        try:
            code = proc.wait(RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            raise
        assert_group_ends(proc.pid)
        assert code == 0, self.errors()
        print("the last run: %.1f s" % (time.monotonic() - started))

    def errors(self):
        with open(self.stderr) as f:
            return f.read()[-3000:]

    def running(self, proc):
        """For wait_until: a pipeline that ended meanwhile fails the test."""
        assert proc.poll() is None, "the pipeline ended (%s):\n%s" % (proc.returncode, self.errors())
        return True

    def in_read(self):
        """(a) the first link an executor's Python worker opens is black-holed as it is accepted."""
        trapped = []
        proc = None

        def trap(client):
            if trapped or proc is None:
                return False
            owner = socket_owner(client.getpeername()[1], self.proxy.port, descendants(proc.pid))
            if owner is not None and is_executor_worker(owner):
                trapped.append((owner, command_line(owner)))
                return True
            return False

        proc = self.start()
        self.proxy.on_accept = trap
        try:
            wait_until(lambda: self.running(proc) and trapped, RUN_TIMEOUT, "an executor's link to the broker")
            worker, seen_as = trapped[0]
            batch = latest_batch(self.checkpoint)
            assert alive(worker) and socket_owner_of_trap(self.proxy, worker)
            assert batch == 0 and not committed(self.checkpoint, batch)
        finally:
            self.proxy.on_accept = None
            kill_group(proc)
            self.proxy.heal()  # drops the dead link
        self.landed["read"] = {"batch": batch, "worker": seen_as}

    def in_commit(self):
        """(c) the source's commit() blocks (HUTCH_SPARK_PAUSE_AT) and says so in self.marker."""
        proc = self.start(HUTCH_SPARK_PAUSE_AT="commit:" + self.marker)
        try:
            wait_until(lambda: self.running(proc) and os.path.exists(self.marker), RUN_TIMEOUT, "commit() paused")
            with open(self.marker) as f:
                paused = json.load(f)
            batch = latest_batch(self.checkpoint)
            assert paused["pid"] in descendants(proc.pid)
            assert "python_streaming_source_runner" in command_line(paused["pid"])
            assert committed(self.checkpoint, batch - 1) and not committed(self.checkpoint, batch)
            assert paused["detail"] == log_entries(os.path.join(self.checkpoint, "offsets"))[batch - 1]
        finally:
            kill_group(proc)
        os.remove(self.marker)
        self.landed["commit"] = {"batch": batch, "committing": paused["detail"]}

    def files_written(self):
        """(b) frozen at a batch's first new part file, before the sink's own commit of it."""
        self.before_batch_commit("files", sink_logged=False)

    def sink_committed(self):
        """(b) frozen once the sink's commit log lists a batch (its files are in the output for
        readers), before Spark's commit of it: the replay must not write that batch again."""
        self.before_batch_commit("sink log", sink_logged=True)

    def before_batch_commit(self, name, sink_logged):
        """Poll (every 2 ms: the moments last tens of milliseconds) for a batch N's new part
        files, or for N in the sink's commit log (_spark_metadata), while Spark's commits/N is
        not there; freeze the group (SIGSTOP) and, once every thread is stopped, check: N not
        committed, N in the sink's log or not as asked, and kill. A freeze that came too late
        is let go (SIGCONT) and the next batch is waited for."""
        known = set(part_files(self.output))
        proc = self.start()
        try:
            found = None
            deadline = time.monotonic() + RUN_TIMEOUT
            while found is None:
                assert time.monotonic() < deadline, "no batch caught between its %s and its commit" % name
                self.running(proc)
                batch = latest_batch(self.checkpoint)
                new = set(part_files(self.output)) - known
                if batch is None:  # nothing planned yet (the first run of a checkpoint)
                    sign = False
                elif sink_logged:
                    sign = in_sink_log(self.output, batch) and not committed(self.checkpoint, batch)
                else:
                    sign = bool(new)
                if not sign:
                    time.sleep(0.002)  # the polling interval
                    continue
                freeze(proc.pid)
                batch = latest_batch(self.checkpoint)
                new = set(part_files(self.output)) - known
                listed = set(committed_files(self.output))
                if not committed(self.checkpoint, batch) and in_sink_log(self.output, batch) == sink_logged:
                    found = {"batch": batch, "new files": len(new), "listed by the sink": len(new & listed)}
                else:
                    known |= new
                    os.killpg(proc.pid, signal.SIGCONT)  # too late for this batch: the next one
        finally:
            kill_group(proc)
        self.landed[name] = found

    def broker_dies(self):
        """(d) the broker SIGKILLed two batches into a run; the pipeline fails by itself."""
        first = latest_batch(self.checkpoint)
        proc = self.start()
        try:
            wait_until(
                lambda: self.running(proc) and latest_batch(self.checkpoint) >= first + 2,
                RUN_TIMEOUT,
                "two batches planned",
            )
            self.broker.proc.kill()
            self.broker.proc.wait(10)
            batch = latest_batch(self.checkpoint)
            code = proc.wait(RUN_TIMEOUT)
        except BaseException:
            kill_group(proc)
            raise
        assert_group_ends(proc.pid)
        errors = self.errors().splitlines()
        assert code == 1 and errors[-1].startswith("hutch pipeline: "), (code, errors[-5:])
        self.broker.log_file.close()
        self.broker.start()  # the same port and data folder
        self.landed["broker"] = {"batch": batch, "pipeline said": errors[-1][:160]}


def part_files(output):
    found = []
    if os.path.isdir(output):
        for folder in os.listdir(output):
            if folder.startswith("date="):
                found += [os.path.join(output, folder, name) for name in os.listdir(os.path.join(output, folder))]
    return [path for path in found if os.path.basename(path).startswith("part-")]


def in_sink_log(output, batch):
    """Whether the file sink's commit log has batch (every tenth entry is a compaction)."""
    folder = os.path.join(output, "_spark_metadata")
    return any(os.path.exists(os.path.join(folder, name)) for name in (str(batch), "%d.compact" % batch))


def socket_owner_of_trap(proxy, pid):
    """The trapped worker still holds a link to the proxy (it is stuck in it, not gone)."""
    for client, _ in list(proxy.links):
        if socket_owner(client.getpeername()[1], proxy.port, [pid]) == pid:
            return True
    return False


def environment():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [SUPPORT, os.environ.get("PYTHONPATH")])))
    env.pop("HUTCH_SPARK_PAUSE_AT", None)
    return env


def expected_from(batches, readings):
    """What the committed batches give, computed in Python from the published readings (a
    sensor's straight to the broker: no gateway)."""
    return expected_aggregates([("",) + readings[stream][offset] for batch in batches for stream, offset in batch])


def publish_all(broker, readings, queue_type):
    connection = pika_connection(broker)
    channel = connection.channel()
    for name in readings:
        channel.queue_declare(name, durable=True, arguments={"x-queue-type": queue_type})
    connection.close()
    for name, stream in readings.items():
        publish(broker, name, bodies(stream))


# ---------------------------------------------------------------- the tests


@pytest.mark.long  # tests/conftest.py: its group is started early
def test_killed_at_four_points_and_its_broker_once_the_pipeline_writes_every_window_once(hutch, tmp_path):
    readings = published_readings()
    publish_all(hutch, readings, "stream")
    proxy = TcpProxy(hutch.port).start()
    kills = Kills(hutch, proxy, [HUTCH, "pipeline"], environment(), tmp_path)
    try:
        kills.run_all()
    finally:
        proxy.stop()
    print("kills landed: %s" % json.dumps(kills.landed))

    counts = dict((name, len(stream)) for name, stream in readings.items())
    batches = committed_batches(kills.checkpoint, sorted(readings))
    assert not_once(batches, counts) == {}
    expected = expected_from(batches, readings)
    written, dates = written_aggregates(kills.output)  # a window's final row twice fails as it reads
    assert_same(written, expected)
    # the six late readings, each in a correction row of its window, written once
    corrections = [row for row in written_rows(kills.output) if row["kind"] == "correction"]
    assert sum(row["count"] for row in corrections) == 6 and dates == {"2024-05-01", "2024-05-02"}, corrections
    assert len(batches) > 2 * 120 // BATCH  # many batches: the kills fell between others
    assert not hutch.errors(), hutch.log()[-3000:]


def test_a_source_that_acks_on_receipt_fails_the_same_comparison(hutch, tmp_path):
    """The same readings in classic queues, acked_source.py's source, and the kill that shows
    it: once the sink wrote a batch's files, before its commit. Spark replays that batch, and
    what it took from the queues the first time is gone. (One kill and a last run, not all
    five: two Spark starts instead of six. The other kills cost it nothing: a replayed batch
    the sink had committed is not read again, and the others fall before anything was taken.)"""
    readings = published_readings()
    publish_all(hutch, readings, "classic")
    proxy = TcpProxy(hutch.port).start()
    command = [sys.executable, "-c", "import acked_source; acked_source.main()"]
    kills = Kills(hutch, proxy, command, environment(), tmp_path)
    try:
        kills.run_all(only=("files_written",))
    finally:
        proxy.stop()

    counts = dict((name, len(stream)) for name, stream in readings.items())
    not_read_once = not_once(committed_batches(kills.checkpoint, sorted(readings)), counts)
    # what an exactly-once run writes: the real source's batches, BATCH // 2 of each stream
    expected = expected_from(even_batches(counts), readings)
    written, _ = written_aggregates(kills.output)
    missing = sorted(set(expected) - set(written))
    extra = sorted(set(written) - set(expected))
    wrong = sorted(key for key in set(expected) & set(written) if written[key] != pytest.approx(expected[key]))
    counted = sum(row[0] for row in written.values())
    print(
        "ack on receipt: kills %s; published offsets in no committed batch: %d; windows: %d expected, "
        "%d missing, %d extra, %d with other values; readings counted: %d of %d"
        % (
            json.dumps(kills.landed),
            len(not_read_once),
            len(expected),
            len(missing),
            len(extra),
            len(wrong),
            counted,
            sum(row[0] for row in expected.values()),
        )
    )
    assert missing or extra or wrong
    assert counted < sum(row[0] for row in expected.values())  # what it took before a kill is lost


def even_batches(counts):
    """The batches the real source makes of streams of one length: BATCH // 2 of each."""
    (length,) = set(counts.values())
    half = BATCH // 2
    return [
        [(name, i) for name in sorted(counts) for i in range(k, min(k + half, length))] for k in range(0, length, half)
    ]


# ---------------------------------------------------------------- read() and initialOffset() alone


def test_a_reader_shipped_as_spark_ships_it_reads_a_range_the_same_every_time(hutch):
    """read() runs on executors in a reader unpickled for each task, and Spark replays a batch's
    partitions after a crash: two unpickled copies read the same partition to the same rows.
    initialOffset(), asked again on replay, gives the same start, also after more records
    came. (latestOffset() without arguments, as Spark 4.0 and 4.1 call it: test_spark_source.py's
    test_spark_4_0_and_4_1_ask_for_the_latest_offsets_without_a_start.)"""
    from pyspark import cloudpickle
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from hutch.spark.options import Options
    from hutch.spark.source import HutchStreamReader

    declare(hutch, "r1", "r2")
    publish(hutch, "r1", [b"one-%d" % i for i in range(30)])
    publish(hutch, "r2", [b"two-%d" % i for i in range(7)])
    reader = HutchStreamReader(Options({"uri": hutch.url, "streams": "r1,r2", "maxOffsetsPerTrigger": "20"}))
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxRows(20))
    assert (start, end) == ({"r1": 0, "r2": 0}, {"r1": 13, "r2": 7})
    shipped = cloudpickle.dumps(reader)
    parts = [pickle.loads(pickle.dumps(part)) for part in reader.partitions(start, end)]

    def rows(part):
        batches = pickle.loads(shipped).read(part)  # pyarrow RecordBatches, as Spark takes them
        return [(r["stream"], r["offset"], r["body"]) for batch in batches for r in batch.to_pylist()]

    for part in parts:
        first = rows(part)
        assert first == [
            (part.stream, i, b"%s-%d" % (b"one" if part.stream == "r1" else b"two", i))
            for i in range(part.start, part.end)
        ]
        assert rows(part) == first

    publish(hutch, "r1", [b"one-%d" % i for i in range(30, 35)])
    assert pickle.loads(shipped).initialOffset() == start
    assert reader.initialOffset() == start
