"""Each bridge scenario written once, run over every protocol a bridge speaks upstream, to the
run's RabbitMQ: AMQP 0-9-1 (its AMQP port), AMQP 1.0 (its rabbitmq_amqp1_0 plugin, on the same
port) and MQTT (its rabbitmq_mqtt plugin). UPSTREAMS says, a row each, how a bridge of that
protocol reaches the queue a test reads with pika, and what its log says of a refused login;
a fourth upstream protocol is a row here.

- Cut, reset and black-holed links (tests/support/tcp_proxy.py) while pika publishes at the
  edge: every message the edge confirmed arrives, first copies in the order sent.
- A refused login: said once with its reason (never the password), retried with a backoff,
  counted by `hutch ctl bridges`.
- To another hutch (TO_HUTCH: the protocols that carry a message's origin and number), exactly
  once through muted replies, link faults and edge SIGKILLs.
"""

import json
import os
import random
import re
import subprocess
import threading
import time

import pika
import pytest
from bridging import consume_every, edge_with_bridge, first_copies, publish_during, rabbitmq_url, upstream_queue
from brokers import BIN, RunningBroker, failed_attempts, stop_all, wait_until
from tcp_proxy import TcpProxy

# protocol -> (its URI, its port of the run's RabbitMQ (a fixture attribute), for queue Q: the
# bridge keys that send to it and the key it is bound to amq.topic with (None: it need not be;
# RabbitMQ routes MQTT's topic bridged/Q as bridged.Q), what its log says of a refused login,
# the refused attempts a test waits for: RabbitMQ 3.10's 1.0 plugin answers a refused SASL
# login only after seconds)
UPSTREAMS = {
    "0-9-1": ("amqp://%s@127.0.0.1:%d/", "port", lambda q: ({"routing_key": q}, None), ("login refused: 403", "ACCESS_REFUSED"), 8),
    "1.0": ("amqp10://%s@127.0.0.1:%d", "port", lambda q: ({"address": "/amq/queue/" + q}, None), ("login refused: SASL outcome 1 (auth)",), 2),
    "mqtt": ("mqtt://%s@127.0.0.1:%d", "mqtt_port", lambda q: ({"topic": "bridged/" + q}, "bridged." + q), ("login refused", "not authorized"), 8),
}  # fmt: skip
PROTOCOLS = sorted(UPSTREAMS)
FAULT_OPTIONS = "heartbeat=1&connection_timeout=2000"  # a black hole is found within seconds


def uri(protocol, port, login="guest:guest", options=FAULT_OPTIONS):
    return UPSTREAMS[protocol][0] % (login, port) + ("?" + options if options else "")


def queue_for(rabbitmq, protocol, name):
    """The upstream queue the bridge's messages land in, declared (and bound to amq.topic where
    the protocol's row says)."""
    url = rabbitmq_url(rabbitmq)
    upstream_queue(url, name)
    binding_key = UPSTREAMS[protocol][2](name)[1]
    if binding_key is not None:
        conn = pika.BlockingConnection(pika.URLParameters(url))
        conn.channel().queue_bind(name, "amq.topic", binding_key)
        conn.close()
    return url


@pytest.mark.long  # mostly waits: started early (tests/conftest.py)
@pytest.mark.timeout(240)  # about 30 s alone; a loaded machine's RabbitMQ is slow to take links back
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_cut_reset_and_black_holed_links_lose_nothing_and_keep_order(tmp_path, rabbitmq, protocol):
    """A TCP proxy between the bridge and RabbitMQ cuts (FIN), resets (RST) and black-holes
    (silence: found by heartbeats or keep-alives) the link again and again while pika publishes
    at the edge. A message leaves the edge only once upstream took it (a confirm, `accepted`, a
    PUBACK): every one arrives, first copies in order; duplicates (what was in flight at a fault)
    are counted and printed."""
    name = "faults-" + protocol.replace(".", "")
    url = queue_for(rabbitmq, protocol, name)
    proxy = TcpProxy(getattr(rabbitmq, UPSTREAMS[protocol][1])).start()
    bridge = {"name": name, "uri": uri(protocol, proxy.port), "queue": name + "-out", "prefetch": 200}
    bridge.update(UPSTREAMS[protocol][2](name)[0], reconnect_delay=0.1, max_reconnect_delay=0.5)
    edge = edge_with_bridge(tmp_path, bridge)
    faults = {"cut": 0, "reset": 0, "black-hole": 0}
    seed = random.randrange(1 << 30)
    chooser = random.Random(seed)
    kinds = ["cut", "reset", "black-hole"] * 4
    chooser.shuffle(kinds)

    def inject():
        for kind in kinds:
            time.sleep(chooser.uniform(0.2, 0.6))
            proxy.fault(kind, chooser)
            faults[kind] += 1

    try:
        wait_until(lambda: "bridge %s: running" % name in edge.log(), timeout=30, what="the bridge running")
        injector = threading.Thread(target=inject, daemon=True)
        injector.start()
        bodies = publish_during(edge, name + "-out", injector, lambda i: b"f%06d" % i, 1000, most=20000)
        injector.join(60)
        got = consume_every(url, name, bodies)
    finally:
        edge.stop()
        proxy.stop()
    first, duplicates = first_copies([body for body, _h, _m in got])
    print(
        "%s, seed %d: faults %s, links %d, %d sent, %d received, %d duplicates"
        % (protocol, seed, faults, proxy.accepted, len(bodies), len(got), duplicates)
    )
    assert sum(faults.values()) == 12, faults
    assert len(bodies) >= 500 and first == bodies, "lost or out of order (seed %d)" % seed
    assert duplicates <= 200 * 12, "more duplicates than the window per fault"
    log = edge.log()  # (a black hole is found by the link's silence, whatever its protocol)
    assert "missed heartbeats: upstream is silent" in log or "no answer to the handshake" in log, log[-3000:]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_refused_login_is_logged_with_its_reason_and_retried(tmp_path, rabbitmq, protocol):
    """Retried every 0.4 s at most, the outage is said once (its reason, its first backoff),
    not a warning and a line per retry; `hutch ctl bridges` counts the attempts."""
    name = "badlogin-" + protocol.replace(".", "")
    queue_for(rabbitmq, protocol, name)
    port = getattr(rabbitmq, UPSTREAMS[protocol][1])
    bad = uri(protocol, port, "guest:wrong", None)
    attempts = UPSTREAMS[protocol][4]
    bridge = {"name": name, "uri": bad, "queue": "q", "reconnect_delay": 0.2, "max_reconnect_delay": 0.4}
    bridge.update(UPSTREAMS[protocol][2](name)[0])
    edge = edge_with_bridge(tmp_path, bridge)
    try:
        wait_until(lambda: failed_attempts(edge, name) >= attempts, timeout=60, what="%d attempts" % attempts)
        log = edge.log()
        assert any(words in log for words in UPSTREAMS[protocol][3]), log[-2000:]
        assert "wrong" not in log, "the password is never logged"
        lines = [line for line in log.splitlines() if "bridge %s: " % name in line]
        assert [line.split("bridge %s: " % name)[1].split(" ")[0] for line in lines] == [
            "connecting", bad.replace("guest:wrong", "guest:***") + ":", "backoff"
        ], lines  # fmt: skip
        shown = subprocess.run(
            [os.path.join(BIN, "hutch"), "ctl", "bridges", "--data", edge.data], capture_output=True, text=True
        )
        assert re.search(r"    down: \d+ attempts failed since a link last ran", shown.stdout), shown.stdout
    finally:
        edge.stop()


# ---------------------------------------------------------------- to another hutch, exactly once

# protocol -> the URI of a bridge to a hutch upstream (through the proxy's port) and the keys
# that send to its queue `central`; what is sent again carries x-hutch-origin and x-hutch-seq
# (0-9-1 headers, 1.0 application properties) and the upstream hutch drops it. (MQTT 3.1.1
# carries no headers: its uplink is at least once, tests/interop/bridge/test_bridge_mqtt.py.)
TO_HUTCH = {
    "0-9-1": ("amqp://guest:guest@127.0.0.1:%d/?heartbeat=1&connection_timeout=2000&frame_max=4096", {"routing_key": "central"}),
    "1.0": ("amqp10://guest:guest@127.0.0.1:%d?heartbeat=1&connection_timeout=2000&frame_max=4096", {"exchange": "", "routing_key": "central"}),
}  # fmt: skip


@pytest.mark.long  # tests/conftest.py: started early
@pytest.mark.timeout(300)  # (about 40 s alone; a loaded machine has taken over 120)
@pytest.mark.parametrize("protocol", sorted(TO_HUTCH))
def test_hutch_to_hutch_is_exactly_once_through_link_faults_and_edge_sigkills(tmp_path, protocol):
    """Upstream is a hutch: what the bridge sends again after a muted reply, a cut, reset or
    black-holed link (a TCP proxy) or after the edge is SIGKILLed and restarted, it drops by
    origin and number. Messages of every size up to several 4 KiB frames. Upstream gets every
    confirmed message once, in order, and must have dropped some (the muted replies make
    duplicates certain)."""
    upstream_folder = tmp_path / "up"
    upstream_folder.mkdir()
    upstream = RunningBroker([os.path.join(BIN, "hutch"), "serve"], upstream_folder).start()
    upstream_queue(upstream.url, "central")
    proxy = TcpProxy(upstream.port).start()
    bridge = {"name": "h2h", "uri": TO_HUTCH[protocol][0] % proxy.port, "queue": "edge-out", "prefetch": 300}
    bridge.update(TO_HUTCH[protocol][1], reconnect_delay=0.1, max_reconnect_delay=0.5)
    edge = edge_with_bridge(tmp_path, bridge)
    seed = random.randrange(1 << 30)
    chooser = random.Random(seed)
    faults = {"cut": 0, "reset": 0, "black-hole": 0, "mute": 0, "sigkill": 0}
    kinds = ["cut", "reset", "black-hole"] * 3
    chooser.shuffle(kinds)
    sizes = [chooser.choice((0, 10, 500, 5000, 13000)) for _ in range(20000)]  # (the most published below)

    def inject():
        # first the replies muted while a batch flows: upstream takes messages whose confirms
        # the edge never sees, so it sends them again (duplicates, for certain)
        time.sleep(0.2)
        proxy.mute_replies()
        time.sleep(2.5)  # past twice the heartbeat
        proxy.heal()
        faults["mute"] += 1
        for kind in kinds:
            time.sleep(chooser.uniform(0.2, 0.6))
            proxy.fault(kind, chooser)
            faults[kind] += 1

    def sigkill(batch):
        if batch % 2 == 1 and faults["sigkill"] < 3:
            time.sleep(chooser.uniform(0.0, 0.05))  # the bridge is mid-flight
            edge.proc.kill()
            edge.proc.wait()
            faults["sigkill"] += 1
            edge.start()

    try:
        # running before the faults: muted replies during the handshake keep the link from opening
        wait_until(lambda: "bridge h2h: running" in edge.log(), timeout=30, what="the bridge running")
        injector = threading.Thread(target=inject, daemon=True)
        injector.start()
        # 8,000 messages at least, 500 a second, on while the faults go on (about 15 s); the edge
        # SIGKILLed after batches 2, 4 and 6
        bodies = publish_during(
            edge, "edge-out", injector, lambda i: b"x%06d-" % i + b"b" * sizes[i], 500,
            at_least=8000, most=20000, batch=1000, after=sigkill,
        )  # fmt: skip
        injector.join(60)
        got = consume_every(upstream.url, "central", bodies)
    finally:
        stop_all(edge, proxy, upstream)
    received = [body for body, _h, _m in got]
    with open(os.path.join(upstream.data, "status.json")) as f:
        dropped = json.load(f)["duplicates_dropped"]
    print(
        "%s, seed %d: faults %s, links %d, %d sent, %d received, upstream dropped %d duplicates"
        % (protocol, seed, faults, proxy.accepted, len(bodies), len(received), dropped)
    )
    assert faults["sigkill"] == 3 and sum(faults.values()) == 13, faults
    assert len(received) == len(set(received)), "duplicates upstream (seed %d)" % seed
    assert received == bodies, "lost or out of order (seed %d)" % seed
    assert dropped > 0, "no fault made the bridge send anything again: the test proved nothing"
    headers = got[0][1]
    assert headers["x-hutch-hops"] == 1 and headers["x-hutch-seq"] == 1, headers
    assert not upstream.errors(), upstream.log()[-3000:]
