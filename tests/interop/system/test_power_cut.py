"""Power cuts, proven by crash states: nothing a client was told is safe is lost.

A SIGKILL leaves the kernel's page cache, so every write reaches the disk; a pulled plug does
not. One run of hutch is recorded under strace (tests/support/crash_states.py) while the
clients a gateway has all work at once: pika publishes with confirms into two queues, a stream
and a sensor's queue (its readings numbered: x-sensor-id, x-sensor-seq) and takes (and acks)
from one of them, so segments roll over and are deleted; a Modbus meter is polled; MQTT
publishers send QoS 1 and QoS 2 messages to a persistent session that is away (each QoS 2
message's PUBREL held back until the next one's PUBREC); `hutch ctl` adds a user
and gives it permissions; a fleet's upstream (another hutch) sends the gateway two signed
documents, which it tries and keeps (fleet/pending.json, then fleet/state.json). Then, for
each of HUTCH_CRASH_STATES crash states built from the recording (a cut at a random moment, or just before an fsync returned, with a random part
of what was not yet synced kept, some of it torn at 512-byte or 4 KiB blocks), a real hutch
starts on that disk and is asked, by the same real clients:

- it comes up, whatever it finds (a damaged tail is cut and said; it never refuses to start),
  with no traceback in its log;
- every message confirmed before the cut (basic.ack, PUBACK) is there, exactly once, in
  publishing order per queue, unless it was delivered to the consumer before the cut (then
  at most once: its ack may not have been synced); nothing is there that was never
  published;
- the QoS 2 publisher, resuming its session (PUBREL again, or the PUBLISH again with DUP where
  it had no PUBREC), leaves each of its messages in the session exactly once;
- the sensor, sending every reading again after the start, leaves each exactly once (the
  broker's record of the numbers it took is whole with the readings); so does a bridge of
  another hutch (x-hutch-origin, x-hutch-seq: its dedup window), sending again what it
  forwarded;
- a user whose `hutch ctl set-permissions` was answered before the cut logs in;
- the bridge's DATA/node-id is the one the cut left, or a new one if it left none;
- the fleet's files are whole (the old or the new); a document the gateway said it runs, with
  no try pending, is the one its state holds; a try the cut left pending is tried again at
  the start, and said;
- a Modbus meter's poll numbers (kept in DATA/devices/) are never given twice: the readings the
  cut left and those of the polls after the start go on growing.

`make test` runs 120 states; `make soak` (HUTCH_CRASH_STATES) tens of thousands. The seed is
printed; HUTCH_CRASH_SEED replays the states of a recording. The states that found a bug are
kept in crash_states/ (the data folder, and what was said before the cut) and started again.
"""

import concurrent.futures
import json
import os
import random
import shutil
import socket
import struct
import subprocess
import time

import paho.mqtt.client as mqtt
import pika
import pytest
from brokers import BIN, RunningBroker, free_port, hutch_serve, wait_until
from crash_states import Recording, materialize, snapshot, traced, traced_pid
from fleet_members import Signer, document
from modbus_support import ModbusDevices, bound_queue, device_table, drain

STATES = int(os.environ.get("HUTCH_CRASH_STATES", "120"))
ROUNDS = 12  # publishing rounds in the recorded run
PER_ROUND = 8  # messages per queue and round
QUEUES = {1: "crash-a", 2: "crash-b", 3: "crash-s", 4: "crash-r", 5: "crash-d"}  # the publisher's channel: its queue
SENSOR = "crash-r"  # its readings numbered as a sensor's (x-sensor-id, x-sensor-seq: core/dedup.py)
BRIDGED = "crash-d"  # its messages numbered as another hutch's bridge numbers them (x-hutch-origin, x-hutch-seq)
NUMBERED = (SENSOR, BRIDGED)  # sent again after the start: each taken once
NODE = "crash-gw"  # the gateway's name in its fleet
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


def hutch_command(folder, mqtt_port, device_port, fleet_port=9, key=None):
    """hutch serve with CONFIG, MQTT on mqtt_port, a Modbus meter (its poll numbers kept in
    DATA/devices/) polled every 0.2 s on device_port, and a member of the fleet whose upstream
    is on fleet_port (9: none answers), trusting key (fleet_members.Signer's)."""
    config = folder / "hutch.toml"
    fleet = '[fleet]\nuri = "amqp://guest:guest@127.0.0.1:%d"\nnode = "%s"\nkeys = [%s]\nstatus_interval = 1\nconfirm_within = 10\n' % (fleet_port, NODE, json.dumps(key or ANY_KEY))  # fmt: skip
    config.write_text(CONFIG + fleet + device_table("crash-meter", "modbus+tcp://127.0.0.1:%d" % device_port, 1, 0.2))
    return [os.path.join(BIN, "hutch"), "serve", "--config", str(config), "--mqtt-port", str(mqtt_port)]


class RawQos2:
    """An MQTT 3.1.1 publisher of QoS 2 written byte by byte (a persistent session, clean
    session 0), so that a test decides when each PUBREL goes and can send a PUBLISH again
    with DUP, as a client resuming its session after a broker's restart does."""

    def __init__(self, port, client_id=b"crash-q2"):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        body = b"\x00\x04MQTT\x04\x00\x00\x3c" + struct.pack(">H", len(client_id)) + client_id
        self.send(0x10, body)
        kind, answer = self.read()
        assert kind == 2 and answer[1] == 0, (kind, answer)

    def send(self, first, body):
        self.sock.sendall(bytes([first, len(body)]) + body if len(body) < 128 else bytes([first]) + _length(len(body)) + body)  # fmt: skip

    def read(self):
        head = self._exactly(2)
        size, shift, byte = head[1] & 0x7F, 7, head[1]
        while byte & 0x80:
            byte = self._exactly(1)[0]
            size |= (byte & 0x7F) << shift
            shift += 7
        return head[0] >> 4, self._exactly(size)

    def _exactly(self, n):
        data = b""
        while len(data) < n:
            more = self.sock.recv(n - len(data))
            assert more, "the broker closed the connection"
            data += more
        return data

    def publish(self, n, dup=False):
        """Message n (packet id n + 1) to TOPIC; its PUBREC read."""
        topic = TOPIC.encode()
        self.send(0x34 | (0x08 if dup else 0), struct.pack(">H", len(topic)) + topic + struct.pack(">H", n + 1) + b"q2:%d" % n)  # fmt: skip
        kind, answer = self.read()
        assert kind == 5 and answer[:2] == struct.pack(">H", n + 1), (n, kind, answer)

    def release(self, n):
        self.send(0x62, struct.pack(">H", n + 1))
        kind, answer = self.read()
        assert kind == 7 and answer[:2] == struct.pack(">H", n + 1), (n, kind, answer)

    def close(self):
        self.sock.close()  # (no DISCONNECT needed: clean session 0 keeps it either way)


def _length(n):
    out = b""
    while True:
        byte, n = n & 0x7F, n >> 7
        out += bytes([byte | (0x80 if n else 0)])
        if not n:
            return out


ANY_KEY = "ed25519:" + "A" * 43 + "="  # (a crash state's start: a pending try's keys are in its files)


def mqtt_client(client_id, port, clean):
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=clean)
    client.connect("127.0.0.1", port)
    client.loop_start()
    return client


def properties(queue, n):
    """Persistent; the sensor's readings numbered as a sensor numbers them, the bridged ones as
    a hutch bridge does (from 1, along its queue)."""
    if queue == SENSOR:
        return pika.BasicProperties(delivery_mode=2, headers={"x-sensor-id": "crash-sensor", "x-sensor-seq": n})
    if queue == BRIDGED:
        return pika.BasicProperties(delivery_mode=2, headers={"x-hutch-origin": "crash-edge/up", "x-hutch-seq": n + 1})
    return pika.BasicProperties(delivery_mode=2)


def resend(port, queue, published):
    """The sensor, or the other hutch's bridge, after the restart: every message sent again, as
    one that lost its link does with those it had no confirm for (all of them here: a repeat
    must go nowhere)."""
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        for n in range(published):
            channel.basic_publish("", queue, b"%s:%d" % (queue.encode(), n), properties(queue, n))
    finally:
        connection.close()


def push(cloud, signer, version):
    """`hutch fleet push` of a signed document for the gateway (a [server] key a reload applies)."""
    path = cloud.data + "/pushed-%d.toml" % version
    with open(path, "wb") as f:
        f.write(
            signer.sign(document(version, "node:" + NODE, "[server]\ndisk_free_limit = %d\n" % (1000000 * version)))
        )
    uri = "amqp://guest:guest@127.0.0.1:%d" % cloud.port
    subprocess.run([os.path.join(BIN, "hutch"), "fleet", "push", "--uri", uri, path], check=True, capture_output=True, timeout=60)  # fmt: skip


def fleet_files(data, files=None):
    """(the version of the gateway's own document its fleet/state.json holds, or None; the
    version fleet/pending.json tries, or None; the version it goes back to if that try fails),
    read from the data folder or from a crash state's files (path -> content). Each file must
    be whole: JSON, as written."""

    def read(name):
        path = os.path.join(data, "fleet", name)
        if files is not None:
            content = files.get(path)
        else:
            try:
                with open(path, "rb") as f:
                    content = f.read()
            except FileNotFoundError:
                content = None
        return None if content is None else json.loads(content)

    def version(state):
        applied = (state or {}).get("applied", {}).get("node:" + NODE)
        return applied and applied["version"]

    pending = read("pending.json")
    return version(read("state.json")), pending and pending["version"], pending and version(pending["before"])


def run_clients(broker, mqtt_port, data, fleet):
    """What the gateway's clients do while the broker is recorded; fleet: (its upstream, the
    signer of its documents)."""
    subscriber = mqtt_client("crash-sub", mqtt_port, clean=False)
    subscribed = subscriber.subscribe(TOPIC, qos=1)
    wait_until(lambda: subscribed[0] == 0 and subscriber.is_connected(), what="the MQTT subscription")
    time.sleep(0.2)  # (its SUBACK)
    subscriber.disconnect()
    subscriber.loop_stop()
    publisher_mqtt = mqtt_client("crash-pub", mqtt_port, clean=True)
    qos2 = RawQos2(mqtt_port)
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
                channels[number].basic_publish("", queue, b"%s:%d" % (queue.encode(), n), properties(queue, n))
            publisher_mqtt.publish(TOPIC, b"m:%d" % n, qos=1).wait_for_publish(10)
            qos2.publish(n)  # (its id held between PUBREC and PUBREL until the next one's PUBREC)
            if n:
                qos2.release(n - 1)
            n += 1
        for _ in range(PER_ROUND // 2 + round_ % 3):  # the consumer falls behind, then catches up
            method, _properties, _body = consumer.basic_get("crash-b")
            if method is not None:
                consumer.basic_ack(method.delivery_tag)
        if round_ in (2, ROUNDS - 4):
            push(*fleet, 1 if round_ == 2 else 2)
        if round_ == ROUNDS // 2:
            ctl = [os.path.join(BIN, "hutch"), "ctl"]
            subprocess.run(ctl + ["add-user", "crash-user", "crash-pass", "--data", data], check=True, capture_output=True)  # fmt: skip
            subprocess.run(ctl + ["set-permissions", "crash-user", ".*", ".*", ".*", "--data", data], check=True, capture_output=True)  # fmt: skip
    qos2.release(n - 1)
    qos2.close()
    wait_until(
        lambda: fleet_files(data)[:2] == (2, None), 60, what="the fleet's second document kept"
    )  # (each step recorded)
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
    meter = ModbusDevices(free_port(), [1])
    (folder / "cloud").mkdir()
    cloud = hutch_serve(folder / "cloud").start()  # the fleet's upstream (not recorded)
    signer = Signer()
    command = hutch_command(folder, mqtt_port, meter.port, cloud.port, signer.key)
    broker = RunningBroker(traced(command, trace), folder).start()  # (on folder/data)
    try:
        bound_queue(broker)  # (its readings: a durable queue)
        published = run_clients(broker, mqtt_port, str(data), (cloud, signer))
    finally:
        meter.stop()
        pid = traced_pid(broker.proc.pid)
        if pid is not None:
            os.kill(pid, 9)  # (a cut: what it did before is in the trace)
        broker.proc.wait(30)
        broker.log_file.close()
        cloud.stop()
    ports = {"amqp": broker.port, "mqtt": mqtt_port, "fleet": cloud.port}
    return Recording(trace, str(data), initial), published, ports


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


def amqp_said(recording, cut, port):
    """({channel: the delivery tags confirmed}, {the bodies given to the consumer}) before cut,
    by the broker's AMQP listener on port."""
    confirmed = {number: set() for number in QUEUES}
    delivered = set()
    for _socket, stream in recording.sent_before(cut, "TCP:[127.0.0.1:%d->" % port).items():
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


def fleet_said(recording, cut, port):
    """The version of its own document the gateway's status said it runs, kept (no try
    pending), before cut: the newest in its statuses sent to the fleet's upstream on port."""
    said = None
    for socket_, stream in recording.sent_before(cut, "TCP:").items():
        if not socket_.endswith("->127.0.0.1:%d]" % port):
            continue
        for kind, _channel, payload in frames(stream):
            if kind == 3 and payload.startswith(b"{"):
                config = json.loads(payload)["config"]
                if config["pending"] is None:
                    said = config["applied"].get("node:" + NODE)
    return said


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
    for stream in recording.sent_before(cut, "TCP:[127.0.0.1:%d->" % mqtt_port).values():
        for kind, body in mqtt_packets(stream):
            if kind == 4:  # PUBACK
                acked.add(struct.unpack_from(">H", body)[0] - 1)
    return acked


def qos2_said(recording, cut, mqtt_port):
    """({n: PUBREC sent before cut}, {n: PUBCOMP sent}) of the QoS 2 publisher's messages, and
    whether the session's SUBACK was sent (its subscription promised)."""
    received, completed, subscribed = set(), set(), False
    for stream in recording.sent_before(cut, "TCP:[127.0.0.1:%d->" % mqtt_port).values():
        for kind, body in mqtt_packets(stream):
            if kind == 5:
                received.add(struct.unpack_from(">H", body)[0] - 1)
            elif kind == 7:
                completed.add(struct.unpack_from(">H", body)[0] - 1)
            elif kind == 9:
                subscribed = True
    return received, completed, subscribed


def resume_qos2(port, published, received, completed):
    """The QoS 2 publisher back after the restart, as a client resumes its session: a PUBREL
    again for each message it had a PUBREC for and no PUBCOMP, each other message sent again
    with DUP (then released)."""
    client = RawQos2(port)
    try:
        for n in range(published):
            if n in completed:
                continue
            if n not in received:
                client.publish(n, dup=True)
            client.release(n)
    finally:
        client.close()


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


def readings_count(broker):
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
    try:
        return connection.channel().queue_declare("readings", passive=True).method.message_count
    finally:
        if connection.is_open:
            connection.close()


def check_polls_numbered_once(broker, before):
    """The meter's readings (those the cut left, then those of its polls since the start, once
    there are more than `before`): no poll number given twice, and each later than the one
    before (a restart goes on past every number the last run reserved, which it keeps in
    DATA/devices/ before it gives any of them)."""
    wait_until(lambda: readings_count(broker) > before, 10, what="a poll after the start")
    numbers = [body["poll"] for key, _headers, body in drain(broker) if key.startswith("sensors.")]
    # two registers a poll, its number on each reading, one after the other: the cut may keep
    # the first of a poll's two (each is a message of its own, confirmed to no one), never more
    assert numbers == sorted(numbers), "poll numbers out of order: %s" % numbers
    again = [n for n in set(numbers) if numbers.count(n) > 2]
    assert not again, "a poll number given again after the start: %s in %s" % (again, numbers)


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


def session_backlog(port):
    """How many messages the away session's queue holds (a passive declare: 0 if it is not
    there), so that reading it waits for all of them, however slow a loaded machine is."""
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    try:
        return connection.channel().queue_declare("mqtt-subscription-crash-subqos1", passive=True).method.message_count
    except pika.exceptions.ChannelClosedByBroker:
        return 0
    finally:
        if connection.is_open:
            connection.close()


def read_session(port, amqp_port):
    """The away session's messages: as many as its queue holds (a message it holds twice is
    counted there twice), and whatever more comes within 0.05 s."""
    expected = session_backlog(amqp_port)
    got = []
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="crash-sub", clean_session=False)
    client.on_message = lambda _c, _u, message: got.append(message.payload)
    client.connect("127.0.0.1", port)
    client.loop_start()
    try:
        wait_until(lambda: len(got) >= expected, 30, what="the session's %d messages" % expected, interval=0.05)
        quiet, count = time.monotonic(), len(got)
        while time.monotonic() - quiet < 0.05:
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


def said_before(recording, cut, ports, published):
    """What the broker had told its clients before the cut (the trace's sends), as JSON keeps it:
    what a crash state is checked against (check_started)."""
    mqtt_port = ports["mqtt"]
    confirmed, delivered = amqp_said(recording, cut, ports["amqp"])
    received, completed, subscribed = qos2_said(recording, cut, mqtt_port)
    return {
        "published": published,
        "confirmed": {str(number): sorted(tags) for number, tags in confirmed.items()},
        "delivered": sorted(body.decode() for body in delivered),
        "mqtt_acked": sorted(mqtt_confirmed(recording, cut, mqtt_port)),
        "qos2_received": sorted(received),
        "qos2_completed": sorted(completed),
        "subscribed": subscribed,
        "ctl_answers": ctl_answers(recording, cut),
        "fleet_runs": fleet_said(recording, cut, ports["fleet"]),
    }


def check_fleet_files(state, root, said):
    """The fleet's files a crash state holds: whole, and what the gateway said it runs kept (or,
    with a later try pending, what that try goes back to if it fails)."""
    runs, pending, before = fleet_files(root, state)
    said["fleet_pending"] = pending
    if said["fleet_runs"] is not None:
        kept = runs if pending is None else before
        assert kept is not None and kept >= said["fleet_runs"], (
            "the gateway said it runs document %d, kept; its files: %s, pending %s (before it: %s)"
            % (said["fleet_runs"], runs, pending, before)
        )


def check_state(recording, published, folder, index, cut, rng, ports, meter):
    """One crash state: hutch started on it, asked by the real clients."""
    keep = rng.choice((0.0, 0.3, 0.7, 1.0))
    block = rng.choice((512, 4096))
    state = recording.state(cut, rng, keep=keep, block=block)
    where = folder / ("state-%d" % index)
    materialize(state, recording.root, str(where / "data"))
    said = said_before(recording, cut, ports, published)
    node_id = state.get(recording.root + "/node-id")
    said["node_id"] = node_id.decode("latin-1") if node_id else None
    what = "crash state %d (cut before op %d of %d, keep %.1f, blocks of %d)" % (index, cut, len(recording.ops), keep, block)  # fmt: skip
    try:
        check_fleet_files(state, recording.root, said)
    finally:
        (where / "said.json").write_text(json.dumps(said))  # (with data/: the state kept, if it fails)
    check_started(where, said, what, meter)
    shutil.rmtree(where)  # (kept when it failed: the crash state to look at)
    return said


def check_started(where, said, what, meter):
    """hutch started on the crash state in where/data, asked by the real clients what said
    (said_before) says it must hold; meter: the Modbus device it polls."""
    published = said["published"]
    mqtt_port = free_port()
    broker = RunningBroker(hutch_command(where, mqtt_port, meter.port), where)
    try:
        broker.start()
        bound_queue(broker)  # (again: the cut may have taken it; the polls to come go there)
        before = readings_count(broker)
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
        try:
            channel = connection.channel()
            for number, queue in QUEUES.items():
                prefix = queue.encode() + b":"
                confirmed = said["confirmed"].get(str(number), [])  # (a kept state may be older than a queue)
                try:
                    if queue == "crash-s":
                        found = numbers(read_stream(connection.channel(), queue), prefix)
                    else:
                        found = numbers(read_queue(channel, queue), prefix)
                except pika.exceptions.ChannelClosedByBroker as e:
                    assert not confirmed, "%s: %s, with %d confirmed" % (queue, e, len(confirmed))
                    channel = connection.channel()
                    continue
                # delivery tag t confirmed the message numbered t - 1
                delivered = [body.encode() for body in said["delivered"]] if queue == "crash-b" else []
                check_queue(queue, found, {tag - 1 for tag in confirmed}, published, numbers(delivered, prefix))
                if queue in NUMBERED:  # every one sent again: what the queue took is not taken twice
                    resend(broker.port, queue, published)
                    again = numbers(read_queue(channel, queue), prefix)
                    assert sorted(found + again) == list(range(published)), "%s once each: %s then %s" % (queue, found, again)  # fmt: skip
        finally:
            connection.close()
        received, completed = set(said["qos2_received"]), set(said["qos2_completed"])
        resume_qos2(mqtt_port, published, received, completed)
        session = read_session(mqtt_port, broker.port)
        check_queue("MQTT session", numbers(session, b"m:"), said["mqtt_acked"], published)
        # QoS 2: each message exactly once once the subscription was promised, whatever the cut
        # left (the resumed publisher sent again what it had no PUBREC for)
        every = range(published) if said["subscribed"] else ()
        check_queue("MQTT session, QoS 2", numbers(session, b"q2:"), every, published)
        check_user(broker.port, said["ctl_answers"])
        node_id = said["node_id"]
        check_node_id(node_id.encode("latin-1") if node_id else None, where / "data" / "node-id")
        check_polls_numbered_once(broker, before)
        if said.get("fleet_pending") is not None:  # (a try cut short: again, first)
            text = "fleet: version %d for node:%s was being tried when hutch stopped: trying it again" % (said["fleet_pending"], NODE)  # fmt: skip
            wait_until(lambda: text in broker.log(), 10, what=text)
        log = broker.log()
        assert "Traceback" not in log and "internal error" not in log, log[-3000:]
    except AssertionError as e:
        raise AssertionError("%s: %s\nthe broker's log:\n%s" % (what, e, broker.log()[-2000:])) from None
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def meter():
    """The Modbus meter the crash states' brokers poll (one for all of them)."""
    device = ModbusDevices(free_port(), [1])
    yield device
    device.stop()


@pytest.mark.long  # tests/conftest.py: started early
def test_every_confirmed_message_survives_power_cuts(recording, tmp_path, meter):
    record, published, ports = recording
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
            pool.submit(check_state, record, published, tmp_path, i, cut, random.Random(s), ports, meter)
            for i, (cut, s) in enumerate(zip(cuts, seeds))
        ]
        said = [future.result() for future in done]
    print(
        "crash states: %d tried (seed %d) in %.0f s, every one came up and kept what it confirmed; "
        "%d after a fleet document was kept, %d with a fleet try pending"
        % (
            len(cuts),
            seed,
            time.monotonic() - began,
            sum(1 for s in said if s["fleet_runs"]),
            sum(1 for s in said if s["fleet_pending"]),
        )
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


KEPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "crash_states")


@pytest.mark.parametrize("name", sorted(os.listdir(KEPT)))
def test_a_crash_state_that_failed_once_is_served_whole(name, tmp_path, meter):
    """The crash states that found a bug (tests/interop/system/crash_states/NAME: the data folder
    as the cut left it, and what the broker had said before it), started again as they were."""
    shutil.copytree(os.path.join(KEPT, name, "data"), tmp_path / "data")
    with open(os.path.join(KEPT, name, "said.json")) as f:
        said = json.load(f)
    check_started(tmp_path, said, "kept crash state %s" % name, meter)
