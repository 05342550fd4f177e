"""memory_high_watermark on a host, as RabbitMQ's vm_memory_high_watermark: a broker in a memory
cgroup of its own (600 MiB, the limit a container or a systemd unit's MemoryMax gives) with a
watermark of a fraction of it takes a backlog in memory until its resident memory passes the
watermark; then its publishers are blocked (connection.blocked; nacks in confirm mode), a
durable queue's window pages to disk, it is never killed, /metrics says so in RabbitMQ's
series, and every message it confirmed is there for a consumer; once it is consumed, the
publishers are let go. A watermark in bytes, reloaded,
applies at once."""

import json
import os
import re
import signal
import uuid

import pika
import pytest
from brokers import BIN, RunningBroker, wait_until
from scrapes import get, series

from hutch.bench.brokers import free_port

pytestmark = pytest.mark.system

LIMIT = 600 * 1024 * 1024
BODY = 256 * 1024  # (transient messages to a non-durable queue: kept in memory)
MOST = 1500  # the publisher gives up after this many: 375 MiB, past the watermark, under the limit
KEPT = 300  # persistent messages of 1 KiB in a durable queue: its window holds them in memory


@pytest.fixture
def memory_cgroup():
    """A memory cgroup of its own, LIMIT bytes (cgroup v1's memory controller, or v2's), its
    folder; removed afterwards."""
    name = "hutch-test-%s" % uuid.uuid4().hex[:8]
    for root, limit_file in (("/sys/fs/cgroup/memory", "memory.limit_in_bytes"), ("/sys/fs/cgroup", "memory.max")):
        folder = os.path.join(root, name)
        try:
            os.mkdir(folder)
        except OSError:
            continue
        try:
            with open(os.path.join(folder, limit_file), "w") as f:
                f.write(str(LIMIT))
        except OSError:
            os.rmdir(folder)
            continue
        yield folder
        os.rmdir(folder)  # (its processes have ended)
        return
    pytest.fail("no memory cgroup can be made here (cgroup v1 or v2, with write access)")


def _in_cgroup(folder, command):
    """command, run inside the cgroup folder (its PID written there before it starts)."""
    return ["sh", "-c", 'echo $$ > "%s/cgroup.procs" && exec "$@"' % folder, "sh"] + command


def test_a_backlog_past_memory_high_watermark_blocks_publishers_and_loses_nothing(tmp_path, memory_cgroup):
    metrics = free_port()
    config = tmp_path / "hutch.toml"
    config.write_text("[server]\nmemory_high_watermark = 0.25\n[metrics]\nport = %d\n" % metrics)
    broker = RunningBroker(_in_cgroup(memory_cgroup, [os.path.join(BIN, "hutch"), "serve", "--config", str(config)]), tmp_path)  # fmt: skip
    broker.start()
    watermark = LIMIT // 4
    said = wait_until(lambda: re.search(r"memory_high_watermark: (\d+) bytes \(0\.25 of the cgroup's limit", broker.log()), 10)  # fmt: skip
    assert int(said.group(1)) == watermark, broker.log()
    blocked = []
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port, blocked_connection_timeout=120))  # fmt: skip
    connection.add_on_connection_blocked_callback(lambda _, frame: blocked.append(frame.method.reason))
    connection.add_on_connection_unblocked_callback(lambda _, frame: blocked.append("unblocked"))
    channel = connection.channel()
    channel.queue_declare("backlog", durable=False)
    channel.confirm_delivery()
    channel.queue_declare("kept", durable=True)  # a durable queue's backlog: in memory, its window
    for i in range(KEPT):
        channel.basic_publish("", "kept", b"%04d" % i + bytes(1020), pika.BasicProperties(delivery_mode=2))
    confirmed = 0
    for i in range(MOST):
        try:
            channel.basic_publish("", "backlog", i.to_bytes(4, "big") * (BODY // 4), pika.BasicProperties(delivery_mode=1))  # fmt: skip
        except pika.exceptions.NackError:
            break
        confirmed += 1
    connection.process_data_events(time_limit=1)
    assert blocked and "memory_high_watermark" in blocked[0], (confirmed, blocked)
    assert broker.proc.poll() is None  # (never killed)
    resident = confirmed * BODY
    print("blocked after %d messages of %d KiB (%d MiB), watermark %d MiB of a %d MiB cgroup" % (confirmed, BODY // 1024, resident >> 20, watermark >> 20, LIMIT >> 20))  # fmt: skip
    assert resident < MOST * BODY and "publishers blocked" in broker.log()
    found = series(get("http://127.0.0.1:%d/metrics" % metrics)[2])
    assert found[("rabbitmq_alarms_memory_used_watermark", "")] == 1
    assert found[("rabbitmq_resident_memory_limit_bytes", "")] == watermark
    assert found[("rabbitmq_process_resident_memory_bytes", "")] > watermark
    # the durable queue paged to disk: 16 messages of it stay in memory
    [kept] = [q for q in json.loads(get("http://127.0.0.1:%d/api/overview" % metrics)[2])["broker"]["queues"] if q["name"] == "kept"]  # fmt: skip
    assert (kept["in_memory"], kept["on_disk"]) == (16, KEPT - 16), kept
    assert "%d messages of durable queues paged to disk" % (KEPT - 16) in broker.log()
    # a consumer takes all of it, whole: nothing confirmed is lost
    reader = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
    inbound = reader.channel()
    got = 0
    for method, _, body in inbound.consume("backlog", inactivity_timeout=5):
        if method is None:
            break
        assert body == got.to_bytes(4, "big") * (BODY // 4)
        inbound.basic_ack(method.delivery_tag)
        got += 1
        if got == confirmed:
            break
    assert got == confirmed
    reader.close()
    # the backlog consumed, resident memory under 90 % of the watermark: publishers let go
    wait_until(lambda: (connection.process_data_events(time_limit=0.1), "unblocked" in blocked)[1], 30, what=broker.log)  # fmt: skip
    assert "under 90 % of memory_high_watermark" in broker.log()
    channel.basic_publish("", "backlog", b"after", pika.BasicProperties(delivery_mode=1))
    kept = [body[:4] for _, _, body in (channel.basic_get("kept", auto_ack=True) for _ in range(KEPT))]
    assert kept == [b"%04d" % i for i in range(KEPT)]  # read back from disk, in order
    # a watermark in bytes, reloaded (SIGHUP): below what the broker uses, so blocked again
    config.write_text("[server]\nmemory_high_watermark = 4096\n[metrics]\nport = %d\n" % metrics)
    broker.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: (connection.process_data_events(time_limit=0.1), blocked[-1] != "unblocked")[1], 30, what=broker.log)  # fmt: skip
    assert "reload: memory_high_watermark: 4096" in broker.log()
    connection.close()
    assert broker.stop() == 0
    assert "Traceback" not in broker.log()
