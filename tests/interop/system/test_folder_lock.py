"""One broker per data folder: a second `hutch serve` on a folder in use is refused and touches
nothing there; what the first confirmed, before and after, survives its restart (also after a
SIGKILL, whose lock the kernel releases)."""

import os
import signal
import subprocess

import pika
import pytest
from brokers import BIN, RunningBroker

from hutch.bench.brokers import free_port

HUTCH = os.path.join(BIN, "hutch")
PERSISTENT = pika.BasicProperties(delivery_mode=2)


def _publish(running, queue, count):
    """count persistent messages to a new durable queue, each confirmed."""
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", running.port))
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare(queue, durable=True)
    for i in range(count):
        channel.basic_publish("", queue, b"%s-%d" % (queue.encode(), i), PERSISTENT, mandatory=True)
    connection.close()


def _count(running, queue):
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", running.port))
    count = connection.channel().queue_declare(queue, passive=True).method.message_count
    connection.close()
    return count


def _files(folder):
    """Every file under folder: (size, mtime_ns) by path."""
    found = {}
    for top, _dirs, names in os.walk(folder):
        for name in names:
            path = os.path.join(top, name)
            info = os.stat(path)
            found[os.path.relpath(path, folder)] = (info.st_size, info.st_mtime_ns)
    return found


def _second_broker(data):
    return subprocess.run(
        [HUTCH, "serve", "--bind", "127.0.0.1", "--port", str(free_port()), "--data", data],
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.parametrize("first_stops_by", ["sigterm", "sigkill"])
def test_a_second_broker_on_a_folder_in_use_is_refused_and_the_first_loses_nothing(tmp_path, first_stops_by):
    first = RunningBroker([HUTCH, "serve"], tmp_path).start()
    _publish(first, "before", 20)
    files = _files(first.data)

    second = _second_broker(first.data)

    assert second.returncode == 1, second.stderr
    assert second.stdout == ""
    assert second.stderr.splitlines() == [
        "hutch: data folder %s is in use by another process (pid %d): one broker per data folder "
        "(stop it, or choose another --data)" % (os.path.abspath(first.data), first.proc.pid)
    ]
    changed = {path for path, seen in _files(first.data).items() if files.get(path) != seen}
    assert changed <= {"status.json"}, "the refused broker changed %s" % sorted(changed)  # status.json: the first's

    _publish(first, "after", 50)
    if first_stops_by == "sigterm":
        assert first.stop() == 0
    else:
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait()
        first.log_file.close()
    first.start()  # the kernel released a SIGKILLed broker's lock: the restart takes it at once
    assert (_count(first, "before"), _count(first, "after")) == (20, 50)
    assert first.stop() == 0
    assert first.errors() == []


def test_a_data_folder_that_cannot_be_used_is_named_as_such(tmp_path):
    a_file = tmp_path / "not-a-folder"
    a_file.write_text("")
    refused = _second_broker(str(a_file))
    assert refused.returncode == 1
    assert refused.stderr.splitlines() == ["hutch: cannot use data folder %s: Not a directory" % a_file]
