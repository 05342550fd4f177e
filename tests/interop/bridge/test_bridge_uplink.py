"""The gateway's one link upstream ([uplink], core/bridge/uplink.py): a byte budget every up bridge
shares by priority, measured on the drain after an outage; connection windows (every N seconds
for M, and hours of the day) with what waits kept on disk, and a reload that opens them."""

import os
import subprocess
import threading
import time

import pika
import pytest
from bridging import publish_confirmed, toml, upstream_queue
from brokers import BIN, RunningBroker, wait_until

pytestmark = [pytest.mark.timeout(180)]


def write_config(path, uplink, bridges):
    lines = ["[uplink]\n" + "".join("%s = %s\n" % (k, toml(v)) for k, v in uplink.items())] if uplink else []
    for bridge in bridges:
        lines.append("[[bridge]]\n" + "".join("%s = %s\n" % (k, toml(v)) for k, v in bridge.items()))
    path.write_text("".join(lines))


def edge_with(tmp_path, uplink, bridges, *more):
    folder = tmp_path / "edge"
    folder.mkdir()
    config = folder / "hutch.toml"
    write_config(config, uplink, bridges)
    edge = RunningBroker([os.path.join(BIN, "hutch"), "serve", "--config", str(config), *more], folder).start()
    edge.config = config
    return edge


def upstream(tmp_path):
    folder = tmp_path / "up"
    folder.mkdir()
    up = RunningBroker([os.path.join(BIN, "hutch"), "serve"], folder).start()
    upstream_queue(up.url, "central")
    return up


def bridge(up, name, queue, **more):
    return dict(
        {
            "name": name,
            "uri": "amqp://guest:guest@127.0.0.1:%d/?connection_timeout=1000" % up.port,
            "queue": queue,
            "routing_key": "central",
            "reconnect_delay": 0.2,
            "max_reconnect_delay": 0.5,
        },  # fmt: skip
        **more,
    )


def consume_timed(url, count, timeout=60):
    """(wall-clock time it came, body) of count messages from upstream's queue central, in order."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=1000)
    got = []
    deadline = time.monotonic() + timeout
    for method, _properties, body in channel.consume("central", inactivity_timeout=0.5):
        if method is not None:
            got.append((time.time(), body))
            channel.basic_ack(method.delivery_tag)
        if len(got) >= count or time.monotonic() > deadline:
            break
    channel.cancel()
    connection.close()
    return got


def ctl(edge, *args):
    return subprocess.run(
        [os.path.join(BIN, "hutch"), "ctl", *args, "--data", edge.data], capture_output=True, text=True, timeout=60
    )


def test_after_an_outage_the_budget_paces_the_drain_and_the_higher_priority_goes_first(tmp_path):
    """[uplink] max_byte_rate = 20000 shared by two bridges (alarms, priority 9; telemetry, 1):
    the backlog of an outage (115,000 body bytes) drains at no more than the budget, the
    alarms before any telemetry."""
    budget = 20000
    up = upstream(tmp_path)
    up.stop()  # the outage
    edge = edge_with(
        tmp_path,
        {"max_byte_rate": budget},
        [bridge(up, "telemetry", "telemetry-out", priority=1), bridge(up, "alarms", "alarms-out", priority=9)],
    )
    try:
        telemetry = [b"t%03d" % i + b"." * 496 for i in range(200)]
        alarms = [b"a%03d" % i + b"." * 496 for i in range(30)]
        publish_confirmed(edge, "telemetry-out", telemetry)
        publish_confirmed(edge, "alarms-out", alarms)
        shown = ctl(edge, "bridges").stdout  # each bridge's share: its priority
        up.start()
        got = consume_timed(up.url, len(telemetry) + len(alarms))
        assert not edge.errors(), edge.log()[-3000:]
    finally:
        edge.stop()
        up.stop()
    bodies = [body for _t, body in got]
    for name, priority in (("alarms", 9), ("telemetry", 1)):
        assert "  %s (up, queue %s-out)" % (name, name) in shown, shown
        assert "    priority %d; dropped 0 (expired or over its budget), refused 0" % priority in shown, shown
    assert bodies == alarms + telemetry, "lost, out of order, or telemetry before an alarm"
    took = got[-1][0] - got[0][0]
    sent = sum(len(body) for body in bodies)
    rate = (sent - len(bodies[0])) / took
    print(
        "drain after the outage: %d bytes in %.2f s: %.0f bytes/s, %.2f of the %d bytes/s budget"
        % (sent, took, rate, rate / budget, budget)
    )
    # the bucket holds a tenth of a second's worth at the start; over the rest, the budget
    assert sent <= 1.1 * (budget / 10 + budget * took) + 500, "the budget was exceeded"


@pytest.mark.long  # mostly waits: started early (tests/conftest.py)
def test_every_n_seconds_for_m_it_connects_sends_only_then_and_keeps_the_rest_on_disk(tmp_path):
    """every = 10, open_for = 3: a publisher sends a message every 100 ms for 22 s; upstream gets
    each once, in order, and each within a window (at most a moment after its close, in flight
    then), the link ended and opened again between them."""
    up = upstream(tmp_path)
    edge = edge_with(tmp_path, {"every": 10, "open_for": 3}, [bridge(up, "out", "out")])
    try:
        bodies = [b"m%04d" % i for i in range(220)]
        published = []

        def publish():
            connection = pika.BlockingConnection(pika.URLParameters(edge.url))
            channel = connection.channel()
            channel.confirm_delivery()
            for body in bodies:
                channel.basic_publish("", "out", body, pika.BasicProperties(delivery_mode=2))
                published.append(body)
                time.sleep(0.1)
            connection.close()

        publisher = threading.Thread(target=publish, daemon=True)
        publisher.start()
        got = consume_timed(up.url, len(bodies), timeout=60)
        publisher.join(30)
        shown = ctl(edge, "bridges").stdout
        assert not edge.errors(), edge.log()[-3000:]
        log = edge.log()
    finally:
        edge.stop()
        up.stop()
    assert [body for _t, body in got] == bodies, "lost, twice or out of order"
    late = [(t, body) for t, body in got if (t + _utc_offset(t)) % 10 >= 3.5]
    assert not late, "sent outside the windows: %r" % late[:5]
    windows = {int((t + _utc_offset(t)) // 10) for t, _b in got}
    print("%d messages through %d windows of 3 s every 10 s" % (len(got), len(windows)))
    assert len(windows) >= 2 and log.count("bridge out: its window closed") >= 1, log[-2000:]
    assert "bridge out: waiting for its window (opens at " in log
    assert "window: " in shown, shown


def _utc_offset(t):
    """The local time's offset from UTC at t (s): the edge counts its windows in local time."""
    local = time.localtime(t)
    return local.tm_gmtoff


def test_outside_its_hours_a_bridge_waits_and_a_reload_that_opens_them_sends_what_waited(tmp_path):
    import urllib.request

    from brokers import free_port

    up = upstream(tmp_path)
    hour = time.localtime().tm_hour
    closed = ["%02d:00-%02d:00" % ((hour + 2) % 24, (hour + 3) % 24)]
    metrics = free_port()
    edge = edge_with(tmp_path, {"hours": closed}, [bridge(up, "out", "out")], "--metrics-port", str(metrics))
    try:
        wait_until(lambda: "bridge out: waiting for its window" in edge.log(), 30, what=edge.log)
        bodies = [b"w%03d" % i for i in range(50)]
        publish_confirmed(edge, "out", bodies)
        time.sleep(1.5)
        shown = ctl(edge, "bridges").stdout
        scraped = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % metrics, timeout=10).read().decode()
        assert consume_timed(up.url, 1, timeout=1) == [], "sent outside its hours"
        write_config(edge.config, {"hours": ["%02d:00-%02d:00" % (hour, (hour + 1) % 24)]}, [bridge(up, "out", "out")])
        done = ctl(edge, "reload")
        got = consume_timed(up.url, len(bodies), timeout=30)
        assert not edge.errors(), edge.log()[-3000:]
    finally:
        edge.stop()
        up.stop()
    print(shown)
    assert "out (up, queue out): waiting" in shown and "window: opens at %02d:00:00" % ((hour + 2) % 24) in shown
    assert 'hutch_bridge_state{bridge="out",state="waiting"} 1' in scraped
    assert done.returncode == 0 and "uplink: budget and windows applied" in done.stdout, done.stdout
    assert [body for _t, body in got] == bodies


def test_a_message_larger_than_the_budget_goes_alone_and_what_waits_behind_it_is_said_and_shown(tmp_path):
    """[uplink] max_byte_rate = 1000 and a 100 KB message: it goes once the bucket is full, and
    the 100 s it overdrew hold back what follows; the log says so once, `hutch ctl bridges`
    shows the wait and the oldest message's age as /metrics does, with the bridge's alarm. A
    class (its upstream away) whose disk budget the same message passes drops it, and says so
    once."""
    import urllib.request

    from brokers import free_port

    up = upstream(tmp_path)
    metrics = free_port()
    folder = tmp_path / "edge"
    folder.mkdir()
    config = folder / "hutch.toml"
    cloud = dict(bridge(up, "cloud", None), source_exchange="amq.topic", uri="amqp://127.0.0.1:%d/" % free_port())
    del cloud["queue"]  # (its upstream away: what its class takes waits in its queue)
    write_config(config, {"max_byte_rate": 1000}, [bridge(up, "to-up", "out"), cloud])
    config.write_text(
        config.read_text()
        + 'classes = [{ name = "telemetry", binding_key = "sensors.#", max_bytes = 20000, when_full = "drop-oldest" }]\n'
    )
    edge = RunningBroker(
        [os.path.join(BIN, "hutch"), "serve", "--config", str(config), "--metrics-port", str(metrics)], folder
    ).start()
    try:
        publish_confirmed(edge, "out", [b"x" * 100000, b"small"])
        connection = pika.BlockingConnection(pika.URLParameters(edge.url))
        channel = connection.channel()
        channel.confirm_delivery()
        channel.basic_publish("amq.topic", "sensors.big", b"y" * 100000, pika.BasicProperties(delivery_mode=2))
        connection.close()
        got = consume_timed(up.url, 1, timeout=30)
        wait_until(
            lambda: "budget: waiting" in ctl(edge, "bridges").stdout, 30, what=lambda: repr(ctl(edge, "bridges"))
        )
        wait_until(lambda: "bridge cloud.telemetry: dropped 1 messages" in edge.log(), 30, what=edge.log)
        shown = ctl(edge, "bridges").stdout
        scraped = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % metrics, timeout=10).read().decode()
        log = edge.log()
        assert not edge.errors(), log[-3000:]
    finally:
        edge.stop()
        up.stop()
    print(shown)
    assert [len(body) for _t, body in got] == [100000], "the large message went first, alone"
    said = [line for line in log.splitlines() if "bridge to-up: waiting" in line]
    assert len(said) == 1 and said[0].endswith(
        " s for budget: a 100,000-byte message went over the [uplink]'s 1,000 bytes/s"
    ), said
    assert "    budget: waiting " in shown, shown
    assert 'hutch_bridge_alarm{bridge="to-up"} 1' in scraped
    age = [line for line in scraped.splitlines() if line.startswith('hutch_bridge_oldest_age_seconds{bridge="to-up"}')]
    assert age and float(age[0].split()[1]) > 0, age
    line = [one for one in shown.splitlines() if one.startswith("  to-up ")][0]
    assert "oldest waiting -" not in line, line
    assert "dropped 1 (expired or over its budget)" in shown
    assert "bridge cloud.telemetry: dropped 1 messages (the oldest over its max_bytes of 20,000)" in log
