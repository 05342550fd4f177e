"""`hutch ctl status` on a running broker's data folder: each queue's messages in memory and on
disk, bytes on disk, unacked, consumers and oldest message age (DATA/status.json, written by the
broker every two seconds and at its stop), live while it runs and "as left" once it has stopped
or was killed."""

import json
import os
import signal
import subprocess
import time

import pika
from brokers import BIN, RunningBroker, wait_until

HUTCH = os.path.join(BIN, "hutch")
PERSISTENT = pika.BasicProperties(delivery_mode=2)


def _status(running, *extra):
    done = subprocess.run(
        [HUTCH, "ctl", "status", "--data", running.data, *extra], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _queues(running):
    """(what hutch ctl status says of the broker: asked, or from status.json; its queues by
    name); ({}, {}) when neither answers."""
    broker = json.loads(_status(running, "--json"))["broker"] or {}
    return broker, {q["name"]: q for q in broker.get("queues", ())}


def test_status_shows_each_queue_in_memory_and_on_disk(tmp_path):
    config = tmp_path / "hutch.toml"
    config.write_text("[limits]\nqueue_window_messages = 8\n")
    running = RunningBroker([HUTCH, "serve", "--config", str(config)], tmp_path).start()
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", running.port))
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare("backlog", durable=True)
    channel.queue_declare("scratch", durable=False)
    published = time.time()
    for i in range(50):
        channel.basic_publish("", "backlog", b"%0100d" % i, PERSISTENT)
    for _ in range(5):
        channel.basic_publish("", "scratch", b"t" * 10)
    channel.basic_qos(prefetch_count=3)
    channel.basic_consume("backlog", lambda *args: None)
    connection.process_data_events(0.5)

    def seen():
        broker, queues = _queues(running)
        return broker.get("live") and queues.get("backlog", {}).get("unacked") == 3

    wait_until(seen, timeout=15, interval=0.3)
    broker, queues = _queues(running)
    backlog = queues["backlog"]
    # 50 published, 3 delivered and not acked: 47 ready, the window's rest in memory, the backlog on disk
    assert backlog["messages"] == 47 and backlog["in_memory"] + backlog["on_disk"] == 47, backlog
    assert 0 < backlog["in_memory"] <= 8 and backlog["on_disk"] >= 39, backlog
    assert backlog["bytes_on_disk"] == 100 * backlog["on_disk"], backlog
    assert backlog["consumers"] == 1 and backlog["durable"] is True
    assert 0 <= backlog["oldest_age_s"] <= time.time() - published + 1, backlog
    scratch = queues["scratch"]
    assert (scratch["messages"], scratch["in_memory"], scratch["on_disk"], scratch["bytes_in_memory"]) == (5, 5, 0, 50)
    text = _status(running)
    assert "queues: 2 (live, " in text and "pid %d" % running.proc.pid in text, text
    assert (
        "  backlog: 47 ready (%d in memory, %d on disk, %s bytes on disk), 3 unacked, consumers 1, oldest "
        % (
            backlog["in_memory"],
            backlog["on_disk"],
            "{:,}".format(backlog["bytes_on_disk"]),
        )
        in text
    ), text
    connection.close()
    assert running.stop() == 0

    # Stopped: what it left, said as such; the unacked three are back in the queue.
    broker, queues = _queues(running)
    assert broker["live"] is False and broker["running"] is False
    assert queues["backlog"]["messages"] == 50 and queues["backlog"]["unacked"] == 0
    assert "as the broker left them" in _status(running)


def test_status_right_after_confirmed_publishes_shows_them(tmp_path):
    """hutch ctl status asks the running broker (its control socket), so what was confirmed a
    moment ago is there, not two seconds later when status.json is written again."""
    running = RunningBroker([HUTCH, "serve"], tmp_path).start()
    try:
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", running.port))
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("fresh", durable=True)
        for i in range(7):
            channel.basic_publish("", "fresh", b"%d" % i, PERSISTENT)  # returns once confirmed
        text = _status(running)
        assert "queues: 1 (live, asked the broker now, pid %d)" % running.proc.pid in text, text
        assert "  fresh: 7 ready" in text, text
        connection.close()
    finally:
        assert running.stop() == 0


def test_status_of_a_killed_broker_is_not_called_live(tmp_path):
    running = RunningBroker([HUTCH, "serve"], tmp_path).start()
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", running.port))
    connection.channel().queue_declare("kept", durable=True)
    connection.close()
    assert _queues(running)[0]["live"] is True and "kept" in _queues(running)[1]  # (asked the broker)

    def written():  # what the broker leaves behind: its status.json
        with open(os.path.join(running.data, "status.json")) as f:
            return "kept" in f.read()

    wait_until(written, timeout=15, interval=0.3)
    running.proc.send_signal(signal.SIGKILL)
    running.proc.wait()
    running.log_file.close()
    broker, queues = _queues(running)
    assert broker["running"] is True and broker["live"] is False and "kept" in queues
    assert "it is not running" in _status(running)


def test_status_says_when_no_broker_has_written_one(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    done = subprocess.run([HUTCH, "ctl", "status", "--data", str(data)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "queues: not known (no status.json" in done.stdout, done.stdout
    (data / "status.json").write_text("{half")
    done = subprocess.run([HUTCH, "ctl", "status", "--data", str(data)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "queues: not known (status.json does not read as JSON" in done.stdout, done.stdout
