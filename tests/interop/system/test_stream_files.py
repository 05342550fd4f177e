"""A stream's files with the real `hutch serve`: SIGKILLs, and what `hutch ctl status` shows.

SIGKILLs: a publisher with confirms and a consumer at the tail while the broker is killed
at random moments, then restarted on the same folder. After every restart: each confirmed
record is there, at the offset a consumer was given for it before the kill (consumers are
given only durable records), offsets strictly grow along the stream, and no offset is
given twice: a record lost with the crash leaves its offset unused, the next one comes
past every offset handed out before.
"""

import json
import os
import random
import signal
import subprocess
import threading

import pika
import pytest
from brokers import BIN, RunningBroker, pika_connection, pump_until, sigkill

HUTCH = os.path.join(BIN, "hutch")

pytestmark = pytest.mark.timeout(300)

KILLS = 8
STREAM = {"x-queue-type": "stream", "x-stream-max-segment-size-bytes": 65536}


class Tail(threading.Thread):
    """A consumer at the stream's tail ("next"), noting (offset, body) as it is given them."""

    def __init__(self, running):
        super().__init__(daemon=True)
        self.connection = pika_connection(running)
        channel = self.connection.channel()
        channel.basic_qos(prefetch_count=500)
        self.seen = []
        channel.basic_consume("crash", self._on, arguments={"x-stream-offset": "next"})

    def _on(self, channel, method, properties, body):
        self.seen.append((properties.headers["x-stream-offset"], body))
        channel.basic_ack(method.delivery_tag, multiple=True)

    def run(self):
        try:
            while True:
                self.connection.process_data_events(time_limit=0.1)
        except (pika.exceptions.AMQPError, OSError):
            pass  # the broker is gone


def _read_all(running, sentinel):
    """Every record from the first, up to the sentinel (the last one published)."""
    connection = pika_connection(running)
    channel = connection.channel()
    channel.basic_qos(prefetch_count=1000)
    got = []

    def on(ch, method, properties, body):
        got.append((properties.headers["x-stream-offset"], body))
        ch.basic_ack(method.delivery_tag, multiple=True)

    channel.basic_consume("crash", on, arguments={"x-stream-offset": "first"})
    pump_until(connection, lambda: got and got[-1][1] == sentinel, 60, "the stream read back to its sentinel")
    connection.close()
    return got


def test_confirmed_records_keep_their_offsets_and_no_offset_is_reused_across_sigkills(tmp_path):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    running = RunningBroker([HUTCH, "serve"], tmp_path)
    confirmed = set()  # bodies whose publish was confirmed
    given = {}  # body -> the offset a consumer was given for it before a kill
    highest = -1  # the highest offset any consumer was ever given
    n = 0
    for round_number in range(KILLS + 1):
        running.start()
        connection = pika_connection(running)
        channel = connection.channel()
        channel.queue_declare("crash", durable=True, arguments=STREAM)
        channel.confirm_delivery()
        sentinel = b"sentinel-%d" % round_number
        channel.basic_publish("", "crash", sentinel)
        records = _read_all(running, sentinel)
        offsets = [offset for offset, _ in records]
        assert offsets == sorted(set(offsets)), "offsets must strictly grow (seed %d)" % seed
        where = dict((body, offset) for offset, body in records)
        assert len(where) == len(records), "a record came back twice (seed %d)" % seed
        missing = [body for body in confirmed if body not in where]
        assert not missing, "confirmed records lost (seed %d): %r" % (seed, missing[:5])
        moved = [(body, given[body], where.get(body)) for body in given if where.get(body) != given[body]]
        assert not moved, "records at another offset than a consumer was given (seed %d): %r" % (seed, moved[:5])
        # the sentinel, the first record after the restart, comes past every offset handed out before
        assert where[sentinel] > highest, (seed, where[sentinel], highest)
        highest = max(highest, where[sentinel])
        given[sentinel] = where[sentinel]
        confirmed.add(sentinel)
        if round_number == KILLS:
            break
        tail = Tail(running)
        tail.start()
        killer = threading.Timer(rng.uniform(0.1, 0.8), sigkill, (running,))
        killer.start()
        try:
            while True:
                body = b"r%02d-%06d-" % (round_number, n) + b"x" * rng.randrange(0, 2000)
                n += 1
                channel.basic_publish("", "crash", body)
                confirmed.add(body)
        except (pika.exceptions.AMQPError, OSError):
            pass  # the broker is gone; the last publish may or may not have been taken
        killer.join()
        tail.join(10)
        assert running.proc.returncode == -signal.SIGKILL
        for offset, body in tail.seen:
            given[body] = offset
            highest = max(highest, offset)
    print(
        "seed %d: %d kills, %d records, %d confirmed, highest offset %d"
        % (seed, KILLS, len(records), len(confirmed), highest)
    )
    connection.close()
    assert running.stop() == 0
    assert not running.errors(), running.log()[-3000:]


def test_ctl_status_shows_each_streams_offsets_segments_bytes_and_retention(tmp_path):
    running = RunningBroker([HUTCH, "serve"], tmp_path).start()
    connection = pika_connection(running)
    channel = connection.channel()
    channel.queue_declare(
        "readings",
        durable=True,
        arguments={"x-queue-type": "stream", "x-max-age": "7D", "x-stream-max-segment-size-bytes": 4096},
    )
    channel.queue_declare("empty", durable=True, arguments={"x-queue-type": "stream", "x-max-length-bytes": 1000000})
    channel.confirm_delivery()
    for i in range(100):
        channel.basic_publish("", "readings", b"%03d" % i + b"." * 100)
    connection.close()
    # while it runs, and after it stopped: the same
    for stopped in (False, True):
        if stopped:
            assert running.stop() == 0
        plain = subprocess.run(
            [HUTCH, "ctl", "status", "--data", running.data], capture_output=True, text=True, timeout=60
        )
        assert plain.returncode == 0, plain.stderr
        lines = [line.strip() for line in plain.stdout.splitlines()]
        assert "streams: 2" in lines, plain.stdout
        readings = [line for line in lines if line.startswith("readings: ")]
        assert len(readings) == 1 and readings[0].startswith("readings: offsets 0 to 99, "), plain.stdout
        assert readings[0].endswith("bytes; retention: max-age 7D, segment-size 4096"), readings
        assert "empty: empty, 0 segments, 0 bytes; retention: max-length-bytes 1000000" in lines, plain.stdout
        done = subprocess.run(
            [HUTCH, "ctl", "status", "--data", running.data, "--json"], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        streams = {stream["name"]: stream for stream in json.loads(done.stdout)["streams"]}
        stream = streams["readings"]
        files = sorted(
            n for n in os.listdir(os.path.join(running.data, "streams", stream["folder"])) if n.endswith(".seg")
        )
        assert (stream["first"], stream["last"], stream["segments"]) == (0, 99, len(files)) and len(files) > 2, stream
        assert stream["bytes"] == sum(
            os.path.getsize(os.path.join(running.data, "streams", stream["folder"], n)) for n in files
        )
        assert (stream["max_age"], stream["segment_bytes"], stream["max_length_bytes"]) == ("7D", 4096, None)
        assert streams["empty"]["first"] is None and streams["empty"]["max_length_bytes"] == 1000000
    assert not running.errors(), running.log()
