"""core/bridge/outbox.py: the local side of an up bridge (a consumer session with no socket)."""

from harness import opened

from hutch.core.bridge.outbox import Outbox


def _queue_with(client, count):
    client.declare_queue(1, b"src", durable=True)
    for i in range(count):
        client.publish(1, b"", b"src", b"m%d" % i)
    return client.broker.queues[b"src"]


def _bodies(entries):
    return [entry[0].body_tail[4:-1] for entry in entries]


def test_nothing_is_delivered_until_the_link_is_up_then_at_most_the_window():
    client = opened()
    queue = _queue_with(client, 10)
    woken = []
    outbox = Outbox(client.broker, queue, "up", 4, lambda: woken.append(1))
    assert outbox.take() == [] and not woken
    outbox.link_up()
    assert _bodies(outbox.take()) == [b"m0", b"m1", b"m2", b"m3"]
    assert woken and outbox.backlog() == 10
    assert outbox.take() == []  # the window is full until upstream confirms


def test_confirms_settle_and_make_room_in_order():
    client = opened()
    queue = _queue_with(client, 10)
    outbox = Outbox(client.broker, queue, "up", 4)
    outbox.link_up()
    outbox.take()
    outbox.confirmed(3, True)  # m0..m2 leave the queue
    assert outbox.forwarded == 3 and outbox.backlog() == 7 and len(outbox.held) == 3  # (the window, and as many held)
    assert _bodies(outbox.take()) == [b"m4", b"m5", b"m6"]
    outbox.confirmed(4, False)
    assert outbox.forwarded == 4
    assert _bodies(outbox.take()) == [b"m7"]
    assert [seq for seq, _entry in outbox.in_flight] == [5, 6, 7, 8]


def test_a_lost_link_puts_what_was_in_flight_back_first_marked_redelivered():
    client = opened()
    queue = _queue_with(client, 6)
    outbox = Outbox(client.broker, queue, "up", 3)
    outbox.link_up()
    outbox.take()
    outbox.confirmed(1, False)
    outbox.down()
    assert outbox.in_flight == [] and queue.message_count() == 5
    outbox.link_up()  # a new link: its confirms count from 1 again
    entries = outbox.take()
    assert _bodies(entries) == [b"m1", b"m2", b"m3"]
    assert [entry[1] for entry in entries] == [True, True, True]  # m3 had been delivered too
    assert [seq for seq, _entry in outbox.in_flight] == [1, 2, 3]


def test_a_nack_puts_the_message_back_and_close_ends_the_consumer():
    client = opened()
    queue = _queue_with(client, 2)
    outbox = Outbox(client.broker, queue, "up", 1)
    outbox.link_up()
    outbox.take()
    outbox.nacked(1, False)
    entries = outbox.take()
    assert _bodies(entries) == [b"m0"] and entries[0][1] is True
    outbox.close()
    assert queue.consumers == [] and queue.message_count() == 2


def _props(header_tail):
    from hutch.codec.wire import decode_properties

    return decode_properties(memoryview(header_tail)[4:-1])


def test_forwarded_headers_name_origin_sequence_and_hops_and_make_it_persistent():
    from hutch.core.message import Message

    client = opened()
    client.declare_queue(1, b"src", durable=True)
    client.publish(1, b"", b"src", b"x", {"delivery-mode": 1, "headers": {"a": 1}})
    client.publish(1, b"", b"src", b"y")
    outbox = Outbox(client.broker, client.broker.queues[b"src"], "up", 4, node=b"node-1")
    outbox.link_up()
    first, second = [entry[0] for entry in outbox.take()]
    props = _props(outbox.header_for(first))
    assert props["delivery-mode"] == 2
    headers = props["headers"]
    # no journal here, so transient: a lane of this run's own, named in the origin
    assert headers["a"] == 1 and headers["x-hutch-origin"] == outbox.run_origin
    assert outbox.run_origin.startswith(b"node-1/up/run-")
    assert (headers["x-hutch-seq"], headers["x-hutch-hops"]) == (1, 1)
    assert headers["x-hutch-gateway"] == b"hutch"  # the gateway's name (the broker's: [server] name)
    assert _props(outbox.header_for(second))["headers"]["x-hutch-seq"] == 2
    assert _props(outbox.header_for(first))["headers"]["x-hutch-seq"] == 1, "sent again: the same number"
    # a message that came over a bridge already: one hop more, its old bridge headers replaced,
    # the gateway that took it first kept
    came = Message(b"", b"k", b"\x00\x01k", outbox.header_for(first), None, 0)
    client.broker.name = "relay"
    again = _props(outbox.header_for(came))["headers"]
    assert sorted(again) == ["a", "x-hutch-gateway", "x-hutch-hops", "x-hutch-origin", "x-hutch-seq"]
    assert again["x-hutch-hops"] == 2 and again["x-hutch-gateway"] == b"hutch"
    # renamed (a reload): what is forwarded from then on carries the new name
    assert _props(outbox.header_for(second))["headers"]["x-hutch-gateway"] == b"relay"


def test_a_returned_message_is_sent_again_and_without_a_dead_letter_exchange_the_bridge_is_stuck():
    from hutch.core.bridge.outbox import MAX_RETURNS

    client = opened()
    queue = _queue_with(client, 2)
    outbox = Outbox(client.broker, queue, "up", 4)
    outbox.link_up()
    for _attempt in range(MAX_RETURNS):
        entries = outbox.take() or []
        message = entries[0][0] if entries else outbox.in_flight[0][1][0]
        outbox.header_for(message)  # as the port sends it: its number in the run's lane
        assert outbox.returned_by(outbox.run_origin, message.forward_seq, "312 NO_ROUTE")
        outbox.confirmed(outbox.seq, True)  # the confirm after the return: m1 is settled, m0 back
        assert outbox.backlog() == 1 and outbox.forwarded == 1
    assert outbox.stuck is not None and "312 NO_ROUTE" in outbox.stuck


def test_a_header_made_from_the_template_is_the_header_made_whole():
    """header_for rewrites a tail's headers once and then puts each number in (_template)."""
    import struct

    from hutch.core.bridge.outbox import KEYS
    from hutch.core.headers import with_entries

    client = opened()
    client.declare_queue(1, b"src", durable=True)
    client.publish(1, b"", b"src", b"x", {"content-type": b"a/b", "headers": {"a": 1, "x-hutch-seq": 9}})
    outbox = Outbox(client.broker, client.broker.queues[b"src"], "up", 4, node=b"node-1")
    outbox.link_up()
    tail = outbox.take()[0][0].header_tail
    gateway = b"\x0fx-hutch-gateway" + b"S" + struct.pack(">I", 4) + b"gw-1"
    for hops in (1, 7):
        _, _, _, before, after, _ = outbox._template(tail, b"n/up", hops, "gw-1")
        for seq in (1, 255, 256, 1 << 40, (1 << 63) - 1):
            entries = outbox._head(b"n/up") + struct.pack(">q", seq) + outbox.hops_key + struct.pack(">i", hops)
            assert before + struct.pack(">q", seq) + after == with_entries(tail, entries + gateway, KEYS, True)


def test_a_persistent_message_is_numbered_within_the_start_that_journalled_it():
    """A journal id a crash lost may be given again by the next start (its record was never
    synced, but its message may have gone upstream already): the origin names the start, so the
    same number from a later start is a new number upstream, and a message recovered from an
    earlier start keeps the origin it was first forwarded with."""
    client = opened()
    queue = _queue_with(client, 1)
    outbox = Outbox(client.broker, queue, "up", 4, node=b"node-1")
    outbox.link_up()
    message = outbox.take()[0][0]

    def origin(journal_id):
        message.journal_id = journal_id  # (this broker has no journal: the id it would have)
        return _props(outbox.header_for(message))["headers"]["x-hutch-origin"]

    assert origin(7) == b"node-1/up"  # no starts known (a broker without a data folder)
    client.broker.bridge_runs = [1, 500, 500, 812]  # (a start that numbered nothing durable: 500 twice)
    assert origin(1) == origin(499) == b"node-1/up/1"
    assert origin(500) == origin(811) == b"node-1/up/500"
    assert origin(812) == origin(10**9) == b"node-1/up/812"
