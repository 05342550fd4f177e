"""The broker starts as a user starts it, serves a client, and stops cleanly on SIGTERM."""

import socket


def test_serve_answers_and_stops(broker):
    with socket.create_connection((broker.host, broker.port), timeout=5) as s:
        s.sendall(b"AMQP\x00\x00\x09\x01")
        data = s.recv(7)
        assert data[:1] == b"\x01" and data[1:3] == b"\x00\x00"  # a method frame on channel 0
    assert "listening for AMQP 0-9-1" in broker.log()
