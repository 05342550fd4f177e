"""`hutch flash` into a unix-port MicroPython board, then the broker that board starts.

The board is `python -m hutch.emulator.unixboard --board-dir DIR` on a pty or on
socket://: MicroPython whose filesystem is DIR, with the REPL mpremote drives.
`hutch flash` builds the bundle from this checkout and installs it with
mpremote as on hardware, writes hutch.json from the config given, and resets
the board; the board runs main.py, which starts the broker from hutch.json;
pika logs in as the config's user. Everything started here is stopped by PID.
"""

import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time

import pika
import pytest
from brokers import BIN, free_port, read_log, wait_for_port
from paths import ROOT

from hutch.core.auth import hash_password

USER, PASSWORD = "sensor", "s3cret"


class UnixBoard:
    """python -m hutch.emulator.unixboard, serving a board folder on a pty or socket://."""

    def __init__(self, tmp_path, line, romfs=False, files=None):
        self.dir = str(tmp_path / "board")
        os.makedirs(self.dir)
        for name, text in (files or {}).items():
            with open(os.path.join(self.dir, name), "w") as f:
                f.write(text)
        self.log_path = str(tmp_path / "board.log")
        self.rom = str(tmp_path / "board.rom") if romfs else None
        command = [sys.executable, "-m", "hutch.emulator.unixboard", "--board-dir", self.dir, "--log", self.log_path]
        command += ["--pty"] if line == "pty" else ["--listen", "127.0.0.1:0"]
        if romfs:
            command += ["--romfs", self.rom, "--romfs-size", str(320 * 1024)]  # (the broker's bundle: 256 KiB)
        self.stderr = open(str(tmp_path / "unixboard.err"), "w")
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=self.stderr)
        ready, _, _ = select.select([self.proc.stdout], [], [], 30)
        assert ready, "unixboard printed no port within 30 s"
        self.port = self.proc.stdout.readline().decode().strip()
        assert self.port.startswith(("/dev/", "socket://")), self.port

    def log(self):
        return read_log(self.log_path) if os.path.exists(self.log_path) else ""

    def stop(self, timeout=15):
        """SIGTERM by PID; the board's MicroPython process goes with it."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("unixboard did not stop within %ds of SIGTERM" % timeout)
        self.proc.stdout.close()
        self.stderr.close()
        return self.proc.returncode


@pytest.fixture(params=["pty", "socket"])
def board(request, tmp_path):
    running = UnixBoard(tmp_path, request.param)
    yield running
    running.stop()
    print(running.log()[-5000:])  # shown by pytest when the test failed


def board_config(tmp_path, port):
    path = str(tmp_path / "board-config.json")
    config = {
        "server": {"bind": "127.0.0.1", "port": port, "data": "/data"},
        "users": {USER: {"password_hash": hash_password(PASSWORD, os.urandom(4))}},
        "auth": {"loopback_users": []},
        "wifi": {"ssid": "greenhouse", "password": "not-on-the-unix-port"},
    }
    with open(path, "w") as f:
        json.dump(config, f)
    return path, config


def hutch_flash(*args, timeout=240):
    result = subprocess.run(
        [os.path.join(BIN, "hutch"), "flash"] + list(args), capture_output=True, text=True, timeout=timeout
    )
    return result.returncode, result.stdout, result.stderr


def wait_for_broker(board, port):
    try:
        wait_for_port(port, board.proc, board.log_path, timeout=60)
    except AssertionError:
        raise AssertionError("the board did not start the broker on %d:\n%s" % (port, board.log()[-3000:]))


def round_trip(port, count=50):
    params = pika.ConnectionParameters(
        "127.0.0.1",
        port,
        credentials=pika.PlainCredentials(USER, PASSWORD),
        heartbeat=5,
        socket_timeout=10,
        stack_timeout=15,
    )
    connection = pika.BlockingConnection(params)
    try:
        assert connection._impl.server_properties["platform"].startswith("MicroPython")
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("readings")
        for i in range(count):
            channel.basic_publish("", "readings", b"reading %d" % i)
        received = []
        for method, _properties, body in channel.consume("readings", inactivity_timeout=10):
            assert method is not None, "no delivery for 10 s after %d of %d" % (len(received), count)
            channel.basic_ack(method.delivery_tag)
            received.append(body)
            if len(received) == count:
                break
        channel.cancel()
        assert received == [b"reading %d" % i for i in range(count)]
    finally:
        connection.close()


def guest_refused(port):
    params = pika.ConnectionParameters(
        "127.0.0.1",
        port,
        credentials=pika.PlainCredentials("guest", "guest"),
        socket_timeout=10,
        stack_timeout=15,
        connection_attempts=1,
    )
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        pika.BlockingConnection(params)


@pytest.mark.long  # tests/conftest.py: started early
def test_flash_installs_the_bundle_and_the_board_serves_from_its_config(board, tmp_path):
    amqp_port = free_port()
    config_path, config = board_config(tmp_path, amqp_port)
    code, out, err = hutch_flash("--board", "unix", "--port", board.port, "--config", config_path)
    assert code == 0, "hutch flash failed:\n%s\n%s\nboard:\n%s" % (out, err, board.log()[-3000:])
    assert "copied hutch/core/broker.mpy" in out, out
    assert "copied hutch.json" in out, out

    # The files landed on the board's filesystem.
    for name in ("main.py", "boot.py"):
        with open(os.path.join(ROOT, "firmware", name)) as f, open(os.path.join(board.dir, name)) as g:
            assert f.read() == g.read(), name
    for package in ("codec", "core", "core/store", "amqp091", "ports", "server", "boards"):
        assert os.path.exists(os.path.join(board.dir, "hutch", package, "__init__.mpy")), package
    assert not os.path.exists(os.path.join(board.dir, "hutch", "tools"))  # the host's command line
    # of the sensor client, only the protocol a bridge speaks upstream through (server/manifest.py)
    assert sorted(os.listdir(os.path.join(board.dir, "hutch", "client"))) == [
        "__init__.mpy",
        "clock.mpy",
        "protocol.mpy",
    ]
    assert not os.path.exists(os.path.join(board.dir, "hutch", "amqp091", "batch.mpy"))  # the C scanner's reader
    with open(os.path.join(board.dir, "hutch.json")) as f:
        written = json.load(f)
    assert written["server"] == dict(config["server"], board="unix")
    assert written["users"] == config["users"] and written["wifi"] == config["wifi"]

    # The flash reset the board: main.py started the broker from hutch.json.
    wait_for_broker(board, amqp_port)
    round_trip(amqp_port)
    guest_refused(amqp_port)
    log = board.log()
    assert "no network module on this board: wifi section skipped" in log, log[-3000:]
    served = log[log.index("board profile unix") :]  # mpremote's probes before it print OSError tracebacks
    assert " ERROR " not in served and "Traceback" not in served, served[-3000:]

    # Again, without --config: the board keeps its hutch.json, unchanged files are skipped
    # (mpremote compares hashes), the broker comes back.
    code, out, err = hutch_flash("--board", "unix", "--port", board.port)
    assert code == 0, "second hutch flash failed:\n%s\n%s" % (out, err)
    unchanged = re.search(r"(\d+) unchanged", out)
    assert unchanged and int(unchanged.group(1)) >= 16, out  # all, unless someone edits the checkout meanwhile
    wait_for_broker(board, amqp_port)
    round_trip(amqp_port, count=5)

    assert board.stop() == 0
    with pytest.raises(OSError):  # the broker went with the board
        socket.create_connection(("127.0.0.1", amqp_port), timeout=2).close()


def test_flash_romfs_writes_the_image_into_the_rom_partition(tmp_path):
    board = UnixBoard(tmp_path, "pty", romfs=True)
    try:
        amqp_port = free_port()
        config_path, _ = board_config(tmp_path, amqp_port)
        code, out, err = hutch_flash("--board", "unix", "--port", board.port, "--config", config_path, "--romfs")
        assert code == 0, "hutch flash --romfs failed:\n%s\n%s\nboard:\n%s" % (out, err, board.log()[-3000:])
        assert "copied ROMFS image" in out, out
        with open(board.rom, "rb") as f:
            assert f.read(3) == b"\xd2\xcd\x31"  # a ROMFS image in the partition
        assert not os.path.exists(os.path.join(board.dir, "hutch"))  # the code is in /rom only
        assert os.path.exists(os.path.join(board.dir, "main.py"))
        wait_for_broker(board, amqp_port)
        round_trip(amqp_port, count=10)
    finally:
        board.stop()
        print(board.log()[-5000:])


def test_flash_config_only_writes_just_hutch_json(tmp_path):
    """For a firmware with hutch frozen in: the config goes on the board, no bundle."""
    board = UnixBoard(tmp_path, "pty")
    try:
        config_path, _ = board_config(tmp_path, free_port())
        code, out, err = hutch_flash(
            "--board", "unix", "--port", board.port, "--config", config_path, "--config-only", "--no-reset"
        )
        assert code == 0, (out, err)
        assert sorted(os.listdir(board.dir)) == ["hutch.json"], os.listdir(board.dir)
        assert "1 copied" in out, out
    finally:
        board.stop()


SENSOR_MAIN = """import hutch.client
from hutch.client.simple import Client
print("sensor program: the client is here,", Client.__name__)
"""


def test_flash_node_installs_the_sensor_client_and_keeps_the_board_s_main_py(tmp_path):
    """--node: the sensor client's bundle (hutch.client and the codec it speaks through), no
    broker, no hutch.json; the board's own main.py, the sensor's program, stays and runs."""
    board = UnixBoard(tmp_path, "pty", files={"main.py": SENSOR_MAIN})
    try:
        code, out, err = hutch_flash("--node", "--port", board.port)
        assert code == 0, "hutch flash --node failed:\n%s\n%s\nboard:\n%s" % (out, err, board.log()[-3000:])
        assert "built the bundle for a sensor node" in out, out
        client = sorted(os.listdir(os.path.join(board.dir, "hutch", "client")))
        assert "simple.mpy" in client and "robust.mpy" in client, client
        assert os.path.exists(os.path.join(board.dir, "hutch", "codec", "wire.mpy"))
        for absent in ("core", "server", "amqp091", "ports"):
            assert not os.path.exists(os.path.join(board.dir, "hutch", absent)), absent
        assert not os.path.exists(os.path.join(board.dir, "hutch.json"))
        with open(os.path.join(board.dir, "main.py")) as f:
            assert f.read() == SENSOR_MAIN  # the sensor's program, not the broker's main.py
        deadline = time.monotonic() + 30
        while "sensor program: the client is here, Client" not in board.log() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "sensor program: the client is here, Client" in board.log(), board.log()[-3000:]
        code, out, err = hutch_flash("--node", "--board", "esp32", "--port", board.port)
        assert code == 1 and "takes no --board" in err, (out, err)
    finally:
        board.stop()
        print(board.log()[-5000:])


def test_flash_errors_are_one_readable_line(tmp_path):
    config_path, _ = board_config(tmp_path, free_port())
    code, out, err = hutch_flash("--board", "unix", "--port", "/dev/ttyUSB-nothing-here", "--config", config_path)
    assert code == 1 and err.startswith("hutch: no board at /dev/ttyUSB-nothing-here"), (out, err)
    assert len(err.strip().splitlines()) == 1, err

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    code, out, err = hutch_flash("--board", "unix", "--port", "socket://127.0.0.1:%d" % closed)
    assert code == 1 and "cannot reach a MicroPython board on socket://127.0.0.1" in err, (out, err)
    assert len(err.strip().splitlines()) == 1, err

    code, out, err = hutch_flash("--board", "nosuch", "--port", "socket://127.0.0.1:1")
    assert code == 1 and "unknown board 'nosuch'" in err, err

    with open(config_path) as f:
        bad = json.load(f)
    bad["limits"] = {"frame_max": 12}
    with open(config_path, "w") as f:
        json.dump(bad, f)
    code, out, err = hutch_flash("--board", "unix", "--port", "socket://127.0.0.1:1", "--config", config_path)
    assert code == 1 and err.startswith("hutch: %s" % config_path) and "frame_max" in err, err
    assert len(err.strip().splitlines()) == 1, err


def test_the_unix_board_takes_ctrl_c_and_resets_like_a_board(tmp_path):
    """The unix board itself, as a terminal sees it: main.py at reset, Ctrl-C, both REPLs, Ctrl-D."""
    main = "import time\nprint('main running')\nwhile True:\n    time.sleep_ms(10)\n"
    board = UnixBoard(tmp_path, "pty", files={"main.py": main})
    try:
        fd = os.open(board.port, os.O_RDWR | os.O_NOCTTY)
        try:

            def expect(text, timeout=20):
                deadline, seen = time.monotonic() + timeout, b""
                while time.monotonic() < deadline:
                    ready, _, _ = select.select([fd], [], [], 0.2)
                    if ready:
                        seen += os.read(fd, 4096)
                        if text in seen:
                            return seen
                raise AssertionError("board did not print %r; it printed %r\nlog:\n%s" % (text, seen, board.log()))

            expect(b"main running")
            os.write(fd, b"\x03")  # Ctrl-C: KeyboardInterrupt in main.py, then the REPL
            assert b"KeyboardInterrupt" in expect(b">>> ")
            os.write(fd, b"6 * 7\r")
            expect(b"42\r\n>>> ")
            os.write(fd, b"\x01")  # the raw REPL, as mpremote drives it
            expect(b"raw REPL; CTRL-B to exit\r\n>")
            os.write(fd, b"print('raw', 1 + 1)\x04")
            expect(b"OKraw 2\r\n\x04\x04>")
            os.write(fd, b"1/0\x04")
            assert b"ZeroDivisionError" in expect(b"\x04>")
            os.write(fd, b"\x02")  # back to the friendly REPL
            expect(b">>> ")
            os.write(fd, b"\x04")  # Ctrl-D: soft reset, main.py runs again
            expect(b"MPY: soft reboot\r\nmain running")
            os.write(fd, b"\x03")
            expect(b">>> ")
        finally:
            os.close(fd)
    finally:
        assert board.stop() == 0


def test_the_bundle_holds_the_front_ends_the_config_serves():
    """hutch flash builds the bundle with AMQP 1.0's and MQTT's front ends only for a config that
        serves them, and the board's Modbus master only for one with a [[device]] (firmware/build.py:
    broker, broker-amqp10, broker-mqtt, broker-modbus, broker-amqp10-mqtt, ...)."""
    from hutch.firmware.build import broker_bundle
    from hutch.tools.flash import served_features

    def bundle(config):
        return broker_bundle(served_features(json.dumps(config) if config is not None else None))

    assert bundle(None) == bundle({"server": {"board": "esp32"}}) == "broker"
    assert bundle({"server": {"amqp10": True}}) == "broker-amqp10"
    assert bundle({"server": {"mqtt": True}}) == bundle({"server": {"mqtt_port": 1884}}) == "broker-mqtt"
    assert bundle({"listener": [{"port": 1883, "protocol": "mqtt"}]}) == "broker-mqtt"
    assert bundle({"server": {"amqp10": True, "mqtt": True}}) == "broker-amqp10-mqtt"
    assert bundle({"device": [{"name": "probe", "uri": "modbus+rtu://uart2"}]}) == "broker-modbus"
    assert (
        bundle({"server": {"mqtt_ws_port": 8083}})
        == bundle({"server": {"mqtt": False, "mqtt_port": 1884}})
        == "broker-mqtt"
    )
    mqtt_up = {"uri": ["amqp://cloud", "mqtts://cloud:8883"], "topic": "t"}
    assert bundle({"bridge": [mqtt_up], "device": [{"name": "probe"}]}) == "broker-mqtt-modbus"
    assert bundle({"bridge": [{"uri": "amqps10://hub.example/"}, "not a table"]}) == "broker"
