"""Node-RED (npm `node-red`, started headless from a flows file) as a dashboard's flow would use
hutch: an `mqtt in` node on a `ws://` broker URL (MQTT over WebSocket) relays the readings
sensors publish over TCP, 1,000 at QoS 1, to a file node: every one arrives, once."""

import json
import os
import subprocess

from brokers import free_port, wait_until
from mqtt_brokers import Paho, start_hutch, stop
from paths import NODE_DIR

READINGS = 1000


def flows(ws_port, out):
    return [
        {"id": "relay", "type": "tab", "label": "relay"},
        {"id": "hutch-broker", "type": "mqtt-broker", "name": "hutch", "broker": "ws://127.0.0.1:%d/mqtt" % ws_port,
         "clientid": "node-red-relay", "autoConnect": True, "usetls": False, "protocolVersion": "4",
         "keepalive": "60", "cleansession": True},
        {"id": "readings", "type": "mqtt in", "z": "relay", "topic": "sensors/#", "qos": "1", "datatype": "utf8",
         "broker": "hutch-broker", "nl": False, "rap": False, "inputs": 0, "wires": [["to-file"]]},
        {"id": "to-file", "type": "file", "z": "relay", "filename": out, "filenameType": "str",
         "appendNewline": True, "createDir": False, "overwriteFile": "false", "encoding": "none", "wires": []},
    ]  # fmt: skip


def test_a_node_red_flow_on_a_websocket_url_relays_every_reading_once(tmp_path):
    ws_port = free_port()
    config = tmp_path / "hutch.toml"
    config.write_text('[auth]\nanonymous_login_user = "guest"\n')  # (the flow's broker node logs in without a user)
    broker = start_hutch(tmp_path, ("--mqtt-ws-port", str(ws_port), "--config", str(config)))
    out = tmp_path / "relayed.txt"
    flows_file = tmp_path / "flows.json"
    flows_file.write_text(json.dumps(flows(ws_port, str(out))))
    red_log = open(tmp_path / "node-red.log", "w")
    red = subprocess.Popen(
        ["node", os.path.join(NODE_DIR, "node_modules", "node-red", "red.js"), "--userDir", str(tmp_path / "red"),
         "--port", str(free_port()), str(flows_file)],
        stdout=red_log, stderr=subprocess.STDOUT, cwd=str(tmp_path),
    )  # fmt: skip
    try:
        wait_until(lambda: "client id 'node-red-relay'" in broker.running.log(), 60, what=broker.running.log)
        sensor = Paho(broker, "greenhouse-sensor").connect()
        # the flow subscribes just after it connects: a probe, until one reaches the file
        wait_until(lambda: out.exists() or not sensor.publish("sensors/probe", "probe", 1), 30, interval=0.2)
        for i in range(READINGS):
            sensor.client.publish("sensors/greenhouse-%d/temp" % (i % 4), "r%04d" % i, 1)
        relayed = lambda: [line for line in out.read_text().splitlines() if line != "probe"]  # noqa: E731
        wait_until(lambda: len(relayed()) >= READINGS, 60)
        sensor.stop()
        assert sorted(relayed()) == ["r%04d" % i for i in range(READINGS)]  # every one, once
    finally:
        red.terminate()
        red.wait(30)
        red_log.close()
        stop(broker)
