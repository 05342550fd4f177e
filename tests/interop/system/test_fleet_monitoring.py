"""What hutch ships for watching a fleet with Prometheus and Grafana (monitoring/): the alert
rules pass Debian's `promtool check rules` and their unit tests (`promtool test rules`: three
gateways, a bridge down, a device down, publishers blocked, a gateway silent); every query of
the Grafana dashboard is PromQL promtool takes; and every series either names is one a real
gateway serves (a scrape of a hutch with a bridge and a device), or Prometheus' own `up`."""

import json
import os
import re
import subprocess

from brokers import free_port, hutch_serve, wait_until
from modbus_support import device_table
from paths import ROOT
from scrapes import PROMTOOL, get, get_once_listening, series

RULES = os.path.join(ROOT, "monitoring", "prometheus")
DASHBOARD = os.path.join(ROOT, "monitoring", "grafana", "hutch-fleet.json")
PROMQL_NAME = re.compile(r"\b((?:hutch|rabbitmq)_[a-z_]+|up)\b(?=\s*[{\[)*=!<>]|\s*$)")


def promtool(*args, cwd=RULES):
    done = subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def dashboard_queries():
    with open(DASHBOARD) as f:
        dashboard = json.load(f)
    assert dashboard["templating"]["list"][0]["query"]["query"] == "label_values(hutch_build_info, gateway)"
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def rule_queries():
    with open(os.path.join(RULES, "hutch-rules.yml")) as f:
        return re.findall(r"^\s+expr: (.*)$", f.read(), re.M)


def test_the_alert_rules_pass_promtool_and_their_unit_tests():
    assert "SUCCESS: 7 rules found" in promtool("check", "rules", "hutch-rules.yml")
    assert "SUCCESS" in promtool("test", "rules", "hutch-rules.test.yml")


def test_the_dashboard_s_queries_are_promql(tmp_path):
    queries = dashboard_queries()
    assert len(queries) == 10
    rules = tmp_path / "dashboard-queries.yml"
    rules.write_text(
        "groups:\n  - name: dashboard\n    rules:\n"
        + "".join(
            "      - record: dashboard:query_%d\n        expr: %s\n" % (i, json.dumps(query.replace("$gateway", ".*")))
            for i, query in enumerate(queries)
        )
    )
    assert "SUCCESS: 10 rules found" in promtool("check", "rules", str(rules), cwd=str(tmp_path))


def test_every_series_they_name_is_one_a_gateway_serves(tmp_path):
    metrics, meter_port = free_port(), free_port()
    dead = "amqp://guest:guest@127.0.0.1:%d/" % free_port()
    config = (
        '[server]\nname = "barn"\n[metrics]\nport = %d\n' % metrics
        + device_table("meter-1", "modbus+tcp://127.0.0.1:%d" % meter_port, 1, 0.2)
        + '[[bridge]]\nname = "up"\nuri = "%s"\nqueue = "readings"\nalarm_backlog = 10\n' % dead
    )
    broker = hutch_serve(tmp_path, config).start()
    try:
        url = "http://127.0.0.1:%d/metrics" % metrics
        wait_until(lambda: "hutch_device_up{" in get_once_listening(url)[2], 10, what="the device's series")
        served = {name for name, _ in series(get(url)[2])}
    finally:
        broker.stop()
    named = set()
    for query in rule_queries() + dashboard_queries():
        named |= set(PROMQL_NAME.findall(query))
    assert {"hutch_health", "hutch_build_info", "hutch_bridge_state", "hutch_device_up", "up"} <= named, named
    assert named - served == {"up"}, named - served
