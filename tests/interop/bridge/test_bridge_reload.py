"""Reading the config again in a running broker (server/reload.py): `hutch ctl reload` and SIGHUP
change its bridges (upstream, credentials), users and permissions while messages flow; a config
that does not load changes nothing and says why in one line."""

import os
import signal
import subprocess
import threading

import pika
import pytest
from bridging import consume_every, publish_confirmed, toml, upstream_queue
from brokers import BIN, RunningBroker, wait_until

pytestmark = [pytest.mark.timeout(180)]

# hutch passwd --password greenhouse / --password second
GREENHOUSE = "3yPudymwzH7quov3AvyvH2fdr5gddkKIOXfQzjjaM2n2kg6k"


def passwd(password):
    done = subprocess.run(
        [os.path.join(BIN, "hutch"), "passwd", "--password", password], capture_output=True, text=True
    )
    return done.stdout.strip().split()[-1]


def write_config(path, bridges, users):
    lines = []
    for name, (password_hash, permissions) in users.items():
        lines.append("[users.%s]\npassword_hash = %s\n" % (name, toml(password_hash)))
        if permissions is not None:
            lines.append("permissions = %s\n" % toml(permissions))
    for bridge in bridges:
        lines.append("[[bridge]]\n" + "".join("%s = %s\n" % (k, toml(v)) for k, v in bridge.items()))
    path.write_text("".join(lines))


def ctl(edge, *args):
    return subprocess.run(
        [os.path.join(BIN, "hutch"), "ctl", *args, "--data", edge.data], capture_output=True, text=True, timeout=60
    )


def login(edge, user, password):
    try:
        pika.BlockingConnection(pika.URLParameters("amqp://%s:%s@127.0.0.1:%d/" % (user, password, edge.port))).close()
        return True
    except pika.exceptions.ProbableAuthenticationError:
        return False


def test_a_reload_moves_a_bridge_to_a_new_upstream_and_changes_users_while_messages_flow(tmp_path):
    """Bridge `out` forwards to upstream A; the config is changed to send it to upstream B with
    another user and password, to add a bridge and a user and drop one: `hutch ctl reload`
    applies it while a publisher goes on. Every message reaches A or B once: those confirmed by
    A before the reload at A, the rest at B; none twice, none lost."""
    ups = []
    for name in ("a", "b"):
        folder = tmp_path / name
        folder.mkdir()
        config = folder / "hutch.toml"
        write_config(config, [], {"edge-%s" % name: (passwd("secret-" + name), None)})
        ups.append(RunningBroker([os.path.join(BIN, "hutch"), "serve", "--config", str(config)], folder).start())
    a, b = ups
    for up, user in ((a, "edge-a"), (b, "edge-b")):
        url = "amqp://%s:secret-%s@127.0.0.1:%d/" % (user, user[-1], up.port)
        upstream_queue(url, "central")
        up.user_url = url
    folder = tmp_path / "edge"
    folder.mkdir()
    config = folder / "hutch.toml"

    def bridge(up, user, name="out", queue="edge-out"):
        return {"name": name, "uri": "amqp://%s:secret-%s@127.0.0.1:%d/?heartbeat=2" % (user, user[-1], up.port),
                "queue": queue, "routing_key": "central", "reconnect_delay": 0.1, "max_reconnect_delay": 0.5}  # fmt: skip

    admin = {"guest": (passwd("guest"), None), "sensor": (GREENHOUSE, None)}
    write_config(config, [bridge(a, "edge-a")], admin)
    edge = RunningBroker([os.path.join(BIN, "hutch"), "serve", "--config", str(config)], folder).start()
    try:
        wait_until(lambda: "bridge out: running" in edge.log(), 30, what=edge.log)
        assert login(edge, "sensor", "greenhouse")
        # a connection of the user the reload removes: closed by it, as RabbitMQ's delete_user does
        held = pika.BlockingConnection(pika.URLParameters("amqp://sensor:greenhouse@127.0.0.1:%d/" % edge.port))
        published = []
        stop = threading.Event()

        def publish():  # (paced, so that the reloads come while it goes on, on any machine)
            n = 0
            while not stop.is_set() and n < 40000:  # (10 s at its pace: stopped long before)
                chunk = [b"m%06d" % i for i in range(n, n + 200)]
                publish_confirmed(edge, "edge-out", chunk, rate=4000)
                published.extend(chunk)
                n += 200

        def flowed(since):  # until 1,000 more than `since` are confirmed by the edge
            wait_until(lambda: len(published) >= since + 1000, 30, what="messages confirmed by the edge")

        publisher = threading.Thread(target=publish, daemon=True)
        publisher.start()
        flowed(0)
        users = {
            "guest": admin["guest"],
            "ops": (passwd("ops-secret"), {"configure": "^$", "write": "^$", "read": ".*"}),
        }
        write_config(config, [bridge(b, "edge-b"), bridge(b, "edge-b", "more", "more-out")], users)
        done = ctl(edge, "reload")
        assert done.returncode == 0, done.stderr
        reloaded_at = len(published)
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker, match="user 'sensor' is deleted"):
            wait_until(lambda: held.process_data_events(0.05) or not held.is_open, 10, what="sensor's connection")
        flowed(reloaded_at)
        again = ctl(edge, "reload")  # the same file: its users with permissions, bridges without prefetch
        stop.set()
        publisher.join(60)
        at_a = [body for body, _h, _m in consume_every(a.user_url, "central", [], timeout=3)]
        at_b = [body for body, _h, _m in consume_every(b.user_url, "central", published[len(at_a) :])]
        assert login(edge, "ops", "ops-secret") and not login(edge, "sensor", "greenhouse")
        assert not edge.errors(), edge.log()[-3000:]
    finally:
        edge.stop()
        for up in ups:
            up.stop()
    print(done.stdout)
    print("%d published: %d at upstream a before the reload, %d at b after it" % (len(published), len(at_a), len(at_b)))
    lines = done.stdout.splitlines()
    assert "bridge out restarted with its new table (uri changed)" in lines and "bridge more started" in lines, lines
    assert "users: 2 (added ops, removed sensor, 1 connection of removed users closed)" in lines, lines
    assert again.stdout == "nothing changed\n", "a reload of the same file restarted or changed: %r" % again.stdout
    assert at_a and at_b, "the reload came before or after every message: the test proved nothing"
    assert at_a + at_b == published, "lost, twice or out of order"


def test_a_config_that_does_not_load_keeps_the_running_one_and_says_why(tmp_path):
    folder = tmp_path / "edge"
    folder.mkdir()
    config = folder / "hutch.toml"
    running = '[users.guest]\npassword_hash = "%s"\n' % passwd("guest")
    config.write_text(running)
    edge = RunningBroker([os.path.join(BIN, "hutch"), "serve", "--config", str(config)], folder).start()
    try:
        for text, words in (
            ("[[bridge]\n", "config"),
            ('[[bridge]]\nname = "x"\nuri = "amqp://h/"\nqueue = "q"\nack = 1\n', "unknown key 'ack'"),
            (
                '[[bridge]]\nname = "x"\nuri = "amqps://h/"\nqueue = "q"\nca_file = "/no/such.pem"\n',
                "cannot read ca_file",
            ),
            ('[[bridge]]\nname = "x"\nuri = "amqp://h/"\nsource_exchange = "nowhere"\n', "no exchange 'nowhere'"),
        ):
            config.write_text(text)
            done = ctl(edge, "reload")
            lines = done.stderr.strip().splitlines()
            assert done.returncode == 1 and len(lines) == 1, (done.returncode, done.stderr)
            assert "reload refused, the running config is kept" in lines[0] and words in lines[0], lines
        assert login(edge, "guest", "guest")  # (the running users)
        assert ctl(edge, "ping").returncode == 0
        config.write_text(running)
        edge.proc.send_signal(signal.SIGHUP)  # systemctl reload: the same, logged
        wait_until(lambda: "reload: nothing changed" in edge.log(), 30, what=edge.log)
    finally:
        edge.stop()
