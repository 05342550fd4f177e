"""Makes the fuzzers' seed corpora (tests/fuzz/corpus/TARGET/) from real peers: hutch serves,
and real clients talk to it through a recording proxy (tests/support/tcp_proxy.py), each
session's bytes kept as a seed of the targets that read them; a real Modbus device library
(pymodbus) frames the answers the RTU master reads. Run by hand when a client or a target is
added; its output is kept in the tree:

    .venv/bin/python tests/fuzz/record_corpus.py

A session's seed is its bytes with one octet in front, the size of the pieces a target feeds
them in (fuzz_targets/served.py pieces(): 0x55, 256 octets).
"""

import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "support")]

from brokers import BIN, RunningBroker, free_port, wait_until  # noqa: E402
from tcp_proxy import TcpProxy  # noqa: E402

CORPUS = os.path.join(HERE, "corpus")
PIECES = b"\x55"  # pieces of 256 octets


def keep(target, name, data):
    folder = os.path.join(CORPUS, target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def recorded(port, session):
    """What each link a session made to port through a recording proxy carried: [(sent, answered)]."""
    proxy = TcpProxy(port).record().start()
    try:
        session(proxy.port)
        wait_until(lambda: not proxy.links, 10, what="the session's links closed")
    finally:
        proxy.stop()
    return [(bytes(sent), bytes(answered)) for sent, answered in (proxy.recorded[n] for n in sorted(proxy.recorded))]


# ---------------------------------------------------------------- AMQP 0-9-1


def pika_session(port):
    import pika

    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port, heartbeat=30))
    channel = connection.channel()
    channel.exchange_declare("fz.topic", "topic", durable=True)
    channel.queue_declare("fz.q", durable=True, arguments={"x-max-length": 100, "x-message-ttl": 60000})
    channel.queue_bind("fz.q", "fz.topic", "sensors.#")
    channel.confirm_delivery()
    properties = pika.BasicProperties(
        content_type="application/json", delivery_mode=2, headers={"x-sensor-id": "t1", "x-sensor-seq": 7, "on": True, "list": [1, "a"]},
        message_id="m1", timestamp=1700000000, correlation_id="c", reply_to="r", expiration="60000", priority=3,
    )  # fmt: skip
    for n in range(20):
        channel.basic_publish("fz.topic", "sensors.t%d" % (n % 3), b'{"v": %d}' % n, properties)
    channel.basic_publish("", "fz.q", b"x" * 5000)
    channel.basic_qos(prefetch_count=5)
    method, _props, _body = channel.basic_get("fz.q")
    channel.basic_nack(method.delivery_tag, requeue=True)
    for n, (method, _props, _body) in enumerate(channel.consume("fz.q", inactivity_timeout=0.5)):
        if method is None:
            break
        if n % 3 == 0:
            channel.basic_reject(method.delivery_tag, requeue=False)
        else:
            channel.basic_ack(method.delivery_tag, multiple=n % 2 == 0)
    channel.cancel()
    tx = connection.channel()
    tx.tx_select()
    tx.basic_publish("", "fz.q", b"in a transaction")
    tx.tx_commit()
    stream = connection.channel()
    stream.queue_declare("fz.s", durable=True, arguments={"x-queue-type": "stream", "x-max-age": "1D"})
    stream.basic_publish("", "fz.s", b"record")
    stream.basic_qos(prefetch_count=10)
    for method, _props, _body in stream.consume("fz.s", arguments={"x-stream-offset": "first"}, inactivity_timeout=0.3):
        if method is None:
            break
        stream.basic_ack(method.delivery_tag)
    stream.cancel()
    channel.queue_purge("fz.q")
    channel.queue_unbind("fz.q", "fz.topic", "sensors.#")
    channel.queue_delete("fz.q")
    channel.exchange_delete("fz.topic")
    connection.close()


def pika_persistent_session(port):
    """Persistent publishes in a burst, as a sensor gateway sends them: runs for the journal."""
    import pika

    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    channel = connection.channel()
    channel.queue_declare("fz.p", durable=True)
    persistent = pika.BasicProperties(delivery_mode=2, content_type="application/json")
    for n in range(200):  # (without confirms: pika sends each at once, and they come in a run)
        channel.basic_publish("", "fz.p", b'{"sensor": "t1", "seq": %d, "v": 21.5}' % n, persistent)
    channel.confirm_delivery()
    for n in range(5):
        channel.basic_publish("", "fz.p", b'{"seq": %d}' % n, persistent)
    channel.queue_delete("fz.p")
    connection.close()


def kombu_session(port):
    import kombu

    with kombu.Connection("amqp://guest:guest@127.0.0.1:%d//" % port) as connection:
        queue = kombu.Queue("fz.k", kombu.Exchange("fz.k", "direct"), routing_key="k")
        with connection.Producer() as producer:
            for n in range(5):
                producer.publish({"n": n}, exchange=queue.exchange, routing_key="k", declare=[queue], serializer="json")
        with connection.SimpleQueue(queue) as simple:
            for _ in range(5):
                simple.get(timeout=5).ack()


# ---------------------------------------------------------------- MQTT


def mqtt_js_session(port, version):
    """MQTT.js (tests/node/mqtt_js.js: a persistent subscriber, QoS 0-2, a retained message, a
    will on a cut link, user properties in 5), its clients each a link."""
    from mqtt_brokers import run_mqtt_js

    run_mqtt_js(None, version, url="mqtt://guest:guest@127.0.0.1:%d" % port)


def paho_session(port, version, transport="tcp"):
    import paho.mqtt.client as mqtt
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    five = version == mqtt.MQTTv5
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="fz-%d" % version, protocol=version,
                         transport=transport, **({} if five else {"clean_session": False}))  # fmt: skip
    client.username_pw_set("guest", "guest")
    client.will_set("fz/will", b"gone", qos=1, retain=True)
    if transport == "websockets":
        client.ws_set_options(path="/mqtt")
    got = []
    client.on_message = lambda _c, _u, message: got.append(message.payload)
    client.connect("127.0.0.1", port, keepalive=30)
    client.loop_start()
    wait_until(client.is_connected, 10, what="paho connected")
    client.subscribe([("fz/#", 2), ("fz/+/x", 0), ("$share/g/fz/s", 1)])
    for qos in (0, 1, 2):
        props = None
        if five:  # (a sensor's numbered readings: each its own number, or the broker drops it as a repeat)
            props = Properties(PacketTypes.PUBLISH)
            props.UserProperty = [("x-sensor-id", "t-" + transport), ("x-sensor-seq", str(qos))]
            props.ContentType = "application/json"
            props.MessageExpiryInterval = 60
        client.publish("fz/a", b'{"v": %d}' % qos, qos=qos, properties=props).wait_for_publish(10)
    client.publish("fz/retained", b"kept", qos=1, retain=True).wait_for_publish(10)
    wait_until(lambda: len(got) >= 4, 10, what=lambda: "paho's messages back: %r" % got)
    client.unsubscribe("fz/+/x")
    time.sleep(0.2)
    client.disconnect()
    client.loop_stop()


# ---------------------------------------------------------------- AMQP 1.0


def proton_session(port):
    from proton import Message
    from proton.utils import BlockingConnection

    connection = BlockingConnection("amqp://guest:guest@127.0.0.1:%d" % port, timeout=10)
    sender = connection.create_sender("/queues/fz.10")
    for n in range(5):
        sender.send(Message(body="reading %d" % n, properties={"n": n}, durable=True, subject="s", ttl=60))
    sender.send(Message(body=b"\x00\x01binary"))
    receiver = connection.create_receiver("/queues/fz.10", credit=10)
    for _ in range(6):
        receiver.receive(10)
        receiver.accept()
    connection.close()


def pika_declare(port, queue):
    import pika

    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    connection.channel().queue_declare(queue, durable=True)
    connection.close()


# ---------------------------------------------------------------- a bridge's upstream

BRIDGES = (("amqp091", "amqp", "queue"), ("amqp10", "amqp10", "queue"), ("mqtt", "mqtt", "topic"))


def bridge_answers(folder, amqp_port, mqtt_port):
    """What an upstream (this hutch) answers a bridge of each protocol, recorded through a proxy:
    {protocol: the upstream's bytes}. Another hutch forwards a few messages over each."""
    from pathlib import Path

    import pika

    proxies = {
        "amqp091": TcpProxy(amqp_port).record().start(),
        "amqp10": TcpProxy(amqp_port).record().start(),
        "mqtt": TcpProxy(mqtt_port).record().start(),
    }
    edge_folder = Path(folder) / "edge"
    edge_folder.mkdir()
    config = ""
    for protocol, scheme, where in BRIDGES:
        config += '[[bridge]]\nname = "fz-%s"\nqueue = "fz.out.%s"\nuri = "%s://guest:guest@127.0.0.1:%d/"\n' % (
            protocol, protocol, scheme, proxies[protocol].port,
        )  # fmt: skip
        config += (
            'topic = "fz/{routing_key}"\n' if where == "topic" else 'exchange = ""\nrouting_key = "fz.up"\n'
        ) + "\n"
    (edge_folder / "hutch.toml").write_text(config)
    edge = RunningBroker(
        [os.path.join(BIN, "hutch"), "serve", "--config", str(edge_folder / "hutch.toml")], edge_folder
    ).start()
    try:
        upstream = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", amqp_port))
        upstream.channel().queue_declare("fz.up", durable=True)
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", edge.port))
        channel = connection.channel()
        channel.confirm_delivery()
        for protocol, _scheme, _where in BRIDGES:
            channel.queue_declare("fz.out." + protocol, durable=True)
            for n in range(5):
                channel.basic_publish("", "fz.out." + protocol, b"reading %d" % n, pika.BasicProperties(delivery_mode=2, headers={"n": n}))  # fmt: skip
        connection.close()
        wait_until(lambda: upstream.channel().queue_declare("fz.up", passive=True).method.message_count >= 10, 30,
                   what="the bridges forwarding")  # fmt: skip
        upstream.close()
    finally:
        edge.stop()
    answers = {}
    for protocol, proxy in proxies.items():
        wait_until(lambda proxy=proxy: not proxy.links, 10, what="the bridge's links closed")
        proxy.stop()
        answers[protocol] = b"".join(bytes(answered) for _sent, answered in proxy.recorded.values())
    return answers


# ---------------------------------------------------------------- HTTP, files


def http_requests(port):
    """A scraper's and a browser's requests to the metrics port: urllib (as Prometheus asks) and
    headless Chromium opening the status page (which fetches the overview)."""
    import subprocess
    import urllib.request

    for path in ("/metrics", "/api/overview", "/"):
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=10) as answer:
            answer.read()
    from scrapes import CHROMIUM

    if os.path.exists(CHROMIUM):
        subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=3000", "--dump-dom",
             "http://127.0.0.1:%d/" % port],
            capture_output=True, timeout=60,
        )  # fmt: skip


def ctl_requests(data, folder):
    """The lines `hutch ctl` sends the control socket, for a run of its commands: a recording
    socket in another folder forwards each to the broker's (DATA/control.sock) and keeps it."""
    import socket
    import subprocess
    import threading

    front = os.path.join(folder, "ctl")
    os.makedirs(front)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(os.path.join(front, "control.sock"))
    listener.listen()
    lines = []

    def forward():
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            with client:
                line = client.makefile("rb").readline()
                lines.append(line)
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as broker:
                    broker.connect(os.path.join(data, "control.sock"))
                    broker.sendall(line)
                    client.sendall(broker.makefile("rb").readline())

    threading.Thread(target=forward, daemon=True).start()
    ctl = [os.path.join(BIN, "hutch"), "ctl"]
    for command in (
        ["ping"], ["list", "queues"], ["list", "connections"], ["list", "bindings"], ["add-user", "fz-user", "fz-pass"],
        ["set-permissions", "fz-user", "^fz", ".*", ".*"], ["change-password", "fz-user", "other"],
        ["clear-permissions", "fz-user"], ["delete-user", "fz-user"], ["purge", "fz.k"], ["delete", "queue", "fz.k"],
        ["status"], ["bridges"], ["health"],
    ):  # fmt: skip
        subprocess.run(ctl + command + ["--data", front], capture_output=True, timeout=60)
    listener.close()
    return lines


def fenced(kind):
    """The ```kind blocks of the docs: the configs and files the docs show users."""
    import re

    blocks = []
    docs = os.path.join(HERE, "..", "..", "docs")
    for entry in sorted(os.listdir(docs)):
        if entry.endswith(".md"):
            with open(os.path.join(docs, entry)) as f:
                for n, block in enumerate(re.findall(r"```%s\n(.*?)```" % kind, f.read(), re.S)):
                    blocks.append(("%s-%d" % (entry[:-3], n), block.encode()))
    return blocks


# ---------------------------------------------------------------- Modbus RTU


def rtu_answers():
    """pymodbus's RTU framing of a device's answers to the requests fuzz_targets/modbus.py asks
    (its REQUESTS, by index): normal answers and exceptions."""
    from pymodbus.framer import FramerRTU
    from pymodbus.pdu import DecodePDU, ExceptionResponse
    from pymodbus.pdu.bit_message import ReadCoilsResponse, WriteSingleCoilResponse
    from pymodbus.pdu.register_message import (
        ReadHoldingRegistersResponse,
        ReadInputRegistersResponse,
        WriteMultipleRegistersResponse,
        WriteSingleRegisterResponse,
    )

    framer = FramerRTU(DecodePDU(False))
    answers = [
        ReadHoldingRegistersResponse(dev_id=1, registers=[10, 0x4170, 0x0000, 65535]),
        ReadInputRegistersResponse(dev_id=1, registers=[0x41A0, 0x0000]),
        ReadCoilsResponse(dev_id=1, bits=[True, False, True, True, False, False, False, True, True]),
        WriteSingleRegisterResponse(dev_id=1, address=7, registers=[1234]),
        WriteMultipleRegistersResponse(dev_id=1, address=7, count=2),
        WriteSingleCoilResponse(dev_id=1, address=3, bits=[True]),
        ExceptionResponse(3, 2, device_id=1),
    ]
    return [framer.buildFrame(answer) for answer in answers]


def main():
    shutil.rmtree(CORPUS, ignore_errors=True)
    folder = tempfile.mkdtemp(prefix="hutch-corpus-")
    try:
        from pathlib import Path

        mqtt_port, ws_port, metrics_port = free_port(), free_port(), free_port()
        command = [os.path.join(BIN, "hutch"), "serve", "--mqtt-port", str(mqtt_port), "--mqtt-ws-port", str(ws_port)]
        command += ["--metrics-port", str(metrics_port)]
        broker = RunningBroker(command, Path(folder)).start()
        try:
            import paho.mqtt.client as mqtt

            wait_until(lambda: "MQTT over WebSocket" in broker.log(), 30, what="the WebSocket listener")
            for name, session in (
                ("pika", pika_session),
                ("pika-persistent", pika_persistent_session),
                ("kombu", kombu_session),
            ):
                for n, (sent, _answered) in enumerate(recorded(broker.port, session)):
                    keep("amqp091-session", "%s-%d" % (name, n), PIECES + sent)
                    keep("amqp091-frames", "%s-%d" % (name, n), b"\x01" + sent[8:])  # (the frames after the header)
            for name, version in (("paho-3.1.1", mqtt.MQTTv311), ("paho-5", mqtt.MQTTv5)):
                for n, (sent, _answered) in enumerate(
                    recorded(mqtt_port, lambda port, v=version: paho_session(port, v))
                ):
                    keep("mqtt-session", "%s-%d" % (name, n), PIECES + sent)
                    keep("mqtt-packets", "%s-%d" % (name, n), sent)
            for version in (4, 5):
                for n, (sent, _answered) in enumerate(
                    recorded(mqtt_port, lambda port, v=version: mqtt_js_session(port, v))
                ):
                    keep("mqtt-session", "mqtt-js-%d-%d" % (version, n), PIECES + sent)
                    keep("mqtt-packets", "mqtt-js-%d-%d" % (version, n), sent)
            for name, version in (("paho-3.1.1", mqtt.MQTTv311), ("paho-5", mqtt.MQTTv5)):
                links = recorded(ws_port, lambda port, v=version: paho_session(port, v, "websockets"))
                for n, (sent, _answered) in enumerate(links):
                    keep("websocket-session", "%s-%d" % (name, n), PIECES + sent)
                    keep("websocket-frames", "%s-%d" % (name, n), sent[sent.index(b"\r\n\r\n") + 4 :])
            pika_declare(broker.port, "fz.10")
            for n, (sent, _answered) in enumerate(recorded(broker.port, proton_session)):
                keep("amqp10-session", "proton-%d" % n, PIECES + sent)
                keep("amqp10-types", "proton-%d" % n, sent)
            for n, (sent, _answered) in enumerate(recorded(metrics_port, http_requests)):
                keep("http-request", "%s-%d" % ("chromium" if b"Chrome" in sent else "urllib", n), sent)
            for protocol, answered in bridge_answers(folder, broker.port, mqtt_port).items():
                keep("bridge-upstream", protocol, answered)
                for choice in (0,) if protocol == "amqp091" else (1,) if protocol == "amqp10" else (2, 3):
                    keep("upstream-clients", "%s-%d" % (protocol, choice), bytes([choice]) + answered)
            for n, line in enumerate(ctl_requests(broker.data, folder)):
                keep("control", "hutch-ctl-%d" % n, line)
            exported = os.path.join(folder, "definitions.json")
            import subprocess

            subprocess.run([os.path.join(BIN, "hutch"), "ctl", "export", exported, "--data", broker.data], check=True)
            with open(exported, "rb") as f:
                keep("definitions", "hutch-ctl-export", f.read())
        finally:
            broker.stop()
        for name, block in fenced("toml"):
            keep("config", "docs-" + name, block)
        for entry in sorted(os.listdir(os.path.join(HERE, "..", "..", "examples"))):
            if entry.endswith(".toml"):
                with open(os.path.join(HERE, "..", "..", "examples", entry), "rb") as f:
                    keep("config", "example-" + entry[:-5], f.read())
        for name, block in fenced("json"):
            if block.lstrip().startswith(b"{"):
                keep("definitions", "docs-" + name, block)
        from tls_certs import Certificates

        certs = Certificates(os.path.join(folder, "certs"))
        for name, path in (("ca", certs.ca), ("server", certs.server.cert), ("server-key", certs.server.key)):
            with open(path, "rb") as f:
                keep("pem", "cryptography-" + name, f.read())
        for n, frame in enumerate(rtu_answers()):
            keep("modbus-rtu", "pymodbus-%d" % n, bytes([n]) + bytes(frame))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    for target in sorted(os.listdir(CORPUS)):
        print("%s: %d seeds" % (target, len(os.listdir(os.path.join(CORPUS, target)))))


if __name__ == "__main__":
    main()
