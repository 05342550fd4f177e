"""Priority queues (x-max-priority, core/priority.py): delivery order in memory, with requeues
and consumers, paged (a window of a few messages, the rest on disk in runs of one priority),
and across a restart from the journal. Also run under MicroPython."""

from harness import opened
from journal_node import Node, in_folder

from hutch.codec import spec
from hutch.core.limits import Limits
from hutch.core.priority import PriorityQueue
from hutch.core.queue import Queue

# (body, priority property or None), and the order RabbitMQ 3.10 delivers them from a queue
# of x-max-priority 3 (checked against it: tests/interop/compat/test_compat_queues.py)
PUBLISHED = [(b"0", None), (b"1", 1), (b"2", 5), (b"3", 3), (b"4", 2), (b"5", 0), (b"6", 3), (b"7", None), (b"8", 255)]
DELIVERED = [b"2", b"3", b"6", b"8", b"4", b"1", b"0", b"5", b"7"]


def _publish(client, queue, published, persistent=False):
    for body, priority in published:
        properties = {}
        if persistent:
            properties["delivery-mode"] = 2
        if priority is not None:
            properties["priority"] = priority
        if body == b"7":  # one with properties before the priority: decoded, not read in place
            properties["content-type"] = "text/plain"
            properties["headers"] = {"h": 1}
        client.publish(1, b"", queue, body, properties)


def _all(client, queue):
    out = []
    for _ in range(100):
        event = client.get(1, queue, True)[0]
        if event.name == "basic.get-empty":
            return out
        out.append(event.body)
    return out


def test_higher_priority_first_publish_order_within_one_and_above_the_maximum_counts_as_it():
    client = opened()
    client.queue(1, b"q", arguments={"x-max-priority": 3})
    assert type(client.broker.queues[b"q"]) is PriorityQueue
    _publish(client, b"q", PUBLISHED)
    assert client.broker.queues[b"q"].message_count() == 9
    assert _all(client, b"q") == DELIVERED


def test_max_priority_zero_is_a_plain_queue():
    client = opened()
    client.queue(1, b"q", arguments={"x-max-priority": 0})
    assert type(client.broker.queues[b"q"]) is Queue
    _publish(client, b"q", PUBLISHED[:3])
    assert _all(client, b"q") == [b"0", b"1", b"2"]


def test_requeued_messages_go_back_to_their_places_in_their_priority():
    client = opened()
    client.queue(1, b"q", arguments={"x-max-priority": 5})
    _publish(client, b"q", [(b"0", 1), (b"1", 5), (b"2", 1), (b"3", 5), (b"4", 0)])
    tags = {}
    taken = []
    for _ in range(4):
        event = client.get(1, b"q")[0]
        tags[event.body] = event.args[0]
        taken.append(event.body)
    assert taken == [b"1", b"3", b"0", b"2"]
    for body in (b"2", b"1", b"3", b"0"):
        client.call(1, spec.BASIC_REJECT, (tags[body], True))
    assert _all(client, b"q") == [b"1", b"3", b"0", b"2", b"4"]


def test_a_consumer_gets_the_highest_priority_waiting():
    client = opened()
    client.queue(1, b"q", arguments={"x-max-priority": 9})
    client.call(1, spec.BASIC_QOS, (0, 1, False))
    _publish(client, b"q", [(b"low", 1), (b"high", 9)])
    events = client.consume(1, b"q", tag=b"c")
    assert [e.body for e in events if e.name == "basic.deliver"] == [b"high"]
    _publish(client, b"q", [(b"mid", 5)])
    events = client.ack(1, 1)
    assert [e.body for e in events if e.name == "basic.deliver"] == [b"mid"]


@in_folder
def _restart(folder):
    node = Node(folder)
    client = node.client()
    client.queue(1, b"q", durable=True, arguments={"x-max-priority": 3})
    _publish(client, b"q", PUBLISHED, persistent=True)
    client.get(1, b"q")  # b"2", delivered and not acked: it comes back redelivered
    node.crash()
    again = Node(folder)
    queue = again.broker.queues[b"q"]
    assert type(queue) is PriorityQueue and queue.message_count() == 9
    client = again.client()
    # a message published before the first delivery sorts with the backlog the journal brought back
    _publish(client, b"q", [(b"9", 3)], persistent=True)
    events = [client.get(1, b"q", True)[0] for _ in range(10)]
    assert [e.body for e in events] == DELIVERED[:4] + [b"9"] + DELIVERED[4:]
    assert [e.args[1] for e in events] == [True] + [False] * 9  # redelivered


def test_a_durable_priority_queue_keeps_its_order_across_a_restart():
    _restart()


def _mixed(count):
    """count messages whose priorities (0..9, some without) follow no order; and the order a
    priority queue of maximum 9 delivers them in."""
    published = []
    state = 7
    for i in range(count):
        state = (state * 1103515245 + 12345) & 0x7FFFFFFF  # the same numbers under MicroPython
        priority = state % 11
        published.append((b"m%03d" % i, None if priority == 10 else priority))
    order = sorted(range(count), key=lambda i: (-(published[i][1] or 0), i))
    return published, [published[i][0] for i in order]


def _paged_node(folder, published, arguments=None):
    """A broker whose queues keep a window of 4 messages, with a durable priority queue "q"
    (maximum 9) holding published; (node, its client)."""
    node = Node(folder, segment_bytes=4096, limits=Limits(queue_window_messages=4))
    client = node.client()
    client.queue(1, b"q", durable=True, arguments=dict({"x-max-priority": 9}, **(arguments or {})))
    _publish(client, b"q", published, persistent=True)
    return node, client


def _restarted(folder):
    return Node(folder, segment_bytes=4096, limits=Limits(queue_window_messages=4))


@in_folder
def _paged(folder):
    published, delivered = _mixed(60)
    node, client = _paged_node(folder, published[:40])
    queue = node.broker.queues[b"q"]
    assert queue.messages.length == 4 and queue.paged == 36  # a window in memory, the rest on disk
    assert [run.priority for run in queue.runs] == sorted((run.priority for run in queue.runs), reverse=True)
    taken = [client.get(1, b"q")[0] for _ in range(10)]  # unacked: they go back at their places
    _publish(client, b"q", published[40:], persistent=True)
    client.call(1, spec.BASIC_NACK, (taken[-1].args[0], True, True))
    assert [e.body for e in taken] == _mixed(40)[1][:10]
    assert _all(client, b"q") == delivered
    assert queue.paged == 0 and queue.runs == [] and queue.message_count() == 0


def test_a_paged_priority_queue_delivers_by_priority_from_disk_and_memory():
    _paged()


@in_folder
def _paged_restart(folder):
    published, delivered = _mixed(80)
    node, _client = _paged_node(folder, published[:70])
    node.crash()
    again = _restarted(folder)
    queue = again.broker.queues[b"q"]
    assert queue.messages.length == 0 and queue.paged == 70  # back as runs in publish order
    client = again.client()
    _publish(client, b"q", published[70:], persistent=True)  # behind the backlog: sorted with it
    assert queue.messages.length == 0 and queue.paged == 80 and len(queue.runs) <= 30
    assert _all(client, b"q") == delivered


def test_a_paged_priority_queue_comes_back_in_priority_order_after_a_restart():
    _paged_restart()


@in_folder
def _paged_purge(folder):
    node, client = _paged_node(folder, _mixed(30)[0])
    events = client.call(1, spec.QUEUE_PURGE, (0, b"q", False))
    assert events[0].name == "queue.purge-ok" and events[0].args == [30]
    assert node.broker.flow.held_messages == 0
    node.crash()
    again = _restarted(folder)
    assert again.broker.queues[b"q"].message_count() == 0
    assert _all(again.client(), b"q") == []


def test_a_purged_paged_priority_queue_stays_empty_after_a_restart():
    _paged_purge()


@in_folder
def _expiry_first(folder):
    published, delivered = _mixed(40)
    node, _client = _paged_node(folder, published[:30], {"x-message-ttl": 3600000})
    node.crash()
    again = _restarted(folder)
    again.broker.tick(1000)  # the TTL check reads the backlog back before anything is taken
    client = again.client()
    _publish(client, b"q", published[30:], persistent=True)
    assert _all(client, b"q") == delivered


def test_a_restarted_priority_queue_read_first_by_its_ttl_check_keeps_its_order():
    _expiry_first()
