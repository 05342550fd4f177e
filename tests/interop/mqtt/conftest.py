"""The MQTT tests' brokers: `mqtt_broker` is hutch or Debian's mosquitto (tests/support/
mqtt_brokers.py); a scenario that takes it runs against both and must see the same."""

import pytest
from mqtt_brokers import start_hutch, start_mosquitto, stop


@pytest.fixture(params=["hutch", "mosquitto"])
def mqtt_broker(request, tmp_path):
    broker = start_hutch(tmp_path) if request.param == "hutch" else start_mosquitto(tmp_path)
    yield broker
    stop(broker)


@pytest.fixture
def hutch_mqtt(tmp_path):
    broker = start_hutch(tmp_path)
    yield broker
    stop(broker)
