"""The Modbus line from the device's side: a device that answers garbage, late, twice, for
another unit or another transaction, cut short, too long, or with an exception, at random
among its right answers, while hutch polls it (Modbus TCP, a poll every 0.1 s) and a real
client is served on the same broker.

Only a right answer becomes a reading (every reading holds the values the device's right
answers hold); each other one is a failed poll, counted, never a traceback or an internal
error in the log; the device is polled on to the end. HUTCH_FUZZ_POLLS sets how many polls
(`make test`: a hundred; `make soak`: ten thousand)."""

import os
import random
import struct
import time

import pika
from brokers import BIN, RunningBroker
from modbus_support import bound_queue, device_table, drain
from peer_server import PeerServer

POLLS = int(os.environ.get("HUTCH_FUZZ_POLLS", "100"))
SEED = int(os.environ.get("HUTCH_FUZZ_SEED", random.randrange(10**6)))
MOISTURE = 100  # holding register 0 (scaled 0.1: 10.0 %)
TEMP = struct.pack(">f", 21.5)  # input registers 0-1
# mostly right: a device wrong in most of its answers is down, and polled after a backoff that
# doubles up to a minute (devices/device.py)
KINDS = ("right",) * 20 + ("garbage", "late", "twice", "unit", "transaction", "short", "long", "exception", "silent")


def answer_pdu(pdu):
    """A right answer to a read of holding register 0 (one) or input registers 0-1 (a float)."""
    if pdu[0] == 3:
        return struct.pack(">BBH", 3, 2, MOISTURE)
    if pdu[0] == 4:
        return struct.pack(">BB", 4, 4) + TEMP
    return bytes((pdu[0] | 0x80, 1))  # (a function it does not have: illegal function)


class Device:
    """A Modbus TCP device on a port of its own, answering each request as KINDS says, at
    random (seeded); counts what it answered."""

    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.answered = dict.fromkeys(KINDS, 0)
        self.server = PeerServer(self._serve)
        self.port = self.server.port

    def _serve(self, sock):
        with sock:
            while True:
                head = _exactly(sock, 7)
                if head is None:
                    return
                transaction, protocol, length, unit = struct.unpack(">HHHB", head)
                pdu = _exactly(sock, length - 1)
                if pdu is None:
                    return
                kind = self.rng.choice(KINDS)
                self.answered[kind] += 1
                body = answer_pdu(pdu)
                if kind == "exception":
                    body = bytes((pdu[0] | 0x80, 2))  # illegal data address
                elif kind == "unit":
                    unit ^= 0x5A
                elif kind == "transaction":
                    transaction ^= 0x0101
                elif kind == "long":
                    body += bytes(self.rng.randrange(256) for _ in range(self.rng.randint(1, 9)))
                frame = struct.pack(">HHHB", transaction, protocol, len(body) + 1, unit) + body
                if kind == "garbage":
                    frame = bytes(self.rng.randrange(256) for _ in range(self.rng.randint(1, 24)))
                elif kind == "short":
                    frame = frame[: self.rng.randint(1, len(frame) - 1)]
                try:
                    if kind == "silent":
                        continue
                    if kind == "late":
                        time.sleep(0.4)  # (past the read's timeout of 0.3 s)
                    sock.sendall(frame * 2 if kind == "twice" else frame)
                except OSError:
                    return

    def stop(self):
        self.server.stop()


def _exactly(sock, n):
    data = b""
    while len(data) < n:
        try:
            more = sock.recv(n - len(data))
        except OSError:
            return None
        if not more:
            return None
        data += more
    return data


def test_a_device_answering_wrongly_in_every_way_costs_its_polls_only(tmp_path):
    device = Device(SEED)
    config = tmp_path / "hutch.toml"
    config.write_text(device_table("odd-meter", "modbus+tcp://127.0.0.1:%d" % device.port, 1, 0.1))
    broker = RunningBroker([os.path.join(BIN, "hutch"), "serve", "--config", str(config)], tmp_path).start()
    try:
        bound_queue(broker)
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
        channel = connection.channel()
        queue = channel.queue_declare("", exclusive=True).method.queue
        trips = 0
        deadline = time.monotonic() + 60 + POLLS  # (a poll every 0.1 s; a failed one waits its timeout)
        while sum(device.answered.values()) < 2 * POLLS:  # (two reads a poll, the second if the first was right)
            trips += 1
            channel.basic_publish("", queue, b"trip %d" % trips)
            assert channel.basic_get(queue, auto_ack=True)[2] == b"trip %d" % trips
            time.sleep(0.05)
            assert time.monotonic() < deadline, "the device was asked %s" % device.answered
        connection.close()
        readings = [body for key, _headers, body in drain(broker) if key.startswith("sensors.")]
        wrong = [r for r in readings if r["value"] not in (MOISTURE / 10, 21.5)]
        assert not wrong, "readings that no right answer holds: %s" % wrong[:5]
        assert readings, "no poll got right answers to both its reads (answers: %s)" % device.answered
        log = broker.log()
        assert "Traceback" not in log and "internal error" not in log and " ERROR " not in log, log[-5000:]
        print("device answers: %s; %d readings, all right; %d round trips of a client meanwhile (seed %d)"
              % (device.answered, len(readings), trips, SEED))  # fmt: skip
    finally:
        device.stop()
        broker.stop()
