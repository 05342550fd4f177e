"""The MQTT tests' brokers: `mqtt_broker` is hutch (`hutch serve --mqtt-port FREE`) or Debian's
mosquitto (the oracle: `mosquitto -c CONF` on a free port, stopped by its PID), each as
(host, port, what); a scenario that takes it runs against both and must see the same."""

import os
import subprocess

import pytest
from brokers import BIN, RunningBroker, terminate, wait_for_port

from hutch.bench.brokers import free_port

MOSQUITTO = "/usr/sbin/mosquitto"


class MqttBroker:
    def __init__(self, kind, port, running=None, proc=None, log_path=None):
        self.kind = kind
        self.host = "127.0.0.1"
        self.port = port
        self.running = running  # hutch's RunningBroker (its AMQP port: running.port)
        self.proc = proc
        self.log_path = log_path

    def log(self):
        if self.running is not None:
            return self.running.log()
        with open(self.log_path, errors="replace") as f:
            return f.read()


def start_hutch(tmp_path, extra=()):
    port = free_port()
    running = RunningBroker([os.path.join(BIN, "hutch"), "serve", "--mqtt-port", str(port), *extra], tmp_path).start()
    assert "listening for MQTT on 127.0.0.1:%d" % port in running.log(), running.log()
    return MqttBroker("hutch", port, running=running)


def start_mosquitto(tmp_path):
    port = free_port()
    conf = tmp_path / "mosquitto.conf"
    log_path = str(tmp_path / "mosquitto.log")
    conf.write_text(
        "listener %d 127.0.0.1\nallow_anonymous true\npersistence false\nlog_dest file %s\n"
        "log_type error\nlog_type warning\nlog_type notice\n" % (port, log_path)
    )
    proc = subprocess.Popen([MOSQUITTO, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    open(log_path, "a").close()
    wait_for_port(port, proc, log_path)
    return MqttBroker("mosquitto", port, proc=proc, log_path=log_path)


def stop(broker):
    if broker.running is not None:
        code = broker.running.stop()
        assert not broker.running.errors(), "broker logged errors:\n" + broker.running.log()[-5000:]
        assert code == 0
    else:
        terminate(broker.proc, 10, "mosquitto", broker.log)


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
