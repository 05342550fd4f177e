"""MQTT over TLS: a `[[listener]]` with `protocol = "mqtt"` and `tls` (certificates the test
makes), Paho as the client: a password login over TLS, a device that sends no user name and is
logged in as the user its certificate names, and one whose certificate another CA signed,
refused in the handshake."""

import os
import socket
import ssl

import pytest
from brokers import BIN, RunningBroker, wait_until
from mqtt_brokers import MqttBroker, Paho, stop
from tls_certs import Certificates

from hutch.core.auth import hash_password
from hutch.mqtt import packets


class MqttTLSBroker(RunningBroker):
    """`hutch serve --config` with one MQTT listener over TLS (and no other)."""

    def __init__(self, tmp_path, certs):
        self.certs = certs
        self.config_path = str(tmp_path / "hutch.toml")
        super().__init__([os.path.join(BIN, "hutch"), "serve"], tmp_path)

    def _take_port(self, port):
        self.port = port
        tls = 'certfile = "%s", keyfile = "%s", cacertfile = "%s", verify_peer = true' % (
            self.certs.server.cert, self.certs.server.key, self.certs.ca)  # fmt: skip
        with open(self.config_path, "w") as f:
            f.write(
                '[users.guest]\npassword_hash = "%s"\n\n[users."sensor-01"]\npassword_hash = "%s"\n\n'
                '[[listener]]\nprotocol = "mqtt"\nbind = "127.0.0.1"\nport = %d\ntls = {%s}\n'
                % (hash_password("guest", b"salt"), hash_password("unused", b"salt"), port, tls)
            )
        self.command = self.base_command + ["--config", self.config_path, "--data", self.data]

    def _wait_listening(self, offset):
        wait_until(
            lambda: (
                self.proc.poll() is not None
                or "listening for MQTT over TLS on 127.0.0.1:%d" % self.port in self.log_since(offset)
            ),
            30,
            what="the MQTT TLS listener in the broker's log",
        )
        if self.proc.poll() is not None:
            raise AssertionError("broker exited with %s:\n%s" % (self.proc.returncode, self.log()))


@pytest.fixture
def tls_mqtt(tmp_path):
    certs = Certificates(tmp_path / "certs")
    certs.device = certs.client("sensor-01")
    certs.rogue = Certificates(tmp_path / "rogue", "rogue CA").client("sensor-01")
    running = MqttTLSBroker(tmp_path, certs).start()
    broker = MqttBroker("hutch", running.port, running=running)
    broker.certs = certs
    yield broker
    stop(broker)


def tls_client(broker, client_id, pair=None, user=True):
    client = Paho(broker, client_id)
    if not user:
        client.client.username_pw_set(None)
    client.client.tls_set(ca_certs=broker.certs.ca, certfile=pair and pair.cert, keyfile=pair and pair.key)
    return client


def test_mqtt_over_tls_with_a_password_and_with_a_device_certificate(tls_mqtt):
    with_password = tls_client(tls_mqtt, "dashboard").connect()
    with_password.subscribe("sensors/#", 1)
    device = tls_client(tls_mqtt, "sensor-01", tls_mqtt.certs.device, user=False).connect()
    assert device.reason == 0
    device.publish("sensors/sensor-01/temp", b"21.5", 1)
    assert with_password.take(1)[0][:2] == ("sensors/sensor-01/temp", b"21.5")
    assert "MQTT 3.1.1 connection open (user 'sensor-01', client id 'sensor-01')" in tls_mqtt.log()
    device.stop()
    with_password.stop()


def test_a_certificate_another_ca_signed_is_refused_in_the_handshake(tls_mqtt):
    context = ssl.create_default_context(cafile=tls_mqtt.certs.ca)
    context.load_cert_chain(tls_mqtt.certs.rogue.cert, tls_mqtt.certs.rogue.key)
    with socket.create_connection(("127.0.0.1", tls_mqtt.port), timeout=10) as raw:
        try:
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                tls.sendall(packets.connect(b"rogue"))
                answer = tls.recv(16)  # (TLS 1.3: the broker's refusal comes with the first read)
        except (ssl.SSLError, ConnectionResetError) as e:
            answer = e
    assert not isinstance(answer, bytes) or answer == b"", answer  # no CONNACK: refused in the handshake
    wait_until(lambda: "CERTIFICATE_VERIFY_FAILED" in tls_mqtt.log(), 10, what="the refusal in the log")
    assert still_serves(tls_mqtt)


def still_serves(broker):
    client = tls_client(broker, "after").connect()
    client.stop()
    return True
