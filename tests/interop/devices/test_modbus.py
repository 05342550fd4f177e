"""[[device]]s polled from real Modbus devices: pymodbus's server (examples/modbus_device.py)
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
from paths import ROOT
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
    # the readings are counted as the devices' own protocol's, not as an AMQP client's
    received = re.search(r'rabbitmq_global_messages_received_total\{protocol="modbus"\} (\d+)', metrics)
    assert received and int(received.group(1)) >= 15, metrics
    assert 'rabbitmq_global_messages_received_total{protocol="amqp091"} 0' in metrics, metrics
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


def test_readings_refused_while_publishers_are_blocked_are_said_once_a_burst(tmp_path):
    """A disk_free_limit above what the disk has blocks publishers: each poll's readings are
    refused, which the log says once, with why, and counts; a reload that lets publishers go on
    says how many polls the burst cost, and the polls after it are taken."""
    port = free_port()
    devices = ModbusDevices(port, [1])
    table = device_table("probe-1", port, 1)
    broker = hutch_serve(tmp_path, "[server]\ndisk_free_limit = 1000000000000000\n" + table)
    try:
        broker.start()
        bound_queue(broker)
        said = "device probe-1: its readings refused (publishers blocked: low on disk: "
        wait_until(lambda: said in broker.log(), 10, what=broker.log)
        time.sleep(10 * INTERVAL)
        (tmp_path / "hutch.toml").write_text(table)  # (the limit back to the profile's)
        reload = subprocess.run(
            [os.path.join(BIN, "hutch"), "ctl", "reload", "--data", broker.data],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        taken = re.compile(r"device probe-1: its readings taken again, after (\d+) polls whose readings were refused")
        wait_until(lambda: taken.search(broker.log()), 10, what=broker.log)
        time.sleep(5 * INTERVAL)
        ctl = subprocess.run(
            [os.path.join(BIN, "hutch"), "ctl", "devices", "--json", "--data", broker.data],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        polls, _ = polls_by_device(drain(broker))
        log = broker.log()
    finally:
        stop_all(broker, devices)
    assert reload.returncode == 0, reload.stdout + reload.stderr
    assert log.count(said) == 1, log  # once for the burst, not once a poll
    refused_polls = int(taken.search(log).group(1))
    assert refused_polls >= 8, log
    (counted,) = json.loads(ctl.stdout)["devices"]
    assert counted["refused"] == 2 * refused_polls + 1, counted  # two readings a poll, and its first status
    assert len(polls["probe-1"]) >= 3, polls  # taken again once publishers go on
    check_polls(polls)


def test_the_page_s_device_without_hardware_is_polled_as_the_recipe_says(tmp_path):
    """docs/modbus.md's "Trying it without a device": its simulated device on TCP, its config and
    definitions file as written (the port made a free one), its commands; then its RTU line on a
    socat pty pair, where parity=E is said as what it is (a pty takes no parity), once, without
    a traceback."""
    with open(os.path.join(ROOT, "docs", "modbus.md"), encoding="utf-8") as f:
        page = f.read()
    recipe = page[page.index("## Trying it without a device") : page.index("## A device")]
    (config,) = re.findall(r"```toml\n(.*?)```", recipe, re.S)
    (definitions,) = re.findall(r"```json\n(.*?)```", recipe, re.S)
    port = free_port()
    (tmp_path / "try-modbus.json").write_text(definitions)
    config = config.replace("5020", str(port)).replace(
        '"try-modbus.json"', json.dumps(str(tmp_path / "try-modbus.json"))
    )
    assert "python examples/modbus_device.py tcp 5020 1" in recipe
    device = ModbusDevices(port, [1])
    broker = hutch_serve(tmp_path, config)
    try:
        broker.start()
        wait_until(lambda: "device sim-1: up (modbus+tcp" in broker.log(), 10, what=broker.log)
        time.sleep(4.5)  # (polled every 2 s)
        assert "hutch get readings --count 4 --ack --user me --password greenhouse" in recipe
        got = subprocess.run(
            [os.path.join(BIN, "hutch"), "get", "readings", "--count", "4", "--ack", "--port", str(broker.port),
             "--user", "me", "--password", "greenhouse"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
    finally:
        stop_all(broker, device)
    readings = [json.loads(line) for line in got.stdout.splitlines()]
    assert [(r["sensor"], r["poll"]) for r in readings] == [
        ("sim-1.counter", 1), ("sim-1.temp", 1), ("sim-1.counter", 2), ("sim-1.temp", 2)
    ], got.stdout + got.stderr  # fmt: skip
    assert readings[0]["value"] == 10 and readings[1]["value"] == 20.5 and readings[1]["unit"] == "°C"
    # the RTU line, as the page makes it
    line = PtyPair(tmp_path)
    assert "socat pty,raw,echo=0,link=/tmp/rtu-device pty,raw,echo=0,link=/tmp/rtu-gateway &" in recipe
    rtu = ModbusDevices(None, [1], line=line.ends[0])
    (tmp_path / "rtu").mkdir()
    uri = "modbus+rtu://%s?baudrate=19200" % line.ends[1]
    broker = hutch_serve(tmp_path / "rtu", modbus_table("sim-1", uri, 1, 0.5))
    try:
        broker.start()
        wait_until(lambda: "device sim-1: up (modbus+rtu" in broker.log(), 10, what=broker.log)
        broker.stop()
        (tmp_path / "rtu" / "hutch.toml").write_text(modbus_table("sim-1", uri + "&parity=E", 1, 0.5))
        broker.start()
        said = "device sim-1: down (gone: cannot set %s to baudrate=19200, parity=E" % line.ends[1]
        wait_until(lambda: said in broker.log(), 10, what=broker.log)
        time.sleep(2)
        log = broker.log()
    finally:
        stop_all(broker, rtu, line)
    assert "Invalid argument (a pty takes no parity)" in log and log.count(said) == 1, log
    assert "Traceback" not in log and not broker.errors(), log


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
            "nested": command(broker, "admin", "edge-secret", "cmd.boiler.level", b"[" * 3000),
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
    assert said["nested"]["error"].startswith("the command's body is not JSON: b'[[["), (
        said
    )  # (past the recursion limit)
    assert "Traceback" not in log, log[-3000:]
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
        ('name = "q"\nuri = "modbus+rtu:///dev/ttyS9?baudrate=9600"\nregisters = [{ name = "a", address = 0 }]\n'
         '[[device]]\nname = "p"\nuri = "modbus+rtu:///dev/ttyS9?baudrate=9600&parity=E"\nregisters = [{ name = "a", address = 0 }]',
         "its serial line /dev/ttyS9 is device 'q''s, with other settings (parity E, not N)"),
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
