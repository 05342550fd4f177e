"""hutch as a service under a real systemd: `hutch install-service`, then in a Debian system booted
by systemd-nspawn (tests/support/nspawn.py: a root of its own, never the machine's) the steps it
prints: systemd-sysusers, daemon-reload, enable --now. systemd sees it ready (Type=notify) and
its watchdog pings; `systemctl reload` applies a new config and fails, saying why, on a bad one;
a SIGKILL is restarted by Restart=on-failure with its data kept; its log is in the journal."""

import os
import shutil
import signal
import subprocess
import tempfile
import time

import pika
import pytest
from brokers import BIN, free_port
from nspawn import Container, debian_tree

pytestmark = [pytest.mark.timeout(600)]

HUTCH = os.path.join(BIN, "hutch")


def show(container, *properties):
    done = container.run("systemctl", "show", "hutch", *("--property=" + p for p in properties))
    return dict(line.split("=", 1) for line in done.stdout.splitlines())


def until(what, condition, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError("not within %d s: %s" % (seconds, what))


def connect(port):
    return pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port, connection_attempts=1))


@pytest.mark.long  # mostly waits: started early (tests/conftest.py)
def test_the_service_under_a_real_systemd_ready_watched_reloaded_and_restarted(tmp_path):
    tree = debian_tree()
    sentinel = tempfile.NamedTemporaryFile(prefix="hutch-sentinel-", dir="/tmp", delete=False)
    sentinel.close()
    # install-service's root: a folder others may enter (the service's user checks its way in)
    root = tempfile.mkdtemp(prefix="hutch-service-", dir="/var/tmp")
    os.chmod(root, 0o755)
    container = None
    try:
        done = subprocess.run([HUTCH, "install-service", "--root", root], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        port = free_port()
        config = os.path.join(root, "etc/hutch/hutch.toml")
        guest = '[users.guest]\npassword_hash = "%s"\npermissions = { configure = ".*", write = ".*", read = ".*" }\n'
        good = '[server]\nbind = "127.0.0.1"\nport = %d\n' % port + guest % _hash("guest")
        with open(config, "w") as f:
            f.write(good)
        unit = "/etc/systemd/system/hutch.service"
        container = Container(
            tree,
            [
                (root + "/opt/hutch", "/opt/hutch", False),
                (root + unit, unit, False),
                (root + "/etc/sysusers.d/hutch.conf", "/etc/sysusers.d/hutch.conf", False),
                (root + "/etc/hutch", "/etc/hutch", True),
            ],
            str(tmp_path / "container.log"),
        )
        # what install-service says to run next
        for step in (["systemd-sysusers"], ["systemctl", "daemon-reload"], ["systemctl", "enable", "--now", "hutch"]):
            ran = container.run(*step)
            assert ran.returncode == 0, (step, ran.stdout + ran.stderr)
        # Type=notify: enable --now returned once hutch said READY=1, so it accepts now
        connection = connect(port)
        channel = connection.channel()
        channel.queue_declare("kept", durable=True)
        channel.confirm_delivery()
        channel.basic_publish("", "kept", b"before the kill", pika.BasicProperties(delivery_mode=2))
        connection.close()
        first = show(container, "MainPID", "StatusText", "WatchdogUSec", "WatchdogTimestampMonotonic", "NRestarts")
        assert first["StatusText"] == "serving on 127.0.0.1:%d" % port and first["WatchdogUSec"] == "30s", first

        # systemctl reload: a new user applied; a config that does not load refused, hutch serving on
        with open(config, "a") as f:
            f.write(guest.replace("guest", "ops") % _hash("ops-secret"))
        reloaded = container.run("systemctl", "reload", "hutch")
        assert reloaded.returncode == 0, reloaded.stdout + reloaded.stderr
        pika.BlockingConnection(
            pika.ConnectionParameters("127.0.0.1", port, credentials=pika.PlainCredentials("ops", "ops-secret"))
        ).close()
        with open(config) as f:
            applied = f.read()
        with open(config, "w") as f:
            f.write(applied + "[server2]\n")
        refused = container.run("systemctl", "reload", "hutch")
        assert refused.returncode != 0, refused.stdout + refused.stderr
        connect(port).close()
        with open(config, "w") as f:
            f.write(applied)

        # the watchdog: systemd records each ping (every half of WatchdogSec)
        until(
            "a watchdog ping",
            lambda: (
                show(container, "WatchdogTimestampMonotonic")["WatchdogTimestampMonotonic"]
                != first["WatchdogTimestampMonotonic"]
            ),
            25,
        )

        # SIGKILL: Restart=on-failure starts it again (RestartSec=5), its data folder kept
        os.kill(container.host_pid(int(first["MainPID"])), signal.SIGKILL)
        after = until(
            "a restart",
            lambda: (lambda s: s if s["NRestarts"] == "1" and s["ActiveState"] == "active" else None)(
                show(container, "NRestarts", "ActiveState", "MainPID", "Result")
            ),
            30,
        )
        assert after["MainPID"] != first["MainPID"], after
        connection = connect(port)
        method, _properties, body = connection.channel().basic_get("kept", auto_ack=True)
        connection.close()
        assert body == b"before the kill"

        journal = container.run("journalctl", "--unit=hutch", "--no-pager", "--output=cat").stdout
        stopped = container.run("systemctl", "stop", "hutch")
        assert stopped.returncode == 0 and show(container, "ActiveState")["ActiveState"] == "inactive"
    finally:
        if container is not None:
            container.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(journal[-2500:])
    for line in (
        "INFO listening for AMQP 0-9-1 and 1.0 on 127.0.0.1:%d" % port,  # (journald: no timestamps of its own)
        "INFO reload: users: 2 (added ops)",
        "ERROR reload refused, the running config is kept: /etc/hutch/hutch.toml: unknown section [server2]",
        "hutch.service: Main process exited, code=killed, status=9/KILL",
        "hutch.service: Scheduled restart job, restart counter is at 1.",
    ):
        assert line in journal, line
    assert os.path.exists(sentinel.name), "the machine's /tmp was touched"
    os.remove(sentinel.name)
    with open(os.path.join(tree, "etc/passwd")) as f:
        assert "hutch" not in f.read(), "the container's changes reached the tree"


def _hash(password):
    done = subprocess.run([HUTCH, "passwd", "--password", password], capture_output=True, text=True, timeout=60)
    return done.stdout.strip().split()[-1]
