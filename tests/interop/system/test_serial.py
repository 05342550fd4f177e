"""AMQP over a serial line: `hutch serve --serial PTY`, a sensor on the far end, pika on TCP.

The line (tests/support/serial_line.py) joins two ptys at 11,520 bytes/s each way, as
a UART at 115,200 baud 8N1 does, and can damage bytes. The sensor is
tests/support/serial_sensor.py (codec/link.py and the client's protocol, client/protocol.py), run
under MicroPython's unix port (from the node bundle, the tty opened as a file) or CPython
(pyserial). It
publishes with confirms to a queue that a pika consumer on TCP drains; every
body carries its number and a pattern, so a damaged message cannot pass.
"""

import os
import re
import subprocess
import sys
import time

import pytest
from brokers import BIN, RunningBroker, pika_connection, wait_until
from micropython_env import micropython, node_root, package_root
from paths import SUPPORT
from serial_line import SerialLine
from serial_sensor import body  # the bodies the sensor sends

SENSOR = os.path.join(SUPPORT, "serial_sensor.py")
HUTCH = os.path.join(BIN, "hutch")


@pytest.fixture
def line():
    running = SerialLine(rate=11520, seed=7).start()
    yield running
    running.stop()


def start_broker(tmp_path, line, *extra):
    broker = RunningBroker([HUTCH, "serve", "--serial", line.a_path] + list(extra), tmp_path).start()
    deadline = time.monotonic() + 10
    while "AMQP 0-9-1 over serial on" not in broker.log():
        assert time.monotonic() < deadline, broker.log()
        time.sleep(0.05)
    return broker


@pytest.fixture
def broker(tmp_path, line):
    running = start_broker(tmp_path, line)
    yield running
    code = running.stop()
    assert not running.errors(), "broker logged errors:\n" + running.log()[-5000:]
    assert code == 0, running.log()[-3000:]


def run_sensor(tmp_path, line, count, size=64, runtime="micropython", timeout=120, expect_rc=0, **opts):
    """Run the sensor to its end; its output lines."""
    if runtime == "micropython":
        # the node bundle, plus the serial port and clock the script opens the tty with
        folder = os.path.join(str(tmp_path), "sensor")
        root = os.path.join(folder, "node")
        if not os.path.exists(root):
            root = node_root(folder, ("ports/__init__.py", "ports/clock.py", "ports/uart.py"))
        command = [micropython(), SENSOR]
        env = dict(os.environ, MICROPYPATH=root + ":.frozen")
    else:
        command = [sys.executable, SENSOR]
        env = None
    command += [line.b_path, str(count), str(size)] + ["%s=%s" % kv for kv in opts.items()]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        raise AssertionError("the sensor did not finish within %ds:\n%s" % (timeout, out[-3000:]))
    assert proc.returncode == expect_rc, out[-3000:]
    return out.splitlines()


def consumer(broker):
    conn = pika_connection(broker, heartbeat=60, blocked_connection_timeout=None)
    channel = conn.channel()
    channel.queue_declare("sensor")
    return conn, channel


def drain(channel, count, size=64, quiet=3):
    """The message numbers in the queue, checking every body; stops after `quiet` seconds of silence."""
    seen = []
    for method, _properties, data in channel.consume("sensor", inactivity_timeout=quiet):
        if method is None:
            break
        number = int(data[:8])
        assert data == body(number, size), "message %d arrived damaged: %r" % (number, data)
        seen.append(number)
        channel.basic_ack(method.delivery_tag)
        if len(seen) == count:
            break
    channel.cancel()
    return seen


def rate(lines):
    words = [line.split() for line in lines if line.startswith("rate ")][0]
    return int(words[1]), int(words[2])


@pytest.mark.parametrize("runtime", ["micropython", "cpython"])
def test_sensor_publishes_through_the_link_to_a_tcp_consumer(tmp_path, line, broker, runtime):
    conn, channel = consumer(broker)
    count = 500
    lines = run_sensor(tmp_path, line, count, runtime=runtime)
    assert "confirmed %d" % count in lines and lines[-1] == "done", lines
    assert drain(channel, count) == list(range(count))
    conn.close()
    per_second, payload = rate(lines)
    wire = line.stats()["b->a"]["bytes"]
    print(
        "\n%s sensor, 115,200 baud, %d messages of 64 bytes with confirms: %d msg/s, %d payload bytes/s "
        "(%d bytes on the line, %.0f per message)" % (runtime, count, per_second, payload, wire, wire / count)
    )
    assert per_second > 40  # the line carries ~90/s; far less means the link is stalling
    assert "%s:0: connection open (user 'guest'" % line.a_path in broker.log()


def test_damaged_line_never_delivers_a_damaged_message(tmp_path, line, broker):
    conn, channel = consumer(broker)
    # about one byte in 2,000 damaged each way: one link frame in ten is lost
    line.set_damage(corrupt=3e-4, drop=1e-4, garbage=1e-4)
    count = 400
    lines = run_sensor(tmp_path, line, count)
    assert "confirmed %d" % count in lines, lines
    assert drain(channel, count) == list(range(count))
    conn.close()
    stats = line.stats()
    assert sum(stats["b->a"][k] for k in ("corrupted", "dropped", "garbage")) > 20, stats
    link = [line for line in lines if line.startswith("stats ")][0]
    assert int(re.search(r"retransmits=(\d+)", link).group(1)) > 0, link
    print("\ndamaged line: %s; sensor %s; %d msg/s" % (stats, link, rate(lines)[0]))
    code = broker.stop()
    log = broker.log()
    assert code == 0
    found = re.search(r"link \d+ frames sent, \d+ received, (\d+) CRC errors, (\d+) resyncs", log)
    assert found and int(found.group(1)) + int(found.group(2)) > 0, log[-2000:]
    assert "closing connection" not in log and "FRAME_ERROR" not in log, log[-3000:]
    broker.stop = lambda: 0  # the fixture's stop: already done


def test_sensor_consumes_what_a_tcp_client_publishes(tmp_path, line, broker):
    """The other direction: deliveries larger than a link frame, with acks, on a damaged line."""
    conn, channel = consumer(broker)
    count, size = 60, 1500
    for i in range(count):
        channel.basic_publish("", "sensor", body(i, size))
    line.set_damage(corrupt=2e-4, drop=1e-4, garbage=1e-4)
    lines = run_sensor(tmp_path, line, 0, size, consume=count)
    consumed = [line.split() for line in lines if line.startswith("consumed ")]
    assert consumed and int(consumed[0][1]) == count, lines
    print("\nsensor consuming %d-byte messages: %s msg/s, %s payload bytes/s" % (size, consumed[0][2], consumed[0][3]))
    assert channel.queue_declare("sensor", passive=True).method.message_count == 0  # all acked
    conn.close()


def test_line_outage_and_garbage_storm_recover_by_themselves(tmp_path, line, broker):
    conn, channel = consumer(broker)
    count = 400
    proc_lines = []

    def sensor():
        proc_lines.extend(run_sensor(tmp_path, line, count, runtime="cpython"))

    import threading

    thread = threading.Thread(target=sensor)
    thread.start()
    # mid-stream: about a third of the messages (~123 bytes each on the line) went over
    wait_until(lambda: line.stats()["b->a"]["bytes"] > 16000, 60, what="the sensor publishing")
    assert thread.is_alive(), proc_lines
    # the outage and the noise last this long on purpose: these sleeps are the scenario
    line.set_damage(drop=1.0)  # the cable is pulled for a second and a half
    time.sleep(1.5)
    line.set_damage(garbage=0.05, corrupt=0.01)  # then a burst of noise
    time.sleep(1)
    line.set_damage()
    thread.join(120)
    assert not thread.is_alive()
    assert "confirmed %d" % count in proc_lines, proc_lines
    assert drain(channel, count) == list(range(count))
    conn.close()


def test_restarted_sensor_is_detected_and_its_new_connection_works(tmp_path, line, broker):
    conn, channel = consumer(broker)
    first = run_sensor(tmp_path, line, 1000, die_after=150, expect_rc=3)
    died = int([line for line in first if line.startswith("died ")][0].split()[1])
    assert died >= 150
    second = run_sensor(tmp_path, line, 100, first=5000)
    assert "confirmed 100" in second, second
    seen = drain(channel, 10**6)
    conn.close()
    before = [n for n in seen if n < 5000]
    # the first life's messages: everything confirmed, maybe a few published after, in order,
    # and not the one whose frame was cut in half by the power loss
    assert before == list(range(len(before))) and died <= len(before) <= died + 40, (died, before[-5:])
    assert [n for n in seen if n >= 5000] == list(range(5000, 5100))
    assert 999999 not in seen
    log = broker.log()
    assert "the peer restarted; its AMQP connection is gone" in log, log[-3000:]
    assert log.count("%s:0: connection open (user 'guest'" % line.a_path) == 2


def test_amqp_connections_follow_each_other_on_one_link(tmp_path, line, broker):
    conn, channel = consumer(broker)
    lines = run_sensor(tmp_path, line, 90, connections=3)
    assert ["confirmed 30", "confirmed 60", "confirmed 90"] == [line for line in lines if line.startswith("confirmed")]
    assert drain(channel, 90) == list(range(90))
    conn.close()
    log = broker.log()
    assert log.count("%s:0: connection open (user 'guest'" % line.a_path) == 3
    assert "restarted" not in log


def test_serial_devices_from_the_config_file_and_a_missing_one(tmp_path, line):
    missing = str(tmp_path / "no-such-tty")
    config = tmp_path / "hutch.toml"
    config.write_text('[server]\nserial = ["%s", "%s"]\nbaud = 115200\n' % (line.a_path, missing))
    broker = RunningBroker([HUTCH, "serve", "--config", str(config)], tmp_path).start()
    try:
        deadline = time.monotonic() + 10
        while "cannot open" not in broker.log() or "over serial on %s" % line.a_path not in broker.log():
            assert time.monotonic() < deadline, broker.log()
            time.sleep(0.05)
        conn, channel = consumer(broker)  # TCP is unaffected
        lines = run_sensor(tmp_path, line, 20, runtime="cpython")
        assert "confirmed 20" in lines
        assert drain(channel, 20) == list(range(20))
        conn.close()
    finally:
        assert broker.stop() == 0
    assert not broker.errors(), broker.log()
    assert "serial %s: cannot open" % missing in broker.log()


@pytest.mark.parametrize(
    "value, message",
    [
        ('serial = "/dev/ttyUSB0"\nbaud = 0', "baud must be a positive number"),
        ("serial = [1, 2]", "serial must be a list of device names"),
    ],
)
def test_bad_serial_settings_are_refused(tmp_path, value, message):
    config = tmp_path / "hutch.toml"
    config.write_text("[server]\n%s\n" % value)
    result = subprocess.run([HUTCH, "serve", "--config", str(config)], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and message in result.stdout + result.stderr, result


def test_serial_options_parse():
    import argparse

    from hutch.server import options

    parser = argparse.ArgumentParser()
    options.add_options(parser)
    opts = options.settings(
        parser.parse_args(["--serial", "/dev/ttyUSB0", "--serial", "/dev/ttyUSB1,/dev/ttyACM0", "--baud", "57600"])
    )
    assert opts["serial"] == ["/dev/ttyUSB0", "/dev/ttyUSB1", "/dev/ttyACM0"] and opts["baud"] == 57600
    opts = options.settings(parser.parse_args([]))
    assert opts["serial"] == [] and opts["baud"] == 115200


def test_serial_option_takes_a_boards_uart_pins():
    """--serial uart2 on the esp32 profile opens UART 2 on the pins boards/esp32.py wires;
    a name no profile entry has is opened as given."""
    import argparse

    from hutch.server import options

    parser = argparse.ArgumentParser()
    options.add_options(parser)
    opts = options.settings(parser.parse_args(["--board", "esp32", "--serial", "uart2,uart1"]))
    assert opts["serial"] == [{"uart": 2, "tx": 17, "rx": 16, "baudrate": 115200}, "uart1"]
    opts = options.settings(parser.parse_args(["--board", "rp2-pico-w", "--serial", "0", "--baud", "9600"]))
    assert opts["serial"] == [{"uart": 0, "tx": 0, "rx": 1, "baudrate": 9600}]
    opts = options.settings(parser.parse_args(["--board", "rpi", "--serial", "/dev/serial0,/dev/ttyUSB0"]))
    assert opts["serial"] == [{"device": "/dev/serial0", "baudrate": 115200}, "/dev/ttyUSB0"]


def test_micropython_broker_serves_a_serial_sensor(tmp_path, line):
    """`micropython -m hutch.server.serve --serial PTY`: the port reads the tty through asyncio streams."""
    import signal

    env = dict(os.environ, MICROPYPATH=package_root(tmp_path) + ":.frozen")
    broker = RunningBroker(
        [micropython(), "-m", "hutch.server.serve", "--serial", line.a_path], tmp_path, env=env
    ).start()
    try:
        conn, channel = consumer(broker)
        line.set_damage(corrupt=2e-4, drop=1e-4, garbage=1e-4)
        lines = run_sensor(tmp_path, line, 200, runtime="cpython")
        assert "confirmed 200" in lines, lines
        assert drain(channel, 200) == list(range(200))
        conn.close()
        print("\nMicroPython broker, damaged line: %d msg/s" % rate(lines)[0])
    finally:
        if broker.proc.poll() is None:
            broker.proc.send_signal(signal.SIGINT)  # MicroPython stops on Ctrl-C
            try:
                broker.proc.wait(15)
            except subprocess.TimeoutExpired:
                broker.proc.kill()
                broker.proc.wait()
        broker.stop()  # has exited: this closes the log
    log = broker.log()
    assert broker.proc.returncode == 0, log[-3000:]
    assert "%s:0: connection open (user 'guest'" % line.a_path in log and "serial %s: stopped" % line.a_path in log
    assert not broker.errors(), log[-3000:]


def test_a_connection_starts_at_the_protocol_header():
    """Bytes before "AMQP" (the tail of a closed connection) are skipped, even when the header
    arrives split over two reads."""
    import asyncio

    from hutch.core.broker import Broker
    from hutch.ports.serial import SerialServer
    from hutch.server.frontends import FrontEnds
    from hutch.server.runtime import Runtime

    broker = Broker()
    runtime = Runtime(broker, broker.log)
    server = SerialServer(runtime, FrontEnds(runtime), "/dev/ttyTEST")
    server._event = asyncio.Event()
    server._feed(b"\x01\x00\x00\x00\x00\x00\x04\x00\x0a\x00\x33\xce then AM")
    assert server.conn is None
    server._feed(b"QP\x00\x00\x09\x01")
    assert server.conn is not None
    start = server.conn.take_output()
    assert start[:1] == b"\x01" and start[7:11] == b"\x00\x0a\x00\x0a"  # connection.start
    assert server._skipped == 0 and server.conn.name == "/dev/ttyTEST:0"
