"""A PUBACK or a PUBCOMP means the message is on disk, and a QoS 2 message is taken once: Paho
publishers at QoS 1 and at QoS 2 (a persistent session, resumed after each restart, so Paho
sends again what it had in flight), the broker SIGKILLed (as a power cut ends it) while they
publish, 20 times. A persistent session that subscribed before gets, after the last restart,
every message a PUBACK or PUBCOMP answered, and no QoS 2 message twice."""

import collections
import queue
import time

import pytest
from brokers import sigkill, wait_until
from mqtt_brokers import Paho, restart, start_hutch, stop

KILLS = 20
QOS1_ROUND = 200  # QoS 1 messages published each round before the kill, without waiting for PUBACKs
QOS2_ROUND = 60  # ... and QoS 2 ones (Paho has 20 in flight at a time: the rest wait in it)


@pytest.mark.long  # mostly waits: started early (tests/conftest.py)
@pytest.mark.timeout(400)
def test_every_acknowledged_message_survives_sigkills_and_qos_2_is_taken_once(tmp_path):
    broker = start_hutch(tmp_path)
    try:
        acked, exactly_once, got = _publish_through_kills(broker)
    finally:
        stop(broker)
    numbers = collections.Counter(got)
    lost = sorted(acked - set(numbers))
    twice = sorted(n for n in exactly_once if numbers[n] > 1)
    assert not lost, "%d acknowledged messages lost of %d (first: %s)" % (len(lost), len(acked), lost[:10])
    assert not twice, "%d QoS 2 messages taken twice (first: %s)" % (len(twice), twice[:10])


def _publish_through_kills(broker):
    """(the messages PUBACKed or PUBCOMPed, the QoS 2 ones, what the collector got after the last
    restart): each message a string, 'qos1:N' or 'qos2:N'."""
    collector = Paho(broker, "collector", clean=False).connect()
    collector.subscribe("kill/#", 1)
    collector.stop()
    qos2 = Paho(broker, "qos2-publisher", "5", clean=False)
    # Reconnected by the test alone: Paho's own reconnect, tried while the broker is down, puts a
    # message it sent PUBREL for back to be PUBLISHed again once the test reconnects it too (its
    # state reset twice: paho-mqtt 2.1), which MQTT forbids (4.3.3) and no broker can tell apart
    qos2.client.reconnect_delay_set(min_delay=120, max_delay=120)
    qos2.connect(session_expiry=3600)
    acked, exactly_once, pending = set(), set(), []
    seq = 0
    for kill in range(KILLS):
        qos1 = Paho(broker, "qos1-publisher-%d" % kill).connect()
        sent = []
        for _ in range(QOS1_ROUND):
            sent.append(("qos1:%d" % seq, qos1.client.publish("kill/qos1", b"qos1:%d" % seq, 1)))
            seq += 1
        for _ in range(QOS2_ROUND):
            name = "qos2:%d" % seq
            pending.append((name, qos2.client.publish("kill/qos2", name.encode(), 2)))
            exactly_once.add(name)
            seq += 1
        # killed part way: some of the round's acknowledgements came, the others never will
        wait_until(lambda sent=sent: sum(info.is_published() for _, info in sent) >= QOS1_ROUND // 4, 30)
        sigkill(broker.running)
        qos1.client.loop_stop()
        qos2.client.loop_stop()
        acked |= {name for name, info in sent if info.is_published()}
        restart(broker)
        qos2.connected.clear()
        qos2.client.reconnect()  # (its session: Paho sends its QoS 2 messages in flight again)
        qos2.client.loop_start()
        assert qos2.connected.wait(10)
    wait_until(lambda: all(info.is_published() for _, info in pending), 60, what="every QoS 2 PUBCOMP")
    acked |= {name for name, _ in pending}
    qos2.stop()
    assert len(acked) >= KILLS * (QOS1_ROUND // 4 + QOS2_ROUND)
    collector = Paho(broker, "collector", clean=False).connect()
    assert collector.flags.session_present
    got = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            got.append(collector.got.get(timeout=2)[1].decode())
        except queue.Empty:
            if acked <= set(got):
                break
    collector.stop()
    return acked, exactly_once, got
