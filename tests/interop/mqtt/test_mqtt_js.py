"""MQTT.js (npm `mqtt`, Node) against hutch and against Debian's mosquitto (the oracle), 3.1.1
and 5: tests/node/mqtt_js.js runs the scenario (QoS 0, 1 and 2 in order, a retained message to a
later wildcard subscription, a will on a cut link, a persistent session) and prints what the
clients saw; the two brokers must look alike to them."""

import pytest
from brokers import free_port, wait_until
from mqtt_brokers import run_mqtt_js, start_hutch, stop


@pytest.mark.parametrize("version", [4, 5])
def test_mqtt_js_sees_the_same_broker(mqtt_broker, version):
    seen = run_mqtt_js(mqtt_broker, version)
    assert seen["granted"] == [2]
    sent = [["js/sensors/t%d" % (i % 3), str(i), i % 3] for i in range(30)]
    assert sorted(seen["got"]) == sorted(sent)
    # in order, but where MQTT.js hands a QoS 2 delivery over only at its PUBREL
    assert [m for m in seen["got"] if m[2] < 2] == [m for m in sent if m[2] < 2]
    assert seen["user"] == ({"unit": "celsius"} if version == 5 else None)
    assert seen["retained"] == [{"topic": "js/status/node-1", "payload": "online", "retain": True}]
    assert seen["wills"] == [{"topic": "js/will/doomed", "payload": "gone"}]
    assert seen["sessionPresent"] is True and seen["later"] == ["while away"]


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
    assert seen["granted"] == [2]
    sent = [["js/sensors/t%d" % (i % 3), str(i), i % 3] for i in range(30)]
    assert sorted(seen["got"]) == sorted(sent)
    assert [m for m in seen["got"] if m[2] < 2] == [m for m in sent if m[2] < 2]
    assert seen["retained"] == [{"topic": "js/status/node-1", "payload": "online", "retain": True}]
    assert seen["wills"] == [{"topic": "js/will/doomed", "payload": "gone"}]
    assert seen["sessionPresent"] is True and seen["later"] == ["while away"]
