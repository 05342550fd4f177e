"""Mutated sessions, what the fuzzing of served brokers shares (tests/interop/security/
test_mutated_sessions.py at every front door of a host's broker, tests/interop/boards/
test_board_memory.py on a board's heap): the recorded sessions of real clients
(tests/fuzz/corpus/), a few edits to one, a session played over a real socket, and a real
client's round trips kept going meanwhile."""

import json
import os
import socket
import ssl
import struct
import threading
import time

import pika
from paths import TESTS

from hutch.ports.control_request import connected

CORPUS = os.path.join(TESTS, "fuzz", "corpus")
ODD_VALUES = (None, 0, -1, 2**64, 1.5, True, "", "x" * 300, "../..", [], {}, ["a", 1], {"k": None})


def seeds(corpus):
    """The recorded sessions of a corpus (a session target's without the octet in front that
    picks its pieces)."""
    folder = os.path.join(CORPUS, corpus)
    found = []
    for entry in sorted(os.listdir(folder)):
        with open(os.path.join(folder, entry), "rb") as f:
            found.append(f.read()[1:] if corpus.endswith("-session") else f.read())
    return found


def mutated(data, rng):
    if data.startswith(b"{") and rng.random() < 0.5:  # a control request: a value of another type
        request = json.loads(data)
        request[rng.choice(sorted(request) + ["name", "user", "kind"])] = rng.choice(ODD_VALUES)
        return json.dumps(request).encode() + b"\n"
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        if not data:
            break
        i, kind = rng.randrange(len(data)), rng.random()
        if kind < 0.35:
            data[i] ^= 1 << rng.randrange(8)
        elif kind < 0.5:
            data[i] = rng.choice((0, 0x7F, 0x80, 0xFF))
        elif kind < 0.65:
            del data[i : i + rng.randint(1, 16)]
        elif kind < 0.8:
            data[i:i] = rng.randbytes(rng.randint(1, 16))
        elif kind < 0.92:
            j = rng.randrange(len(data))
            data[i:i] = data[j : j + rng.randint(1, 64)]  # a piece again, elsewhere
        else:
            del data[i:]  # the rest never sent
    return bytes(data)


def play(port, data, rng, tls=None):
    """One session: data sent in pieces, the answers read as they come, then the socket closed
    (a reset, one time in four). port: a TCP port, or a Unix socket's path."""
    try:
        if isinstance(port, str):
            sock = connected(port, 5)  # (as `hutch ctl` connects: a full backlog is waited for)
        else:
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    except OSError as e:
        raise AssertionError("the listener on %s refused a connection: %s" % (port, e)) from None
    try:
        if tls is not None:
            if rng.random() < 0.2:  # garbage where the TLS handshake goes
                sock.sendall(data[: rng.randint(1, 200)])
                drain(sock, 0.05)
                return
            sock = tls.wrap_socket(sock, server_hostname="127.0.0.1")
        at = 0
        while at < len(data):
            size = rng.choice((1, 7, 64, 512, 4096))
            try:
                sock.sendall(data[at : at + size])
            except OSError:
                return  # (the broker closed it: what it does with a bad session)
            at += size
            if rng.random() < 0.3:
                drain(sock, 0)
        drain(sock, 0.02)
    finally:
        if rng.random() < 0.25 and not isinstance(port, str):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()


def drain(sock, wait):
    sock.settimeout(wait)
    try:
        while sock.recv(65536):
            pass
    except (OSError, ssl.SSLError):
        pass


class Served:
    """A real client's round trips, over and over until stop(): each publish comes back."""

    def __init__(self, name, trip):
        self.name, self.trip = name, trip
        self.done, self.failed, self.stopped = 0, [], False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            for n in self.trip(lambda: self.stopped):
                self.done = n
        except Exception as e:  # (said by stop(): the client was not served)
            self.failed.append("%s: %r" % (self.name, e))

    def stop(self):
        self.stopped = True
        self.thread.join(60)
        assert not self.failed, self.failed
        assert self.done > 0, "%s made no round trip" % self.name
        return self.done


def pika_trips(port, ssl_options=None):
    def trips(stopped):
        params = pika.ConnectionParameters("127.0.0.1", port, ssl_options=ssl_options, heartbeat=0)
        connection = pika.BlockingConnection(params)
        channel = connection.channel()
        queue = channel.queue_declare("", exclusive=True).method.queue
        channel.confirm_delivery()
        n = 0
        while not stopped():
            n += 1
            channel.basic_publish("", queue, b"trip %d" % n)
            got = channel.basic_get(queue, auto_ack=True)[2]
            assert got == b"trip %d" % n, got
            yield n
            time.sleep(0.05)
        connection.close()

    return trips
