"""A QoS 1 PUBACK means the message is on disk: Paho publishers at QoS 1, the broker SIGKILLed
(as a power cut ends it) while they publish, again and again; a persistent session that
subscribed before gets every message a PUBACK answered, after the last restart."""

import queue
import time

import pytest
from brokers import sigkill, wait_until
from mqtt_brokers import Paho, start_hutch, stop

KILLS = 5
IN_FLIGHT = 400  # published each round before the kill, without waiting for their PUBACKs


@pytest.mark.timeout(240)
def test_every_pubacked_qos_1_message_survives_sigkill(tmp_path):
    broker = start_hutch(tmp_path)
    try:
        acked, got = _publish_through_kills(broker)
    finally:
        stop(broker)
    lost = sorted(acked - got)
    assert not lost, "%d PUBACKed messages lost of %d (first: %s)" % (len(lost), len(acked), lost[:10])


def _publish_through_kills(broker):
    """(the numbers PUBACKed, the numbers the collector got after the last restart)"""
    collector = Paho(broker, "collector", clean=False).connect()
    collector.subscribe("kill/#", 1)
    collector.stop()
    acked = set()
    seq = 0
    for kill in range(KILLS):
        publisher = Paho(broker, "publisher-%d" % kill).connect()
        sent = []
        for _ in range(IN_FLIGHT):
            sent.append((seq, publisher.client.publish("kill/readings", b"%d" % seq, 1)))
            seq += 1
        # killed part way: some of the round's PUBACKs came, the others never will
        wait_until(lambda sent=sent: sum(info.is_published() for _, info in sent) >= IN_FLIGHT // 4, 30)
        sigkill(broker.running)
        publisher.client.loop_stop()
        acked |= {number for number, info in sent if info.is_published()}
        broker.running.start()
    assert len(acked) >= KILLS * IN_FLIGHT // 4
    collector = Paho(broker, "collector", clean=False).connect()
    assert collector.flags.session_present
    got = set()
    deadline = time.monotonic() + 60
    while not acked <= got and time.monotonic() < deadline:
        try:
            got.add(int(collector.got.get(timeout=1)[1]))
        except queue.Empty:
            pass
    collector.stop()
    return acked, got
