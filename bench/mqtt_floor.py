"""The least a Python MQTT broker can do for a sensor's reading, as a process of its own for
`hutch bench --mqtt`'s fan-in (bench/mqtt_load.py): one epoll loop over non-blocking sockets
that answers CONNECT and SUBSCRIBE, PUBACKs each QoS 1 PUBLISH and forwards it at QoS 1 to the
client that subscribed, with a packet id of its own. No routing, no queue, no session, nothing
kept, no asyncio: what is left is the system calls and the interpreter's own cost per event.
Its CPU per reading beside hutch's and mosquitto's says how much of hutch's is the broker and
how much any Python process pays before it does anything.

    python -m hutch.bench.mqtt_floor PORT [SECONDS]

prints "ready" once it listens on 127.0.0.1:PORT, and exits after SECONDS (300 by default) or
when killed. Standard library and hutch's MQTT codec only.
"""

import select
import socket
import struct
import sys
import time

from ..mqtt import packets

CONNACK = b"\x20\x02\x00\x00"
PINGRESP = b"\xd0\x00"


class Client:
    __slots__ = ("sock", "pending", "out", "next_id")

    def __init__(self, sock):
        self.sock = sock
        self.pending = b""  # a packet's first octets, the rest still to come
        self.out = b""  # what the socket did not take yet
        self.next_id = 1  # of the deliveries to it (the subscriber's)


def serve(port, seconds):
    listener = socket.create_server(("127.0.0.1", port), backlog=4096)
    listener.setblocking(False)
    poller = select.epoll()
    poller.register(listener.fileno(), select.EPOLLIN)
    clients = {}
    subscriber = None
    buffer = bytearray(16384)
    print("ready", flush=True)
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        for fd, events in poller.poll(1.0):
            if fd == listener.fileno():
                accept(listener, poller, clients)
                continue
            client = clients.get(fd)
            if client is None:
                continue
            if events & select.EPOLLOUT:
                send(client, b"", poller)
            if not events & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR):
                continue
            try:
                n = client.sock.recv_into(buffer)
            except BlockingIOError:
                continue
            except OSError:
                n = 0
            if not n:
                poller.unregister(fd)
                del clients[fd]
                client.sock.close()
                if client is subscriber:
                    subscriber = None
                continue
            replies, subscriber = answer(client, bytes(buffer[:n]), subscriber, poller)
            if replies:
                send(client, replies, poller)
    listener.close()


def accept(listener, poller, clients):
    while True:
        try:
            sock, _ = listener.accept()
        except BlockingIOError:
            return
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        clients[sock.fileno()] = Client(sock)
        poller.register(sock.fileno(), select.EPOLLIN)


def answer(client, data, subscriber, poller):
    """(what client is answered, the subscriber): each whole packet of client's octets."""
    data = client.pending + data
    pos = 0
    replies = []
    while True:
        found = packets.split(data, pos, 1 << 20)
        if found is None:
            break
        first, start, end = found
        kind = first >> 4
        if kind == packets.CONNECT:
            replies.append(CONNACK)
        elif kind == packets.SUBSCRIBE:
            replies.append(b"\x90\x03" + data[start : start + 2] + b"\x01")  # (granted QoS 1)
            subscriber = client
        elif kind == packets.PUBLISH:
            topic_end = start + 2 + ((data[start] << 8) | data[start + 1])
            if (first >> 1) & 3:
                replies.append(b"\x40\x02" + data[topic_end : topic_end + 2])  # PUBACK
                payload = data[topic_end + 2 : end]
            else:
                payload = data[topic_end:end]
            if subscriber is not None:
                packet_id = subscriber.next_id
                subscriber.next_id = packet_id % 65535 + 1
                body = data[start:topic_end] + struct.pack(">H", packet_id) + payload
                send(subscriber, b"\x32" + packets.remaining_length(len(body)) + body, poller)
        elif kind == packets.PINGREQ:
            replies.append(PINGRESP)
        pos = end
    client.pending = data[pos:]
    return b"".join(replies), subscriber


def send(client, data, poller):
    """data to client, after what it has not taken yet; what the socket refuses waits for
    EPOLLOUT."""
    out = client.out + data if client.out else data
    try:
        sent = client.sock.send(out) if out else 0
    except BlockingIOError:
        sent = 0
    except OSError:
        return
    waiting = bool(client.out)
    client.out = out[sent:]
    if bool(client.out) != waiting:
        mask = select.EPOLLIN | (select.EPOLLOUT if client.out else 0)
        poller.modify(client.sock.fileno(), mask)


if __name__ == "__main__":
    serve(int(sys.argv[1]), float(sys.argv[2]) if len(sys.argv) > 2 else 300)
