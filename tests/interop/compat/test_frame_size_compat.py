"""Frame sizes as RabbitMQ takes them, checked against the run's RabbitMQ (conftest.py's
rabbitmq fixture): some clients (AMQPStorm, rabbitpy) fill a body frame's payload to frame_max,
so the frame is 8 octets over; RabbitMQ takes that and refuses one octet more with 501. A raw
client (bench/loadgen.py's: the handshake through hutch's client protocol, frames sent as they
are) does the same to both brokers, on each of hutch's frame scanners."""

import pytest
from brokers import SCANNERS

from hutch.bench import loadgen
from hutch.client.protocol import ConnectionClosed, Message
from hutch.codec import spec, wire

pytestmark = pytest.mark.timeout(60)

FRAME_MAX = 4096


def publish_frames(queue, body):
    """A publish whose body goes in one frame of len(body) octets of payload."""
    publish = wire.method_frame(1, spec.BASIC_PUBLISH, (0, b"", queue.encode(), False, False))
    return publish + wire.content_frames(1, body, None, len(body) + 8)


def outcome(target, payload):
    """What a broker does with a publish whose body frame carries `payload` octets, on a
    connection tuned to FRAME_MAX: ("kept", the body as basic.get returns it) or ("closed",
    the reply code)."""
    conn = loadgen.Connection(target.host, target.port, 10, frame_max=FRAME_MAX)
    queue = "frames-%d" % payload
    try:
        conn.declare_queue(queue)
        conn.call(spec.QUEUE_PURGE, (0, queue, False))
        body = bytes(range(256)) * (payload // 256) + b"x" * (payload % 256)
        conn.send(publish_frames(queue, body))
        conn.protocol.call(spec.BASIC_GET, (0, queue, True))
        conn._flush()
        while True:
            event = conn.protocol.next_event()
            if isinstance(event, ConnectionClosed):
                return ("closed", event.code)
            if isinstance(event, Message):
                return ("kept", bytes(event.body) == body)
            n = conn.sock.recv_into(conn.protocol.read_buffer())
            if not n:
                return ("closed", "without a word")
            conn.protocol.received(n)
    finally:
        conn.sock.close()


@pytest.mark.parametrize("broker", sorted(SCANNERS), indirect=True)
def test_a_frame_8_octets_over_frame_max_is_taken_and_one_more_is_not_as_on_rabbitmq(broker, rabbitmq):
    for payload in (FRAME_MAX - 8, FRAME_MAX, FRAME_MAX + 1):
        ours, theirs = outcome(broker, payload), outcome(rabbitmq, payload)
        assert ours == theirs, "payload %d: hutch %r, RabbitMQ %r" % (payload, ours, theirs)
    assert outcome(broker, FRAME_MAX) == ("kept", True)
