"""Many MQTT clients at once against a broker with its defaults, hutch and mosquitto alike: a
gateway's 1,000 sensors and its dashboard all connect (hutch's default `max_connections` is
what its file descriptors allow, as Mosquitto's and RabbitMQ's)."""

import socket
import time

from hutch.mqtt import packets

CLIENTS = 1100


def test_1100_clients_connect_to_a_broker_with_its_defaults(mqtt_broker):
    sockets = []
    try:
        for n in range(CLIENTS):
            s = socket.create_connection((mqtt_broker.host, mqtt_broker.port), timeout=30)
            s.sendall(packets.connect(b"many-%d" % n, user=b"guest", password=b"guest"))
            sockets.append(s)
        answers = []
        for s in sockets:
            got = b""
            deadline = time.monotonic() + 30
            while len(got) < 4 and time.monotonic() < deadline:
                chunk = s.recv(4 - len(got))
                if not chunk:
                    break
                got += chunk
            answers.append(got)
        refused = [n for n, got in enumerate(answers) if got != b"\x20\x02\x00\x00"]
        assert not refused, "%d of %d refused, the first: %r (%s)" % (
            len(refused),
            CLIENTS,
            answers[refused[0]],
            mqtt_broker.kind,
        )
    finally:
        for s in sockets:
            s.close()
