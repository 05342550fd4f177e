"""Power cuts, proven by crash states: nothing a client was told is safe is lost.

A SIGKILL leaves the kernel's page cache, so every write reaches the disk; a pulled plug does
not. One run of hutch is recorded under strace (tests/support/crash_states.py) while the
clients a gateway has all work at once: pika publishes with confirms into two queues and a
stream and takes (and acks) from one of them, so segments roll over and are deleted; an MQTT
publisher sends QoS 1 messages to a persistent session that is away; `hutch ctl` adds a user
and gives it permissions. Then, for each of HUTCH_CRASH_STATES crash states built from the
recording (a cut at a random moment, or just before an fsync returned, with a random part
of what was not yet synced kept, some of it torn at 512-byte or 4 KiB blocks), a real hutch
starts on that disk and is asked, by the same real clients:

- it comes up, whatever it finds (a damaged tail is cut and said; it never refuses to start),
  with no traceback in its log;
- every message confirmed before the cut (basic.ack, PUBACK) is there, exactly once, in
  publishing order per queue, unless it was delivered to the consumer before the cut (then
  at most once: its ack may not have been synced); nothing is there that was never
  published;
- a user whose `hutch ctl set-permissions` was answered before the cut logs in;
- the bridge's DATA/node-id is the one the cut left, or a new one if it left none.

`make test` runs 120 states; `make soak` (HUTCH_CRASH_STATES) tens of thousands. The seed is
printed; HUTCH_CRASH_SEED replays the states of a recording.
"""

import concurrent.futures
import os
import random
import shutil
import struct
import subprocess
import time

import paho.mqtt.client as mqtt
import pika
import pytest
from brokers import BIN, RunningBroker, free_port, wait_until
from crash_states import Recording, materialize, snapshot, traced, traced_pid

STATES = int(os.environ.get("HUTCH_CRASH_STATES", "120"))
ROUNDS = 12  # publishing rounds in the recorded run
PER_ROUND = 8  # messages per queue and round
QUEUES = {1: "crash-a", 2: "crash-b", 3: "crash-s"}  # the publisher's channel: its queue
TOPIC = "crash/m"
# small segments: they roll over and are deleted during the run. A bridge whose upstream never
# answers (port 9): its start writes DATA/node-id and DATA/bridge-runs.
CONFIG = """\
[server]
segment_bytes = 4096

[[bridge]]
name = "crash"
queue = "crash-out"
uri = "amqp://guest:guest@127.0.0.1:9/"
reconnect_delay = 5
"""

pytestmark = [pytest.mark.system, pytest.mark.timeout(300 + STATES)]


def hutch_command(folder, mqtt_port):
    config = folder / "hutch.toml"
    config.write_text(CONFIG)
    return [os.path.join(BIN, "hutch"), "serve", "--config", str(config), "--mqtt-port", str(mqtt_port)]


def mqtt_client(client_id, port, clean):
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=clean)
    client.connect("127.0.0.1", port)
    client.loop_start()
    return client


def run_clients(broker, mqtt_port, data):
    """What the gateway's clients do while the broker is recorded."""
    subscriber = mqtt_client("crash-sub", mqtt_port, clean=False)
    subscribed = subscriber.subscribe(TOPIC, qos=1)
    wait_until(lambda: subscribed[0] == 0 and subscriber.is_connected(), what="the MQTT subscription")
    time.sleep(0.2)  # (its SUBACK)
    subscriber.disconnect()
    subscriber.loop_stop()
    publisher_mqtt = mqtt_client("crash-pub", mqtt_port, clean=True)
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
    channels = {}
    for number, queue in QUEUES.items():
        channel = connection.channel(channel_number=number)
        channel.confirm_delivery()
        arguments = {"x-queue-type": "stream"} if queue == "crash-s" else None
        channel.queue_declare(queue, durable=True, arguments=arguments)
        channels[number] = channel
    consumer = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port)).channel()
    n = 0
    for round_ in range(ROUNDS):
        for _ in range(PER_ROUND):
            for number, queue in QUEUES.items():
                channels[number].basic_publish(
                    "", queue, b"%s:%d" % (queue.encode(), n), pika.BasicProperties(delivery_mode=2)
                )
            publisher_mqtt.publish(TOPIC, b"m:%d" % n, qos=1).wait_for_publish(10)
            n += 1
        for _ in range(PER_ROUND // 2 + round_ % 3):  # the consumer falls behind, then catches up
            method, _properties, _body = consumer.basic_get("crash-b")
            if method is not None:
                consumer.basic_ack(method.delivery_tag)
        if round_ == ROUNDS // 2:
            ctl = [os.path.join(BIN, "hutch"), "ctl"]
            subprocess.run(ctl + ["add-user", "crash-user", "crash-pass", "--data", data], check=True, capture_output=True)  # fmt: skip
            subprocess.run(ctl + ["set-permissions", "crash-user", ".*", ".*", ".*", "--data", data], check=True, capture_output=True)  # fmt: skip
    publisher_mqtt.disconnect()
    publisher_mqtt.loop_stop()
    consumer.connection.close()
    connection.close()
    return n


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    folder = tmp_path_factory.mktemp("power-cut")
    data = folder / "data"
    data.mkdir()
    initial = snapshot(str(data))
    trace = str(folder / "trace")
    mqtt_port = free_port()
    broker = RunningBroker(traced(hutch_command(folder, mqtt_port), trace), folder).start()  # (on folder/data)
    try:
        published = run_clients(broker, mqtt_port, str(data))
    finally:
        pid = traced_pid(broker.proc.pid)
        if pid is not None:
            os.kill(pid, 9)  # (a cut: what it did before is in the trace)
        broker.proc.wait(30)
        broker.log_file.close()
    return Recording(trace, str(data), initial), published, mqtt_port


def frames(stream):
    """AMQP 0-9-1 frames (type, channel, payload) in bytes a broker sent."""
    at = 0
    if stream.startswith(b"AMQP"):
        at = 8
    while at + 7 <= len(stream):
        kind, channel, size = struct.unpack_from(">BHI", stream, at)
        if at + 8 + size > len(stream):
            return
        yield kind, channel, stream[at + 7 : at + 7 + size]
        at += 8 + size


def amqp_said(recording, cut):
    """({channel: the delivery tags confirmed}, {the bodies given to the consumer}) before cut."""
    confirmed = {number: set() for number in QUEUES}
    delivered = set()
    for _socket, stream in recording.sent_before(cut, "TCP:").items():
        for kind, channel, payload in frames(stream):
            if kind == 1 and payload[:4] == b"\x00\x3c\x00\x50":  # basic.ack
                tag, multiple = struct.unpack_from(">QB", payload, 4)
                if channel in confirmed:
                    if multiple & 1:
                        confirmed[channel].update(range(1, tag + 1))
                    else:
                        confirmed[channel].add(tag)
            elif kind == 3 and payload.startswith(b"crash-b:"):
                delivered.add(payload)
    return confirmed, delivered


def mqtt_packets(stream):
    at = 0
    while at < len(stream):
        first = stream[at]
        size = shift = 0
        at += 1
        while at < len(stream):
            byte = stream[at]
            at += 1
            size |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        yield first >> 4, stream[at : at + size]
        at += size


def mqtt_confirmed(recording, cut, mqtt_port):
    """The numbers of the MQTT messages whose PUBACK was sent before cut (paho numbers its
    publishes 1, 2, ...: message n went with packet id n + 1)."""
    acked = set()
    for socket, stream in recording.sent_before(cut, "TCP:").items():
        if ":%d->" % mqtt_port in socket:
            for kind, body in mqtt_packets(stream):
                if kind == 4:  # PUBACK
                    acked.add(struct.unpack_from(">H", body)[0] - 1)
    return acked


def ctl_answers(recording, cut):
    """How many of `hutch ctl`'s requests (add-user, then set-permissions) were answered."""
    return sum(s.count(b'"user": "crash-user"') for s in recording.sent_before(cut, "UNIX").values())


def check_user(port, answers):
    """add-user answered: the user logs in (its password kept), though "/" may refuse it (530)
    if its permissions were not kept; set-permissions answered too: it opens "/"."""
    if not answers:
        return
    credentials = pika.PlainCredentials("crash-user", "crash-pass")
    try:
        pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port, credentials=credentials)).close()
    except pika.exceptions.AMQPConnectionError as e:
        assert answers == 1 and "530" in str(e), "crash-user after %d answers: %s" % (answers, e)


def check_node_id(before, path):
    """The bridge's node id: kept if the cut left one, else made again; never empty."""
    now = path.read_bytes().strip()
    assert now and b"\x00" not in now, "node-id after the start: %r" % now
    if before and before.strip() and b"\x00" not in before:
        assert now == before.strip(), "node-id changed from %r to %r" % (before, now)


def numbers(bodies, prefix):
    return [int(body.split(b":")[1]) for body in bodies if body.startswith(prefix)]


def read_queue(channel, queue):
    bodies = []
    while True:
        method, _properties, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            return bodies
        bodies.append(body)


def read_stream(channel, queue):
    channel.basic_qos(prefetch_count=1000)
    bodies = []
    for method, _properties, body in channel.consume(queue, arguments={"x-stream-offset": "first"}, inactivity_timeout=0.3):  # fmt: skip
        if method is None:
            break
        bodies.append(body)
        channel.basic_ack(method.delivery_tag)
    channel.cancel()
    return bodies


def read_session(port):
    got = []
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="crash-sub", clean_session=False)
    client.on_message = lambda _c, _u, message: got.append(message.payload)
    client.connect("127.0.0.1", port)
    client.loop_start()
    try:
        wait_until(client.is_connected, what="the MQTT session")
        quiet, count = time.monotonic(), 0
        while time.monotonic() - quiet < 0.3:
            time.sleep(0.05)
            if len(got) != count:
                quiet, count = time.monotonic(), len(got)
    finally:
        client.disconnect()
        client.loop_stop()
    return got


def check_queue(name, found, confirmed, published, may_be_gone=()):
    assert found == sorted(set(found)), "%s: out of order or twice: %s" % (name, found)
    assert set(found) <= set(range(published)), "%s: never published: %s" % (name, set(found) - set(range(published)))
    missing = set(confirmed) - set(found) - set(may_be_gone)
    assert not missing, "%s: confirmed and lost: %s (found %s)" % (name, sorted(missing), found)


def check_state(recording, published, folder, index, cut, rng, mqtt_port_recorded):
    """One crash state: hutch started on it, asked by the real clients."""
    keep = rng.choice((0.0, 0.3, 0.7, 1.0))
    block = rng.choice((512, 4096))
    state = recording.state(cut, rng, keep=keep, block=block)
    where = folder / ("state-%d" % index)
    materialize(state, recording.root, str(where / "data"))
    what = "crash state %d (cut before op %d of %d, keep %.1f, blocks of %d)" % (
        index,
        cut,
        len(recording.ops),
        keep,
        block,
    )
    confirmed, delivered = amqp_said(recording, cut)
    acked_mqtt = mqtt_confirmed(recording, cut, mqtt_port_recorded)
    mqtt_port = free_port()
    broker = RunningBroker(hutch_command(where, mqtt_port), where)
    try:
        broker.start()
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
        try:
            channel = connection.channel()
            for number, queue in QUEUES.items():
                prefix = queue.encode() + b":"
                try:
                    if queue == "crash-s":
                        found = numbers(read_stream(connection.channel(), queue), prefix)
                    else:
                        found = numbers(read_queue(channel, queue), prefix)
                except pika.exceptions.ChannelClosedByBroker as e:
                    assert not confirmed[number], "%s: %s: %s, with %d confirmed" % (what, queue, e, len(confirmed[number]))  # fmt: skip
                    channel = connection.channel()
                    continue
                # delivery tag t confirmed the message numbered t - 1
                check_queue(
                    "%s: %s" % (what, queue),
                    found,
                    {tag - 1 for tag in confirmed[number]},
                    published,
                    numbers(delivered, prefix) if queue == "crash-b" else (),
                )
        finally:
            connection.close()
        check_queue("%s: MQTT session" % what, numbers(read_session(mqtt_port), b"m:"), acked_mqtt, published)
        check_user(broker.port, ctl_answers(recording, cut))
        check_node_id(state.get(recording.root + "/node-id"), where / "data" / "node-id")
        log = broker.log()
        assert "Traceback" not in log and "internal error" not in log, "%s:\n%s" % (what, log[-3000:])
    except AssertionError as e:
        raise AssertionError("%s\n%s\nthe broker's log:\n%s" % (what, e, broker.log()[-2000:])) from None
    finally:
        broker.stop()
    shutil.rmtree(where)  # (kept when it failed: the crash state to look at)


@pytest.mark.long  # tests/conftest.py: started early
def test_every_confirmed_message_survives_power_cuts(recording, tmp_path):
    record, published, mqtt_port = recording
    seed = int(os.environ.get("HUTCH_CRASH_SEED", random.randrange(10**8)))
    print("crash states: seed %d, %d ops recorded, %d fsyncs" % (seed, len(record.ops), len(record.syncs)))
    assert record.ops and record.syncs, "the trace holds none of the broker's file calls (strace's format?)"
    rng = random.Random(seed)
    returns = sorted({returned for _began, returned, _target in record.syncs})
    cuts = [rng.choice(returns) if rng.random() < 0.5 else rng.randrange(len(record.ops) + 1) for _ in range(STATES)]
    seeds = [rng.randrange(10**9) for _ in cuts]
    began = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        done = [
            pool.submit(check_state, record, published, tmp_path, i, cut, random.Random(s), mqtt_port)
            for i, (cut, s) in enumerate(zip(cuts, seeds))
        ]
        for future in done:
            future.result()
    print(
        "crash states: %d tried (seed %d) in %.0f s, every one came up and kept what it confirmed"
        % (len(cuts), seed, time.monotonic() - began)
    )


def _hex(text):
    return "".join("\\x%02x" % byte for byte in text.encode())


def test_the_trace_reader_takes_strace_lines_of_every_shape(tmp_path):
    """The crash states are only as good as the trace read back: strace pads a short pid, splits
    a call another thread interrupts (unfinished ... resumed), names sockets with "->" in them
    and UNIX sockets with a quoted path. A file made, written, synced and renamed over another
    without its folder's fsync: the rename may be lost, the synced data not."""
    root = str(tmp_path / "data")
    d, new, old = _hex(root), _hex(root + "/f.new"), _hex(root + "/f")
    trace = tmp_path / "trace"
    trace.write_text(
        "\n".join(
            [
                '812   openat(AT_FDCWD<%s>, "%s", O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC, 0666) = 5<%s>' % (d, new, new),
                '812   write(5<%s>, "%s", 5 <unfinished ...>' % (new, _hex("hello")),
                '813   sendto(7<TCP:[127.0.0.1:5672->127.0.0.1:40000]>, "%s", 2, 0, NULL, 0) = 2' % _hex("ok"),
                "812   <... write resumed>)              = 5",
                "812   fsync(5<%s>)                = 0" % new,
                '812   sendto(8<UNIX-STREAM:[1->2,"%s"]>, "%s", 4, 0, NULL, 0) = 4'
                % (_hex(root + "/c.sock"), _hex("done")),
                "812   close(5<%s>)                 = 0" % new,
                '812   rename("%s", "%s") = 0' % (new, old),
                '12345 openat(AT_FDCWD<%s>, "%s", O_RDONLY) = -1 ENOENT (No such file or directory)' % (d, old + "x"),
            ]
        )
        + "\n"
    )
    record = Recording(str(trace), root, {root: None})
    assert [op.kind for op in record.ops] == ["create", "write", "rename"], record.ops
    assert record.syncs == [(2, 2, record.ops[0].ino)]
    assert record.sent_before(len(record.ops)) == {
        "TCP:[127.0.0.1:5672->127.0.0.1:40000]": b"ok",
        'UNIX-STREAM:[1->2,"%s/c.sock"]' % root: b"done",
    }
    kept = record.state(3, random.Random(1), keep=1.0)
    assert kept == {root: None, root + "/f": b"hello"}, kept
    lost = record.state(3, random.Random(1), keep=0.0)
    assert lost == {root: None}, lost  # (the name never synced: the file, synced, has none)
