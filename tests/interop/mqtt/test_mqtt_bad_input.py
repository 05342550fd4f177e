"""1,000 mutated MQTT sessions against a running hutch, over TCP: well-formed sessions (3.1.1 and
5) with octets flipped, dropped or inserted, each on a connection of its own, sent in pieces.
The broker logs no error or traceback, and a Paho client is served after them. And clients that
announce a packet as large as the broker takes, send a little of it and go."""

import random
import socket
import time

from brokers import wait_until
from mqtt_brokers import Paho, open_connections, start_hutch, stop

from hutch.mqtt import packets
from hutch.mqtt.packets import V5, V311

SESSIONS = 1000


def session(level, n):
    props = {packets.USER_PROPERTY: [(b"k", b"v")]} if level == V5 else None
    return [
        packets.connect(b"bad-%d" % n, clean=n % 2 == 0, keep_alive=30, user=b"guest", password=b"guest",
                        level=level, will=(b"status/bad", b"gone", 1, False)),
        packets.subscribe(1, [(b"bad/#", 1)], level),
        packets.publish(b"bad/a", b"payload", 1, packet_id=2, props=props, level=level),
        packets.publish(b"bad/b", b"x" * 200, 2, packet_id=3, level=level),
        packets.ack(packets.PUBREL, 3, level=level),
        bytes((0xC0, 0)),
        bytes((0xE0, 0)),
    ]  # fmt: skip


def mutated(rng, data):
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(data))
        kind = rng.randrange(3)
        if kind == 0:
            data[i] ^= rng.randint(1, 255)
        elif kind == 1 and len(data) > 1:
            del data[i]
        else:
            data.insert(i, rng.randint(0, 255))
    return bytes(data)


def still_serving(broker):
    client = Paho(broker, "after").connect()
    client.subscribe("after/check", 1)
    client.publish("after/check", b"still serving", 1)
    assert client.take(1)[0][:2] == ("after/check", b"still serving")
    client.stop()


def test_a_thousand_mutated_sessions_leave_the_broker_serving(tmp_path):
    broker = start_hutch(tmp_path)
    rng = random.Random(20261126)
    try:
        for n in range(SESSIONS):
            level = V5 if n % 2 else V311
            parts = session(level, n)
            which = rng.randrange(len(parts))
            parts[which] = mutated(rng, parts[which])
            data = b"".join(parts)
            with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as s:
                pos = 0
                try:
                    while pos < len(data):
                        step = rng.randint(1, 80)
                        s.sendall(data[pos : pos + step])
                        pos += step
                    s.shutdown(socket.SHUT_WR)
                    while s.recv(4096):
                        pass
                except OSError:
                    pass  # the broker hung up on what it could not read
        still_serving(broker)
    finally:
        stop(broker)  # (fails on any ERROR line or traceback in the broker's log)


def resident(pid):
    with open("/proc/%d/status" % pid) as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def test_clients_that_announce_a_16_mb_packet_and_go_leave_no_memory_behind(tmp_path):
    """A client may announce a PUBLISH as large as the broker takes (max_message_bytes, 16 MB)
    and send a few octets of it: the broker reads it into a buffer of its size, let go of once
    the client has gone. Kept for the next large frame, it held 80 MB (the frame and four more
    of its size ahead) after one such client; glibc's heap then kept what came after it. Ten
    such clients, one after another, leave the broker's resident memory within 8 MB of what it
    was before them, and a client is served after them."""
    broker = start_hutch(tmp_path)
    pid = broker.running.proc.pid

    def announce(n):
        head = packets.connect(b"large-%d" % n, clean=True, keep_alive=30, user=b"guest", password=b"guest", level=V311)
        size = 16 * 1024 * 1024 - 1024
        length = bytes(((size >> shift) & 0x7F) | (0x80 if shift < 21 else 0) for shift in (0, 7, 14, 21))
        with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as s:
            s.sendall(head)
            s.recv(4)  # CONNACK
            s.sendall(b"\x30" + length + b"\x00\x05large" + b"x" * 4000)
            time.sleep(0.3)  # (read: the broker has made room for the rest)

    try:
        before = resident(pid)
        for n in range(10):
            announce(n)
        wait_until(lambda: open_connections(broker) == 0, 10, what="the last client gone")
        after = resident(pid)
        print("resident memory before ten clients that announced 16 MB: %d B, after them: %d B" % (before, after))
        assert after < before + 8 * 1024 * 1024, (before, after)
        still_serving(broker)
    finally:
        stop(broker)
