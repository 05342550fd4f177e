"""The port contract (core/connections.py), kept alike by every front end's connection: a port sees
the same wake, read rule, output, idle clock and end whichever protocol its client speaks, and
the MicroPython port (ports/tcp.py) may end any of them when the heap runs out."""

import asyncio

import pytest

from hutch.amqp091.connection import Connection as Connection091
from hutch.amqp10.connection import SASL_HEADER
from hutch.amqp10.connection import Connection as Connection10
from hutch.core.broker import Broker
from hutch.core.connections import PortConnection
from hutch.core.limits import Limits
from hutch.core.snapshot import snapshot
from hutch.mqtt import packets
from hutch.mqtt.connection import Connection as ConnectionMQTT
from hutch.ports.metrics import render

PEER = {"address": "127.0.0.1", "port": 40000, "transport": "tcp"}
# what each front end's client sends first: a protocol header, or MQTT's CONNECT
HEADERS = {
    Connection091: b"AMQP\x00\x00\x09\x01",
    Connection10: SASL_HEADER,
    ConnectionMQTT: packets.connect(b"sensor-1", user=b"guest", password=b"guest"),
}
FRONT_ENDS = list(HEADERS)  # (server/frontends.py: 0-9-1's by default, 1.0's by its headers, MQTT's by its listeners)


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


@pytest.mark.parametrize("kind", FRONT_ENDS, ids=lambda kind: kind.metrics_label)
def test_each_front_end_is_a_port_connection_with_its_labels(kind):
    broker, conn, _wakes = opened(kind)
    assert isinstance(conn, PortConnection)
    assert (conn.protocol, conn.metrics_label) == {
        Connection091: ("AMQP 0-9-1", "amqp091"),
        Connection10: ("AMQP 1.0", "amqp10"),
        ConnectionMQTT: ("MQTT", "mqtt"),
    }[kind]
    assert conn in broker.connections and conn.name == "127.0.0.1:40000" and conn.loopback


@pytest.mark.parametrize("kind", FRONT_ENDS, ids=lambda kind: kind.metrics_label)
def test_the_port_is_woken_once_a_take(kind):
    broker, conn, wakes = opened(kind)
    send(conn, b"one")
    send(conn, b"two")
    assert len(wakes) == 1 and conn.out_bytes == 6
    assert conn.take_output() == b"onetwo" and conn.out_bytes == 0
    send(conn, b"three")
    assert len(wakes) == 2


@pytest.mark.parametrize("kind", FRONT_ENDS, ids=lambda kind: kind.metrics_label)
def test_a_client_past_the_high_water_mark_is_not_read_until_it_takes_its_output(kind):
    broker, conn, _wakes = opened(kind, output_high_water=10)
    assert conn.reading()
    send(conn, b"x" * 10)
    assert conn.saturated() and not conn.reading()
    assert conn.take_parts() == [b"x" * 10]
    assert conn.take_parts() is None and conn.reading()


@pytest.mark.parametrize("kind", FRONT_ENDS, ids=lambda kind: kind.metrics_label)
def test_one_idle_clock_what_was_fed_and_what_the_port_took(kind):
    broker, conn, _wakes = opened(kind)
    broker.now += 500
    conn.feed(HEADERS[kind])  # (its answer waits in the output)
    assert conn.last_recv == broker.now and conn.last_send == broker.now - 500
    broker.now += 200
    assert conn.take_output()
    assert conn.last_send == broker.now


@pytest.mark.parametrize("kind", FRONT_ENDS, ids=lambda kind: kind.metrics_label)
def test_a_closed_connection_is_not_read_and_wakes_its_port(kind):
    broker, conn, wakes = opened(kind)
    conn.lost()
    assert conn.closed and not conn.reading() and wakes
    assert conn not in broker.connections


@pytest.mark.parametrize("kind", FRONT_ENDS, ids=lambda kind: kind.metrics_label)
def test_a_client_out_of_memory_is_told_in_its_protocol_or_dropped_and_forgotten(kind):
    """out_of_memory: said in the front end's words (0-9-1's 506, 1.0's resource-limit-exceeded,
    MQTT's 0x97 to a version 5 client) where they fit; dropped(): hung up with one line in the
    log. Either way the connection is gone from the broker, and its port woken to close."""
    said = []
    broker = Broker(Limits(), log=lambda level, text, exc=None: said.append(text))
    conn = kind(broker, PEER)
    wakes = []
    conn.wake = lambda: wakes.append(1)
    conn.feed(HEADERS[kind])
    conn.dropped()
    assert conn.closed and conn not in broker.connections and wakes and conn.out == []
    assert said[-1] == "127.0.0.1:40000: out of memory, connection dropped", said
    again = kind(broker, PEER)
    again.feed(HEADERS[kind])
    again.out_of_memory()
    assert "127.0.0.1:40000: out of memory, closing the %s connection" % kind.protocol in said
    assert again.out or again.closed, "told in its protocol's words, or ended"


@pytest.mark.parametrize("kind", FRONT_ENDS, ids=lambda kind: kind.metrics_label)
def test_out_of_memory_ends_the_connection_when_not_even_its_log_line_fits(kind):
    """A port calls out_of_memory unguarded: should its first line not fit, the connection is
    dropped all the same (and said so once the end has given its heap back), never left open."""
    said = []

    def log(level, text, exc=None):
        if "closing the" in text:
            raise MemoryError
        said.append(text)

    broker = Broker(Limits(), log=log)
    conn = kind(broker, PEER)
    conn.feed(HEADERS[kind])
    conn.out_of_memory()
    assert conn.closed and conn not in broker.connections
    assert said[-1] == "127.0.0.1:40000: out of memory, connection dropped", said


@pytest.mark.parametrize("kind", FRONT_ENDS, ids=lambda kind: kind.metrics_label)
def test_a_connection_ends_even_when_the_heap_refuses_its_first_allocation(kind):
    """On a board, the end's first write of `closed` can be what a full heap refuses
    (MicroPython grows an instance's attribute table on its first write): the end collects
    garbage and goes on, and the connection is gone from the broker all the same."""

    class Tight(kind):
        refusals = 1

        def __setattr__(self, name, value):
            if name == "closed" and self.refusals:
                object.__setattr__(self, "refusals", 0)
                raise MemoryError("memory allocation failed, allocating 464 bytes")
            super().__setattr__(name, value)

    broker = Broker(Limits())
    conn = Tight(broker, PEER)
    conn.feed(HEADERS[kind])
    conn.lost()
    assert conn.closed and conn.refusals == 0 and conn not in broker.connections


class OutOfHeap:
    """A MicroPython stream writer whose socket has no heap left to buffer what it is given."""

    closed = False

    def write(self, data):
        raise MemoryError

    async def drain(self):
        pass

    def close(self):
        self.closed = True

    def get_extra_info(self, name):
        return ("127.0.0.1", 40000)


def served_on_the_micropython_port(conn_kind, header, writer):
    """What was logged, as (level, line), about one client of conn_kind on ports/tcp.py that
    sent header and whose answer went to writer, once its write task ended by itself (no
    exception left it) with its socket closed and its connection gone from the broker."""
    from hutch.ports.tcp import _Client

    said = []
    broker = Broker(Limits(), log=lambda level, text, exc=None: said.append((level, text)))

    class Listener:
        log = staticmethod(broker.log)
        tls = None

        class runtime:
            log = staticmethod(broker.log)

        class front:
            open = staticmethod(lambda peer: conn_kind(broker, peer))

    async def run():
        client = _Client(Listener(), None, writer, "127.0.0.1", 40000)
        client.conn.feed(header)  # (its answer to write)
        try:
            await asyncio.wait_for(client.write_loop(), 5)
            return client, "ended"
        except Exception as e:
            return client, e

    client, outcome = asyncio.run(run())
    assert outcome == "ended"
    assert client.conn.closed and client.conn not in broker.connections and writer.closed
    return said


@pytest.mark.parametrize("end_fits", [True, False], ids=["its end fits", "its end out of heap too"])
@pytest.mark.parametrize("kind", FRONT_ENDS, ids=lambda kind: kind.metrics_label)
def test_the_micropython_port_s_writer_out_of_memory_drops_its_client(kind, end_fits):
    """ports/tcp.py (the MicroPython port, which runs on CPython's asyncio too): a client's
    writer whose socket cannot take the output for want of heap (MemoryError in its write)
    ends that client, whatever its protocol, and the task ends by itself; so it does when the end
    that hang-up is (give_back) runs out of heap too. (An exception out of a client's task would
    be printed by asyncio to a board's console, not logged, and could leave its socket open.)"""

    class Tight(kind):
        def give_back(self):
            if end_fits:
                return super().give_back()
            raise MemoryError("memory allocation failed, allocating 64 bytes")

    said = served_on_the_micropython_port(Tight, HEADERS[kind], OutOfHeap())
    assert ("warning", "127.0.0.1:40000: out of memory, connection dropped") in said, said


@pytest.mark.parametrize("kind", FRONT_ENDS, ids=lambda kind: kind.metrics_label)
def test_a_bug_in_the_micropython_port_s_writing_is_logged_and_ends_only_its_client(kind):
    """Anything else a write raises (here a bug: a TypeError) is logged as the port's error, as a
    read's is, and ends that one client by itself."""

    class Buggy(OutOfHeap):
        def write(self, data):
            raise TypeError("a bug")

    said = served_on_the_micropython_port(kind, HEADERS[kind], Buggy())
    assert ("error", "127.0.0.1:40000: port error: TypeError('a bug')") in said, said


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


def test_status_json_counts_the_connections_of_each_protocol_without_listing_them(tmp_path):
    """status.json (written every two seconds) counts the connections per protocol; the list of
    them is for the status page, and /metrics counts them the same way."""
    import json

    from hutch.ports import status_file

    broker = Broker(Limits())
    Connection091(broker, PEER)
    for port in (40001, 40002):
        Connection10(broker, dict(PEER, port=port))
    ConnectionMQTT(broker, dict(PEER, port=40003))
    status_file.write(str(tmp_path), broker)
    with open(tmp_path / status_file.STATUS_FILE) as f:
        written = json.load(f)
    assert written["connections_by_protocol"] == {"amqp091": 1, "amqp10": 2, "mqtt": 1}
    assert "connections" not in written
    assert len(snapshot(broker)["connections"]) == 4  # (each one, for the status page)
    text = render(snapshot(broker, each_connection=False), {})
    assert "rabbitmq_connections 4\n" in text and 'hutch_connections{protocol="mqtt"} 1\n' in text
