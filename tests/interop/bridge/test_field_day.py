"""A day in the field of a cellular gateway, compressed into two minutes, checked as its user
would check it.

The gateway (hutch from a config file, reloaded twice and SIGKILLed twice) takes readings from
three kinds of sensors at once, each numbering its readings as docs/exactly-once.md shows: 3
umqtt.robust sensors under the `micropython` command (MQTT 3.1.1, their identity in the JSON),
3 Paho sensors (MQTT 5, user properties) and 3 hutch.client sensors (AMQP 0-9-1), a reading a
second each; and alarms a Paho client raises (alarms/...). It forwards them to two upstreams,
each behind a TCP proxy paced to 16 KB/s each way (a cellular link): an MQTT cloud (Debian's
mosquitto; the bridge `cloud`, with classes alarms, priority 9 and always connected, and
telemetry, 5) and the run's RabbitMQ (the bridge `to-rabbitmq`, sensors.# into a stream that
`hutch pipeline` reads to Parquet). `[uplink] max_byte_rate` is BUDGET for both together.

The day: the cloud goes down for 8 s (its proxy resets every link, and each new one) while
alarms are raised; the RabbitMQ link is black-holed for 6 s; a reload adds a schedule (every
EVERY s for OPEN_FOR), and a whole cycle of it passes; the gateway is SIGKILLed; outside a window, a second reload turns
to-rabbitmq into classes while its queue holds what waited; a 30 KB debug log is published,
more than a window's budget carries; the cloud goes down again with alarms raised; the gateway is SIGKILLed again. Then the sensors stop, the gateway drains in
its next window, and the pipeline reads the stream to the end.

What is checked:
- after each outage, the alarms raised during it reach the cloud before any telemetry that
  reaches it after the cloud came back; the cloud sees one client id (one link per upstream);
- after the first reload no telemetry reaches either upstream outside a window (but for the
  drain: WINDOW_GRACE_S after its close), and neither reload restarts the bridge it left as it
  was;
- the second reload leaves no queue behind: hutch.bridge.to-rabbitmq's messages went to the
  classes, the queue is gone, and the reload says so;
- the bytes reaching the upstreams in each window stay within the budget (its bucket, a tenth
  of a second's worth, and one message over); the debug log goes alone, and the wait for the
  budget it overdrew is said;
- nothing confirmed is lost: every reading a sensor logged reaches the cloud, every alarm too;
- every reading is counted in Parquet exactly once.
"""

import json
import os
import subprocess
import sys
import threading
import time
import types
import uuid

import paho.mqtt.client as paho
import pika
import pytest
from brokers import BIN, RunningBroker, free_port, sigkill, wait_until
from micropython_env import micropython
from mqtt_brokers import start_mosquitto
from mqtt_brokers import stop as stop_mosquitto
from paho.mqtt.enums import CallbackAPIVersion
from paths import ROOT
from pipeline_support import Pipeline, expected_windows, logged, publish_end, written_aggregates
from tcp_proxy import TcpProxy

pytestmark = [pytest.mark.timeout(600)]

BUDGET = 4000  # [uplink] max_byte_rate: body bytes/s for both bridges together
EVERY, OPEN_FOR = 12, 6  # the schedule the first reload adds
WINDOW_GRACE_S = 1.5  # a closing window lets what is in flight settle, then ends the link (at a tick: 0.5 s)
LINK_BYTE_RATE = 16000  # the proxies' pace, each way
PAUSE = "1.0"  # s between a sensor's readings
BIG = 30000  # a debug log's bytes: more than a window of the budget carries (OPEN_FOR * BUDGET)
T0 = 1714604400  # 2024-05-01T23:00:00Z: a sensor's n-th reading is stamped T0 + 10 n
END_TS = T0 + 3000 * 86400  # the reading that closes every window
GATEWAY = "field"  # the gateway's [server] name: its readings' x-hutch-gateway upstream
SENSORS = os.path.join(ROOT, "tests", "sensor")
UMQTT = os.path.join(ROOT, "build", "umqtt")
LINK = {"reconnect_delay": 0.5, "max_reconnect_delay": 2.0, "watchdog": 5.0}
CLASSES = [
    {"name": "alarms", "binding_key": "alarms.#", "priority": 9, "always_connected": True},
    {"name": "telemetry", "binding_key": "sensors.#", "priority": 5},
]


def toml(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"%s"' % value
    if isinstance(value, dict):
        return "{ %s }" % ", ".join("%s = %s" % (k, toml(v)) for k, v in value.items())
    if isinstance(value, list):
        return "[%s]" % ", ".join(toml(v) for v in value)
    return repr(value)


def write_config(path, mqtt_port, cloud_port, rabbit_port, stream, schedule=False, rabbit_classes=False):
    uplink = {"max_byte_rate": BUDGET}
    if schedule:
        uplink.update(every=EVERY, open_for=OPEN_FOR)
    cloud = dict(
        LINK,
        name="cloud",
        uri="mqtt://127.0.0.1:%d/?heartbeat=2&connection_timeout=2000" % cloud_port,
        source_exchange="amq.topic",
        classes=CLASSES,
    )
    rabbit = dict(
        LINK,
        name="to-rabbitmq",
        uri="amqp://guest:guest@127.0.0.1:%d/?heartbeat=2&connection_timeout=2000" % rabbit_port,
        source_exchange="amq.topic",
        exchange="",
        routing_key=stream,
        prefetch=1000,  # (as docs/bridges.md's RabbitMQ example has it)
    )
    if rabbit_classes:
        rabbit["classes"] = CLASSES
    else:
        rabbit["binding_key"] = "sensors.#"
    text = '[server]\nname = "%s"\nmqtt_port = %d\n\n[uplink]\n' % (GATEWAY, mqtt_port)
    text += "".join("%s = %s\n" % (k, toml(v)) for k, v in uplink.items())
    for bridge in (cloud, rabbit):
        text += "\n[[bridge]]\n" + "".join("%s = %s\n" % (k, toml(v)) for k, v in bridge.items())
    path.write_text(text)


class Arrivals:
    """What reaches an upstream, as (wall-clock time, kind, key, body bytes): kind "alarm",
    "reading" or "log", key the alarm's number, the reading's (sensor, ts) or the log's size."""

    def __init__(self):
        self.got = []
        self.lock = threading.Lock()

    def add(self, body):
        found = json.loads(body)
        if "alarm" in found:
            kind, key = "alarm", found["alarm"]
        elif "sensor" in found:
            kind, key = "reading", (found["sensor"], found["ts"])
        else:
            kind, key = "log", len(body)
        with self.lock:
            self.got.append((time.time(), kind, key, len(body)))

    def of(self, kind):
        with self.lock:
            return [entry for entry in self.got if entry[1] == kind]


def cloud_subscriber(mosquitto, arrivals):
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id="cloud-dashboard", protocol=paho.MQTTv311)
    client.on_message = lambda c, u, m: arrivals.add(m.payload)
    subscribed = threading.Event()
    client.on_subscribe = lambda *a: subscribed.set()
    client.on_connect = lambda c, u, f, r, p: c.subscribe("#", 1)
    client.connect("127.0.0.1", mosquitto.port, keepalive=30)
    client.loop_start()
    assert subscribed.wait(10), "no SUBACK from mosquitto"
    return client


def stream_reader(rabbitmq, stream, arrivals, done):
    """Reads the RabbitMQ stream from its first record as it grows (a consumer of its own: the
    stream is not consumed away), until done is set."""
    connection = pika.BlockingConnection(pika.URLParameters("amqp://guest:guest@127.0.0.1:%d/" % rabbitmq.port))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=500)
    for method, _properties, body in channel.consume(
        stream, arguments={"x-stream-offset": "first"}, inactivity_timeout=0.2
    ):
        if done.is_set():
            break
        if method is not None:
            arrivals.add(body)
            channel.basic_ack(method.delivery_tag)
    connection.close()


class Alarms:
    """A Paho client on the gateway raising alarms (QoS 1, each acknowledged)."""

    def __init__(self, mqtt_port):
        self.client = paho.Client(CallbackAPIVersion.VERSION2, client_id="alarm-panel", protocol=paho.MQTTv5)
        self.client.username_pw_set("guest", "guest")
        self.client.connect("127.0.0.1", mqtt_port, keepalive=10)
        self.client.loop_start()
        self.raised = []

    def raise_one(self):
        number = len(self.raised)
        sent = self.client.publish("alarms/door", json.dumps({"alarm": number}), qos=1)
        sent.wait_for_publish(10)
        assert sent.is_published(), "alarm %d not acknowledged" % number
        self.raised.append(number)
        return number

    def stop(self):
        self.client.disconnect()
        self.client.loop_stop()


def in_window(t, after=0.0):
    """Whether wall-clock time t falls inside a window of the schedule (in the gateway's local
    time), or at most `after` seconds past one's close."""
    local = (t + time.localtime(t).tm_gmtoff) % EVERY
    return local < OPEN_FOR + after


def outside_a_window(lead=2.0):
    """Wait until a window has been closed for a moment and stays closed `lead` s more."""
    while True:
        local = (time.time() + time.localtime().tm_gmtoff) % EVERY
        if OPEN_FOR + 1.5 <= local <= EVERY - lead:
            return
        time.sleep(0.1)


def run_sensors(folder, edge, mqtt_port, stop):
    logs = [os.path.join(folder, kind + ".log") for kind in ("amqp", "umqtt", "paho")]
    common = ["3", "100000"]
    procs = [
        subprocess.Popen([sys.executable, "-u", os.path.join(SENSORS, "numbered_sensors.py"), str(edge.port), "a",
                          *common, logs[0], folder, stop, str(T0), PAUSE]),
        subprocess.Popen([micropython(), os.path.join(SENSORS, "numbered_umqtt.py"), UMQTT, str(mqtt_port), "m",
                          *common, logs[1], folder, stop, str(T0), PAUSE]),
        subprocess.Popen([sys.executable, "-u", os.path.join(SENSORS, "numbered_paho.py"), str(mqtt_port), "p",
                          *common, logs[2], folder, stop, str(T0), PAUSE]),
    ]  # fmt: skip
    return procs, logs


def ctl(edge, *args):
    return subprocess.run(
        [os.path.join(BIN, "hutch"), "ctl", *args, "--data", edge.data], capture_output=True, text=True, timeout=60
    )


def drained(edge):
    shown = json.loads(ctl(edge, "bridges", "--json").stdout)
    return all(b["backlog"] == 0 and b["in_flight"] == 0 for b in shown["bridges"])


@pytest.mark.long  # tests/conftest.py: started early
def test_a_day_in_the_field(tmp_path, rabbitmq, request):
    stream = "field-%s" % uuid.uuid4().hex[:8]
    connection = pika.BlockingConnection(pika.URLParameters("amqp://guest:guest@127.0.0.1:%d/" % rabbitmq.port))
    connection.channel().queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    connection.close()
    (tmp_path / "mosquitto").mkdir()
    mosquitto = start_mosquitto(tmp_path / "mosquitto", "log_type information\n")
    cloud_proxy, rabbit_proxy = TcpProxy(mosquitto.port).start(), TcpProxy(rabbitmq.port).start()
    for proxy in (cloud_proxy, rabbit_proxy):
        proxy.byte_rate = LINK_BYTE_RATE
    folder = tmp_path / "edge"
    folder.mkdir()
    sensors_folder = str(tmp_path / "sensors")
    os.makedirs(sensors_folder)
    mqtt_port = free_port()
    config = folder / "hutch.toml"
    settings = (config, mqtt_port, cloud_proxy.port, rabbit_proxy.port, stream)
    write_config(*settings)
    edge = RunningBroker([os.path.join(BIN, "hutch"), "serve", "--config", str(config)], folder)
    cloud, upstream = Arrivals(), Arrivals()
    done = threading.Event()
    reader = subscriber = alarms = pipeline = None
    procs = []
    try:
        edge.start()
        wait_until(lambda: "listening for MQTT on" in edge.log(), 30, what=edge.log)
        subscriber = cloud_subscriber(mosquitto, cloud)
        reader = threading.Thread(target=stream_reader, args=(rabbitmq, stream, upstream, done), daemon=True)
        reader.start()
        stop = os.path.join(sensors_folder, "stop")
        procs, logs = run_sensors(sensors_folder, edge, mqtt_port, stop)
        alarms = Alarms(mqtt_port)
        outages = []  # (alarms raised during it, when the cloud came back)

        def cloud_outage():
            cloud_proxy.down()
            raised = []
            for _ in range(4):
                time.sleep(2)
                raised.append(alarms.raise_one())
            cloud_proxy.heal()
            outages.append((raised, time.time()))

        time.sleep(4)
        cloud_outage()  # 1
        time.sleep(3)
        rabbit_proxy.black_hole()  # 2
        time.sleep(6)
        rabbit_proxy.heal()
        time.sleep(2)
        write_config(*settings, schedule=True)  # 3
        first = ctl(edge, "reload")
        scheduled_at = time.time()
        assert first.returncode == 0 and "uplink: budget and windows applied" in first.stdout, first.stdout
        time.sleep(EVERY + 2)  # (a whole cycle, its closed part too, on the links the reload found)
        sigkill(edge)  # 4
        edge.start()
        outside_a_window()  # 5: to-rabbitmq's queue holds what waits for the next window
        held = json.loads(ctl(edge, "bridges", "--json").stdout)
        write_config(*settings, schedule=True, rabbit_classes=True)
        second = ctl(edge, "reload")
        big = json.dumps({"log": "x" * BIG}).encode()  # more than a window carries: it goes alone
        connection = pika.BlockingConnection(pika.URLParameters(edge.url))
        channel = connection.channel()
        channel.confirm_delivery()
        channel.basic_publish("amq.topic", "sensors.debug-log", big, pika.BasicProperties(delivery_mode=2))
        connection.close()
        time.sleep(2)
        cloud_outage()  # 6
        time.sleep(2)
        sigkill(edge)  # 7
        edge.start()
        time.sleep(4)
        open(stop, "w").close()
        for proc in procs:
            assert proc.wait(180) == 0, "a sensor process failed"
        alarms.stop()
        wait_until(lambda: drained(edge), 90, what="the gateway to forward everything (in its next windows)")
        shown = json.loads(ctl(edge, "bridges", "--json").stdout)
        readings = logged(logs)
        sent = {(sensor, ts) for (sensor, _seq), (ts, _v) in readings.items()}
        try:
            wait_until(lambda: {key for _t, _k, key, _n in cloud.of("reading")} >= sent, 30)
        except AssertionError:
            pass  # (said below, with what is missing)

        # every reading to Parquet, once: a reading past every window closes them, then the
        # pipeline reads the stream to its end
        publish_end("amqp://guest:guest@127.0.0.1:%d/" % rabbitmq.port, stream, GATEWAY, END_TS)
        upstream_of = types.SimpleNamespace(url="amqp://guest:guest@127.0.0.1:%d/" % rabbitmq.port, stream=stream)
        output, checkpoint = str(tmp_path / "aggregates"), str(tmp_path / "checkpoint")
        request.getfixturevalue("spark_jvm")  # (conftest.py: the run's class archive, once made)
        pipeline = Pipeline(upstream_of, output, checkpoint).start("--trigger", "available-now")
        assert pipeline.finish() == 0, "\n".join(pipeline.lines[-30:])
        done.set()
        reader.join(10)
        clients = mosquitto.log()
        log = edge.log()
    finally:
        done.set()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        if pipeline is not None:
            pipeline.stop()
        if subscriber is not None:
            subscriber.disconnect()
            subscriber.loop_stop()
        for proxy in (cloud_proxy, rabbit_proxy):
            proxy.stop()
        if edge.proc is not None and edge.proc.poll() is None:
            code = edge.stop()
            assert code == 0 and not edge.errors(), edge.log()[-3000:]
        stop_mosquitto(mosquitto)

    broken = []  # each promise the day broke, in a line (all of them said at the end)

    # after each outage, the alarms that waited reach the cloud before any telemetry that waited
    figures = []
    order = [(t, kind, key) for t, kind, key, _n in cloud.got]  # (in the order they came)
    for raised, back in outages:
        last_alarm = max(i for i, (_t, kind, key) in enumerate(order) if kind == "alarm" and key in raised)
        after = [i for i, (t, kind, _key) in enumerate(order) if kind == "reading" and t > back]
        first_reading = after[0] if after else len(order)
        figures.append(
            "alarms %s in %.2f s, then the first telemetry (%.2f s)"
            % (raised, order[last_alarm][0] - back, order[min(first_reading, len(order) - 1)][0] - back)
        )
        if last_alarm > first_reading:
            broken.append("telemetry before the alarms after an outage: %s" % figures[-1])
    ids = {
        line.split(" as ")[1].split()[0]
        for line in clients.splitlines()
        if "New client connected" in line and " as " in line
    }
    ids.discard("cloud-dashboard")
    if len(ids) != 1:
        broken.append("the cloud saw more than one client id from the gateway (a link per class): %s" % sorted(ids))

    # after the first reload, telemetry only within the windows
    late = [(t, key) for arrivals in (cloud, upstream) for t, _k, key, _n in arrivals.of("reading")
            if t > scheduled_at + WINDOW_GRACE_S and not in_window(t, WINDOW_GRACE_S) and key[0] != "~end"]  # fmt: skip
    if late:
        broken.append("%d readings sent outside the windows after the reload: %r" % (len(late), late[:3]))
    restarted = [line for line in (first.stdout + second.stdout).splitlines() if line.startswith("bridge cloud")]
    if restarted:
        broken.append("a reload restarted the unchanged bridge cloud: %r" % restarted)

    # the second reload took in the plain bridge's queue
    taken = [line for line in second.stdout.splitlines() if line.startswith("queue hutch.bridge.to-rabbitmq: its ")]
    waiting = [b["backlog"] for b in held["bridges"] if b["name"] == "to-rabbitmq"]
    if second.returncode != 0 or not taken or "went to bridge to-rabbitmq, and it was deleted" not in taken[0]:
        broken.append("the reload into classes did not take in the old queue: %r" % (second.stdout + second.stderr))
    classes = {"cloud.alarms", "cloud.telemetry", "to-rabbitmq.alarms", "to-rabbitmq.telemetry"}
    if shown.get("left_behind") or {b["name"] for b in shown["bridges"]} != classes:
        broken.append("after the reloads, bridges %s, left behind %s" % (
            sorted(b["name"] for b in shown["bridges"]), shown.get("left_behind")))  # fmt: skip

    # the bytes of each window within the budget (its bucket and one message over)
    largest = max(n for arrivals in (cloud, upstream) for _t, _k, _key, n in arrivals.got)
    windows = {}
    for arrivals in (cloud, upstream):
        for t, _k, key, n in arrivals.got:
            if t > scheduled_at + EVERY and in_window(t, WINDOW_GRACE_S) and key != ("~end", END_TS):
                start = t - (t + time.localtime(t).tm_gmtoff) % EVERY
                windows[start] = windows.get(start, 0) + n
    most = BUDGET * (OPEN_FOR + WINDOW_GRACE_S) + BUDGET / 10 + largest
    over = {start: sent for start, sent in windows.items() if sent > most}
    if over:
        broken.append("windows over the budget (%d bytes at most): %r" % (most, over))

    # the large message went alone, and what it overdrew was said
    said = [line for line in log.splitlines() if " for budget: a {:,}-byte message went over".format(len(big)) in line]
    if not said or len([1 for arrivals in (cloud, upstream) if arrivals.of("log")]) != 2:
        broken.append("the %d-byte message: %d lines said its wait, %d upstreams got it" % (
            len(big), len(said), len([1 for arrivals in (cloud, upstream) if arrivals.of("log")])))  # fmt: skip

    # nothing confirmed lost: every reading and every alarm at the cloud
    at_cloud = {key for _t, _k, key, _n in cloud.of("reading")}
    missing = [key for key, (ts, _v) in readings.items() if (key[0], ts) not in at_cloud]
    if missing:
        broken.append("%d readings the sensors logged never reached the cloud: %r" % (len(missing), missing[:3]))
    if {key for _t, _k, key, _n in cloud.of("alarm")} != set(alarms.raised):
        broken.append("alarms lost on the way to the cloud")

    # every reading in Parquet, exactly once
    written, _ = written_aggregates(output)
    written.pop((GATEWAY, END_TS // 60 * 60, "~end"), None)
    expected = expected_windows(readings, GATEWAY)
    counted = {key: row[0] for key, row in written.items()}
    wrong = {key for key in set(counted) | set(expected) if counted.get(key) != expected.get(key, (None,))[0]}
    if wrong:
        broken.append("%d window rows in Parquet count readings missing or twice: %r" % (len(wrong), sorted(wrong)[:3]))

    print(
        "\nfield day: %d readings from 9 sensors (umqtt, Paho, AMQP), %d alarms; cloud outages: %s; the cloud got "
        "%d messages (%d repeats), RabbitMQ's stream %d; %d windows of %d s every %d s, their bytes %s (budget %d "
        "bytes/s: %d at most a window); the reload into classes: %s (to-rabbitmq's backlog before it %s); %d window "
        "rows in Parquet"
        % (len(readings), len(alarms.raised), "; ".join(figures), len(cloud.got),
           len(cloud.got) - len(at_cloud) - len(alarms.raised), len(upstream.got), len(windows), OPEN_FOR, EVERY,
           sorted(windows.values()), BUDGET, most, taken or second.stdout.splitlines(), waiting, len(written))
    )  # fmt: skip
    print("\n".join(said))
    assert not broken, "the day broke %d promises:\n%s" % (len(broken), "\n".join(broken))
    assert "bridge to-rabbitmq restarted with its new table (binding_key, classes changed)" in second.stdout
