"""Bridges ([[bridge]] in the config): `hutch serve` forwarding a local queue upstream.

Upstream is the run's RabbitMQ (conftest.py's rabbitmq fixture), or a second hutch. pika
publishes with confirms at the edge; a consumer upstream must get every message, in order.
"""

import os
import re
import subprocess

import pika
import pytest
from bridging import (
    consume_all,
    consume_every,
    edge_with_bridge,
    publish_confirmed,
    publish_during,
    rabbitmq_url,
    toml,
    upstream_count,
    upstream_queue,
)
from brokers import (
    BIN,
    RunningBroker,
    free_port,
    fresh_status,
    interrupt_between_collections,
    status,
    stop_all,
    wait_until,
)

pytestmark = [pytest.mark.timeout(120)]


def test_an_up_bridge_forwards_every_confirmed_message_to_rabbitmq_in_order(tmp_path, rabbitmq):
    upstream = rabbitmq_url(rabbitmq)
    upstream_queue(upstream, "bridged-readings")
    edge = edge_with_bridge(
        tmp_path,
        {"name": "up", "uri": upstream, "queue": "readings", "routing_key": "bridged-readings", "prefetch": 100},
    )
    try:
        bodies = [b"reading-%05d" % i + b"x" * (i % 300) for i in range(3000)]
        publish_confirmed(edge, "readings", bodies)
        got = consume_all(upstream, "bridged-readings", len(bodies))
        assert [body for body, _h, _m in got] == bodies
        headers = [h for _b, h, _m in got]
        assert headers[7]["n"] == len(bodies[7]), "properties are forwarded as they came"
        node = (tmp_path / "edge" / "data" / "node-id").read_text().strip()
        assert {h["x-hutch-origin"] for h in headers} == {node + "/up/1"}  # numbered by this broker's first start
        assert {h["x-hutch-hops"] for h in headers} == {1}
        seqs = [h["x-hutch-seq"] for h in headers]
        assert seqs == sorted(set(seqs)), "a number per message that only grows"
        assert {mode for _b, _h, mode in got} == {2}
        wait_until(lambda: "bridge up: running" in edge.log(), what="the running line")
    finally:
        edge.stop()
    assert not edge.errors(), edge.log()[-3000:]


@pytest.mark.long  # mostly waits: started early (tests/conftest.py)
def test_messages_wait_at_the_edge_while_upstream_is_unreachable_then_go_in_order(tmp_path, rabbitmq):
    """The first URI refuses connections (nothing listens there): the bridge logs why, backs
    off, and fails over to the second; meanwhile the backlog waits in the local queue."""
    upstream = rabbitmq_url(rabbitmq)
    upstream_queue(upstream, "bridged-failover")
    dead = "amqp://guest:guest@127.0.0.1:%d/" % free_port()
    edge = edge_with_bridge(
        tmp_path,
        {
            "name": "failover",
            "uri": [dead, upstream],
            "queue": "outbox",
            "routing_key": "bridged-failover",
            "reconnect_delay": 0.2,
        },
    )
    try:
        bodies = [b"m%04d" % i for i in range(500)]
        publish_confirmed(edge, "outbox", bodies)
        got = consume_all(upstream, "bridged-failover", len(bodies))
        assert [body for body, _h, _m in got] == bodies
        log = edge.log()
        assert "bridge failover: connecting to %s" % dead.replace("guest:guest", "guest:***") in log
        assert "%s: connection refused" % dead.replace("guest:guest", "guest:***") in log, log[-2000:]
    finally:
        edge.stop()


def test_hutch_to_hutch_with_the_upstream_starting_later(tmp_path):
    """Upstream is another hutch, started after the edge already queued messages."""
    up_folder = tmp_path / "up"
    up_folder.mkdir()
    upstream = RunningBroker([os.path.join(BIN, "hutch"), "serve"], up_folder)
    uri = "amqp://guest:guest@127.0.0.1:%d/" % upstream.port
    edge = edge_with_bridge(
        tmp_path, {"name": "h2h", "uri": uri, "queue": "edge-out", "routing_key": "central", "reconnect_delay": 0.2}
    )
    try:
        bodies = [b"h%05d" % i for i in range(2000)]
        publish_confirmed(edge, "edge-out", bodies)
        upstream.start()
        # (a new upstream: nothing to purge, and the bridge forwards already; its first
        # publishes may race the declare: see below)
        upstream_queue(upstream.url, "central", purge=False)
        got = consume_all(upstream.url, "central", len(bodies))
        # What the bridge forwarded before the queue existed upstream came back (mandatory:
        # NO_ROUTE) and was sent again, after what followed it: all of it arrives, once.
        received = [body for body, _h, _m in got]
        assert sorted(received) == bodies
    finally:
        edge.stop()
        if upstream.proc is not None:
            upstream.stop()


@pytest.mark.parametrize(
    "bridge, words",
    [
        (
            {"name": "x", "uri": "http://example.com", "queue": "q"},
            "is not an amqp://, amqps://, amqp10://, amqps10://, mqtt:// or mqtts:// URI",
        ),
        ({"name": "x", "uri": "mqtt://h/", "queue": "q", "topic": "dt/+/x"}, "holds a wildcard"),
        ({"name": "x", "direction": "down", "uri": "mqtt://h/"}, 'needs topic = "..."'),
        ({"name": "x", "uri": "mqtt://h/", "queue": "q", "mqtt_version": "4"}, 'mqtt_version must be "3.1.1" or "5"'),
        (
            {"name": "x", "uri": "amqp://h/", "queue": "q", "topic": "t"},
            "topic is for links over MQTT (mqtt:// or mqtts://); this bridge speaks AMQP 0-9-1",
        ),
        ({"name": "x", "uri": "mqtt://h/sensors", "queue": "q"}, "an MQTT URI names no vhost"),
        (
            {"name": "x", "uri": "mqtt://h/", "queue": "q", "declare": {"queue": "x"}},
            "declare is for links over AMQP 0-9-1 (amqp:// or amqps://); this bridge speaks MQTT",
        ),
        (
            {"name": "x", "direction": "down", "uri": "mqtt://h/", "topic": "t", "queue": "q"},
            'a down bridge from MQTT subscribes to topic = "..."',
        ),
        (
            {"name": "x", "uri": "mqtt://h/", "queue": "q", "protocol": "1.0"},
            'protocol = "1.0", but a uri is MQTT (mqtt:// or mqtts://)',
        ),
        ({"name": "x", "uri": ["mqtt://h/", "amqp://h/"], "queue": "q"}, "must speak one protocol"),
        ({"name": "x", "uri": "amqp://h:99999/", "queue": "q"}, "has no valid port"),
        ({"name": "x", "uri": "amqp://h/?heartbeet=5", "queue": "q"}, "unknown option 'heartbeet'"),
        ({"name": "x", "uri": "amqp://h/", "queue": "q", "ack": "on-confirm"}, "unknown key 'ack'"),
        ({"name": "x", "uri": "amqp://h/"}, 'needs queue = "..."'),
        ({"name": "x", "uri": "amqp://h/", "queue": "q", "source_exchange": "e"}, "queue or source_exchange"),
        ({"name": "x", "uri": "amqp://h/", "source_exchange": "nowhere"}, "no exchange 'nowhere' to forward from"),
        ({"name": "x", "uri": "amqp://h/", "queue": "q", "max_rate": -1}, "max_rate must be messages per second"),
        ({"uri": "amqp://h/", "queue": "q"}, 'needs name = "..."'),
        ({"name": "x", "uri": "amqp://h/", "queue": "q", "ack_mode": "later"}, "ack_mode must be one of"),
        ({"name": "x", "uri": "amqp://h/", "queue": "q", "prefetch": 0}, "prefetch must be a whole number"),
        ({"name": "x", "uri": "amqps://h/", "queue": "q", "ca_file": "/no/such/ca.pem"}, "cannot read ca_file"),
        (
            {"name": "x", "uri": "amqps://h/?auth_mechanism=kerberos", "queue": "q"},
            "must be plain, external or anonymous",
        ),
        (
            {"name": "x", "uri": "amqp://h/?auth_mechanism=external", "queue": "q"},
            "needs an amqps:// URI and cert_file",
        ),
        (
            {"name": "x", "uri": "amqps://h/?auth_mechanism=external", "queue": "q"},
            "needs an amqps:// URI and cert_file",
        ),
        ({"name": "x", "uri": "amqp://h/", "queue": "q", "prefer_first": True}, "prefer_first needs uri to be a list"),
        (
            {"name": "x", "uri": ["amqp://a@h:5672/", "amqp://g/", "amqp://b@H/"], "queue": "q"},
            "uri names h:5672 twice (amqp://a@h:5672/ and amqp://b@H/): list each node once",
        ),
        (
            {"name": "x", "uri": "amqp://h/", "queue": "q", "declare": {"arguments": {"x-queue-type": "quorum"}}},
            'declare.arguments needs declare.queue = "..."',
        ),
        (
            {"name": "x", "uri": "amqp://h/", "queue": "q", "declare": {"queue": "q", "arguments": {"x-max-age": 1.5}}},
            "declare.arguments.x-max-age must be a string, an integer or true/false, not 1.5",
        ),
        (
            {"name": "x", "uri": ["amqp10://h/", "amqp10://g/"], "queue": "q", "prefer_first": True},
            "prefer_first moves an up bridge back over amqp:// or mqtt:// URIs (not AMQP 1.0",
        ),
        (
            {"name": "x", "direction": "down", "uri": ["amqp://h/", "amqp://g/"], "queue": "q", "prefer_first": True},
            "prefer_first moves an up bridge back over amqp:// or mqtt:// URIs (not a down bridge)",
        ),
    ],
)
def test_a_wrong_bridge_config_is_one_line_and_exit_code_2(tmp_path, bridge, words):
    config = tmp_path / "hutch.toml"
    config.write_text("[[bridge]]\n" + "".join("%s = %s\n" % (k, toml(v)) for k, v in bridge.items()))
    done = subprocess.run(
        [os.path.join(BIN, "hutch"), "serve", "--config", str(config), "--port", "0", "--data", str(tmp_path / "d")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    # one line; a mistake found only once the journal is read (a missing exchange) comes
    # after the start's log lines, as the last one
    assert words in lines[-1] and lines[-1].startswith("hutch: "), done.stderr
    assert len(lines) == 1 or "source_exchange" in str(bridge), done.stderr
    assert "Traceback" not in done.stderr


def test_bridge_config_reads_rabbitmq_uris():
    from hutch.server.bridges.config import parse_uri

    uri = parse_uri("amqps://edge:p%40ss@[::1]:5999/%2Fsensors?heartbeat=10&frame_max=8192")
    assert (uri["host"], uri["port"], uri["user"], uri["password"], uri["vhost"]) == (
        "::1",
        5999,
        "edge",
        "p@ss",
        "/sensors",
    )
    assert (uri["tls"], uri["heartbeat"], uri["frame_max"]) == (True, 10, 8192)
    assert uri["uri"] == "amqps://edge:***@[::1]:5999/%2Fsensors?heartbeat=10&frame_max=8192"
    plain = parse_uri("amqp://central")
    assert (plain["port"], plain["user"], plain["password"], plain["vhost"]) == (5672, "guest", "guest", "/")
    assert (parse_uri("mqtt://cloud")["port"], parse_uri("mqtts://cloud")["port"]) == (1883, 8883)


@pytest.mark.parametrize("tls", [False, True], ids=["amqp", "amqps"])
def test_a_micropython_broker_forwards_to_rabbitmq(tmp_path, rabbitmq, tls):
    """The same bridge on the unix port of MicroPython (the esp32 profile: a board's limits),
    its config in JSON as on a board; also over TLS (MicroPython's ssl, its CA file named)."""
    import json

    from micropython_env import micropython, serve_env
    from tcp_proxy import TlsTerminator, self_signed

    upstream = rabbitmq_url(rabbitmq)
    upstream_queue(upstream, "bridged-from-board")
    config = tmp_path / "hutch.json"
    bridge = {"name": "board-up", "uri": upstream, "queue": "board-out", "routing_key": "bridged-from-board"}
    terminator = None
    if tls:
        cert, key = self_signed(tmp_path)
        terminator = TlsTerminator(rabbitmq.port, cert, key).start()
        bridge.update(uri="amqps://guest:guest@localhost:%d/" % terminator.port, ca_file=cert)
    config.write_text(json.dumps({"bridge": [bridge]}))
    board = RunningBroker(
        [micropython(), "-m", "hutch.server.serve", "--board", "esp32", "--config", str(config)]
        + ["--stats-interval", "1"],  # its heap figures, logged every second
        tmp_path,
        env=serve_env(tmp_path),
    ).start()
    try:
        wait_until(lambda: "bridge board-up: running" in board.log(), timeout=20)
        idle = wait_until(lambda: _heap_live(board.log().split("bridge board-up: running")[1]), timeout=10)
        bodies = [b"board-%04d" % i + b"y" * (i % 90) for i in range(1000)]
        publish_confirmed(board, "board-out", bodies)
        got = consume_all(upstream, "bridged-from-board", len(bodies))
        assert [body for body, _h, _m in got] == bodies
        reports = board.log().count("stats:")
        after = wait_until(  # from a stats line written after the forwarding (a whole one)
            lambda: board.log().count("stats:") > reports and _heap_live(board.log().split("stats:")[-1]),
            timeout=10,
        )
        print(
            "esp32 profile%s: heap live with the bridge running %d bytes, after forwarding 1000 %d (peak %d)"
            % (" over TLS" if tls else "", idle[0], after[0], after[1])
        )
    finally:
        try:
            exit_code = interrupt_between_collections(board)  # Ctrl-C: MicroPython has no signal module
        finally:
            board.stop()
            if terminator is not None:
                terminator.stop()
    assert not board.errors(), board.log()[-3000:]
    assert exit_code == 0 and "bridge board-up: stopped" in board.log(), board.log()[-3000:]


def _heap_live(log):
    """(live, peak) from the first `stats:` line of log that the heap monitor wrote, or None."""

    found = re.search(r"heap live (\d+), peak (\d+)", log)
    return (int(found.group(1)), int(found.group(2))) if found else None


def test_what_upstream_cannot_route_is_retried_then_dead_lettered_at_the_edge(tmp_path, rabbitmq):
    """mandatory: RabbitMQ returns a message no queue takes (RabbitMQ's own shovel would have it
    confirmed and lost). After 5 returns it is dead-lettered from the source queue; the
    messages around it still go through, in order."""
    upstream = rabbitmq_url(rabbitmq)
    upstream_queue(upstream, "bridged-routable")
    upstream_binding(upstream, "bridged-routable", "amq.direct", "ok")
    folder = tmp_path / "edge"
    folder.mkdir()
    config = folder / "hutch.toml"
    config.write_text("")
    edge = RunningBroker([os.path.join(BIN, "hutch"), "serve", "--config", str(config)], folder).start()
    connection = pika.BlockingConnection(pika.URLParameters(edge.url))
    channel = connection.channel()
    channel.queue_declare("dead", durable=True)
    arguments = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"}
    channel.queue_declare("routed-out", durable=True, arguments=arguments)
    for key in ("ok", "nowhere"):  # the messages keep their routing keys, and so go upstream
        channel.queue_bind("routed-out", "amq.direct", key)
    connection.close()
    edge.stop()
    config.write_text(
        '[[bridge]]\nname = "returns"\nuri = "%s"\nqueue = "routed-out"\nexchange = "amq.direct"\n' % upstream
    )
    edge.start()
    try:
        connection = pika.BlockingConnection(pika.URLParameters(edge.url))
        channel = connection.channel()
        channel.confirm_delivery()
        for key, body in (("ok", b"first"), ("nowhere", b"unroutable"), ("ok", b"second")):
            channel.basic_publish("amq.direct", key, body, pika.BasicProperties(delivery_mode=2))
        connection.close()
        got = consume_all(upstream, "bridged-routable", 2)
        assert [body for body, _h, _m in got] == [b"first", b"second"]
        wait_until(lambda: "dead-lettered after 5 returns" in edge.log(), timeout=30, what="the dead-letter line")
        assert "312 NO_ROUTE" in edge.log()
        connection = pika.BlockingConnection(pika.URLParameters(edge.url))
        method, properties, body = connection.channel().basic_get("dead", auto_ack=True)
        connection.close()
        assert body == b"unroutable"
        assert (
            properties.headers["x-death"][0]["queue"] == b"routed-out"
            or properties.headers["x-death"][0]["queue"] == "routed-out"
        )
    finally:
        edge.stop()
    assert not edge.errors(), edge.log()[-3000:]


def upstream_binding(url, queue, exchange, key):
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.queue_bind(queue, exchange, key)
    connection.close()


def test_without_a_dead_letter_exchange_an_unroutable_message_waits_at_the_edge(tmp_path, rabbitmq):
    """No dead-letter exchange on the source queue: the bridge says it is stuck, backs off and
    tries again; the message stays at the edge until upstream can take it."""
    upstream = rabbitmq_url(rabbitmq)
    upstream_queue(upstream, "bridged-later")
    edge = edge_with_bridge(
        tmp_path,
        {
            "name": "stuck",
            "uri": upstream,
            "queue": "stuck-out",
            "exchange": "amq.direct",
            "routing_key": "later",
            "reconnect_delay": 0.2,
            "max_reconnect_delay": 0.5,
        },
    )
    try:
        publish_confirmed(edge, "stuck-out", [b"patience"])
        wait_until(lambda: "has no dead-letter exchange" in edge.log(), timeout=30, what="the stuck line")
        upstream_binding(upstream, "bridged-later", "amq.direct", "later")
        got = consume_all(upstream, "bridged-later", 1, timeout=15)
        assert [body for body, _h, _m in got] == [b"patience"]
    finally:
        edge.stop()


def test_ctl_bridges_shows_state_backlog_oldest_age_and_last_error(tmp_path):
    import json

    port = free_port()
    dead = "amqp://guest:guest@127.0.0.1:%d/" % port
    edge = edge_with_bridge(
        tmp_path,
        {
            "name": "nowhere",
            "uri": dead,
            "queue": "waiting",
            "reconnect_delay": 0.2,
            "exchange": "arrivals",
            "declare": {"exchange_type": "fanout", "queue": "arrived"},
        },
    )
    (tmp_path / "upstream").mkdir()
    upstream = RunningBroker([os.path.join(BIN, "hutch"), "serve"], tmp_path / "upstream")
    upstream._take_port(port)
    try:
        publish_confirmed(edge, "waiting", [b"a", b"b", b"c"])

        def shown():
            done = subprocess.run(
                [os.path.join(BIN, "hutch"), "ctl", "bridges", "--data", edge.data, "--json"],
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert done.returncode == 0, done.stderr
            return json.loads(done.stdout)

        # the oldest waits a while: its age grows (read by the broker's 200 ms tick, as it stamps
        # arrivals: a reading may lag the clock by up to a tick)
        def waited():
            info = shown()
            one = info["bridges"][0]
            return info if one["backlog"] == 3 and one["oldest_age_s"] >= 0.4 else None

        info = wait_until(waited, timeout=15, what="the backlog in status.json, its oldest 0.4 s old", interval=0.1)
        bridge = info["bridges"][0]
        assert info["live"] and bridge["name"] == "nowhere" and bridge["queue"] == "waiting"
        assert bridge["state"] in ("connecting", "backoff"), bridge
        assert bridge["last_error"].endswith("connection refused") and "guest:***" in bridge["last_error"]
        assert bridge["forwarded"] == 0
        plain = subprocess.run(
            [os.path.join(BIN, "hutch"), "ctl", "bridges", "--data", edge.data],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
        assert "nowhere (up, queue waiting)" in plain and "backlog 3" in plain and "connection refused" in plain
        # the upstream comes: a healthy bridge shows no error of its own, only what ended a link before
        upstream.start()
        wait_until(lambda: shown()["bridges"][0]["state"] == "running", timeout=30, what="the bridge running")
        plain = subprocess.run(
            [os.path.join(BIN, "hutch"), "ctl", "bridges", "--data", edge.data],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
        assert ": running, upstream" in plain and "last error: none on this link (an earlier link ended: " in plain
    finally:
        edge.stop()
        if upstream.proc is not None:
            upstream.stop()
    after = shown()
    assert not after["live"] and after["bridges"][0]["state"] == "stopped"


def test_the_watchdog_replaces_a_link_that_stopped_confirming(tmp_path, rabbitmq):
    """Heartbeats off (heartbeat=0): only the watchdog can tell that the black-holed link
    makes no progress."""
    from tcp_proxy import TcpProxy

    proxy = TcpProxy(rabbitmq.port).start()
    upstream = rabbitmq_url(rabbitmq)
    upstream_queue(upstream, "bridged-watchdog")
    edge = edge_with_bridge(
        tmp_path,
        {
            "name": "watched",
            "uri": "amqp://guest:guest@127.0.0.1:%d/?heartbeat=0&connection_timeout=1000" % proxy.port,
            "queue": "watched-out",
            "routing_key": "bridged-watchdog",
            "watchdog": 1.5,
            "reconnect_delay": 0.1,
        },
    )
    try:
        bodies = [b"w%04d" % i for i in range(200)]
        publish_confirmed(edge, "watched-out", bodies[:100])
        wait_until(lambda: "bridge watched: running" in edge.log(), what="running")
        proxy.black_hole()
        publish_confirmed(edge, "watched-out", bodies[100:])
        wait_until(lambda: "watchdog: no confirm for" in edge.log(), timeout=20, what="the watchdog")
        proxy.heal()
        got = consume_every(upstream, "bridged-watchdog", bodies)
    finally:
        edge.stop()
        proxy.stop()
    first = []
    for body, _h, _m in got:
        if body not in first:
            first.append(body)
    assert first == bodies


def hutch_to_hutch(tmp_path, heartbeat=1):
    """(upstream, proxy, edge): a hutch upstream with a queue `central`, a TCP proxy in front of
    it, and an edge whose bridge forwards `edge-out` there through the proxy (heartbeats every
    `heartbeat` seconds, 300 in flight, quick retries), all started."""
    from tcp_proxy import TcpProxy

    up_folder = tmp_path / "up"
    up_folder.mkdir()
    upstream = RunningBroker([os.path.join(BIN, "hutch"), "serve"], up_folder).start()
    upstream_queue(upstream.url, "central")
    proxy = TcpProxy(upstream.port).start()
    edge = edge_with_bridge(
        tmp_path,
        {
            "name": "h2h",
            "uri": "amqp://guest:guest@127.0.0.1:%d/?heartbeat=%d&connection_timeout=2000" % (proxy.port, heartbeat),
            "queue": "edge-out",
            "routing_key": "central",
            "prefetch": 300,
            "reconnect_delay": 0.1,
            "max_reconnect_delay": 0.5,
        },
    )
    # running before the test goes on: a fault (muted replies) during the handshake would keep
    # the link from ever opening (a loaded CI machine was that slow once)
    wait_until(lambda: "bridge h2h: running" in edge.log(), timeout=30, what="the bridge running")
    return upstream, proxy, edge


@pytest.mark.timeout(300)
def test_hutch_to_hutch_stays_exactly_once_when_the_upstream_hutch_is_sigkilled(tmp_path):
    """Upstream is a hutch, SIGKILLed three times while the bridge forwards, each time just
    after it took (and synced) a window of messages whose confirms a proxy kept from the edge: the edge
    sends them all again to the restarted upstream, which knows their numbers from its
    journal and drops them. Every message arrives once, in order."""
    import time

    # heartbeats far apart: the muted link must stay up until its window is upstream, however
    # slowly a loaded machine publishes (heal() cuts the links: the edge sees that at once)
    upstream, proxy, edge = hutch_to_hutch(tmp_path, heartbeat=60)
    bodies = [b"k%06d" % i for i in range(4500)]
    dropped = []
    try:
        for kill in range(3):
            proxy.mute_replies()  # upstream takes what comes; the edge hears of none of it
            publish_confirmed(edge, "edge-out", bodies[kill * 1500 : (kill + 1) * 1500])
            # the bridge's window (prefetch 300) is upstream; a moment more and it is synced there
            wait_until(
                lambda k=kill: upstream_count(upstream.url, "central") >= k * 1500 + 300,
                timeout=60,
                what=lambda: "the window upstream; the edge's log:\n" + edge.log()[-3000:],
            )
            time.sleep(0.3)
            upstream.proc.kill()
            upstream.proc.wait()
            proxy.heal()
            upstream.start()
            # everything is upstream: the window again (dropped) and the rest after it
            wait_until(lambda k=kill: upstream_count(upstream.url, "central") == (k + 1) * 1500, timeout=60)
            dropped.append(fresh_status(upstream)["duplicates_dropped"])
        got = consume_all(upstream.url, "central", 10**9, timeout=3)
    finally:
        stop_all(edge, proxy, upstream)
    received = [body for body, _h, _m in got]
    print(
        "upstream SIGKILLed 3 times: %d sent, %d received, dropped after each restart %s"
        % (len(bodies), len(received), dropped)
    )
    assert len(received) == len(set(received)), "duplicates upstream"
    assert received == bodies, "lost or out of order"
    # a window killed before its sync is lost upstream and simply taken again; the 0.3 s makes
    # that rare, and at least one restart must have had duplicates to drop
    assert max(dropped) > 0, dropped


@pytest.mark.long  # mostly waits: started early (tests/conftest.py)
def test_amqps_checks_upstreams_certificate_and_forwards_over_tls(tmp_path, rabbitmq):
    """Upstream behind TLS (a terminator in front of the run's RabbitMQ), its certificate
    self-signed: trusted through ca_file it forwards; with the system's CAs only it is refused
    with the reason and retried."""
    from tcp_proxy import TlsTerminator, self_signed

    cert, key = self_signed(tmp_path)
    tls = TlsTerminator(rabbitmq.port, cert, key).start()
    upstream = rabbitmq_url(rabbitmq)
    upstream_queue(upstream, "bridged-tls")
    amqps = "amqps://guest:guest@localhost:%d/" % tls.port
    common = {"uri": amqps, "routing_key": "bridged-tls", "reconnect_delay": 0.2}
    trusted = edge_with_bridge(tmp_path, dict(common, name="tls", queue="tls-out", ca_file=cert), "trusted")
    untrusted = edge_with_bridge(tmp_path, dict(common, name="notrust", queue="tls-untrusted"), "untrusted")
    try:
        bodies = [b"secret-%03d" % i for i in range(300)]
        publish_confirmed(trusted, "tls-out", bodies)
        got = consume_all(upstream, "bridged-tls", len(bodies))
        assert [body for body, _h, _m in got] == bodies
        wait_until(lambda: "bridge notrust: backoff" in untrusted.log(), timeout=30, what="a refused certificate")
        assert "TLS: " in untrusted.log() and "CERTIFICATE_VERIFY_FAILED" in untrusted.log(), untrusted.log()[-2000:]
        # verify = false: the same certificate goes unchecked (the user's choice, said in the config)
        upstream_queue(upstream, "bridged-unchecked")
        unchecked = edge_with_bridge(
            tmp_path,
            dict(common, name="unchecked", queue="tls-unchecked", routing_key="bridged-unchecked", verify=False),
            "unchecked",
        )
        publish_confirmed(unchecked, "tls-unchecked", [b"a", b"b"])
        assert [body for body, _h, _m in consume_all(upstream, "bridged-unchecked", 2)] == [b"a", b"b"]
        unchecked.stop()
    finally:
        trusted.stop()
        untrusted.stop()
        tls.stop()
    assert not trusted.errors(), trusted.log()[-3000:]


def test_an_exchange_source_forwards_what_its_binding_key_matches_at_most_max_rate(tmp_path, rabbitmq):
    """source_exchange + binding_key: the bridge's own durable queue (hutch.bridge.NAME) bound to
    a local exchange; messages keep their exchange and routing key upstream. max_rate = 20 (in
    bursts of 2): 30 messages take at least 1.4 s (a lower bound only: speed is not asserted)."""
    import time

    upstream = rabbitmq_url(rabbitmq)
    upstream_queue(upstream, "bridged-topic")
    upstream_binding(upstream, "bridged-topic", "amq.topic", "site.#")
    edge = edge_with_bridge(
        tmp_path,
        {"name": "topic", "uri": upstream, "source_exchange": "amq.topic", "binding_key": "site.#", "max_rate": 20},
    )
    try:
        connection = pika.BlockingConnection(pika.URLParameters(edge.url))
        channel = connection.channel()
        channel.confirm_delivery()
        started = time.monotonic()
        for i in range(30):
            channel.basic_publish("amq.topic", "site.%d" % i, b"s%02d" % i)
            channel.basic_publish("amq.topic", "other.%d" % i, b"o%02d" % i)  # not bound: not forwarded
        connection.close()
        got = consume_all(upstream, "bridged-topic", 30)
        elapsed = time.monotonic() - started
        assert [body for body, _h, _m in got] == [b"s%02d" % i for i in range(30)]
        assert elapsed >= 1.3, "30 messages at 20/s went in %.2f s" % elapsed
    finally:
        edge.stop()


def edge_then_bridge(tmp_path, prepare, bridge, name="edge"):
    """An edge that first runs without bridges for prepare(url) (local queues, bindings), then
    again with the [[bridge]] table."""
    folder = tmp_path / name
    folder.mkdir()
    config = folder / "hutch.toml"
    config.write_text("")
    edge = RunningBroker([os.path.join(BIN, "hutch"), "serve", "--config", str(config)], folder).start()
    prepare(edge.url)
    edge.stop()
    config.write_text("[[bridge]]\n" + "".join("%s = %s\n" % (k, toml(v)) for k, v in bridge.items()))
    return edge.start()


def test_a_down_bridge_brings_commands_from_rabbitmq_to_a_local_queue_in_order(tmp_path, rabbitmq):
    """direction = "down": an upstream queue consumed, each message published here (to the
    default exchange with routing_key) and acked upstream only once held here; one no local
    queue takes is refused to upstream (nack, no requeue), not acked and lost."""
    upstream = rabbitmq_url(rabbitmq)
    upstream_queue(upstream, "commands-for-edge")

    def prepare(url):
        connection = pika.BlockingConnection(pika.URLParameters(url))
        connection.channel().queue_declare("sensor-7.cmd", durable=True)
        connection.close()

    connection = pika.BlockingConnection(pika.URLParameters(upstream))
    channel = connection.channel()
    channel.confirm_delivery()
    commands = [b"set-interval %d" % i for i in range(500)]
    for body in commands:
        channel.basic_publish("", "commands-for-edge", body, pika.BasicProperties(delivery_mode=2, type="cmd"))
    connection.close()
    edge = edge_then_bridge(
        tmp_path,
        prepare,
        {
            "name": "cmds",
            "direction": "down",
            "uri": upstream,
            "queue": "commands-for-edge",
            "routing_key": "sensor-7.cmd",
        },
    )
    try:
        got = consume_all(edge.url, "sensor-7.cmd", len(commands))
        assert [body for body, _h, _m in got] == commands
        connection = pika.BlockingConnection(pika.URLParameters(upstream))
        channel = connection.channel()
        wait_until(
            lambda: channel.queue_declare("commands-for-edge", passive=True).method.message_count == 0,
            what="upstream's queue emptied by the bridge's acks",
        )
        connection.close()
        assert "bridge cmds: running" in edge.log()
    finally:
        edge.stop()
    assert not edge.errors(), edge.log()[-3000:]


def test_declare_sets_up_the_destination_upstream(tmp_path, rabbitmq):
    """declare: the destination exchange (its type) and a queue bound to it, made upstream by
    the bridge at each connect: nothing has to be set up there by hand."""
    upstream = rabbitmq_url(rabbitmq)
    edge = edge_with_bridge(
        tmp_path,
        {
            "name": "declaring",
            "uri": upstream,
            "queue": "declaring-out",
            "exchange": "edge-readings",
            "routing_key": "site.7",
            "declare": {"exchange_type": "topic", "queue": "declared-readings", "binding_key": "site.*"},
        },
    )
    try:
        publish_confirmed(edge, "declaring-out", [b"r1", b"r2"])
        wait_until(lambda: "bridge declaring: running" in edge.log(), timeout=30)  # declared by then
        got = consume_all(upstream, "declared-readings", 2)
        assert [body for body, _h, _m in got] == [b"r1", b"r2"]
    finally:
        edge.stop()


@pytest.mark.long  # tests/conftest.py: started early
@pytest.mark.timeout(300)  # 35 s alone; a RabbitMQ restart takes 20 s and more on a loaded 2-core CI
def test_rabbitmq_restarted_while_the_bridge_forwards_loses_nothing(tmp_path, rabbitmq):
    """The worker's RabbitMQ is stopped and started again (the same node and data) twice while
    pika publishes at the edge: the bridge backs off while it is away and goes on, each time;
    every confirmed message is upstream at least once, first copies in order; duplicates
    (what was in flight when it went) are counted and printed."""
    import threading

    upstream = rabbitmq_url(rabbitmq)
    upstream_queue(upstream, "bridged-restarts")
    edge = edge_with_bridge(
        tmp_path,
        {
            "name": "restarts",
            "uri": upstream + "?heartbeat=2",
            "queue": "restarts-out",
            "routing_key": "bridged-restarts",
            "reconnect_delay": 0.2,
            "max_reconnect_delay": 1.0,
        },
    )
    restarts = []

    def restart_twice():
        for _ in range(2):
            running = edge.log().count("bridge restarts: running")
            rabbitmq.restart()
            restarts.append(1)
            # the next restart once the bridge is back (a node stops in a second: one restart
            # right after another could fall in the bridge's backoff, two outages seen as one)
            wait_until(
                lambda seen=running: edge.log().count("bridge restarts: running") > seen, 60, what="the bridge back"
            )

    restarter = threading.Thread(target=restart_twice, daemon=True)
    try:
        restarter.start()
        # 12,000 messages at least, 500 a second, and on until both restarts are over
        bodies = publish_during(
            edge, "restarts-out", restarter, lambda i: b"r%06d" % i, 500, at_least=12000, batch=1000
        )
        restarter.join(300)
        got = consume_every(upstream, "bridged-restarts", bodies)
    finally:
        edge.stop()
    received = [body for body, _h, _m in got]
    first = list(dict.fromkeys(received))
    print(
        "%d restarts: %d sent, %d received, %d duplicates"
        % (len(restarts), len(bodies), len(received), len(received) - len(first))
    )
    assert len(restarts) == 2
    assert first == bodies, "lost or out of order"
    assert edge.log().count("bridge restarts: running") >= 2, "it came back after a restart"


def test_a_black_holed_link_is_given_up_with_more_unsent_than_its_socket_holds(tmp_path):
    """A dead route takes nothing, so what the bridge sends it piles up: 300 messages of 64 KB,
    more than the kernel's socket buffers hold (about 4 MB here). Once heartbeats find the
    silence, the bridge must drop the link at once: a polite close waits to write all that
    out first, forever, and the bridge stayed on the dead link, "running", forwarding
    nothing. The old link stays dead (heal(drop=False)); a new one forwards everything."""
    from tcp_proxy import TcpProxy

    up_folder = tmp_path / "up"
    up_folder.mkdir()
    upstream = RunningBroker([os.path.join(BIN, "hutch"), "serve"], up_folder).start()
    upstream_queue(upstream.url, "central")
    proxy = TcpProxy(upstream.port).start()
    edge = edge_with_bridge(
        tmp_path,
        {
            "name": "deadroute",
            # heartbeats of 2 s: the silence is found after 4 s, when the 19 MB are at the edge
            "uri": "amqp://guest:guest@127.0.0.1:%d/?heartbeat=2&connection_timeout=2000" % proxy.port,
            "queue": "big-out",
            "routing_key": "central",
            "reconnect_delay": 0.1,
        },
    )
    try:
        wait_until(lambda: "bridge deadroute: running" in edge.log(), what="running")
        proxy.black_hole()
        bodies = [b"%03d" % i + b"x" * 65536 for i in range(300)]
        publish_confirmed(edge, "big-out", bodies)
        wait_until(lambda: "missed heartbeats" in edge.log(), timeout=20, what="the bridge giving up the dead link")
        proxy.heal(drop=False)
        got = consume_all(upstream.url, "central", len(bodies))
        assert [body for body, _h, _m in got] == bodies
    finally:
        stop_all(edge, proxy, upstream)
    assert not edge.errors(), edge.log()[-3000:]


@pytest.mark.timeout(240)
def test_a_stream_source_forwards_every_record_once_in_order_through_restarts_and_sigkill(tmp_path):
    """A [[bridge]] whose local queue is a stream: its records go upstream as a queue's messages
    do, and its place in the stream (DATA/bridge-NAME.offset, written after confirms) survives
    restarts. Records published before and after a clean restart (SIGTERM) and a SIGKILL (just
    after upstream took a window whose confirms a proxy kept from the edge: the edge sends them
    again, and the upstream hutch drops them) all arrive once, in order, in one lane."""
    import binascii
    import json
    import time

    from tcp_proxy import TcpProxy

    up_folder = tmp_path / "up"
    up_folder.mkdir()
    upstream = RunningBroker([os.path.join(BIN, "hutch"), "serve"], up_folder).start()
    upstream_queue(upstream.url, "central")
    proxy = TcpProxy(upstream.port).start()

    def prepare(url):
        connection = pika.BlockingConnection(pika.URLParameters(url))
        connection.channel().queue_declare("events", durable=True, arguments={"x-queue-type": "stream"})
        connection.close()

    edge = edge_then_bridge(
        tmp_path,
        prepare,
        {
            "name": "s2h",
            # heartbeats far apart: the muted link stays up until the edge is killed
            "uri": "amqp://guest:guest@127.0.0.1:%d/?heartbeat=60&connection_timeout=2000" % proxy.port,
            "queue": "events",
            "routing_key": "central",
            "prefetch": 100,
            "reconnect_delay": 0.1,
            "max_reconnect_delay": 0.5,
        },
    )
    offsets = os.path.join(edge.data, "bridge-%s.offset" % binascii.hexlify(b"s2h").decode())
    bodies = [b"e%05d" % i for i in range(3000)]
    try:
        publish_confirmed(edge, "events", bodies[:1000])
        wait_until(lambda: upstream_count(upstream.url, "central") == 1000, timeout=60, what="the first 1000")
        wait_until(
            lambda: [b.get("confirmed_offset") for b in status(edge).get("bridges", [])] == [999],
            timeout=30,
            what="the confirmed offset in status.json",
        )
        edge.stop()  # SIGTERM: the offset file says where to go on
        with open(offsets) as f:
            assert f.read().split()[0] == "1000"
        edge.start()
        publish_confirmed(edge, "events", bodies[1000:2000])
        wait_until(lambda: upstream_count(upstream.url, "central") == 2000, timeout=60, what="the next 1000")
        # their confirms are back at the edge before the replies are muted: a confirm still on
        # its way would keep its record in the window, and the window upstream short of 100
        wait_until(
            lambda: [b.get("confirmed_offset") for b in status(edge).get("bridges", [])] == [1999],
            timeout=30,
            what="the confirmed offset in status.json",
        )
        proxy.mute_replies()  # upstream takes what comes; the edge hears of none of it
        publish_confirmed(edge, "events", bodies[2000:])
        wait_until(lambda: upstream_count(upstream.url, "central") >= 2100, timeout=60, what="a window upstream")
        time.sleep(0.2)
        edge.proc.kill()
        edge.proc.wait()
        proxy.heal()
        edge.start()
        wait_until(lambda: upstream_count(upstream.url, "central") == 3000, timeout=60, what="all 3000 upstream")
        got = consume_all(upstream.url, "central", 10**9, timeout=3)
    finally:
        stop_all(edge, proxy, upstream)
    received = [body for body, _h, _m in got]
    assert len(received) == len(set(received)), "duplicates upstream"
    assert received == bodies, "lost or out of order"
    node = (tmp_path / "edge" / "data" / "node-id").read_text().strip()
    origins = {h["x-hutch-origin"] for _b, h, _m in got}
    assert len(origins) == 1 and origins.pop().startswith(node + "/s2h/lane-"), "one lane through the restarts"
    assert [h["x-hutch-seq"] for _b, h, _m in got] == list(range(1, 3001)), "the offset + 1"
    with open(os.path.join(upstream.data, "status.json")) as f:
        dropped = json.load(f)["duplicates_dropped"]
    print("stream source: upstream dropped %d duplicates after the SIGKILL" % dropped)
    assert dropped >= 100, "the muted window was not sent again: the test proved nothing"
    assert not edge.errors(), edge.log()[-3000:]
