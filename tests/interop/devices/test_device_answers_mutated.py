"""The Modbus line from the device's side: a device that answers garbage, late, twice, for
another unit or another transaction (Modbus TCP) or with a wrong CRC (RTU), cut short, too long,
or with an exception, at random among its right answers, while hutch polls it (a poll every
0.1 s; over Modbus TCP, and over RTU on an RS-485 line of two ptys joined by socat, at 115,200
baud) and a real client is served on the same broker.

Only a right answer becomes a reading (every reading holds the values the device's right
answers hold); each other one is a failed poll, counted, never a traceback or an internal
error in the log; the device is polled on to the end. HUTCH_FUZZ_POLLS sets how many polls
(`make test`: a hundred; `make soak`: ten thousand)."""

import os
import random
import struct
import threading
import time

import pika
import pytest
import serial
from brokers import BIN, RunningBroker, wait_until
from modbus_support import PtyPair, bound_queue, device_table, drain
from peer_server import PeerServer

from hutch.devices.modbus.rtu import framed

POLLS = int(os.environ.get("HUTCH_FUZZ_POLLS", "100"))
SEED = int(os.environ.get("HUTCH_FUZZ_SEED", random.randrange(10**6)))
MOISTURE = 100  # holding register 0 (scaled 0.1: 10.0 %)
TEMP = struct.pack(">f", 21.5)  # input registers 0-1
# mostly right: a device wrong in most of its answers is down, and polled after a backoff that
# doubles up to a minute (devices/device.py)
WRONG = ("garbage", "late", "twice", "unit", "short", "long", "fewer", "other", "exception", "silent")
KINDS = ("right",) * 20 + WRONG + ("transaction",)
RTU_KINDS = ("right",) * 20 + WRONG + ("crc",)


def answer_pdu(pdu):
    """A right answer to a read of holding register 0 (one) or input registers 0-1 (a float)."""
    if pdu[0] == 3:
        return struct.pack(">BBH", 3, 2, MOISTURE)
    if pdu[0] == 4:
        return struct.pack(">BB", 4, 4) + TEMP
    return bytes((pdu[0] | 0x80, 1))  # (a function it does not have: illegal function)


def wrong(kind, body, rng):
    """A PDU answer made wrong the ways both transports share (or left right)."""
    if kind == "fewer":  # a sound answer with a register less than was asked for
        return bytes((body[0], body[1] - 2)) + body[2:-2]
    if kind == "other":  # a sound answer to the other read (as the read before's, late, looks)
        return answer_pdu(bytes((7 - body[0],)))
    if kind == "exception":
        return bytes((body[0] | 0x80, 2))  # illegal data address
    if kind == "long":
        return body + bytes(rng.randrange(256) for _ in range(rng.randint(1, 9)))
    return body


def sent(kind, frame, rng):
    """The octets a frame goes out as: garbage instead, cut short, or twice."""
    if kind == "garbage":
        return bytes(rng.randrange(256) for _ in range(rng.randint(1, 24)))
    if kind == "short":
        return frame[: rng.randint(1, len(frame) - 1)]
    return frame * 2 if kind == "twice" else frame


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
                body = wrong(kind, answer_pdu(pdu), self.rng)
                if kind == "unit":
                    unit ^= 0x5A
                elif kind == "transaction":
                    transaction ^= 0x0101
                frame = struct.pack(">HHHB", transaction, protocol, len(body) + 1, unit) + body
                try:
                    if kind == "silent":
                        continue
                    if kind == "late":
                        time.sleep(0.4)  # (past the read's timeout of 0.3 s)
                    sock.sendall(sent(kind, frame, self.rng))
                except OSError:
                    return

    def stop(self):
        self.server.stop()


class RtuDevice:
    """A Modbus RTU device (unit 1) on the device's end of a pty line, answering each request as
    kinds (RTU_KINDS) says, at random (seeded); counts what it answered."""

    def __init__(self, path, seed, kinds=RTU_KINDS):
        self.rng = random.Random(seed)
        self.kinds = kinds
        self.answered = dict.fromkeys(kinds, 0)
        self.port = serial.Serial(path, 115200, timeout=0.2)
        self.stopped = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stopped:
            request = self.port.read(8)  # (a read request: unit, function, start, count, CRC)
            if len(request) < 8:
                self.port.reset_input_buffer()  # (a master's frame cut by a timeout: start again)
                continue
            kind = self.rng.choice(self.kinds)
            self.answered[kind] += 1
            unit = request[0] ^ 0x5A if kind == "unit" else request[0]
            frame = framed(unit, wrong(kind, answer_pdu(request[1:-2]), self.rng))
            if kind == "crc":
                frame = frame[:-1] + bytes((frame[-1] ^ 0xFF,))
            if kind == "silent":
                continue
            if kind == "late":
                time.sleep(0.4)  # (past the read's timeout of 0.3 s)
            self.port.write(sent(kind, frame, self.rng))

    def stop(self):
        self.stopped = True
        self.thread.join(5)
        self.port.close()


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


@pytest.mark.long  # mostly waits: started early (tests/conftest.py)
@pytest.mark.timeout(max(300, 120 + POLLS))  # (past its own deadline: `make soak` polls 10,000 times)
@pytest.mark.parametrize("transport", ["tcp", "rtu"])
def test_a_device_answering_wrongly_in_every_way_costs_its_polls_only(tmp_path, transport):
    line = None
    if transport == "tcp":
        device = Device(SEED)
        uri = "modbus+tcp://127.0.0.1:%d" % device.port
    else:
        line = PtyPair(tmp_path)
        device = RtuDevice(line.ends[0], SEED)
        uri = "modbus+rtu://%s?baudrate=115200" % line.ends[1]
    config = tmp_path / "hutch.toml"
    config.write_text(device_table("odd-meter", uri, 1, 0.1))
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
        print("%s device answers: %s; %d readings, all right; %d round trips of a client meanwhile (seed %d)"
              % (transport, device.answered, len(readings), trips, SEED))  # fmt: skip
    finally:
        device.stop()
        broker.stop()
        if line is not None:
            line.stop()


@pytest.mark.parametrize(
    "kind, said",
    [
        # pymodbus hands such an answer on: decoding it raised struct.error
        ("fewer", "an answer of 0 registers to a read of 1 holding at 0"),
        # over RTU a late answer to the read before looks so: its registers became a reading
        ("other", "an answer of function 4 to a read of 1 holding at 0"),
    ],
)
def test_a_sound_answer_that_does_not_fit_the_read_is_an_error_of_the_poll(tmp_path, kind, said):
    """A device whose every answer is sound (its CRC right) but holds a register less than the
    read asked for, or answers another function: each poll fails as an error said in one line,
    never a reading, never an internal error."""
    line = PtyPair(tmp_path)
    device = RtuDevice(line.ends[0], SEED, kinds=(kind,))
    config = tmp_path / "hutch.toml"
    config.write_text(device_table("short-meter", "modbus+rtu://%s?baudrate=115200" % line.ends[1], 1, 0.1))
    broker = RunningBroker([os.path.join(BIN, "hutch"), "serve", "--config", str(config)], tmp_path).start()
    try:
        said = "device short-meter: down (error: %s)" % said
        wait_until(lambda: said in broker.log(), 30, what=lambda: broker.log()[-2000:])
        log = broker.log()
        assert "Traceback" not in log and "internal error" not in log and " ERROR " not in log, log[-5000:]
    finally:
        device.stop()
        broker.stop()
        line.stop()
