"""The MQTT front end's in-process tests (tests/mqtt/test_mqtt.py, test_mqtt5.py) run again
under the `micropython` command, with a board-sized heap too: what a board that serves MQTT
([server] mqtt = true) runs is the same code."""

import os

import pytest
from micropython_env import package_root, run_suite
from paths import TESTS


@pytest.mark.parametrize("heap", [None, "512k"])
def test_the_mqtt_front_end_under_micropython(tmp_path, heap):
    root = package_root(tmp_path, ("codec", "core", "amqp091", "ports", "server", "mqtt"))
    print(
        run_suite(
            root,
            ["test_mqtt", "test_mqtt5", "test_mqtt_identity", "test_mqtt_client"],
            heap,
            [os.path.join(TESTS, "mqtt")],
            41,
            timeout=300,
        )
    )
