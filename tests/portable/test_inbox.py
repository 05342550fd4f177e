"""core/bridge/inbox.py: the local side of a down bridge (deliveries from upstream published here)."""

import struct

from harness import opened

from hutch.core.bridge.inbox import DROP, REQUEUE, Inbox

BARE_HEADER = struct.pack(">IHHQH", 14, 60, 0, 5, 0) + b"\xce"  # no properties, a 5-byte body


def _tail(body):
    return struct.pack(">I", len(body)) + body + b"\xce"


def test_taken_deliveries_become_ackable_in_order():
    client = opened()
    client.declare_queue(1, b"cmd")
    woken = []
    inbox = Inbox(client.broker, None, b"cmd", lambda: woken.append(1))
    for tag in (1, 2, 3):
        assert inbox.receive(tag, b"", b"anything", BARE_HEADER, _tail(b"go-%d!" % tag), 5) == 0
    assert woken and inbox.received == 3
    assert inbox.ackable() == 3 and inbox.ackable() == 0  # once
    assert [client.get(1, b"cmd", True)[0].body for _ in range(3)] == [b"go-1!", b"go-2!", b"go-3!"]


def test_what_no_queue_takes_is_dropped_to_upstream_and_a_refusal_goes_back():
    client = opened()
    inbox = Inbox(client.broker, b"", None)
    assert inbox.receive(1, b"", b"no-such-queue", BARE_HEADER, _tail(b"lost?"), 5) == DROP
    assert Inbox(client.broker, b"nowhere", None).receive(1, b"", b"k", BARE_HEADER, _tail(b"lost?"), 5) == DROP
    client.declare_queue(1, b"q")
    client.broker.flow.set_alarm("memory", "low on memory")  # publishers blocked
    assert inbox.receive(2, b"", b"q", BARE_HEADER, _tail(b"later"), 5) == REQUEUE
    assert inbox.ackable() == 0 and inbox.received == 0
