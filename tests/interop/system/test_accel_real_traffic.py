"""Real client traffic through every frame scanner.

pika talks to a running hutch through a relay that records what the client sent, read
by read. Those reads are then fed, chunk for chunk, to three connections reading frames
three ways (tests/support/accel_sides.py): the C scanner, its Python reference and the
connection's own loop. Their answers must be the same, byte for byte, at every read.
The session covers what real clients send: publishes with and without confirms, bodies
larger than frame_max (several body frames), empty bodies, properties and headers,
consume with acks, nack and reject, basic.get, a channel error and a clean close.
"""

import socket
import threading

import pika
import pytest
from accel_sides import SCANNERS, Side
from brokers import SCANNERS as BROKER_SCANNERS

from hutch.core.limits import Limits


class Recorder:
    """A TCP relay on 127.0.0.1 to the broker that keeps each read from the client."""

    def __init__(self, port):
        self.target = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.reads = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        self.listener.settimeout(30)
        client, _ = self.listener.accept()
        upstream = socket.create_connection(("127.0.0.1", self.target), timeout=30)
        back = threading.Thread(target=self._pump, args=(upstream, client, None), daemon=True)
        back.start()
        self._pump(client, upstream, self.reads)
        back.join(30)

    @staticmethod
    def _pump(source, sink, record):
        source.settimeout(30)
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if record is not None:
                    record.append(data)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            try:
                sink.shutdown(socket.SHUT_WR)
            except OSError:
                pass


def client_session(port):
    params = pika.ConnectionParameters("127.0.0.1", port, frame_max=4096, heartbeat=0)
    conn = pika.BlockingConnection(params)
    ch = conn.channel()
    ch.queue_declare("replay")
    ch.confirm_delivery()
    props = pika.BasicProperties(content_type="text/plain", delivery_mode=2, headers={"n": 1, "s": "x"})
    bodies = [b"", b"small", b"x" * 4000, b"y" * 10000, bytes(range(256)) * 3]
    for i in range(60):
        ch.basic_publish("", "replay", bodies[i % len(bodies)], props if i % 2 else None)
    got = []
    for _ in range(3):
        method, _props, body = ch.basic_get("replay")
        got.append(body)
        ch.basic_ack(method.delivery_tag)
    ch.basic_qos(prefetch_count=10)
    seen = []

    def on_message(channel, method, properties, body):
        seen.append(body)
        n = len(seen)
        if n % 7 == 0:
            channel.basic_reject(method.delivery_tag, requeue=False)
        elif n % 5 == 0:
            channel.basic_nack(method.delivery_tag, multiple=True, requeue=False)
        elif n % 3 == 0:
            channel.basic_ack(method.delivery_tag, multiple=True)

    ch.basic_consume("replay", on_message, consumer_tag="replay-consumer")
    while len(seen) < 57:
        conn.process_data_events(time_limit=0.2)
    ch.basic_cancel("replay-consumer")
    other = conn.channel()
    try:
        other.queue_declare("no-such-queue", passive=True)  # 404: the channel closes
    except pika.exceptions.ChannelClosedByBroker:
        pass
    conn.close()
    return got, seen


# The broker itself runs each of its scanners too: the session is recorded against both.
@pytest.mark.parametrize("broker", sorted(BROKER_SCANNERS), indirect=True)
def test_real_pika_traffic_gets_the_same_answers_from_every_scanner(broker):
    recorder = Recorder(broker.port)
    got, seen = client_session(recorder.port)
    recorder.thread.join(30)
    assert got[:2] == [b"", b"small"] and len(seen) == 57
    reads = recorder.reads
    assert len(reads) > 10 and sum(map(len, reads)) > 60 * 3000
    sides = [Side(how, Limits()) for how in SCANNERS]
    answers = 0
    for data in reads:
        results = [side.feed(data) for side in sides]
        assert results[1] == results[0], "python scanner differs from the connection's own loop"
        assert results[2] == results[0], "C scanner differs from the connection's own loop"
        answers += len(results[0][0])
    assert sides[0].conn.closed and answers > 60 * 3000  # the whole session was answered, to the close
