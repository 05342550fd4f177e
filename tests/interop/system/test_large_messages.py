"""Large messages through the CPython port's reads and writes (ports/tcp_cpython.py): a frame
larger than the usual read is read whole with room for several more of its size, so a read
stops anywhere in the frames after it, and a large output is written straight from its parts
to the socket when the transport has nothing of its own left to send, the rest through the
transport. Every body must still arrive whole, in order, byte for byte, also when the
consumer's socket is full and the broker's writes stop part way; and a large write never
overtakes what the transport still holds."""

import asyncio
import random
import socket
import time

import pika

from hutch.ports.tcp_cpython import write_parts

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


def test_a_large_write_waits_behind_what_the_transport_holds():
    """The transport holds octets the socket had no room for; the client then reads some, so
    the socket has room, before asyncio's loop has written the held octets: a large write
    now must still go after them (through the transport), never straight to the socket."""

    async def main():
        loop = asyncio.get_running_loop()
        listener = socket.create_server(("127.0.0.1", 0))
        client = socket.create_connection(listener.getsockname())
        accepted, _ = listener.accept()
        listener.close()
        transport, _protocol = await loop.connect_accepted_socket(asyncio.Protocol, accepted)
        transport.set_write_buffer_limits(high=1 << 30)
        fd = transport.get_extra_info("socket").fileno()
        sent = []
        n = 0
        while not transport.get_write_buffer_size():  # until the socket is full and asyncio holds the rest
            chunk = bytes([n % 251]) * 65536
            transport.write(chunk)
            sent.append(chunk)
            n += 1
        client.setblocking(False)
        received = [client.recv(1 << 20)]  # room in the socket, the loop not run since
        parts = [b"head", bytes(range(256)) * 1024, b"tail"]
        write_parts(transport, fd, parts)
        sent += parts
        total = sum(map(len, sent))
        got = sum(map(len, received))
        while got < total:
            await asyncio.sleep(0.001)  # (asyncio writes what it holds)
            try:
                data = client.recv(1 << 20)
            except BlockingIOError:
                continue
            received.append(data)
            got += len(data)
        transport.close()
        client.close()
        return b"".join(received) == b"".join(sent)

    assert asyncio.run(asyncio.wait_for(main(), 30))
