"""The AMQP 1.0 rows of `hutch bench` (--amqp10): rhea (Node.js) as the load generator, against
hutch and against RabbitMQ with its AMQP 1.0 plugin, the same load for each.

    amqp10-send            a rhea sender, unsettled: each message settled by the broker's outcome
    amqp10-send-settled    a rhea sender, pre-settled (at most once)
    amqp10-receive         a rhea receiver (credit window 1000, accepting as it goes) reading a
                           queue filled beforehand over 0-9-1
    amqp10-to-091          a rhea sender (unsettled) into a queue a 0-9-1 consumer reads: the
                           rate the consumer sees

The load itself is bench/amqp10_load.js. It needs the `node` command and rhea: NODE_PATH (or a
checkout's tests/node/node_modules, which `make test` fills) says where rhea is. Addresses are
each broker's own: RabbitMQ 4's /queues/NAME for hutch, RabbitMQ 3's /amq/queue/NAME for the
RabbitMQ that `--start-rabbitmq` starts (Debian's 3.10: its plugin knows no other).
"""

import json
import os
import shutil
import socket
import subprocess
import threading
import time

from ..codec import spec
from . import loadgen
from .brokers import BenchError, Hutch, cpu_seconds

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "amqp10_load.js")
CHECKOUT_MODULES = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "node", "node_modules"
)
SIZE = 16
PLUGIN = "rabbitmq_amqp1_0"  # RabbitMQ 3's AMQP 1.0 (RabbitMQ 4 serves 1.0 itself)
DELIVER = b"\x00\x3c\x00\x3c"  # basic.deliver's class and method, where a method frame's payload starts


def node_environment():
    """(the node command, its environment with NODE_PATH where rhea is), or BenchError saying
    what to install."""
    node = shutil.which("node")
    paths = [p for p in os.environ.get("NODE_PATH", "").split(os.pathsep) if p] + [CHECKOUT_MODULES]
    found = [p for p in paths if os.path.isdir(os.path.join(p, "rhea"))]
    if node is None or not found:
        raise BenchError(
            "the AMQP 1.0 rows need Node.js and rhea: install them (npm install rhea) and set NODE_PATH "
            "to the node_modules folder that holds rhea"
        )
    return node, dict(os.environ, NODE_PATH=os.pathsep.join(found))


def address(broker, queue):
    """The address of a queue on this broker: v2 on hutch, v1 on RabbitMQ 3."""
    return ("/queues/%s" if isinstance(broker, Hutch) else "/amq/queue/%s") % queue


def rhea(broker, mode, queue, count, timeout=300):
    """One run of bench/amqp10_load.js: (its messages per second, the broker's CPU per message in
    microseconds, or None)."""
    node, env = node_environment()
    before = cpu_seconds(broker.pid)
    done = subprocess.run(
        [node, SCRIPT, str(broker.port), address(broker, queue), mode, str(count), str(SIZE)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    lines = done.stdout.strip().splitlines()
    said = json.loads(lines[-1]) if lines else {"error": done.stderr.strip()[-300:] or "no output"}
    if "error" in said:
        raise loadgen.LoadError("rhea %s: %s" % (mode, said["error"]))
    used = cpu_seconds(broker.pid)
    return round(said["rate"]), (round((used - before) / count * 1e6, 1) if used is not None else None)


def fresh_queue(broker, name):
    conn = loadgen.Connection(broker.host, broker.port, 30)
    conn.declare_queue(name)
    conn.call(spec.QUEUE_PURGE, (0, name, False))
    conn.close()


def send(broker, count, settled=False):
    queue = "bench-amqp10-send"
    fresh_queue(broker, queue)
    return rhea(broker, "send-settled" if settled else "send-unsettled", queue, count)


def receive(broker, count):
    queue = "bench-amqp10-receive"
    fresh_queue(broker, queue)
    loadgen.confirms(broker.host, broker.port, count, size=SIZE, queue=queue, keep=True)
    return rhea(broker, "receive", queue, count)


def to_091(broker, count, timeout=300):
    """rhea sends, a 0-9-1 no-ack consumer counts deliveries (by their method frames: a converted
    message's properties differ between brokers, so its size cannot be assumed)."""
    queue = "bench-amqp10-to-091"
    fresh_queue(broker, queue)
    counter = DeliveryCounter(broker, queue, count, timeout)
    counter.start()
    started = time.perf_counter()
    before = cpu_seconds(broker.pid)
    rhea(broker, "send-unsettled", queue, count, timeout)
    counter.join(timeout)
    if counter.finished_at is None:
        raise loadgen.LoadError("a 0-9-1 consumer got %d of %d messages in time" % (counter.received, count))
    used = cpu_seconds(broker.pid)
    return round(count / (counter.finished_at - started)), (
        round((used - before) / count * 1e6, 1) if used is not None else None
    )


class DeliveryCounter(threading.Thread):
    """A 0-9-1 no-ack consumer that counts basic.deliver frames as they stream in."""

    def __init__(self, broker, queue, expected, timeout):
        super().__init__(daemon=True)
        self.conn = loadgen.Connection(broker.host, broker.port, timeout)
        self.conn.consume(queue, "bench", no_ack=True, prefetch=1000)
        self.expected = expected
        self.received = 0
        self.finished_at = None

    def run(self):
        sock = self.conn.sock
        pending = bytes(self.conn.unread())
        try:
            while True:
                pos = 0
                while len(pending) - pos >= 7:
                    size = int.from_bytes(pending[pos + 3 : pos + 7], "big")
                    if len(pending) - pos < size + 8:
                        break
                    if pending[pos] == 1 and pending[pos + 7 : pos + 11] == DELIVER:
                        self.received += 1
                    pos += size + 8
                if self.received >= self.expected:
                    break
                pending = pending[pos:] + sock.recv(262144)
            self.finished_at = time.perf_counter()
        except (OSError, socket.timeout):
            pass
        finally:
            sock.close()


# Each row gives its rate and the broker's CPU per message (its -cpu row): on a 2-core machine
# the load generator's own CPU (rhea: about 20 us a message sent) bounds the sending rows for
# every broker, and what each broker spends a message says more than the rate.
SCENARIOS = {
    "amqp10-send": ("AMQP 1.0 send 16 B, unsettled (rhea)", "msg/s", True, send),
    "amqp10-send-settled": (
        "AMQP 1.0 send 16 B, pre-settled (rhea)",
        "msg/s",
        True,
        lambda broker, n: send(broker, n, settled=True),
    ),
    "amqp10-receive": ("AMQP 1.0 receive 16 B, credit 1000 (rhea)", "msg/s", True, receive),
    "amqp10-to-091": ("AMQP 1.0 send -> 0-9-1 consumer 16 B", "msg/s", True, to_091),
}
CPU_ROWS = {name + "-cpu": ("... broker CPU per message", "µs", False, None) for name in SCENARIOS}
