"""The broker starts as a user starts it, serves a client, and stops cleanly on SIGTERM:
once with each frame scanner, each named in the log (the other interop tests run the default)."""

import socket

import pytest
from brokers import SCANNERS


@pytest.mark.parametrize("broker", sorted(SCANNERS), indirect=True)
def test_serve_answers_and_stops(broker):
    with socket.create_connection((broker.host, broker.port), timeout=5) as s:
        s.sendall(b"AMQP\x00\x00\x09\x01")
        data = s.recv(7)
        assert data[:1] == b"\x01" and data[1:3] == b"\x00\x00"  # a method frame on channel 0
    assert "listening for AMQP 0-9-1" in broker.log()
    log = broker.log()
    assert SCANNERS[broker.scanner][1] in log, log
    others = [line for name, (_env, line) in SCANNERS.items() if name != broker.scanner]
    assert not any(line in log for line in others), log
