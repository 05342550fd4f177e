"""MQTT.js (npm `mqtt`, Node) against hutch and against Debian's mosquitto (the oracle), 3.1.1
and 5: tests/node/mqtt_js.js runs the scenario (QoS 0, 1 and 2 in order, a retained message to a
later wildcard subscription, a will on a cut link, a persistent session) and prints what the
clients saw; the two brokers must look alike to them."""

import pytest
from brokers import free_port, wait_until
from mqtt_brokers import assert_mqtt_js_scenario, run_mqtt_js, start_hutch, stop


@pytest.mark.parametrize("version", [4, 5])
def test_mqtt_js_sees_the_same_broker(mqtt_broker, version):
    assert_mqtt_js_scenario(run_mqtt_js(mqtt_broker, version), version)


@pytest.mark.parametrize("version", [4, 5])
def test_mqtt_js_over_websocket_sees_what_it_sees_over_tcp(tmp_path, version):
    """The same scenario over `ws://` (MQTT.js's WebSocket transport, as a browser's), against
    hutch's --mqtt-ws-port: what the clients see is what they see over TCP (above)."""
    ws_port = free_port()
    broker = start_hutch(tmp_path, ("--mqtt-ws-port", str(ws_port)))
    try:
        wait_until(lambda: "MQTT over WebSocket on 127.0.0.1:%d" % ws_port in broker.running.log(), 30)
        seen = run_mqtt_js(broker, version, "ws://guest:guest@127.0.0.1:%d/mqtt" % ws_port)
    finally:
        stop(broker)
    assert_mqtt_js_scenario(seen, version)
