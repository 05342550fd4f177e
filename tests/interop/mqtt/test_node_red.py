"""Node-RED (npm `node-red`, started headless as docs/mqtt.md starts it) on a gateway with users,
as docs/gateway.md recommends: the page's flow, an `mqtt in` node on a `ws://` broker URL (MQTT
over WebSocket), logs in as the page's dashboard user from the page's credentials file, and
relays the readings sensors publish over TCP, 1,000 at QoS 1, to a file node: every one
arrives, once. (Without the credentials file it would connect with no user name, which a
broker with users refuses.)"""

import json
import re

from brokers import free_port, wait_until
from mqtt_brokers import Paho, start_hutch, stop
from mqtt_pages import NodeRed
from paths import ROOT
from snippets import snippets, with_port

READINGS = 1000
# the sensors' own user (the page's dashboard user may publish nothing)
SENSOR = """
[users.sensor]
password_hash = "3yPudymwzH7quov3AvyvH2fdr5gddkKIOXfQzjjaM2n2kg6k"
topic_permissions = { "amq.topic" = { write = '^sensors\\.', read = '^$' } }
"""


def node_red_section():
    with open("%s/docs/mqtt.md" % ROOT, encoding="utf-8") as f:
        page = f.read()
    return page[page.index("### A Node-RED flow") : page.index("## `$SYS` topics")]


def test_the_docs_node_red_flow_logs_in_with_its_credentials_file_and_relays_every_reading_once(tmp_path):
    section = node_red_section()
    (users,) = re.findall(r"```toml\n(.*?)```", section, re.S)
    (credentials,) = [block for block in re.findall(r"```json\n(.*?)```", section, re.S) if '"user"' in block]
    assert "node-red --userDir . flows.json" in section
    (flow,) = [code for language, code, _ in snippets("docs/mqtt.md") if language == "node-red"]
    config = tmp_path / "hutch.toml"
    config.write_text(users + SENSOR)
    ws_port = free_port()
    broker = start_hutch(tmp_path, ("--mqtt-ws-port", str(ws_port), "--config", str(config)))
    red_folder = tmp_path / "red"
    red_folder.mkdir()
    (red_folder / "flows.json").write_text(with_port(flow, None, ws_port=ws_port))
    (red_folder / "flows_cred.json").write_text(credentials)
    out = red_folder / "readings.txt"  # (the flow's file node: relative to Node-RED's folder)
    red = NodeRed(red_folder / "flows.json")
    try:
        wait_until(lambda: "client id 'nodered" in broker.running.log(), 60, what=lambda: red.said())
        sensor = Paho(broker, "greenhouse-sensor")
        sensor.client.username_pw_set("sensor", "greenhouse")
        sensor.connect()
        # the flow subscribes just after it connects: a probe, until one reaches the file
        wait_until(lambda: out.exists() or not sensor.publish("sensors/probe", "probe", 1), 30, interval=0.2)
        for i in range(READINGS):
            sensor.client.publish("sensors/greenhouse-%d/temp" % (i % 4), "r%04d" % i, 1)
        relayed = lambda: [line for line in out.read_text().splitlines() if line != "probe"]  # noqa: E731
        wait_until(lambda: len(relayed()) >= READINGS, 60)
        sensor.stop()
        assert sorted(relayed()) == ["r%04d" % i for i in range(READINGS)]  # every one, once
        log = broker.running.log()
        assert "(user 'dashboard', client id 'nodered" in log, log[-3000:]
        assert "login refused" not in log, log[-3000:]
        assert json.loads(credentials)["gateway"]["user"] == "dashboard"
    finally:
        red.stop()
        stop(broker)
