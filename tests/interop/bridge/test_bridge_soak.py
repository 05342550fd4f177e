"""The bridge fault soak: at least 20 faults of each kind in one run, at random moments.

An edge hutch forwards a queue upstream through a TCP proxy on 127.0.0.1 (tcp_proxy.py) while
pika publishes into it with confirms (a window of them), without a pause. One fault at a time,
in a shuffled order, each once the bridge runs again after the one before and a random moment
later: the proxy cuts the link (FIN), resets it (RST), black-holes it (reads and forwards
nothing; once the edge noticed, new links go through and the dead one stays dead) or mutes
upstream's replies only (until the edge noticed); upstream RabbitMQ is restarted (SIGKILL of
its beam.smp, or rabbitmqctl stop); the edge is SIGKILLed and started again on the same data
folder.

Upstream's queue is read between faults and at the end, so the list of what came there is in
the order it came; where each fault began in that list is noted, so each duplicate is put
down to the fault before it. At the end:

- every message the edge confirmed is upstream at least once;
- in order: a message's number grows in publishing order, and upstream's list, with every
  repeat of a number already seen left out (its first occurrences), is strictly
  increasing: no message overtakes an earlier one, a duplicate is an earlier one again;
- nothing is upstream that was never published;
- duplicates are counted per fault kind and printed; toward RabbitMQ there are at most the
  in-flight window (prefetch) per fault, toward hutch none at all (core/dedup.py).

The seed of the random moments and order is printed; HUTCH_SOAK_SEED=N replays it (as far as
real processes replay), HUTCH_SOAK_FAULTS=N sets the faults per kind: 4 in `make test` (20
faults, each kind 4 times at random moments: the first 20 of the 100-fault soak found every
bug it has found), 20 in `make soak` (100 faults).
"""

import json
import logging
import os
import signal
import time

import pytest
from bridge_soak import BRIDGE, PREFETCH, RUNNING, UPSTREAM_QUEUE, URI_OPTIONS, Publisher, Soak, seeded
from bridging import edge_with_bridge, rabbitmq_url, upstream_queue
from brokers import BIN, RunningBroker, wait_until
from tcp_proxy import TcpProxy

FAULTS_PER_KIND = int(os.environ.get("HUTCH_SOAK_FAULTS", "4"))
# On a shared 2-core machine 20 faults of each kind take the soak toward hutch 2.5 minutes,
# toward RabbitMQ 5 to 6 (20 RabbitMQ restarts are 3 of them); this bounds a stuck one, with
# room for a loaded CI.
pytestmark = [pytest.mark.soak, pytest.mark.timeout(150 + 40 * FAULTS_PER_KIND)]


@pytest.fixture(autouse=True)
def quiet_pika():
    """pika logs every refused connection and lost link at ERROR, with a traceback: here they
    are the faults the test makes, hundreds of them, which would bury its summary line."""
    logger = logging.getLogger("pika")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


def restart_rabbitmq(rabbitmq, crash):
    """A RabbitMQ, the same node and data, stopped and started again: gracefully (SIGTERM to its
    node, as RabbitMQ.stop does), or (crash) by SIGKILL of its beam.smp, which also leaves its
    queues to be recovered."""
    if not crash:
        rabbitmq.restart()
        return
    os.kill(rabbitmq.pid, signal.SIGKILL)
    rabbitmq.proc.wait(30)  # the wrapper script follows its beam
    rabbitmq.log.close()
    rabbitmq._launch()  # as restart() does after its stop: the same command, folder and ports
    rabbitmq.start()


@pytest.fixture
def rabbitmq(tmp_path_factory):
    """A RabbitMQ of this soak's own, not the run's: it restarts it twenty times, for five
    minutes, and the run's other RabbitMQ tests (one worker's, one after another) go on beside
    it on another worker (conftest.py's rabbitmq fixture says why they share one)."""
    from hutch.bench.brokers import RabbitMQ

    server = RabbitMQ(str(tmp_path_factory.mktemp("soak-rabbitmq"))).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.long  # tests/conftest.py: started early
@pytest.mark.xdist_group("soak-rabbitmq")
def test_toward_rabbitmq_every_confirmed_message_arrives_in_order_through_faults_of_every_kind(tmp_path, rabbitmq):
    """Cuts, resets, black holes, RabbitMQ restarts and edge SIGKILLs (FAULTS_PER_KIND each).
    RabbitMQ keeps no record of what it took, so what was in flight at a fault may come twice:
    at most the window per fault in all."""
    seed, chooser = seeded()
    began = time.monotonic()
    upstream = rabbitmq_url(rabbitmq)
    upstream_queue(upstream, UPSTREAM_QUEUE)
    proxy = TcpProxy(rabbitmq.port).start()
    edge = edge_with_bridge(
        tmp_path, dict(BRIDGE, uri="amqp://guest:guest@127.0.0.1:%d/%s" % (proxy.port, URI_OPTIONS))
    )
    publisher = Publisher(edge, "soak-out")
    soak = Soak(edge, proxy, publisher, upstream, chooser, revive=rabbitmq.restart)
    restarts = {"crash": 0, "stop": 0, "seconds": 0.0}

    def restart():
        crash = chooser.random() < 0.8  # mostly SIGKILL: quicker, and harsher
        at = time.monotonic()
        restart_rabbitmq(rabbitmq, crash)
        restarts["seconds"] += time.monotonic() - at
        restarts["crash" if crash else "stop"] += 1

    soak.kinds = {
        "cut": proxy.cut,
        "reset": proxy.reset,
        "black-hole": lambda: soak.silence(proxy.black_hole, soak.new_route),
        "rabbitmq-restart": restart,
        "edge-sigkill": soak.sigkill_edge,
    }
    kinds = [kind for kind in soak.kinds for _ in range(FAULTS_PER_KIND)]
    chooser.shuffle(kinds)
    try:
        publisher.start()
        wait_until(lambda: soak.count(RUNNING), what="the bridge running")
        soak.run(kinds)
        received = soak.collect()
    finally:
        publisher.stopping.set()
        edge.stop()
        proxy.stop()
    first, by_kind, most = soak.duplicates(received)
    duplicates = len(received) - len(first)
    faults = soak.faults()
    print(
        "soak toward RabbitMQ, seed %d: faults %s; %d published, %d confirmed, %d received, %d duplicates "
        "(after faults of each kind %s; at most %d after one fault (%s), window %d); %d links; %.0f s, of which "
        "RabbitMQ restarts %.0f s (%d by SIGKILL, %d by rabbitmqctl stop; %d more to bring a forgotten queue back); "
        "mean recovery s %s"
        % (
            seed,
            faults,
            publisher.next,
            len(publisher.confirmed),
            len(received),
            duplicates,
            by_kind,
            most[0],
            most[1],
            PREFETCH,
            proxy.accepted,
            time.monotonic() - began,
            restarts["seconds"],
            restarts["crash"],
            restarts["stop"],
            soak.revivals,
            soak.recovery(),
        )
    )
    assert faults == {kind: FAULTS_PER_KIND for kind in soak.kinds}, faults
    soak.check_order(received, first)
    # (a restart that brought a forgotten queue back is one more fault of the link)
    most_duplicates = PREFETCH * (sum(faults.values()) + soak.revivals)
    assert duplicates <= most_duplicates, "more duplicates than the window per fault (seed %d)" % seed
    assert not edge.errors(), edge.log()[-3000:]


@pytest.mark.long  # tests/conftest.py: started early
def test_toward_hutch_every_confirmed_message_arrives_exactly_once_in_order_through_faults_of_every_kind(tmp_path):
    """Upstream is a hutch: cuts, resets, black holes, muted replies and edge SIGKILLs
    (FAULTS_PER_KIND each); what the bridge sends again it drops (core/dedup.py), so every
    confirmed message arrives exactly once. Upstream is not restarted: its record of what it
    took lives in memory (README: not yet across its own crash)."""
    seed, chooser = seeded()
    began = time.monotonic()
    up_folder = tmp_path / "up"
    up_folder.mkdir()
    upstream = RunningBroker([os.path.join(BIN, "hutch"), "serve"], up_folder).start()
    upstream_queue(upstream.url, UPSTREAM_QUEUE)
    proxy = TcpProxy(upstream.port).start()
    edge = edge_with_bridge(
        tmp_path, dict(BRIDGE, uri="amqp://guest:guest@127.0.0.1:%d/%s" % (proxy.port, URI_OPTIONS))
    )
    publisher = Publisher(edge, "soak-out")
    soak = Soak(edge, proxy, publisher, upstream.url, chooser)
    soak.kinds = {
        "cut": proxy.cut,
        "reset": proxy.reset,
        "black-hole": lambda: soak.silence(proxy.black_hole, soak.new_route),
        # upstream takes what it is sent and its confirms are lost: the edge sends it again
        "muted-replies": lambda: soak.silence(proxy.mute_replies, proxy.heal),
        "edge-sigkill": soak.sigkill_edge,
    }
    kinds = [kind for kind in soak.kinds for _ in range(FAULTS_PER_KIND)]
    chooser.shuffle(kinds)
    try:
        publisher.start()
        wait_until(lambda: soak.count(RUNNING), what="the bridge running")
        soak.run(kinds)
        received = soak.collect()
    finally:
        publisher.stopping.set()
        edge.stop()
        proxy.stop()
        upstream.stop()
    with open(os.path.join(upstream.data, "status.json")) as f:
        dropped = json.load(f)["duplicates_dropped"]  # as upstream left it when it stopped
    first, by_kind, _most = soak.duplicates(received)
    faults = soak.faults()
    print(
        "soak toward hutch, seed %d: faults %s; %d published, %d confirmed, %d received, %d duplicates "
        "(after faults of each kind %s), %d dropped by upstream; %d links; %.0f s; mean recovery s %s"
        % (
            seed,
            faults,
            publisher.next,
            len(publisher.confirmed),
            len(received),
            len(received) - len(first),
            by_kind,
            dropped,
            proxy.accepted,
            time.monotonic() - began,
            soak.recovery(),
        )
    )
    assert faults == {kind: FAULTS_PER_KIND for kind in soak.kinds}, faults
    soak.check_order(received, first)
    assert received == first, "duplicates upstream (seed %d): after faults of each kind %s" % (seed, by_kind)
    assert dropped > 0, "no fault made the bridge send anything again: the test proved nothing"
    assert not edge.errors(), edge.log()[-3000:]
    assert not upstream.errors(), upstream.log()[-3000:]
