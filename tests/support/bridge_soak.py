"""The bridge soak's parts (tests/interop/bridge/test_bridge_soak.py, and the cluster scenarios of
test_bridge_cluster.py on them): a paced publisher with confirms, a bridge under seeded faults,
and what it must have delivered: every confirmed message upstream, in order per publisher."""

import os
import random
import threading
import time

import pika
from brokers import wait_until
from windowed import PACE, confirming_connection

PREFETCH = 200  # the bridge's in-flight window


PUBLISH_RATE = 300  # messages per second at most: a backlog after each fault fills the window; CPU left for the rest


WINDOW = 200  # the publisher's unconfirmed publishes at most


BRIDGE = {
    "name": "soak",
    "queue": "soak-out",
    "routing_key": "soak-in",  # UPSTREAM_QUEUE
    "prefetch": PREFETCH,
    # each fault costs a second or two: reconnect within half a second, and a silent link is
    # found by the watchdog (no confirm for 1 s while messages wait) or by heartbeats (1 s)
    "reconnect_delay": 0.1,
    "max_reconnect_delay": 0.5,
    "watchdog": 1.0,
}


UPSTREAM_QUEUE = "soak-in"


URI_OPTIONS = "?heartbeat=1&connection_timeout=2000"


RUNNING = ("bridge soak: running",)


NOTICED = ("missed heartbeats", "watchdog: no confirm", "no answer to the handshake")


def connection_parameters(url):
    """pika parameters that give up within seconds: an edge or upstream that was just killed
    must be found gone soon, so the thread connects again."""
    parameters = pika.URLParameters(url)
    parameters.socket_timeout = 5
    parameters.stack_timeout = 10
    parameters.blocked_connection_timeout = 30
    parameters.heartbeat = 5
    parameters.connection_attempts = 1
    return parameters


class Publisher(threading.Thread):
    """pika, with confirms, into the edge's source queue: message n's body is n (8 digits),
    n = 0, 1, 2... in publishing order, PUBLISH_RATE a second at most, up to WINDOW of them
    unconfirmed (a SelectConnection: windowed.py says why not one confirm per round trip).
    `confirmed` lists those the edge confirmed. When the edge is SIGKILLed it connects again
    and goes on with the next number; those it had not heard about may or may not have been
    taken, and are not asked for upstream."""

    def __init__(self, edge, queue):
        super().__init__(daemon=True)
        self.edge = edge
        self.queue = queue
        self.next = 0
        self.confirmed = []
        self.stopping = threading.Event()
        self.error = None
        self.started = None  # the rate's clock, across connections

    def run(self):
        try:
            self.started = time.monotonic()
            while not self.stopping.is_set():
                if not self.connection():
                    # the edge is starting again; the polling interval
                    time.sleep(0.05)
        except Exception as e:  # fails the test (check), not just this thread
            self.error = e

    def connection(self):
        """Publish over one connection until the edge is gone or stopping is set; whether its
        channel came to publish."""
        unconfirmed = {}  # delivery tag: n
        state = {"opened": False, "tag": 0}
        persistent = pika.BasicProperties(delivery_mode=2)

        def publish():
            if self.stopping.is_set() or not channel[0].is_open:
                # (a channel the edge closed as it went: the connection's end is on its way, or
                # this one makes it)
                if connection.is_open:
                    connection.close()
                return
            behind = PUBLISH_RATE * (time.monotonic() - self.started) - self.next
            if behind > PUBLISH_RATE:
                self.started += (behind - PUBLISH_RATE) / PUBLISH_RATE  # a second behind at most: no long bursts
                behind = PUBLISH_RATE
            for _ in range(min(int(behind), WINDOW - len(unconfirmed))):
                state["tag"] += 1
                unconfirmed[state["tag"]] = self.next
                channel[0].basic_publish("", self.queue, b"%08d" % self.next, persistent)
                self.next += 1
            connection.ioloop.call_later(PACE, publish)

        def on_confirm(frame):
            method = frame.method
            tags = (
                sorted(t for t in unconfirmed if t <= method.delivery_tag) if method.multiple else [method.delivery_tag]
            )
            for tag in tags:
                n = unconfirmed.pop(tag, None)
                if n is not None and isinstance(method, pika.spec.Basic.Ack):
                    self.confirmed.append(n)

        def on_ready(opened):
            state["opened"] = True
            channel.append(opened)
            publish()

        channel = []
        connection, _ended = confirming_connection(connection_parameters(self.edge.url), on_confirm, on_ready)
        try:
            connection.ioloop.start()
        except ValueError as e:
            # pika raises this out of its loop when the socket it connected is reset before it
            # checks it (getpeername): the edge SIGKILLed just after the kernel took the
            # connection. Like any failed connect: try again.
            if "getpeername() failed" not in str(e):
                raise
            connection.ioloop.close()
        return state["opened"]

    def check(self):
        assert self.error is None, "the publisher failed: %r" % self.error
        assert self.is_alive(), "the publisher ended early"

    def stop(self):
        self.check()
        self.stopping.set()
        self.join(30)
        assert not self.is_alive(), "the publisher did not stop"


class Soak:
    """The edge, its proxy and the publisher; faults one at a time (`kinds`: a function per
    kind that injects one). Upstream's queue is read between faults (so a RabbitMQ killed
    has little to recover: with 100,000 messages that takes it seconds) and at the end, into
    `received`: the numbers in the order upstream holds them, the order they came there."""

    def __init__(self, edge, proxy, publisher, upstream, chooser, revive=None):
        self.edge = edge
        self.proxy = proxy
        self.publisher = publisher
        self.upstream = upstream  # its URL
        self.chooser = chooser
        self.revive = revive  # a RabbitMQ upstream: restarts it (queue_ready says when)
        self.revivals = 0
        self.kinds = {}
        # per fault: (kind, where in `received` the messages that came after it begin, seconds
        # until the bridge ran again)
        self.timeline = []
        self.received = []

    def count(self, words):
        """How many of the edge's log lines (all its runs) say one of words about the bridge."""
        return sum(
            1 for line in self.edge.log().splitlines() if "bridge soak: " in line and any(w in line for w in words)
        )

    def run(self, kinds):
        for kind in kinds:
            self.publisher.check()
            running = self.count(RUNNING)
            self.drain()
            # a random moment while the link forwards, so messages are in flight
            time.sleep(self.chooser.uniform(0.05, 0.5))
            depth = len(self.received) + self.depth()
            at = time.monotonic()
            kept = self.kinds[kind]()  # (True: a fault the link stays up through)
            if kept is not True:
                wait_until(
                    lambda: self.count(RUNNING) > running,  # noqa: B023 (called here, in this iteration)
                    timeout=60,
                    what="the bridge running again after a %s (fault %d)" % (kind, len(self.timeline) + 1),
                    interval=0.05,
                )
            self.timeline.append((kind, depth, time.monotonic() - at))

    def depth(self):
        """How many messages upstream's queue holds (nothing else consumes it); see
        queue_ready for a queue a restarted RabbitMQ does not answer for."""
        return self.queue_ready()

    def queue_ready(self):
        """Upstream's queue depth once upstream answers for the queue (a passive declare).

        A RabbitMQ 3.10 just restarted after a SIGKILL, under load, may answer 404 for a
        durable queue it still holds: its record stays in rabbit_durable_queue, while the
        entry the node serves from (rabbit_queue) was taken out in a race at node-down
        (rabbitmq-server pull request 4563). Full runs failed so three times
        (after 30 s, then after 90 s) where the same seeds passed alone. The node brings the
        queue back from its durable record at its next start, so after 20 s of 404 the node
        is restarted once more (`revive`, gracefully) and asked again for 60 s; a queue
        really gone (no durable record) still fails then."""
        revived = self.revive is None
        deadline = time.monotonic() + 20
        while True:
            connection = pika.BlockingConnection(connection_parameters(self.upstream))
            try:
                return connection.channel().queue_declare(UPSTREAM_QUEUE, passive=True).method.message_count
            except pika.exceptions.ChannelClosedByBroker as e:
                if e.reply_code != 404 or (revived and time.monotonic() > deadline):
                    raise
            finally:
                if connection.is_open:
                    connection.close()
            if not revived and time.monotonic() > deadline:
                self.revive()
                self.revivals += 1
                revived = True
                deadline = time.monotonic() + 60
            time.sleep(0.5)  # (the polling interval)

    def drain(self):
        """Read what upstream's queue holds now (no fault is under way meanwhile). A round at a
        time, with the prefetch set to what the round reads, so that the consumer is
        cancelled with nothing delivered and unread: pika would reject such messages one by
        one, and hutch puts each rejected message at the head of its queue (RabbitMQ puts it
        back where it was), which would reverse their order. A quorum queue's member on a node
        just restarted may deliver nothing for seconds while it catches up (a full run's busy
        cluster took longer than 5 s once): up to 30 s of silence before a round fails. The
        connection is closed either way: left open, what it was delivered would stay checked
        out, past the next test's purge, and come to that test."""
        left = self.depth()
        connection = pika.BlockingConnection(connection_parameters(self.upstream))
        try:
            channel = connection.channel()
            while left:
                count = min(left, 5000)
                channel.basic_qos(prefetch_count=count)
                read = 0
                quiet_since = time.monotonic()
                for method, _properties, body in channel.consume(UPSTREAM_QUEUE, inactivity_timeout=5):
                    if method is None:
                        assert time.monotonic() - quiet_since < 30, (
                            "upstream's queue held %d messages more; %d came"
                            % (
                                left,
                                read,
                            )
                        )
                        continue
                    quiet_since = time.monotonic()
                    self.received.append(int(body))
                    read += 1
                    if read == count:
                        break
                channel.cancel()
                channel.basic_ack(method.delivery_tag, multiple=True)
                left -= count
        finally:
            if connection.is_open:
                connection.close()

    def silence(self, start, stop):
        """A fault that keeps the link open and silent (black hole, muted replies), ended once
        the edge noticed (watchdog, heartbeats)."""
        noticed = self.count(NOTICED)
        start()
        wait_until(lambda: self.count(NOTICED) > noticed, timeout=20, what="the edge noticing a silent link")
        stop()

    def new_route(self):
        """After a black hole: new links go through, and the black-holed ones stay dead, as a
        route that died would (the edge must give them up itself)."""
        self.proxy.heal(drop=False)

    def sigkill_edge(self):
        self.edge.proc.kill()
        self.edge.proc.wait()
        self.edge.log_file.close()
        self.edge.start()  # the same port and data folder

    def collect(self, deadline=120):
        """After the faults: the publisher stops, and upstream's queue is read (auto-ack: no
        faults now) until it gave every confirmed message and then nothing for a second (what
        the last fault made the bridge send again has come too). The numbers, in the order
        upstream holds them (the order they arrived there)."""
        publisher = self.publisher
        publisher.stop()
        self.queue_ready()  # (the last fault may have been a restart of upstream)
        received = self.received
        wanted = set(publisher.confirmed).difference(received)
        connection = pika.BlockingConnection(connection_parameters(self.upstream))
        channel = connection.channel()
        ends = time.monotonic() + deadline
        for method, _properties, body in channel.consume(UPSTREAM_QUEUE, auto_ack=True, inactivity_timeout=1.0):
            if method is not None:
                n = int(body)
                received.append(n)
                wanted.discard(n)
            elif not wanted:
                break
            elif time.monotonic() > ends:
                missing = sorted(wanted)
                raise AssertionError(
                    "%d confirmed messages never came upstream (first %s); the edge's log ends:\n%s"
                    % (len(missing), missing[:10], self.edge.log()[-3000:])
                )
        channel.cancel()
        connection.close()
        return received

    def duplicates(self, received):
        """Upstream's list without its repeats (first occurrences), and the repeats put down to
        the fault before them: per kind, and the most after one fault. A fault's repeats
        arrive after it (the link it broke is replaced, and what was in flight sent again
        first) and before the next (injected once the bridge runs again): they are those
        at or past the queue's length measured just before it."""
        first = []
        seen = set()
        by_kind = {kind: 0 for kind in self.kinds}
        by_fault = [0] * len(self.timeline)
        fault = -1
        for position, n in enumerate(received):
            while fault + 1 < len(self.timeline) and self.timeline[fault + 1][1] <= position:
                fault += 1
            if n not in seen:
                seen.add(n)
                first.append(n)
            elif fault >= 0:
                by_fault[fault] += 1
                by_kind[self.timeline[fault][0]] += 1
        most = max(range(len(by_fault)), key=by_fault.__getitem__, default=None)
        return first, by_kind, (by_fault[most], self.timeline[most][0]) if most is not None else (0, None)

    def check_order(self, received, first):
        """Nothing upstream that was never published; the first occurrences strictly increasing."""
        assert set(received) <= set(range(self.publisher.next)), "upstream has messages never published"
        broken = [first[i - 1 : i + 1] for i in range(1, len(first)) if first[i] <= first[i - 1]]
        assert not broken, "order broken upstream: %s" % broken[:5]

    def faults(self):
        counted = {kind: 0 for kind in self.kinds}
        for kind, _depth, _took in self.timeline:
            counted[kind] += 1
        return counted

    def recovery(self):
        """Mean seconds from a fault to the bridge running again, per kind."""
        took = {}
        for kind, _depth, seconds in self.timeline:
            took.setdefault(kind, []).append(seconds)
        return {kind: round(sum(t) / len(t), 1) for kind, t in took.items()}


def seeded():
    seed = int(os.environ.get("HUTCH_SOAK_SEED") or random.randrange(1 << 30))
    print("seed %d (HUTCH_SOAK_SEED=%d replays it)" % (seed, seed))
    return seed, random.Random(seed)
