"""Publisher confirms (confirm.select, basic.ack/nack from the broker) and transactions (tx.*)."""

from harness import closed_with, content, method, names, opened

from hutch.codec import spec
from hutch.core.limits import Limits


def _publish_frames(ch, key, count):
    return b"".join(
        method(ch, spec.BASIC_PUBLISH, (0, b"", key, False, False)) + content(ch, b"m%d" % i) for i in range(count)
    )


def test_each_publish_is_confirmed():
    client = opened()
    client.queue(1, b"q")
    assert names(client.call(1, spec.CONFIRM_SELECT, (False,))) == ["confirm.select-ok"]
    events = client.publish(1, b"", b"q", b"one")
    assert names(events) == ["basic.ack"] and events[0].args == [1, False]
    events = client.publish(1, b"", b"q", b"two")
    assert events[0].args == [2, False]


def test_confirms_are_coalesced_per_read():
    client = opened()
    client.queue(1, b"q")
    client.call(1, spec.CONFIRM_SELECT, (False,))
    client.send(_publish_frames(1, b"q", 100))
    events = client.read()
    assert names(events) == ["basic.ack"] and events[0].args == [100, True]


def test_confirm_select_nowait():
    client = opened()
    assert client.call(1, spec.CONFIRM_SELECT, (True,)) == []
    client.queue(1, b"q")
    assert client.publish(1, b"", b"q", b"x")[0].args == [1, False]


def test_unroutable_mandatory_is_returned_then_acked():
    client = opened()
    client.call(1, spec.CONFIRM_SELECT, (False,))
    events = client.publish(1, b"amq.direct", b"nowhere", b"x", mandatory=True)
    assert names(events) == ["basic.return", "basic.ack"]


def test_unroutable_without_mandatory_is_acked():
    client = opened()
    client.call(1, spec.CONFIRM_SELECT, (False,))
    assert names(client.publish(1, b"amq.direct", b"nowhere", b"x")) == ["basic.ack"]


def test_full_queue_nacks_and_acks_around_it():
    client = opened(limits=Limits(queue_max_messages=2))
    client.queue(1, b"q")
    client.call(1, spec.CONFIRM_SELECT, (False,))
    client.send(_publish_frames(1, b"q", 4))
    events = client.read()
    assert [(e.name, e.args) for e in events] == [
        ("basic.ack", [2, True]),
        ("basic.nack", [3, False, False]),
        ("basic.nack", [4, False, False]),
    ]
    client.get(1, b"q", no_ack=True)
    assert names(client.publish(1, b"", b"q", b"room again")) == ["basic.ack"]


def test_confirms_on_two_channels_count_separately():
    client = opened()
    client.channel(2)
    client.queue(1, b"q")
    client.call(1, spec.CONFIRM_SELECT, (False,))
    client.call(2, spec.CONFIRM_SELECT, (False,))
    client.send(_publish_frames(1, b"q", 3) + _publish_frames(2, b"q", 2))
    acks = {(e.channel, e.args[0]) for e in client.read()}
    assert acks == {(1, 3), (2, 2)}


def test_pending_confirms_flushed_before_channel_error():
    client = opened()
    client.queue(1, b"q")
    client.call(1, spec.CONFIRM_SELECT, (False,))
    client.send(
        _publish_frames(1, b"q", 2) + method(1, spec.BASIC_PUBLISH, (0, b"ghost", b"", False, False)) + content(1, b"x")
    )
    events = client.read()
    assert [(e.name, e.args[0]) for e in events] == [("basic.ack", 2), ("channel.close", spec.NOT_FOUND)]


def test_confirm_and_tx_exclude_each_other():
    client = opened()
    client.call(1, spec.TX_SELECT)
    text = closed_with(client.call(1, spec.CONFIRM_SELECT, (False,)), spec.PRECONDITION_FAILED)
    assert b"tx" in text
    client.reopen(1)
    client.call(1, spec.CONFIRM_SELECT, (False,))
    closed_with(client.call(1, spec.TX_SELECT), spec.PRECONDITION_FAILED)


def test_tx_publish_is_invisible_until_commit():
    client = opened()
    client.queue(1, b"q")
    assert names(client.call(1, spec.TX_SELECT)) == ["tx.select-ok"]
    client.publish(1, b"", b"q", b"a")
    client.publish(1, b"", b"q", b"b")
    client.channel(2)
    assert client.get(2, b"q")[0].name == "basic.get-empty"
    assert names(client.call(1, spec.TX_COMMIT)) == ["tx.commit-ok"]
    assert [client.get(2, b"q", no_ack=True)[0].body for _ in range(2)] == [b"a", b"b"]


def test_tx_rollback_discards_publishes():
    client = opened()
    client.queue(1, b"q")
    client.call(1, spec.TX_SELECT)
    client.publish(1, b"", b"q", b"gone")
    assert names(client.call(1, spec.TX_ROLLBACK)) == ["tx.rollback-ok"]
    client.call(1, spec.TX_COMMIT)
    assert client.get(1, b"q")[0].name == "basic.get-empty"


def _two_fetched_in_tx():
    """A transactional channel holding two unacknowledged messages, tags 1 and 2."""
    client = opened()
    client.queue(1, b"q")
    for body in (b"1", b"2"):
        client.publish(1, b"", b"q", body)
    client.call(1, spec.TX_SELECT)
    client.get(1, b"q")
    client.get(1, b"q")
    return client


def test_tx_acks_apply_on_commit():
    client = _two_fetched_in_tx()
    client.ack(1, 2, multiple=True)
    assert len(client.conn.channels[1].unacked) == 2
    closed_with(client.ack(1, 1), spec.PRECONDITION_FAILED)  # already acked in this transaction


def test_tx_ack_commit_and_rollback():
    client = _two_fetched_in_tx()
    client.ack(1, 1)
    client.call(1, spec.TX_COMMIT)
    assert sorted(client.conn.channels[1].unacked) == [2]
    client.ack(1, 2)
    client.call(1, spec.TX_ROLLBACK)
    assert sorted(client.conn.channels[1].unacked) == [2]  # the rolled-back ack did not happen
    client.call(1, spec.CHANNEL_CLOSE, (200, b"", 0, 0))
    client.channel(1)
    assert client.get(1, b"q", no_ack=True)[0].body == b"2"


def test_tx_mandatory_return_at_commit():
    client = opened()
    client.call(1, spec.TX_SELECT)
    assert client.publish(1, b"amq.direct", b"nowhere", b"x", mandatory=True) == []
    assert names(client.call(1, spec.TX_COMMIT)) == ["basic.return", "tx.commit-ok"]


def test_commit_without_select():
    client = opened()
    text = closed_with(client.call(1, spec.TX_COMMIT), spec.PRECONDITION_FAILED)
    assert text == b"PRECONDITION_FAILED - channel is not transactional"
    client.reopen(1)
    closed_with(client.call(1, spec.TX_ROLLBACK), spec.PRECONDITION_FAILED)


def test_tx_publish_to_missing_exchange_fails_at_publish():
    client = opened()
    client.call(1, spec.TX_SELECT)
    closed_with(client.publish(1, b"ghost", b"", b"x"), spec.NOT_FOUND)


def test_confirm_frames_are_the_codecs_to_the_byte():
    """amqp091/confirms.py packs confirms itself (the hot path of a sensor with confirms): the
    same bytes codec/wire.py's encoder makes, for any tag, channel and flag."""
    from hutch.amqp091.confirms import Confirms
    from hutch.codec.wire import method_frame

    class Conn:
        def __init__(self):
            self.out, self.added = [], 0

        def output_added(self, n):
            self.added += n

    class Channel:
        def __init__(self, number):
            self.number, self.conn = number, Conn()

    for number in (1, 300, 65535):
        for tag in (1, 255, 1 << 32, (1 << 64) - 1):
            for multiple in (False, True):
                confirms = Confirms(Channel(number))
                confirms.send(spec.BASIC_ACK, tag, multiple)
                confirms.send(spec.BASIC_NACK, tag, multiple)
                expected = method_frame(number, spec.BASIC_ACK, (tag, multiple)) + method_frame(
                    number, spec.BASIC_NACK, (tag, multiple, False)
                )
                conn = confirms.channel.conn
                assert b"".join(conn.out) == expected and conn.added == len(expected) - 16
