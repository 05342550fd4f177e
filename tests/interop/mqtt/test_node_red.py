"""Node-RED (npm `node-red`, started headless from a flows file) as a dashboard's flow would use
hutch: docs/mqtt.md's flow, an `mqtt in` node on a `ws://` broker URL (MQTT over WebSocket),
relays the readings sensors publish over TCP, 1,000 at QoS 1, to a file node: every one
arrives, once."""

from brokers import free_port, wait_until
from mqtt_brokers import Paho, start_hutch, stop
from mqtt_pages import NodeRed
from snippets import snippets, with_port

READINGS = 1000


def test_a_node_red_flow_on_a_websocket_url_relays_every_reading_once(tmp_path):
    ws_port = free_port()
    broker = start_hutch(tmp_path, ("--mqtt-ws-port", str(ws_port)))
    (flow,) = [code for language, code, _ in snippets("docs/mqtt.md") if language == "node-red"]
    flows_file = tmp_path / "flows.json"
    flows_file.write_text(with_port(flow, None, ws_port=ws_port))
    out = tmp_path / "readings.txt"  # (the flow's file node: relative to Node-RED's folder)
    red = NodeRed(flows_file)
    try:
        wait_until(lambda: "client id 'nodered" in broker.running.log(), 60, what=broker.running.log)
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
        red.stop()
        stop(broker)
