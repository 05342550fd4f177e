"""A gateway's health as `hutch ctl health`, the status page and /metrics say it: ok; degraded
while its bridge has no link (and its device is down); failing once the bridge has been down
past its alarm_age, and when the broker is not running; not known for a folder no broker ran
on. The exit codes are a monitoring plugin's: 0, 1, 2 and 3."""

import json
import os
import re
import subprocess

from brokers import BIN, RunningBroker, free_port, hutch_serve, stop_all, wait_until
from modbus_support import ModbusDevices, device_table
from scrapes import dom_figures, get, series

HUTCH = os.path.join(BIN, "hutch")


def health(folder, *more):
    done = subprocess.run(
        [HUTCH, "ctl", "health", "--data", str(folder), *more], capture_output=True, text=True, timeout=60
    )
    return done.returncode, done.stdout


def scraped_health(metrics):
    found = series(get("http://127.0.0.1:%d/metrics" % metrics)[2])
    return [labels for (name, labels), value in found.items() if name == "hutch_health" and value == 1]


def test_a_broker_with_nothing_wrong_is_ok(tmp_path):
    broker = RunningBroker([HUTCH, "serve", "--name", "barn"], tmp_path).start()
    try:
        assert health(broker.data) == (0, "health: ok (gateway barn)\n")
        code, out = health(broker.data, "--json")
        assert code == 0 and json.loads(out) == {"state": "ok", "reasons": [], "gateway": "barn", "live": True}
    finally:
        broker.stop()
    code, out = health(broker.data)
    assert code == 2 and out.startswith("health: failing (gateway barn)\n  the broker is not running (as the broker")
    (tmp_path / "empty").mkdir()
    code, out = health(tmp_path / "empty")
    assert code == 3 and out.startswith("health: unknown\n  the broker has not run on this folder"), out


def test_a_bridge_down_degrades_then_fails_the_gateway_and_a_device_down_is_said(tmp_path):
    meter_port, metrics = free_port(), free_port()
    meter = ModbusDevices(meter_port, [1])
    dead = "amqp://guest:guest@127.0.0.1:%d/" % free_port()  # (nothing listens there)
    config = (
        '[server]\nname = "pump-house"\n[metrics]\nport = %d\n' % metrics
        + device_table("meter-1", "modbus+tcp://127.0.0.1:%d" % meter_port, 1, 0.2)
        + '[[bridge]]\nname = "up"\nuri = "%s"\nqueue = "readings"\nalarm_age = 4\n' % dead
        + "reconnect_delay = 0.2\nmax_reconnect_delay = 0.5\n"
    )
    broker = hutch_serve(tmp_path, config)
    try:
        broker.start()
        code, out = health(broker.data)
        assert code == 1 and out.startswith("health: degraded (gateway pump-house)\n  bridge up: "), out
        assert "connection refused" in out
        wait_until(lambda: health(broker.data)[0] == 2, 15, what="the bridge down past its alarm_age")
        code, out = health(broker.data)
        # (between two of its attempts, or in one: a loaded machine caught it connecting once)
        assert re.match(r"health: failing \(gateway pump-house\)\n  bridge up: (backoff|connecting) for ", out), out
        assert scraped_health(metrics) == ['{state="failing"}']
        meter.stop()
        wait_until(lambda: "device meter-1: down" in health(broker.data)[1], 15, what="the meter down")
        page = dom_figures("http://127.0.0.1:%d/" % metrics, str(tmp_path / "chromium"))
        assert re.match(r"health: failing - bridge up: (backoff|connecting) for ", page["health"]), page
        assert "; device meter-1: down for " in page["health"], page
    finally:
        stop_all(broker, meter)
