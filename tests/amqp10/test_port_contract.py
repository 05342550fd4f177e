"""The port contract (core/connections.py), kept alike by both front ends' connections: a port sees
the same wake, read rule, output and idle clock whichever protocol its client speaks."""

import pytest

from hutch.amqp091.connection import Connection as Connection091
from hutch.amqp10.connection import SASL_HEADER
from hutch.amqp10.connection import Connection as Connection10
from hutch.core.broker import Broker
from hutch.core.connections import PortConnection
from hutch.core.limits import Limits
from hutch.core.snapshot import snapshot
from hutch.ports.metrics import render

PEER = {"address": "127.0.0.1", "port": 40000, "transport": "tcp"}
HEADERS = {Connection091: b"AMQP\x00\x00\x09\x01", Connection10: SASL_HEADER}


def send(conn, data):
    """What a front end does to send: append, then count (the port is woken once a take)."""
    conn.out.append(data)
    conn.output_added(len(data))


def opened(kind, **limits):
    broker = Broker(Limits(**limits))
    conn = kind(broker, PEER)
    wakes = []
    conn.wake = lambda: wakes.append(broker.now)
    return broker, conn, wakes


@pytest.mark.parametrize("kind", [Connection091, Connection10])
def test_each_front_end_is_a_port_connection_with_its_labels(kind):
    broker, conn, _wakes = opened(kind)
    assert isinstance(conn, PortConnection)
    assert (conn.protocol, conn.metrics_label) == {
        Connection091: ("AMQP 0-9-1", "amqp091"),
        Connection10: ("AMQP 1.0", "amqp10"),
    }[kind]
    assert conn in broker.connections and conn.name == "127.0.0.1:40000" and conn.loopback


@pytest.mark.parametrize("kind", [Connection091, Connection10])
def test_the_port_is_woken_once_a_take(kind):
    broker, conn, wakes = opened(kind)
    send(conn, b"one")
    send(conn, b"two")
    assert len(wakes) == 1 and conn.out_bytes == 6
    assert conn.take_output() == b"onetwo" and conn.out_bytes == 0
    send(conn, b"three")
    assert len(wakes) == 2


@pytest.mark.parametrize("kind", [Connection091, Connection10])
def test_a_client_past_the_high_water_mark_is_not_read_until_it_takes_its_output(kind):
    broker, conn, _wakes = opened(kind, output_high_water=10)
    assert conn.reading()
    send(conn, b"x" * 10)
    assert conn.saturated() and not conn.reading()
    assert conn.take_parts() == [b"x" * 10]
    assert conn.take_parts() is None and conn.reading()


@pytest.mark.parametrize("kind", [Connection091, Connection10])
def test_one_idle_clock_what_was_fed_and_what_the_port_took(kind):
    broker, conn, _wakes = opened(kind)
    broker.now += 500
    conn.feed(HEADERS[kind])  # (its answer waits in the output)
    assert conn.last_recv == broker.now and conn.last_send == broker.now - 500
    broker.now += 200
    assert conn.take_output()
    assert conn.last_send == broker.now


@pytest.mark.parametrize("kind", [Connection091, Connection10])
def test_a_closed_connection_is_not_read_and_wakes_its_port(kind):
    broker, conn, wakes = opened(kind)
    conn.lost()
    assert conn.closed and not conn.reading() and wakes
    assert conn not in broker.connections


def test_the_snapshot_and_metrics_say_each_connections_protocol():
    broker = Broker(Limits())
    Connection091(broker, PEER)
    Connection10(broker, PEER)
    Connection10(broker, dict(PEER, port=40001))
    snap = snapshot(broker)
    assert sorted(conn["protocol"] for conn in snap["connections"]) == ["amqp091", "amqp10", "amqp10"]
    text = render(snap, {})
    assert 'hutch_connections{protocol="amqp091"} 1\n' in text
    assert 'hutch_connections{protocol="amqp10"} 2\n' in text
