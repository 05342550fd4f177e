"""The tools a user reaches for first, against a real broker: `hutch publish` and `hutch get`
(as mosquitto_pub and rabbitmqadmin publish/get), `hutch passwd --config FILE --user NAME` (as
mosquitto_passwd -b), and `hutch ctl` finding the broker's data folder without --data."""

import json
import os
import subprocess

import pika
import pytest
from brokers import BIN, RunningBroker, pika_connection

HUTCH = os.path.join(BIN, "hutch")


def hutch(*args, cwd=None, env=None, stdin=None):
    return subprocess.run([HUTCH, *args], capture_output=True, text=True, timeout=60, cwd=cwd, env=env, input=stdin)


def test_publish_and_get_say_what_happened_to_the_message(broker):
    port = ("--port", str(broker.port))
    done = hutch("publish", *port, "--routing-key", "nowhere", "21.5")
    assert done.returncode == 1 and done.stderr == (
        "hutch publish: no queue took the message to exchange '' with routing key 'nowhere': 312 NO_ROUTE\n"
    ), done.stderr
    done = hutch("publish", *port, "--exchange", "nope", "--routing-key", "k", "21.5")
    assert done.returncode == 1 and done.stderr == "hutch publish: NOT_FOUND - no exchange 'nope' in vhost '/'\n"
    done = hutch("publish", *port, "--password", "wrong", "--routing-key", "k", "21.5")
    assert done.returncode == 1 and "ACCESS_REFUSED - Login was refused" in done.stderr, done.stderr
    done = hutch("publish", *port, "--routing-key", "k", "--header", "no-equals", "21.5")
    assert done.returncode == 2 and done.stderr == "hutch publish: --header 'no-equals' is not NAME=VALUE\n"

    connection = pika_connection(broker)
    connection.channel().queue_declare("quick", durable=True)
    done = hutch("publish", *port, "--routing-key", "quick", "--persistent", "--header", "sensor=s-1", '{"t": 21.5}')
    assert done.returncode == 0, done.stderr
    assert done.stdout == "published 11 bytes to exchange '' with routing key 'quick': confirmed\n"
    assert hutch("publish", *port, "--routing-key", "quick", "-", stdin="22.0").returncode == 0

    done = hutch("get", *port, "quick", "--count", "5")  # put back, as rabbitmqadmin get
    assert done.returncode == 0 and done.stdout == '{"t": 21.5}\n22.0\n', done.stdout + done.stderr
    [first] = json.loads(hutch("get", *port, "quick", "--json").stdout)
    assert first["routing_key"] == "quick" and first["redelivered"] is True
    assert first["properties"] == {"headers": {"sensor": "s-1"}, "delivery_mode": 2}
    assert connection.channel().queue_declare("quick", passive=True).method.message_count == 2
    assert hutch("get", *port, "quick", "--count", "5", "--ack").stdout == '{"t": 21.5}\n22.0\n'
    assert hutch("get", *port, "quick").stdout == "(queue 'quick' is empty)\n"
    done = hutch("get", *port, "missing")
    assert done.returncode == 1 and done.stderr == "hutch get: NOT_FOUND - no queue 'missing' in vhost '/'\n"
    connection.close()


def test_passwd_writes_the_user_into_a_config_file(tmp_path):
    config = tmp_path / "hutch.toml"
    config.write_text(
        '[server]\nlog_level = "info"   # kept\n\n[users.admin]\npassword_hash = "x"\ntags = ["administrator"]\n'
    )
    for user, password in (("sensor-1", "greenhouse"), ("admin", "edge-secret")):
        done = hutch("passwd", "--config", str(config), "--user", user, "--password", password)
        assert done.returncode == 0, done.stderr
        assert (
            done.stdout
            == "wrote the password of user '%s' into %s: hutch ctl reload (or a restart) applies it\n" % (user, config)
        )
    text = config.read_text()
    assert text.startswith('[server]\nlog_level = "info"   # kept\n\n[users.admin]\npassword_hash = "')
    assert 'tags = ["administrator"]\n\n[users.sensor-1]\npassword_hash = "' in text, text
    broker = RunningBroker([HUTCH, "serve", "--config", str(config)], tmp_path).start()
    try:
        for user, password in (("sensor-1", "greenhouse"), ("admin", "edge-secret")):
            credentials = pika.PlainCredentials(user, password)
            pika.BlockingConnection(
                pika.ConnectionParameters(broker.host, broker.port, credentials=credentials)
            ).close()
    finally:
        broker.stop()
    # a user the file holds in a form it does not edit: left alone, the hash said
    inline = tmp_path / "inline.toml"
    inline.write_text('[users]\nsensor = {password_hash = "x"}\n')
    done = hutch("passwd", "--config", str(inline), "--user", "sensor", "--password", "pw")
    assert done.returncode == 1 and "in a form hutch passwd does not edit" in done.stderr
    assert inline.read_text() == '[users]\nsensor = {password_hash = "x"}\n' and not os.path.exists(
        str(inline) + ".tmp"
    )
    board = tmp_path / "hutch.json"  # a board's config
    assert hutch("passwd", "--config", str(board), "--user", "node", "--password", "pw").returncode == 0
    assert list(json.loads(board.read_text())["users"]) == ["node"]
    done = hutch("passwd", "--config", str(board), "--password", "pw")
    assert done.returncode == 2 and "--config and --user go together" in done.stderr


@pytest.mark.parametrize("found_by", ["unit", "environment"])
def test_ctl_finds_the_service_s_data_folder_without_data(tmp_path, found_by):
    """As rabbitmqctl finds its node: hutch ctl run anywhere reads the data folder of the
    service that `hutch install-service` installed (its unit's ExecStart), or $HUTCH_DATA."""
    broker = RunningBroker([HUTCH, "serve"], tmp_path).start()
    try:
        connection = pika_connection(broker)
        connection.channel().queue_declare("served", durable=True)
        unit = tmp_path / "hutch.service"
        unit.write_text(
            "[Service]\nExecStart=/opt/hutch/bin/hutch serve --config /etc/hutch/hutch.toml --data %s\n" % broker.data
        )
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        env = {k: v for k, v in os.environ.items() if k not in ("HUTCH_DATA", "HUTCH_SERVICE_UNIT")}
        env.update({"HUTCH_SERVICE_UNIT": str(unit)} if found_by == "unit" else {"HUTCH_DATA": broker.data})
        done = hutch("ctl", "list", "queues", cwd=str(elsewhere), env=env)
        assert done.returncode == 0 and "served" in done.stdout, done.stdout + done.stderr
        assert "  served: 0 ready" in hutch("ctl", "status", cwd=str(elsewhere), env=env).stdout
        connection.close()
    finally:
        broker.stop()
    env = {k: v for k, v in os.environ.items() if k not in ("HUTCH_DATA",)}
    env["HUTCH_SERVICE_UNIT"] = str(tmp_path / "no-such.service")
    done = hutch("ctl", "status", cwd=str(elsewhere), env=env)
    assert done.returncode == 2 and "no data folder" in done.stderr and "no service is installed" in done.stderr
