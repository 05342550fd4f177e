"""hutch as a systemd service: `hutch install-service --root DIR` writes a unit that
`systemd-analyze verify` finds clean and `systemd-analyze security --offline=yes` rates at most
3.0, and leaves the real /etc alone; `hutch serve` under a private NOTIFY_SOCKET says READY=1
only once it accepts (a connection right after it succeeds), pings the watchdog, says STOPPING=1
on SIGTERM, and logs without timestamps under journald (JOURNAL_STREAM)."""

import os
import re
import signal
import socket
import subprocess

import pika
from brokers import BIN, free_port

HUTCH = os.path.join(BIN, "hutch")
SYSTEMD_ANALYZE = "/usr/bin/systemd-analyze"
REAL_UNIT = "/etc/systemd/system/hutch.service"


def test_install_service_writes_a_hardened_unit_under_root(tmp_path):
    before = os.path.exists(REAL_UNIT)
    done = subprocess.run([HUTCH, "install-service", "--root", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    unit = tmp_path / "etc/systemd/system/hutch.service"
    text = unit.read_text()
    assert "Type=notify" in text and "User=hutch" in text and "StateDirectory=hutch" in text
    assert "ExecStart=%s serve --config /etc/hutch/hutch.toml --data /var/lib/hutch" % HUTCH in text
    assert (tmp_path / "etc/sysusers.d/hutch.conf").read_text().startswith("# hutch's own user")
    assert os.path.exists(REAL_UNIT) == before  # the real /etc untouched
    verify = subprocess.run([SYSTEMD_ANALYZE, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert verify.returncode == 0 and verify.stdout + verify.stderr == "", verify.stdout + verify.stderr
    security = subprocess.run(
        [SYSTEMD_ANALYZE, "security", "--offline=yes", "--no-pager", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    score = float(re.search(r"Overall exposure level for hutch.service: ([\d.]+)", security.stdout).group(1))
    print("\nsystemd-analyze security --offline=yes: %.1f" % score)
    assert score <= 3.0, security.stdout[-3000:]
    config = tmp_path / "etc/hutch/hutch.toml"
    config.write_text("# mine\n")
    again = subprocess.run([HUTCH, "install-service", "--root", str(tmp_path)], capture_output=True, text=True)
    assert again.returncode == 0 and "kept %s" % config in again.stdout and config.read_text() == "# mine\n"
    unwritable = subprocess.run(
        [HUTCH, "install-service", "--root", str(config)], capture_output=True, text=True
    )  # a file where a folder should be
    assert unwritable.returncode == 1 and "cannot write %s/etc" % config in unwritable.stderr, unwritable.stderr


def test_ready_only_once_it_accepts_then_the_watchdog_then_stopping(tmp_path):
    path = str(tmp_path / "notify")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(path)
    listener.settimeout(30)
    port = free_port()
    env = dict(os.environ, NOTIFY_SOCKET=path, WATCHDOG_USEC="400000", JOURNAL_STREAM="8:12345")
    broker = subprocess.Popen(
        [HUTCH, "serve", "--bind", "127.0.0.1", "--port", str(port), "--data", str(tmp_path / "data")],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        said = [listener.recv(4096).decode()]
        while "READY=1" not in said[-1]:
            said.append(listener.recv(4096).decode())
        # READY=1: a client connects at once
        pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port, connection_attempts=1)).close()
        assert said[0] == "STATUS=starting: recovering the journal", said
        assert said[-1] == "READY=1\nSTATUS=serving on 127.0.0.1:%d" % port, said
        pings = 0
        while pings < 3:
            message = listener.recv(4096).decode()
            assert message == "WATCHDOG=1", message
            pings += 1
        broker.send_signal(signal.SIGTERM)
        while True:
            message = listener.recv(4096).decode()
            if message != "WATCHDOG=1":
                break
        assert message.startswith("STOPPING=1\n"), message
        assert broker.wait(30) == 0
        log = broker.stderr.read()
        assert "INFO stopped" in log and not re.search(r"^\d{4}-\d\d-\d\d", log, re.M), log  # journald stamps it
    finally:
        if broker.poll() is None:
            broker.kill()
            broker.wait()
        listener.close()
