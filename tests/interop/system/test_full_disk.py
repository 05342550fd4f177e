"""A full disk, as a gateway's SD card fills: the data folder on a small tmpfs of its own, and
publishers writing more than it holds. The broker says so, blocks the publishers and confirms
nothing it could not write; once the disk has room again (the tmpfs grown, as a user frees
space) they go on. After a SIGKILL every confirmed and PUBACKed message is there once, in
order: the write the disk refused is written again in its place, and the segment it was in is
sealed and read back whole (small segments: the failed write lands in a segment that rolls
over later). On CPython with AMQP publishers to a queue and to a stream and an MQTT QoS 1
publisher at once; on MicroPython (whose files write a record's parts one by one) with one
AMQP publisher. A Modbus device whose poll numbers cannot be saved on the full disk is said
once (no poll is numbered unsaved, so a restart never numbers one twice) and polled on once
there is room. A gateway whose backlog fills its disk during an outage is held back by
disk_free_limit before the disk is full, and sends all of it once the upstream is back; a
reload applies a new limit."""

import json
import os
import signal
import subprocess
import threading
import time

import pika
import pytest
from brokers import BIN, RunningBroker, blocked_notices, free_port, hutch_serve, sigkill, stop_all, wait_until
from micropython_env import micropython, serve_env
from modbus_support import ModbusDevices, bound_queue, check_polls, device_table, drain, polls_by_device
from mqtt_brokers import MqttBroker, Paho, restart
from scrapes import dom_figures, get, series

BODY = b"x" * 1000
PERSISTENT = pika.BasicProperties(delivery_mode=2)
REFUSED = "journal: cannot write: "  # the one error each broker logs: the refused write
RELEASED = "journal: the disk is full: its reserve (1048576 bytes) released"  # (CPython: ports/reserve.py)
REMADE = "journal: its reserve (1048576 bytes) made again"
# disk_free_limit at its least: the disk fills before the broker would block its publishers
# for it, as when another program fills the disk
LEAST_LIMIT = 4096


@pytest.fixture
def small_disk(tmp_path):
    """mount(size): the broker's data folder (tmp_path/data, where RunningBroker puts it) on a
    tmpfs of that size; unmounted after the test."""
    data = tmp_path / "data"
    data.mkdir()
    mounted = []

    def mount(size):
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=" + size, "tmpfs", str(data)], check=True)
        mounted.append(data)

    yield mount
    for folder in mounted:  # (--lazy: even while a broker of a failed test holds it)
        subprocess.run(["umount", "--lazy", str(folder)], check=True)


@pytest.mark.timeout(180)
def test_a_full_disk_blocks_publishers_confirms_nothing_unwritten_and_loses_nothing(tmp_path, small_disk):
    small_disk("2560k")  # full after about 2,300 messages
    config = tmp_path / "hutch.toml"
    config.write_text("[server]\nsegment_bytes = 1048576\ndisk_free_limit = %d\n" % LEAST_LIMIT)
    mqtt_port = free_port()
    command = [os.path.join(BIN, "hutch"), "serve", "--config", str(config), "--mqtt-port", str(mqtt_port)]
    running = RunningBroker(command, tmp_path).start()
    broker = MqttBroker("hutch", mqtt_port, running=running)
    wait_until(lambda: "listening for MQTT on 127.0.0.1:%d" % mqtt_port in running.log(), 30, what=running.log)
    try:
        collector = Paho(broker, "collector", clean=False).connect()
        collector.subscribe("disk/#", 1)
        collector.stop()  # its session's queue is durable: what it was sent waits on disk

        amqp = Publisher(running.port, 3000)
        stream = Publisher(running.port, 1000, "stream", {"x-queue-type": "stream"})
        mqtt = Paho(broker, "publisher").connect()
        sent = [mqtt.client.publish("disk/readings", b"%06d" % i + BODY, 1) for i in range(1000)]
        _held_back_then_let_go(
            running, lambda: (len(amqp.confirmed), len(stream.confirmed), sum(info.is_published() for info in sent))
        )
        amqp.finished()
        stream.finished()
        wait_until(lambda: all(info.is_published() for info in sent), 60, what="every PUBACK")
        mqtt.stop()

        sigkill(running)
        restart(broker)
        assert _amqp_queue(running.port) == list(range(3000))
        assert _stream(running.port, 1000) == list(range(1000))
        collector = Paho(broker, "collector", clean=False).connect()
        assert collector.flags.session_present
        got = [int(payload[:6]) for _, payload, _, _, _ in collector.take(1000, timeout=30)]
        collector.stop()
        assert got == list(range(1000))
    finally:
        code = running.stop()
    # (the restart's replay would say so had it found a segment damaged or a message lost)
    assert [line for line in running.errors() if REFUSED not in line] == []
    assert code == 0


@pytest.mark.timeout(180)
def test_a_full_disk_on_micropython_loses_nothing(tmp_path, small_disk):
    small_disk("256k")  # full after about 240 messages
    config = tmp_path / "hutch.json"  # (MicroPython reads no TOML)
    config.write_text(json.dumps({"server": {"segment_bytes": 65536, "disk_free_limit": LEAST_LIMIT}}))
    command = [micropython(), "-m", "hutch.server.serve", "--config", str(config)]
    running = RunningBroker(command, tmp_path, env=serve_env(tmp_path)).start()
    try:
        amqp = Publisher(running.port, 600)
        _held_back_then_let_go(running, lambda: len(amqp.confirmed))
        amqp.finished()
        sigkill(running)
        running.start()
        assert _amqp_queue(running.port) == list(range(600))
    finally:
        if running.proc.poll() is None:
            running.proc.send_signal(signal.SIGINT)  # (MicroPython has no signal module: Ctrl-C)
            running.proc.wait(15)
        running.stop()
    assert [line for line in running.errors() if REFUSED not in line] == []


@pytest.mark.timeout(120)
def test_a_device_polled_onto_a_full_disk_says_so_once_and_goes_on_once_there_is_room(tmp_path, small_disk):
    small_disk("1m")
    port = free_port()
    table = "[server]\ndisk_free_limit = %d\n" % LEAST_LIMIT + device_table(
        "probe-1", "modbus+tcp://127.0.0.1:%d" % port, 1, 0.1
    )
    broker = hutch_serve(tmp_path, table)
    broker.start()
    bound_queue(broker)  # (nothing answers yet: its polls fail, none is numbered)
    filler = _fill(broker.data)
    devices = ModbusDevices(port, [1])
    try:
        said = "device probe-1: cannot write "  # its poll numbers' file: no number is given unsaved
        wait_until(lambda: said in broker.log(), 30, what=broker.log)
        time.sleep(1)  # ten polls more on the full disk: said once
        assert broker.log().count(said) == 1 and "internal error" not in broker.log()
        os.remove(filler)
        wait_until(lambda: "device probe-1: back up" in broker.log(), 10, what=broker.log)
        time.sleep(1)
        broker.stop()
        polls, _ = polls_by_device(drain(broker.start()))
    finally:
        stop_all(broker, devices)
    check_polls(polls)
    assert len(polls["probe-1"]) >= 5, polls


@pytest.mark.timeout(180)
def test_a_gateway_whose_backlog_fills_its_disk_in_an_outage_sends_it_all_once_the_upstream_is_back(
    tmp_path, small_disk
):
    small_disk("3m")  # 5,000 readings of 1 KB do not fit
    upstream = hutch_serve(tmp_path / "upstream")
    (tmp_path / "upstream").mkdir()
    upstream.start()
    _declare(upstream.port, "readings")  # (durable: there again when the upstream comes back)
    upstream.stop()
    bridge = (
        '[[bridge]]\nname = "uplink"\nuri = "amqp://guest:guest@127.0.0.1:%d/"\nqueue = "readings"\n' % upstream.port
    )
    metrics = free_port()
    config = "[server]\nsegment_bytes = 262144\ndisk_free_limit = 1048576\n[metrics]\nport = %d\n" % metrics
    edge = hutch_serve(tmp_path, config + bridge)
    edge.start()
    try:
        sensors = Publisher(edge.port, 5000)
        wait_until(lambda: "publishers blocked: low on disk: " in edge.log(), 60, what=edge.log)
        assert len(sensors.confirmed) < 5000
        seen = _disk_metrics(metrics)
        assert seen["rabbitmq_alarms_free_disk_space_watermark"] == 1, seen
        assert (
            seen["rabbitmq_disk_space_available_bytes"] < seen["rabbitmq_disk_space_available_limit_bytes"] == 1048576
        )
        upstream.start()
        sensors.finished()
        wait_until(lambda: _count(upstream.port, "readings") == 5000, 60, what="the backlog upstream")
        wait_until(lambda: "publishers unblocked" in edge.log(), 30, what=edge.log)
        assert _disk_metrics(metrics)["rabbitmq_alarms_free_disk_space_watermark"] == 0
        assert _amqp_queue(upstream.port) == list(range(5000))
    finally:
        stop_all(edge, upstream)
    assert edge.errors() == [] and upstream.errors() == []


@pytest.mark.timeout(180)
def test_a_backlog_drains_and_its_disk_frees_while_another_program_keeps_the_disk_full(tmp_path, small_disk):
    """A backlog waits on disk during an outage; then another program fills the disk (a log
    file, here a filler), so the broker can write no record more; the upstream comes back: the
    bridge sends every message already durable all the same, and upstream has the whole backlog,
    in order. With the disk still full, the journal releases its reserve (DATA/reserve) to
    write the acknowledgements and the deletion of the backlog's segments: the disk frees, the
    reserve is made again, and publishers are let go, all while the filler stays."""
    small_disk("4m")
    upstream = hutch_serve(tmp_path / "upstream")
    (tmp_path / "upstream").mkdir()
    upstream.start()
    _declare(upstream.port, "readings")
    upstream.stop()
    bridge = (
        '[[bridge]]\nname = "uplink"\nuri = "amqp://guest:guest@127.0.0.1:%d/"\nqueue = "readings"\n' % upstream.port
    )
    edge = hutch_serve(tmp_path, "[server]\nsegment_bytes = 262144\ndisk_free_limit = %d\n" % LEAST_LIMIT + bridge)
    edge.start()
    try:
        assert os.path.getsize(os.path.join(edge.data, "reserve")) == 1 << 20
        sensors = Publisher(edge.port, 1500)
        sensors.thread.join(60)
        assert len(sensors.confirmed) == 1500
        filler = _fill(edge.data)
        journal = _used(os.path.join(edge.data, "journal"))
        upstream.start()
        wait_until(lambda: _count(upstream.port, "readings") == 1500, 60, what=lambda: edge.log()[-2000:])
        assert _amqp_queue(upstream.port) == list(range(1500))
        wait_until(lambda: _count(edge.port, "readings") == 0, 30, what="the acks written")
        wait_until(
            lambda: _used(os.path.join(edge.data, "journal")) < journal // 2, 30, what="the backlog's segments deleted"
        )
        wait_until(lambda: REMADE in edge.log(), 30, what="the reserve made again")
        assert RELEASED in edge.log(), edge.log()[-2000:]
        assert os.path.exists(filler) and os.path.getsize(os.path.join(edge.data, "reserve")) == 1 << 20
        more = Publisher(edge.port, 100)  # let go: the room the deleted segments gave
        more.thread.join(60)
        assert len(more.confirmed) == 100, edge.log()[-2000:]
        os.remove(filler)
    finally:
        stop_all(edge, upstream)
    assert upstream.errors() == []


def _used(folder):
    """Bytes the data folder's files take."""
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(folder) for name in names)


def test_a_reload_applies_a_new_disk_free_limit(tmp_path, small_disk):
    """`hutch ctl reload` with a limit above what the disk has free blocks publishers at the
    watch's next look: a publisher in confirm mode meanwhile is told no (basic.nack) and sends
    again; `hutch ctl status` (and --json) and the status page say publishers are blocked, with
    the bytes free as they are now; one below lets it go, and all it sent is there once, in
    order; the key removed brings back the profile's."""
    small_disk("3m")
    config = tmp_path / "hutch.toml"
    metrics = "[metrics]\nport = %d\n" % free_port()
    config.write_text(metrics + "[server]\ndisk_free_limit = 4096\n")
    broker = RunningBroker([os.path.join(BIN, "hutch"), "serve", "--config", str(config)], tmp_path).start()

    def reload(limit, said, logged):
        config.write_text(metrics + ("" if limit is None else "[server]\ndisk_free_limit = %s\n" % limit))
        before = broker.log().count(logged)
        reloaded = subprocess.run(
            [os.path.join(BIN, "hutch"), "ctl", "reload", "--data", broker.data],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert reloaded.returncode == 0 and said in reloaded.stdout, (reloaded.stdout, reloaded.stderr)
        wait_until(lambda: broker.log().count(logged) > before, 10, what=broker.log)

    try:
        reload("67108864", "disk_free_limit: 67108864 bytes", "publishers blocked: low on disk: ")
        sensors = Publisher(broker.port, 500)
        wait_until(lambda: sensors.nacked >= 3, 10, what="a publisher told no while blocked")
        assert sensors.confirmed == []
        free_then = _blocked_free_bytes(broker)
        with open(os.path.join(broker.data, "filler"), "wb") as f:
            f.write(bytes(512 * 1024))  # the disk fills on while they are blocked: said as it is now
        wait_until(lambda: _blocked_free_bytes(broker) <= free_then - 500 * 1024, 5, what="the figure of now")
        said = json.loads(_ctl(broker, "status", "--json"))["publishers"]
        assert said["blocked"] and said["for_s"] > 0 and "under disk_free_limit (67108864)" in said["reason"], said
        page = dom_figures("http://127.0.0.1:%s/" % metrics.split()[-1], str(tmp_path / "chromium"))
        assert (
            page["blocked"].startswith("Publishers blocked for ")
            and " bytes free for the data folder" in page["blocked"]
        )
        os.remove(os.path.join(broker.data, "filler"))
        reload("4096", "disk_free_limit: 4096 bytes", "publishers unblocked: ")
        assert "publishers: not blocked (live, " in _ctl(broker, "status")
        sensors.thread.join(60)
        assert len(sensors.confirmed) == 500
        # (its connection.blocked came with the connection's opening, before pika takes a
        # callback for it: the publisher hears the unblocked one)
        assert sensors.notices == ["unblocked"]
        assert _amqp_queue(broker.port) == list(range(500))
        reload(None, "disk_free_limit: 50000000 bytes", "publishers blocked: low on disk: ")
    finally:
        code = broker.stop()
    assert broker.errors() == [] and code == 0


def _ctl(broker, *command):
    done = subprocess.run(
        [os.path.join(BIN, "hutch"), "ctl", *command, "--data", broker.data], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _blocked_free_bytes(broker):
    """What `hutch ctl status` says is free while publishers are blocked for the disk."""
    line = [line for line in _ctl(broker, "status").splitlines() if line.startswith("publishers: ")][0]
    assert line.startswith("publishers: BLOCKED for ") and ": low on disk: " in line, line
    return int(line.split(": low on disk: ")[1].split()[0])


def _disk_metrics(port):
    """The edge's disk series on /metrics, by name."""
    _, _, text = get("http://127.0.0.1:%d/metrics" % port)
    return {name: value for (name, labels), value in series(text).items() if "disk" in name}


def _declare(port, queue):
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    connection.channel().queue_declare(queue, durable=True)
    connection.close()


def _count(port, queue):
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    count = connection.channel().queue_declare(queue, durable=True, passive=True).method.message_count
    connection.close()
    return count


def _fill(folder):
    """A file that takes what the disk has left: its path."""
    path = os.path.join(folder, "filler")
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(bytes(65536))
        except OSError:
            pass  # full
    return path


def _held_back_then_let_go(running, counts):
    """The disk fills: the broker logs it and blocks the publishers, and what they have had
    confirmed (counts()) stops moving; then the disk grows, and the broker writes again. (On
    CPython the first refused write releases the journal's reserve, DATA/reserve: the journal
    writes on into its room, and publishers stay blocked until it is made again.)"""
    wait_until(lambda: REFUSED in running.log() or RELEASED in running.log(), 60, what="the journal's write refused")
    assert "publishers blocked" in running.log()
    last = [None]

    def still():
        now = counts()
        same = now == last[0]
        last[0] = now
        return now if same else None

    stalled = wait_until(still, 30, interval=1.0, what="the publishers held back")
    time.sleep(1)  # nothing more is confirmed while the disk stays full
    assert counts() == stalled
    subprocess.run(["mount", "-o", "remount,size=64m", running.data], check=True)
    wait_until(lambda: "journal: writing again" in running.log() or REMADE in running.log(), 30, what=running.log)
    wait_until(lambda: "publishers unblocked" in running.log(), 30, what=running.log)


class Publisher:
    """Persistent messages with confirms to a durable queue, one at a time (BlockingConnection
    waits for each confirm), in a thread: confirmed gets each number confirmed. A publisher in
    confirm mode is told no (basic.nack) while publishers are blocked: it sends that message
    again until it is confirmed."""

    def __init__(self, port, count, queue="readings", arguments=None):
        self.port = port
        self.count = count
        self.queue = queue
        self.arguments = arguments
        self.confirmed = []
        self.nacked = 0
        self.notices = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        params = pika.ConnectionParameters("127.0.0.1", self.port, blocked_connection_timeout=None)
        connection = pika.BlockingConnection(params)
        self.notices = blocked_notices(connection)
        channel = connection.channel()
        channel.queue_declare(self.queue, durable=True, arguments=self.arguments)
        channel.confirm_delivery()
        for i in range(self.count):
            while True:
                try:
                    channel.basic_publish("", self.queue, b"%06d" % i + BODY, PERSISTENT)
                    break
                except pika.exceptions.NackError:  # (a publish that came while publishers were blocked)
                    self.nacked += 1
                    connection.sleep(0.1)  # then sent again, as an application does
            self.confirmed.append(i)
            connection.process_data_events(time_limit=0)  # (hands over the notices that came)
        connection.close()

    def finished(self):
        """Every message confirmed, the connection told it was blocked and then unblocked (pika
        hands the notices over after the confirm it was waiting for)."""
        self.thread.join(60)
        assert len(self.confirmed) == self.count
        # (blocked again if the disk fills again before it is done: each time let go)
        assert self.notices and self.notices == ["blocked", "unblocked"] * (len(self.notices) // 2), self.notices


def _stream(port, count):
    """The stream's first count messages' numbers, read from its first offset."""
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=500)
    got = []
    for method, _, body in channel.consume("stream", arguments={"x-stream-offset": "first"}, inactivity_timeout=10):
        if method is None:
            break
        got.append(int(body[:6]))
        channel.basic_ack(method.delivery_tag)
        if len(got) == count:
            break
    connection.close()
    return got


def _amqp_queue(port):
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    channel = connection.channel()
    got = []
    while True:
        method, _, body = channel.basic_get("readings", auto_ack=True)
        if method is None:
            break
        got.append(int(body[:6]))
    connection.close()
    return got
