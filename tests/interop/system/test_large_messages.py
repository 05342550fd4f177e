"""Large messages through the CPython port's reads and writes (ports/tcp_cpython.py): a frame
larger than the usual read is read whole with room for several more of its size, so a read
stops anywhere in the frames after it, and a large output is gathered into one buffer the
port fills again for the next write. Every body must still arrive whole, in order, byte for
byte, also when the consumer's socket is full and the broker's writes stop part way."""

import random
import time

import pika

FRAME_MAX = 131072  # pika's default: a body above it comes in several frames


def _bodies():
    """Sizes around every edge the port has: the 16 KiB read, one 64 KiB frame, a body of two
    and of three frames; small publishes right after large ones; each body its own octets."""
    rng = random.Random(31)
    sizes = [16 * 1024 + 1, 65536, 65536 + 513, 100, 2 * FRAME_MAX + 7, 70000, 5, 65536, 300000, 16]
    return [rng.randbytes(sizes[i % len(sizes)]) for i in range(120)]


def test_large_bodies_arrive_whole_in_order_through_a_full_socket(broker):
    params = pika.ConnectionParameters(broker.host, broker.port, heartbeat=0)
    consumer = pika.BlockingConnection(params)
    receiving = consumer.channel()
    receiving.queue_declare("large", auto_delete=True)
    got = []
    receiving.basic_consume("large", lambda ch, method, props, body: got.append(body), auto_ack=True)
    consumer.process_data_events(time_limit=0.1)

    publisher = pika.BlockingConnection(params)
    sending = publisher.channel()
    bodies = _bodies()
    for body in bodies:
        sending.basic_publish("", "large", body)
    publisher.process_data_events(time_limit=0.1)  # (all written: the broker reads them in bursts)
    time.sleep(1)  # the consumer reads nothing meanwhile: its socket fills, the broker's writes stop

    deadline = time.monotonic() + 60
    while len(got) < len(bodies) and time.monotonic() < deadline:
        consumer.process_data_events(time_limit=0.2)
    publisher.close()
    consumer.close()
    assert [len(body) for body in got] == [len(body) for body in bodies]
    assert [i for i, (body, sent) in enumerate(zip(got, bodies)) if body != sent] == []
