"""hutch as a systemd service: `hutch install-service --root DIR` installs hutch where the
service's user can run it and writes a unit that `systemd-analyze verify` finds clean and `systemd-analyze security --offline=yes` rates at most
3.0, and leaves the real /etc alone; `hutch serve` under a private NOTIFY_SOCKET says READY=1
only once it accepts (a connection right after it succeeds), pings the watchdog, says STOPPING=1
on SIGTERM, and logs without timestamps under journald (JOURNAL_STREAM)."""

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile

import pika
import pytest
from brokers import BIN, free_port
from paths import ROOT
from service_tree import assert_scripts_name_opt_hutch

HUTCH = os.path.join(BIN, "hutch")
SYSTEMD_ANALYZE = "/usr/bin/systemd-analyze"
REAL_UNIT = "/etc/systemd/system/hutch.service"
REAL_VENV = "/opt/hutch"


def install_service(*args):
    return subprocess.run([HUTCH, "install-service", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.xdist_group("install")
def test_install_service_installs_hutch_where_its_user_can_run_it():
    """Under a root of its own: hutch installed into ROOT/opt/hutch (a virtualenv of the
    system's Python, from a copy of this checkout), a unit that starts it, which an unprivileged
    user (nobody, as the service's hutch would) runs; a command in a 0700 home folder refused in
    one line before anything is written. The root is made under /tmp, open to others, so that
    nobody can reach it (pytest's own folders are root's alone)."""
    before = os.path.exists(REAL_UNIT)
    root = tempfile.mkdtemp(prefix="hutch-service-", dir="/tmp")
    os.chmod(root, 0o755)
    try:
        done = install_service("--root", root, "--board", "rpi")
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.startswith("installing hutch from %s into %s/opt/hutch" % (ROOT, root)), done.stdout
        unit = os.path.join(root, "etc/systemd/system/hutch.service")
        with open(unit) as f:
            text = f.read()
        assert "Type=notify" in text and "User=hutch" in text and "StateDirectory=hutch" in text
        command = "/opt/hutch/bin/python -m hutch.tools.cli serve --board rpi"
        assert "ExecStart=%s --config /etc/hutch/hutch.toml --data /var/lib/hutch\n" % command in text
        assert os.path.exists(REAL_UNIT) == before and not os.path.exists(REAL_VENV)  # the real / untouched
        # what the unit starts, started by a user who is not root, nor in root's group
        nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        ran = subprocess.run(
            nobody + [root + "/opt/hutch/bin/python", "-m", "hutch.tools.cli", "serve", "--board", "rpi", "--help"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert ran.returncode == 0 and "--metrics-port" in ran.stdout, ran.stdout + ran.stderr
        assert_scripts_name_opt_hutch(root)
        # systemd's own check, of the unit with its program where it lies under the root
        checked = os.path.join(root, "hutch.service")
        with open(checked, "w") as f:
            f.write(text.replace("=/opt/hutch/", "=%s/opt/hutch/" % root))
        verify = subprocess.run([SYSTEMD_ANALYZE, "verify", checked], capture_output=True, text=True, timeout=60)
        assert verify.returncode == 0 and verify.stdout + verify.stderr == "", verify.stdout + verify.stderr
        security = subprocess.run(
            [SYSTEMD_ANALYZE, "security", "--offline=yes", "--no-pager", checked],
            capture_output=True,
            text=True,
            timeout=60,
        )
        score = float(re.search(r"Overall exposure level for hutch.service: ([\d.]+)", security.stdout).group(1))
        print("\nsystemd-analyze security --offline=yes: %.1f" % score)
        assert score <= 3.0, security.stdout[-3000:]
        assert subprocess.run([SYSTEMD_ANALYZE, "verify", checked], capture_output=True, timeout=60).returncode == 0

        # again, with a command installed system-wide (--hutch: nothing installed): the config kept
        config = os.path.join(root, "etc/hutch/hutch.toml")
        with open(config, "w") as f:
            f.write("# mine\n")
        os.makedirs(os.path.join(root, "usr/local/bin"))
        shutil.copy("/usr/bin/true", os.path.join(root, "usr/local/bin/hutch"))  # (a program, no script)
        again = install_service("--root", root, "--hutch", "/usr/local/bin/hutch")
        assert again.returncode == 0 and "kept %s" % config in again.stdout, again.stdout + again.stderr
        with open(config) as f:
            assert f.read() == "# mine\n"
        with open(unit) as f:
            assert "ExecStart=/usr/local/bin/hutch serve --config" in f.read()

        # a checkout in a home folder of 0700, as Debian 12 and Raspberry Pi OS make them
        home = os.path.join(root, "home/pi/hutch/.venv/bin")
        os.makedirs(home)
        os.chmod(os.path.join(root, "home/pi"), 0o700)
        with open(os.path.join(home, "hutch"), "w") as f:
            f.write("#!/usr/bin/python3\n")
        os.chmod(os.path.join(home, "hutch"), 0o755)
        os.remove(unit)
        refused = install_service("--root", root, "--hutch", "/home/pi/hutch/.venv/bin/hutch")
        assert refused.returncode == 1 and refused.stdout == "" and not os.path.exists(unit)
        assert refused.stderr == (
            "hutch install-service: user hutch could not run /home/pi/hutch/.venv/bin/hutch: %s/home/pi is 0700 "
            "(only its owner may enter it); install hutch where the service user can run it (the default: its own "
            "virtualenv in /opt/hutch), or give --hutch PATH\n" % root
        ), refused.stderr
        hidden = install_service("--hutch", "/tmp/hutch/bin/hutch")  # (refused before anything is written)
        assert hidden.returncode == 1 and "which the service's PrivateTmp hides from it" in hidden.stderr
        shutil.rmtree(os.path.join(root, "etc"))
        with open(os.path.join(root, "etc"), "w") as f:  # a file where a folder should be
            f.write("")
        unwritable = install_service("--root", root, "--hutch", "/usr/local/bin/hutch")
        assert unwritable.returncode == 1 and "cannot write %s/etc" % root in unwritable.stderr, unwritable.stderr
    finally:
        shutil.rmtree(root, ignore_errors=True)


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
