"""Fail-over and fail-back between two MQTT brokers, a primary A and a standby B (Debian's
mosquitto, each with its own persistence), the same script run against two edges that bridge
QoS 1 readings to them: hutch (`uri = [A, B]`, `prefer_first = true`) and, as the reference,
Debian's mosquitto with a bridge (`address A B`, `round_robin false`: A the main connection,
retried while on B).

The script, under 50 readings a second published into the edge with QoS 1:

1. A stops (SIGTERM): the edge's bridge goes to B;
2. A starts again and is hung at once (SIGSTOP: its kernel accepts connections, nothing answers
   them) for HUNG seconds, while the bridge is on B: mosquitto#3293 reports a Mosquitto bridge
   dropping its working link to B as soon as its retry of the primary connects;
3. A goes on (SIGCONT): the bridge moves back to A.

Counted for each edge: what the two upstreams' subscribers got (every reading the edge
acknowledged: lost, twice), how many readings reached B while A was hung, how many times the
edge's bridge connected to B meanwhile (a working link that survived: none), and the seconds
from SIGCONT until readings reach A. hutch's edge must lose nothing, keep its link to B while A
is hung and move back; the Mosquitto bridge's outcome is printed beside it (docs/cluster.md has
both).
"""

import queue
import re
import signal
import subprocess
import threading
import time

import pytest
from brokers import wait_for_port, wait_until
from mqtt_brokers import MOSQUITTO, Paho, start_hutch, start_mosquitto, stop

pytestmark = [pytest.mark.timeout(180)]

RATE = 50  # readings a second into the edge
HUNG = 12  # seconds A stays hung while the bridge is on B
PERSISTENT = "persistence true\npersistence_location %s/\nautosave_interval 1\n"


class Upstream:
    """A mosquitto (A or B) with its own persistence, and a subscriber to fb/# (a persistent
    session: readings sent while it reconnects wait for it) recording each reading's number."""

    def __init__(self, folder, name):
        folder.mkdir()
        self.broker = start_mosquitto(folder, PERSISTENT % folder + "log_type information\n")
        self.conf = str(folder / "mosquitto.conf")
        self.got = []
        self.subscriber = Paho(self.broker, "count-" + name, clean=False).connect()
        self.subscriber.client.on_message = lambda c, u, m: self.got.append((time.monotonic(), int(m.payload)))
        self.subscriber.subscribe("fb/#", 1)
        self.subscriber.client.reconnect_delay_set(1, 1)  # (back within a second of its broker)

    def stop(self):
        """SIGTERM: mosquitto saves its sessions and stops."""
        self.broker.proc.send_signal(signal.SIGTERM)
        self.broker.proc.wait(10)

    def start_hung(self):
        """Started again on its port and persistence, then SIGSTOPped once it accepts connections."""
        self.broker.proc = subprocess.Popen(
            [MOSQUITTO, "-c", self.conf], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
        )
        wait_for_port(self.broker.port, self.broker.proc, self.broker.log_path)
        self.broker.proc.send_signal(signal.SIGSTOP)

    def bridge_connections(self):
        """How many times a client other than its subscriber connected (the edge's bridge)."""
        return len([line for line in self.broker.log().splitlines()
                    if "New client connected" in line and " as count-" not in line])  # fmt: skip

    def close(self):
        self.subscriber.stop()
        if self.broker.proc.poll() is None:
            self.broker.proc.send_signal(signal.SIGCONT)
            stop(self.broker)


def hutch_edge(tmp_path, a, b):
    folder = tmp_path / "edge"
    folder.mkdir()
    uris = ", ".join('"mqtt://127.0.0.1:%d?heartbeat=2&connection_timeout=2000"' % u.broker.port for u in (a, b))
    (folder / "hutch.toml").write_text(
        '[[bridge]]\nname = "fb"\nuri = [%s]\nsource_exchange = "amq.topic"\nbinding_key = "fb.#"\n'
        "prefer_first = true\nreconnect_delay = 0.2\nmax_reconnect_delay = 1.0\nwatchdog = 2.0\n" % uris
    )
    return start_hutch(folder, ["--config", str(folder / "hutch.toml")])


def mosquitto_edge(tmp_path, a, b):
    folder = tmp_path / "edge"
    folder.mkdir()
    return start_mosquitto(
        folder,
        "max_queued_messages 0\n"  # (no cap on what waits for the bridge: nothing dropped at the edge)
        "connection fb\naddress 127.0.0.1:%d 127.0.0.1:%d\nround_robin false\ntopic fb/# out 1\n"
        "cleansession false\nkeepalive_interval 2\nrestart_timeout 1 2\nbridge_protocol_version mqttv311\n"
        "try_private false\nnotifications false\n" % (a.broker.port, b.broker.port),
    )


class Publisher(threading.Thread):
    """RATE numbered readings a second, QoS 1, to fb/readings at the edge; `acked` the numbers
    the edge acknowledged (PUBACK)."""

    def __init__(self, edge):
        super().__init__(daemon=True)
        self.client = Paho(edge, "fb-sensor").connect()
        self.acked = []
        self.stopping = threading.Event()

    def run(self):
        n = 0
        pending = queue.Queue()
        self.client.client.on_publish = lambda c, u, mid, code, props: pending.put(mid)
        sent = {}
        while not self.stopping.is_set():
            info = self.client.client.publish("fb/readings", str(n).encode(), 1)
            sent[info.mid] = n
            n += 1
            while not pending.empty():
                self.acked.append(sent.pop(pending.get()))
            time.sleep(1 / RATE)
        deadline = time.monotonic() + 10
        while sent and time.monotonic() < deadline:
            try:
                self.acked.append(sent.pop(pending.get(timeout=1)))
            except (queue.Empty, KeyError):
                continue


@pytest.mark.parametrize("kind", ["hutch", "mosquitto"])
def test_fail_over_and_fail_back_with_the_primary_hung(tmp_path, kind):
    a, b = Upstream(tmp_path / "a", "A"), Upstream(tmp_path / "b", "B")
    edge = (hutch_edge if kind == "hutch" else mosquitto_edge)(tmp_path, a, b)
    publisher = Publisher(edge)
    try:
        publisher.start()
        wait_until(lambda: len(a.got) > RATE, 20, what="readings on A")
        a.stop()
        wait_until(lambda: b.got, 30, what="the bridge on B")
        a.start_hung()
        hung_at, to_b, links = time.monotonic(), len(b.got), b.bridge_connections()
        time.sleep(HUNG)
        during = len(b.got) - to_b
        new_links = b.bridge_connections() - links
        a.broker.proc.send_signal(signal.SIGCONT)
        back_at = time.monotonic()
        arrivals = [hung_at] + [t for t, _n in b.got if t > hung_at] + [back_at]
        stalled = max(later - earlier for earlier, later in zip(arrivals, arrivals[1:]))
        top = max(n for _t, n in a.got + b.got)  # (A's session may give it old ones first)
        wait_until(lambda: any(n > top for _t, n in a.got), 30, what="the bridge back on A")
        moved_back = min(t for t, n in a.got if n > top) - back_at
        time.sleep(1)
        publisher.stopping.set()
        publisher.join(20)
        wanted = set(publisher.acked)
        wait_until(lambda: wanted <= {n for _t, n in a.got + b.got}, 30, what="every acknowledged reading upstream")
    finally:
        publisher.stopping.set()
        if kind == "hutch":
            stop(edge)
        else:
            edge.proc.send_signal(signal.SIGTERM)
            edge.proc.wait(10)
        a.close()
        b.close()
    numbers = [n for _t, n in a.got + b.got]
    lost = len(wanted - set(numbers))
    twice = len(numbers) - len(set(numbers))
    print(
        "%s edge: %d readings acknowledged, lost %d, twice %d; while A was hung (%d s): %d readings reached B, "
        "none for %.1f s at most, the bridge connected to B %d times; back on A %.1f s after SIGCONT"
        % (kind, len(wanted), lost, twice, HUNG, during, stalled, new_links, moved_back)
    )
    if kind == "hutch":
        assert lost == 0
        assert new_links == 0 and stalled < 2, "the link to B did not carry on while A was hung"
        assert re.search(r"moved back from mqtt://\S+ to mqtt://127\.0\.0\.1:%d" % a.broker.port, edge.log()), (
            edge.log()[-3000:]
        )
