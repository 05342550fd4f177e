"""[[device]]s polled from real Modbus devices: pymodbus's server (tests/support/modbus_device.py)
answers each read with values that say which read of its device it is, so a reading shows
which poll it came from and the two registers of one poll agree.

- Two devices behind one Modbus TCP address (two units: one line, one request at a time) are
  polled; hutch is SIGKILLed mid-run and started again: every reading is there once, each
  device's polls numbered without a repeat through the restart, each poll's two values its
  own read's, and each device's status said up.
- A device that stops answering: its status message and one warning, the other device polled
  on time meanwhile, then its status back up once it answers again.
- Two devices on one RS-485 line (Modbus RTU over a pty pair Debian's socat makes) are both
  polled, one request at a time, each poll its own read's; a third, whose answers come with a
  bad CRC, is down for an error (counted as one) and costs them nothing.
- `hutch ctl reload` adds, removes and changes devices: the removed one is no longer polled, the
  added one is, the changed one goes on with its new interval and its poll numbers.
- A command to a writable register (cmd.DEVICE.REGISTER) sets it and is answered on its
  reply_to; a value its type cannot hold, a write the device refuses and an unknown register
  are answered with why; a user whose topic permissions do not allow cmd.* cannot send one.
- A config mistake is one line naming the device and the key, and exit code 2.
"""

import collections
import json
import os
import re
import subprocess
import time
import urllib.request

import pika
import pytest
from brokers import BIN, free_port, hutch_serve, sigkill, stop_all, wait_until
from modbus_support import ModbusDevices, PtyPair, bound_queue, check_polls, drain, epoch, polls_by_device
from modbus_support import device_table as modbus_table
from scrapes import dom_figures

INTERVAL = 0.2  # seconds between a device's polls


def device_table(name, port, unit, uri=None):
    """A [[device]] of modbus_support's, polled every INTERVAL, behind the TCP port unless uri."""
    return modbus_table(name, uri or "modbus+tcp://127.0.0.1:%d" % port, unit, INTERVAL)


def two_devices_polled(tmp_path):
    """probe-1 and probe-2, units 1 and 2 behind one Modbus TCP address, polled by a broker with
    a queue for what they publish: (the devices, the broker, the port), both devices up."""
    port = free_port()
    devices = ModbusDevices(port, [1, 2])
    broker = hutch_serve(tmp_path, device_table("probe-1", port, 1) + device_table("probe-2", port, 2))
    try:
        broker.start()
        bound_queue(broker)
        wait_until(lambda: broker.log().count(": up (modbus+tcp") == 2, 10, what="both devices up")
    except BaseException:
        stop_all(*([broker] if broker.proc is not None else []), devices)
        raise
    return devices, broker, port


def test_polled_readings_arrive_once_each_numbered_through_a_sigkill(tmp_path):
    devices, broker, _port = two_devices_polled(tmp_path)
    try:
        time.sleep(10 * INTERVAL)
        sigkill(broker)  # (a power cut: what the journal had not synced is lost, never repeated)
        broker.start()
        time.sleep(10 * INTERVAL)
        broker.stop()
        assert not broker.errors(), broker.errors()
        polls, statuses = polls_by_device(drain(broker.start()))
    finally:
        stop_all(broker, devices)
    check_polls(polls)
    for device in ("probe-1", "probe-2"):
        numbers = sorted(polls[device])
        assert len(numbers) >= 10, (device, numbers)
        # the second run's numbers start past the first's: none given twice
        assert numbers == sorted(set(numbers)), numbers
        assert max(numbers) > 1000, "the restart numbered on past the first run's reserved block: %s" % numbers
    ups = collections.Counter(s["device"] for s in statuses if s["state"] == "up")
    assert ups["probe-1"] >= 2 and ups["probe-2"] >= 2, statuses  # (each start: up at its first poll)


def test_a_device_that_stops_answering_is_down_while_the_other_is_polled_on_time(tmp_path):
    port_1, port_2, metrics_port = free_port(), free_port(), free_port()
    device_1, device_2 = ModbusDevices(port_1, [1]), ModbusDevices(port_2, [1])
    config = device_table("probe-1", port_1, 1) + device_table("probe-2", port_2, 1)
    broker = hutch_serve(tmp_path, config + "\n[metrics]\nport = %d\n" % metrics_port)
    try:
        broker.start()
        bound_queue(broker)
        wait_until(lambda: broker.log().count(": up (modbus+tcp") == 2, 10, what="both devices up")
        drain(broker)
        device_2.stop()
        wait_until(lambda: "device probe-2: down" in broker.log(), 10, what="probe-2 down")
        down_at = time.time()
        time.sleep(3.0)
        during = drain(broker)
        metrics = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % metrics_port, timeout=10).read().decode()
        ctl = subprocess.run(
            [os.path.join(BIN, "hutch"), "ctl", "devices", "--data", broker.data],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        page = dom_figures("http://127.0.0.1:%d/" % metrics_port, str(tmp_path / "chromium"))
        device_2 = ModbusDevices(port_2, [1])
        wait_until(lambda: "device probe-2: back up" in broker.log(), 10, what="probe-2 back up")
        time.sleep(2 * INTERVAL)
        after = drain(broker)
        log = broker.log()
    finally:
        stop_all(broker, device_1, device_2)
    polls, statuses = polls_by_device(during)
    check_polls(polls)
    # probe-1 went on at its interval (3 s at 0.2 s: 15 polls; a loaded machine may lose a few)
    assert len(polls["probe-1"]) >= 10, sorted(polls["probe-1"])
    assert not [n for n in polls["probe-2"] if epoch(polls["probe-2"][n]["moisture"]["ts"]) > down_at], polls["probe-2"]
    down = [s for s in statuses if s["device"] == "probe-2"]
    assert [s["state"] for s in down] == ["down"] and down[0]["reason"].startswith(("gone: ", "timeout: ")), down
    assert log.count("device probe-2: down") == 1, log  # said once, however often it is polled meanwhile
    after_polls, after_statuses = polls_by_device(after)
    assert [s["state"] for s in after_statuses if s["device"] == "probe-2"] == ["up"], after_statuses
    assert after_polls["probe-2"], "probe-2 polled again once it answers"
    assert "reason" not in after_statuses[-1] and after_statuses[-1]["ts"].endswith("Z")
    # what is counted: on /metrics, and as `hutch ctl devices` shows it
    assert 'hutch_device_up{device="probe-2"} 0' in metrics and 'hutch_device_up{device="probe-1"} 1' in metrics
    gone = re.search(r'hutch_device_polls_total\{device="probe-2",result="gone"\} (\d+)', metrics)
    ok = re.search(r'hutch_device_polls_total\{device="probe-1",result="ok"\} (\d+)', metrics)
    assert gone and int(gone.group(1)) >= 2 and ok and int(ok.group(1)) >= 15, metrics
    assert re.search(r'hutch_device_poll_seconds_count\{device="probe-1"\} \d+', metrics), metrics
    assert ctl.returncode == 0 and "devices: 2" in ctl.stdout, ctl.stdout + ctl.stderr
    assert re.search(
        r"probe-2 \(modbus\+tcp://127\.0\.0\.1:\d+, unit 1\): down for [\d.]+ s \((gone|timeout): ", ctl.stdout
    ), ctl.stdout
    assert re.search(r"probe-1 \(.*\): up for .*; last poll #\d+, [\d.]+ s ago", ctl.stdout), ctl.stdout
    # ... and on the status page, in headless Chromium
    assert page["devices.probe-2.state"] == "down" and page["devices.probe-1.state"] == "up", page
    assert page["devices.probe-2.reason"].startswith(("gone: ", "timeout: ")) and page["devices.probe-1.reason"] == "-"
    assert int(page["devices.probe-2.failed"]) >= 2 and int(page["devices.probe-1.ok"]) >= 15, page
    assert page["devices.probe-1.last"].startswith("#"), page
    # how long each has been up or down, on the page's clock: seconds, never a negative age
    assert re.fullmatch(r"\d+ s", page["devices.probe-2.for"]) and re.fullmatch(r"\d+ s", page["devices.probe-1.for"])
    assert not [value for value in page.values() if re.search(r"(^|\s)-\d", value)], page
    assert log.count("Failed to connect") == 0 and log.count("Repeating") == 0, "pymodbus's own lines: %s" % log


def test_two_devices_on_one_rs485_line_are_each_polled_and_a_garbled_one_is_counted(tmp_path):
    """Units 1 and 2 answer; unit 3's answers come with a bad CRC (noise): it is down for an
    error, counted as such, while the others are polled on time, and nothing raises."""
    line = PtyPair(tmp_path)
    devices = ModbusDevices(None, [1, 2, "garbled=3"], line=line.ends[0])
    uri = "modbus+rtu://%s?baudrate=19200" % line.ends[1]
    tables = [device_table(name, None, unit, uri) for name, unit in (("soil-1", 1), ("soil-2", 2), ("noisy", 3))]
    broker = hutch_serve(tmp_path, "".join(tables))
    try:
        broker.start()
        bound_queue(broker)
        wait_until(lambda: broker.log().count(": up (modbus+rtu") == 2, 10, what="both devices up")
        wait_until(lambda: "device noisy: down" in broker.log(), 10, what="the noisy device down")
        time.sleep(10 * INTERVAL)
        polls, statuses = polls_by_device(drain(broker))
        ctl = subprocess.run(
            [os.path.join(BIN, "hutch"), "ctl", "devices", "--data", broker.data, "--json"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert not broker.errors(), broker.errors()
    finally:
        stop_all(broker, devices, line)
    check_polls({name: polls[name] for name in ("soil-1", "soil-2")})
    # 2 s at 0.2 s each; a poll is two requests of about 10 ms at 19,200 baud, one at a time on the line
    assert len(polls["soil-1"]) >= 6 and len(polls["soil-2"]) >= 6, {d: sorted(p) for d, p in polls.items()}
    assert "noisy" not in polls
    noisy = [s for s in statuses if s["device"] == "noisy"]
    assert [s["state"] for s in noisy] == ["down"] and noisy[0]["reason"].startswith("error: "), noisy
    assert "that were no answer (a bad CRC, or noise on the line)" in noisy[0]["reason"], noisy
    counted = {d["name"]: d["polls"] for d in json.loads(ctl.stdout)["devices"]}
    assert counted["noisy"]["error"] >= 1 and counted["noisy"]["ok"] == 0, counted
    assert counted["soil-1"]["error"] == counted["soil-2"]["error"] == 0, counted


def test_a_reload_adds_removes_and_changes_devices(tmp_path):
    devices, broker, port = two_devices_polled(tmp_path)
    try:
        time.sleep(5 * INTERVAL)
        before, _ = polls_by_device(drain(broker))
        changed = device_table("probe-1", port, 1).replace("interval = %s" % INTERVAL, "interval = 0.4")
        (tmp_path / "hutch.toml").write_text(changed + device_table("probe-3", port, 2))
        reload = subprocess.run(
            [os.path.join(BIN, "hutch"), "ctl", "reload", "--data", broker.data],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        reloaded_at = time.time()
        time.sleep(10 * INTERVAL)
        after, statuses = polls_by_device(drain(broker))
        assert not broker.errors(), broker.errors()
    finally:
        stop_all(broker, devices)
    assert reload.returncode == 0, reload.stdout + reload.stderr
    said = reload.stdout.splitlines()
    assert "device probe-2 removed" in said and "device probe-3 added" in said, said
    assert "device probe-1 restarted with its new table (interval changed)" in said, said
    late = [n for n, poll in after.get("probe-2", {}).items() if epoch(poll["moisture"]["ts"]) > reloaded_at]
    assert not late, "probe-2 polled after its removal: %s" % late
    assert after["probe-3"] and [s["state"] for s in statuses if s["device"] == "probe-3"] == ["up"], statuses
    # probe-1 numbered on from where it was, at its new interval: 2 s at 0.4 s
    numbers = sorted(before["probe-1"]) + sorted(after["probe-1"])
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers))), numbers
    since = [n for n, poll in after["probe-1"].items() if epoch(poll["moisture"]["ts"]) > reloaded_at]
    assert 3 <= len(since) <= 7, sorted(since)
    check_polls(after)


COMMANDED = """
[users.admin]
password_hash = "qATcBy2MZRgLPdclaT6GOoHfrsf0Tj2cISm8IrktPZ43E1MW"

[users.sensor]
password_hash = "3yPudymwzH7quov3AvyvH2fdr5gddkKIOXfQzjjaM2n2kg6k"
topic_permissions = { "amq.topic" = { write = '^sensors\\.', read = '.*' } }

[[device]]
name = "boiler"
uri = "modbus+tcp://127.0.0.1:%d"
interval = 0.2
registers = [
  { name = "setpoint", address = 40, type = "float32", writable = true },
  { name = "level", address = 50, type = "int16", scale = 0.5, writable = true },
  { name = "locked", address = 63, writable = true },
  { name = "pump", address = 3, kind = "coil", writable = true },
]
"""


def command(broker, user, password, key, body):
    """Publish a command with a reply queue; its answer as JSON (or the channel's refusal)."""
    credentials = pika.PlainCredentials(user, password)
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port, credentials=credentials))
    try:
        channel = conn.channel()
        reply = channel.queue_declare("", exclusive=True).method.queue
        props = pika.BasicProperties(reply_to=reply, correlation_id="c-%s" % key)
        channel.basic_publish("amq.topic", key, body, props)
        deadline = time.time() + 10
        while time.time() < deadline:
            method, got, answer = channel.basic_get(reply, auto_ack=True)
            if method is not None:
                assert got.correlation_id == "c-%s" % key and got.content_type == "application/json", got
                return json.loads(answer)
            time.sleep(0.05)
        raise AssertionError("no answer to %s" % key)
    finally:
        if conn.is_open:
            conn.close()


def test_a_command_sets_a_writable_register_and_is_answered(tmp_path):
    port = free_port()
    devices = ModbusDevices(port, [1])
    broker = hutch_serve(tmp_path, COMMANDED % port)
    try:
        broker.start()
        wait_until(lambda: "device boiler: up" in broker.log(), 10, what="the device up")
        said = {
            "setpoint": command(broker, "admin", "edge-secret", "cmd.boiler.setpoint", b"42.5"),
            "level": command(broker, "admin", "edge-secret", "cmd.boiler.level", b'{"value": -3.5}'),
            "pump": command(broker, "admin", "edge-secret", "cmd.boiler.pump", b"true"),
            "not a number": command(broker, "admin", "edge-secret", "cmd.boiler.setpoint", b'"hot"'),
            "too big": command(broker, "admin", "edge-secret", "cmd.boiler.level", b"40000"),
            "half a step": command(broker, "admin", "edge-secret", "cmd.boiler.level", b"0.25"),
            "refused": command(broker, "admin", "edge-secret", "cmd.boiler.locked", b"1"),
        }
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            command(broker, "sensor", "greenhouse", "cmd.boiler.setpoint", b"99")
        bound_queue_as(broker, "admin", "edge-secret")
        time.sleep(4 * INTERVAL)
        readings = drain_as(broker, "admin", "edge-secret")
        log = broker.log()
    finally:
        stop_all(broker, devices)
    assert said["setpoint"] == {"device": "boiler", "register": "setpoint", "value": 42.5, "result": "ok"}, said
    assert said["level"]["result"] == "ok" and said["pump"]["result"] == "ok", said
    assert said["not a number"]["error"] == "setpoint is float32: it takes a number, not 'hot'", said
    assert said["too big"]["error"] == "level is int16: 40000 is out of its range", said
    assert said["half a step"]["error"] == "level is int16: 0.25 is not a whole number of its steps", said
    assert said["refused"]["error"].startswith("exception: exception code 2 to a write of locked at 63"), said
    assert refused.value.args[0] == 403 and "cmd.boiler.setpoint" in refused.value.args[1], refused.value.args
    # what the device holds now, as the polls read it
    last = {}
    for _key, _headers, body in readings:
        if "register" in body:
            last[body["register"]] = body["value"]
    assert last["setpoint"] == 42.5 and last["level"] == -3.5 and last["pump"] is True, last
    assert "device boiler: setpoint set to 42.5" in log, log


def bound_queue_as(broker, user, password):
    credentials = pika.PlainCredentials(user, password)
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port, credentials=credentials))
    channel = conn.channel()
    channel.queue_declare("readings", durable=True)
    channel.queue_bind("readings", "amq.topic", "sensors.#")
    conn.close()


def drain_as(broker, user, password):
    credentials = pika.PlainCredentials(user, password)
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port, credentials=credentials))
    channel = conn.channel()
    out = []
    while True:
        method, props, body = channel.basic_get("readings", auto_ack=True)
        if method is None:
            break
        out.append((method.routing_key, props.headers, json.loads(body)))
    conn.close()
    return out


@pytest.mark.parametrize(
    "table, said",
    [
        ('name = "p"\nuri = "modbus://10.0.0.5"\nregisters = [{ name = "a", address = 0 }]', "the scheme must be"),
        ('name = "p"\nuri = "modbus+tcp://h"\nregister = []', "unknown key 'register' (did you mean 'registers'?)"),
        ('name = "p"\nuri = "modbus+tcp://h"\nregisters = [{ name = "a", address = 0, kind = "coil", type = "int16" }]',
         'a coil is one bit: its type is "bool"'),
        ('name = "p"\nuri = "modbus+rtu:///dev/ttyS9?baud=9600"\nregisters = [{ name = "a", address = 0 }]',
         "unknown option 'baud'"),
        ('name = "p"\nuri = "modbus+tcp://h"\ninterval = 0\nregisters = [{ name = "a", address = 0 }]',
         "interval must be more than 0 seconds"),
        ('name = "p"\nuri = "modbus+tcp://h"\nregisters = [{ name = "a", address = 65535, type = "float32" }]',
         "runs past address 65535"),
        ('name = "p"\nuri = "modbus+tcp://h"\nregisters = [{ name = "a", address = 0, kind = "input", writable = true }]',
         "writable: Modbus writes holding registers and coils, not input registers"),
    ],
)  # fmt: skip
def test_a_device_config_mistake_is_one_line_and_exit_2(tmp_path, table, said):
    path = tmp_path / "hutch.toml"
    path.write_text("[[device]]\n" + table + "\n")
    proc = subprocess.run(
        [os.path.join(BIN, "hutch"), "serve", "--config", str(path), "--data",
         str(tmp_path / "data"), "--port", "0"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and said in lines[0], (proc.returncode, proc.stderr)
    assert "device 'p'" in lines[0] or "[[device]]" in lines[0], lines
