"""Stream queues (core/streams/stream.py) through the core and real files (ports/streams.py): offsets,
every x-stream-offset form, retention by size and age (the clock driven through the
broker's tick), several consumers, re-attaching at a saved offset, restarts (a new broker on
the same folder) that keep offsets and never reuse one, and every refusal's code and words
(RabbitMQ's, as its 3.10 server gives them; nack and reject as 3.13+ treats them).

These tests also run under MicroPython.
"""

import os
import struct

from harness import Client, closed_with, names, opened
from scratch import remove_tree, scratch_folder

from hutch.codec import spec
from hutch.codec.wire import Timestamp, encode_properties
from hutch.core.broker import Broker
from hutch.core.limits import Limits
from hutch.ports.recovery import recover
from hutch.ports.streams import folder_name

STREAM = {"x-queue-type": "stream"}
WALL = 1700000000  # the wall clock (seconds) the tests start at


def stream_args(**more):
    args = dict(STREAM)
    for key in more:
        args[key.replace("_", "-")] = more[key]
    return args


class Node:
    """A broker on a data folder, its clock driven by hand, with what it logged."""

    def __init__(self, folder, limits=None, max_bytes=1 << 30):
        self.folder = folder
        self.logs = []
        self.broker = Broker(limits or Limits(), log=self._log)
        self.writer = recover(folder, self.broker, 1 << 20, max_bytes, self.broker.log)
        self.at(0)

    def _log(self, level, text, exc=None):
        self.logs.append((level, text))

    def at(self, seconds):
        """Time goes on to WALL + seconds (the broker's tick: retention, heartbeats...)."""
        self.broker.tick(seconds * 1000, WALL + seconds)

    def client(self):
        return opened(self.broker)

    def sync(self):
        """The storage port writes and syncs what is waiting (a group commit)."""
        self.writer.commit()

    def stop(self):
        """A clean stop, as ports/storage.py JournalWriter.stop does it."""
        self.writer.commit()
        for stream in self.broker.streams:
            stream.close()
        self.writer.files.close()

    def crash(self):
        """A killed process: what was written stays, nothing more is synced or closed."""
        self.writer.write()

    def stream_dir(self, name=b"s"):
        return self.folder + "/streams/" + folder_name(name)

    def segments(self, name=b"s"):
        return sorted(n for n in os.listdir(self.stream_dir(name)) if n.endswith(".seg"))


def _in_folder(test):
    def run():
        folder = scratch_folder("streams")
        try:
            test(folder)
        finally:
            remove_tree(folder)

    return run


def publish(node, c, bodies, name=b"s", properties=None, ch=1):
    for body in bodies:
        c.publish(ch, b"", name, body, properties)
    node.sync()


def consume(c, offset=None, prefetch=1000, name=b"s", ch=1, tag=b""):
    """basic.qos then basic.consume with x-stream-offset (None: none given): the events."""
    c.call(ch, spec.BASIC_QOS, (0, prefetch, False))
    return c.consume(ch, name, tag=tag, arguments={} if offset is None else {"x-stream-offset": offset})


def delivered(events):
    """[(x-stream-offset, body)] of the deliveries among events."""
    return [(e.properties["headers"]["x-stream-offset"], e.body) for e in events if e.name == "basic.deliver"]


def refusal(events, code, name="channel.close"):
    """The reply text of the close that ends events (closed_with), as text."""
    return closed_with(events, code, name).decode()


def bodies(start, stop):
    return [b"m%d" % i for i in range(start, stop)]


def numbered(start, stop):
    return [(i, b"m%d" % i) for i in range(start, stop)]


# ---------------------------------------------------------------- declaring


def _refused(c, arguments, name=b"q", durable=True, exclusive=False, auto_delete=False):
    events = c.declare_queue(
        1, name, durable=durable, exclusive=exclusive, auto_delete=auto_delete, arguments=arguments
    )
    text = refusal(events, spec.PRECONDITION_FAILED)
    c.reopen(1)
    return text


@_in_folder
def _declaring(folder):
    node = Node(folder)
    c = node.client()
    assert c.queue(1, b"s", durable=True, arguments=STREAM) == b"s"
    assert c.queue(1, b"s", durable=True, arguments=STREAM) == b"s"  # the same again: fine
    for flags, what in (
        ({"durable": False}, "non-durable"),
        ({"exclusive": True}, "exclusive-owner"),
        ({"auto_delete": True}, "auto-delete"),
    ):
        text = _refused(c, STREAM, name=b"p", **flags)
        assert text == "PRECONDITION_FAILED - invalid property '%s' for queue 'p' in vhost '/'" % what, text
    text = _refused(c, STREAM, name=b"")
    assert text == "PRECONDITION_FAILED - Cannot declare a server-named queue for type rabbit_stream_queue", text
    for key, value in (
        ("x-message-ttl", 1000),
        ("x-dead-letter-exchange", "dlx"),
        ("x-max-length", 10),
        ("x-max-priority", 5),
        ("x-expires", 1000),
        ("x-overflow", "reject-publish"),
        ("x-single-active-consumer", True),
    ):
        text = _refused(c, dict(STREAM, **{key: value}))
        assert text == (
            "PRECONDITION_FAILED - invalid arg '%s' for queue 'q' in vhost '/' of queue type rabbit_stream_queue" % key
        ), text
    for good in ("7D", "1h", "30s", "1Y", "2M", "5m", "01h", "99999999999999999999s"):
        assert c.queue(1, b"age" + good.encode(), durable=True, arguments=stream_args(x_max_age=good))
    for bad in ("1w", "0s", "5", "", "h", "-1h", " 1h", "1H", "1.5h", "1d"):
        text = _refused(c, stream_args(x_max_age=bad))
        assert text == "PRECONDITION_FAILED - invalid arg 'x-max-age' for queue 'q' in vhost '/': invalid_max_age", text
    text = _refused(c, stream_args(x_max_age=5))
    assert text.endswith("'x-max-age' for queue 'q' in vhost '/': {unacceptable_type,signedint}"), text
    text = _refused(c, dict(STREAM, **{"x-stream-max-segment-size-bytes": 3000000001}))
    assert text == "PRECONDITION_FAILED - Exceeded max value for x-stream-max-segment-size-bytes", text
    text = _refused(c, dict(STREAM, **{"x-stream-max-segment-size-bytes": -1}))
    assert text.endswith("{value_negative,-1}"), text
    text = _refused(c, dict(STREAM, **{"x-max-length-bytes": "100"}))
    assert text.endswith('"expected integer, got longstr"'), text
    text = _refused(c, {"x-max-age": "1h"}, name=b"classic")  # a stream's alone (RabbitMQ: 406 too)
    assert text == "PRECONDITION_FAILED - queue argument 'x-max-age' is not supported by hutch (queue 'classic')", text
    # a redeclare must repeat what was declared
    c.queue(1, b"aged", durable=True, arguments=stream_args(x_max_age="1h"))
    text = _refused(c, stream_args(x_max_age="2h"), name=b"aged")
    assert text.startswith("PRECONDITION_FAILED - inequivalent arg 'x-max-age' for queue 'aged'"), text
    text = _refused(c, {"x-max-age": "1h"}, name=b"aged")
    assert text.startswith("PRECONDITION_FAILED - inequivalent arg 'x-queue-type'"), text
    c.queue(1, b"classic", durable=True)
    text = _refused(c, STREAM, name=b"classic")
    assert text.startswith("PRECONDITION_FAILED - inequivalent arg 'x-queue-type'"), text


def test_a_stream_is_durable_and_what_rabbitmq_refuses_of_one_is_refused_in_its_words():
    _declaring()


def test_without_a_data_folder_there_are_no_streams():
    c = opened()
    events = c.declare_queue(1, b"s", durable=True, arguments=STREAM)
    assert "stream queues need the broker's data folder" in refusal(events, spec.PRECONDITION_FAILED)


# ---------------------------------------------------------------- offsets and deliveries


def _header(body_size, properties):
    """A content header payload as a publisher's encoder makes it (class 60)."""
    return struct.pack(">HHQ", 60, 0, body_size) + encode_properties(properties)


@_in_folder
def _dense(folder):
    node = Node(folder)
    c = node.client()
    c.queue(1, b"s", durable=True, arguments=STREAM)
    props = {
        "content-type": b"text/plain",
        "headers": {"a": 1, "b": b"two"},
        "delivery-mode": 2,
        "priority": 3,
        "correlation-id": b"c1",
        "expiration": b"60000",
    }
    publish(node, c, bodies(0, 10), properties=props)
    events = consume(c, "first")
    assert delivered(events) == numbered(0, 10)
    published = _header(2, props)
    for event in events[1:]:
        assert event.name == "basic.deliver" and event.args[2] is False  # never redelivered
        assert event.args[3:] == [b"", b"s"]  # the exchange and routing key it was published with
        offset = event.properties["headers"]["x-stream-offset"]
        # the header table gains the offset, as a long ('l'), last; every other byte is the publisher's
        entry = b"\x0fx-stream-offset" + b"l" + struct.pack(">q", offset)
        table_at = 14 + 1 + len(b"text/plain")
        size = struct.unpack_from(">I", published, table_at)[0]
        expected = (
            published[:table_at]
            + struct.pack(">I", size + len(entry))
            + published[table_at + 4 : table_at + 4 + size]
            + entry
            + published[table_at + 4 + size :]
        )
        assert event.header == expected, (event.header, expected)
    # no headers table at all: one is made, with the offset alone, and the flag set
    publish(node, c, [b"bare"], properties={"delivery-mode": 1})
    event = c.read()[-1]
    assert event.properties == {"headers": {"x-stream-offset": 10}, "delivery-mode": 1}, event.properties
    # a publisher's own x-stream-offset header is replaced, the rest kept
    publish(node, c, [b"liar"], properties={"headers": {"x-stream-offset": 99, "k": b"v"}})
    event = c.read()[-1]
    assert event.properties["headers"] == {"k": b"v", "x-stream-offset": 11}, event.properties


def test_offsets_are_dense_and_each_delivery_carries_its_offset_the_rest_byte_for_byte():
    _dense()


@_in_folder
def _frames(folder):
    node = Node(folder)
    c = opened(node.broker, frame_max=4096)  # bodies past 4,088 bytes take more than one frame
    c.queue(1, b"s", durable=True, arguments=STREAM)
    sizes = [0, 1, 4087, 4088, 4089, 10000, 16, 0, 8177]
    sent = [bytes((i,)) * size for i, size in enumerate(sizes)]
    publish(node, c, sent, properties={"content-type": b"a/b", "headers": {"k": b"v"}})
    events = consume(c, "first")  # one read of the segment: every delivery made in one run
    assert delivered(events) == list(enumerate(sent))
    for event in events[1:]:
        assert event.properties["content-type"] == b"a/b" and event.properties["headers"]["k"] == b"v"


def test_deliveries_are_framed_to_the_connections_frame_max():
    _frames()


@_in_folder
def _output_mark(folder):
    node = Node(folder, limits=Limits(output_high_water=600))
    c = node.client()
    c.queue(1, b"s", durable=True, arguments=STREAM)
    publish(node, c, bodies(0, 30))
    first = delivered(consume(c, "first"))
    # a run stops at the delivery that reaches the connection's high-water mark, as one at a
    # time did; once the client has taken its output, the next run goes out
    assert 0 < len(first) < 30 and first == numbered(0, len(first))
    got = list(first)
    while len(got) < 30:
        more = delivered(c.read())
        assert more, got
        got += more
    assert got == numbered(0, 30)


def test_a_client_that_does_not_keep_up_gets_runs_up_to_its_output_mark():
    _output_mark()


@_in_folder
def _gap(folder):
    node = Node(folder)
    c = node.client()
    c.queue(1, b"s", durable=True, arguments=STREAM)
    publish(node, c, bodies(0, 3))
    c.publish(1, b"", b"s", b"lost")
    node.crash()  # offset 3 was written, not synced: after the restart, a gap up to the reservation
    node = Node(folder)
    c = node.client()
    gap_end = node.broker.streams[0].next
    assert gap_end > 4, gap_end
    c.publish(1, b"", b"s", b"written, not yet durable")
    node.writer.write()  # in the segment file now, not synced
    reader = node.client()
    got = delivered(consume(reader, 1))  # a consumer inside the gap reads the file past it ...
    assert got == [(1, b"m1"), (2, b"m2"), (3, b"lost")], got
    assert reader.read() == []  # ... but is not given a record that is not durable
    node.sync()
    assert delivered(reader.read()) == [(gap_end, b"written, not yet durable")]


def test_a_consumer_in_a_gap_is_given_only_durable_records():
    _gap()


@_in_folder
def _last_after_a_crash(folder):
    node = Node(folder)
    c = node.client()
    c.queue(1, b"s", durable=True, arguments=STREAM)
    publish(node, c, bodies(0, 3))
    node.crash()  # everything durable: after the restart, offsets go on past the reservation
    node = Node(folder)
    c = node.client()
    gap_end = node.broker.streams[0].next
    assert gap_end > 3, gap_end
    got = delivered(consume(c, "last"))  # the newest record there is, not one inside the gap
    assert got == [(2, b"m2")], got
    c.publish(1, b"", b"s", b"past the gap")
    node.sync()
    reader = node.client()
    assert delivered(consume(reader, "last")) == [(gap_end, b"past the gap")]


def test_last_after_a_crash_is_the_newest_record_not_one_in_the_gap():
    _last_after_a_crash()


@_in_folder
def _visible(folder):
    node = Node(folder)
    c = node.client()
    c.queue(1, b"s", durable=True, arguments=STREAM)
    c.call(1, spec.CONFIRM_SELECT, (False,))
    reader = node.client()
    assert names(consume(reader, "first")) == ["basic.consume-ok"]
    for body in bodies(0, 3):
        assert c.publish(1, b"", b"s", body) == []  # not on disk yet: no confirm ...
    assert reader.read() == []  # ... and nothing for a consumer
    assert c.declare_queue(1, b"s", passive=True)[0].args[1] == 0
    node.sync()
    events = c.read()
    assert names(events) == ["basic.ack"] and events[0].args == [3, True], events
    assert delivered(reader.read()) == numbered(0, 3)
    assert c.declare_queue(1, b"s", passive=True)[0].args[1] == 3  # exact, at once
    c.expect(2, spec.CHANNEL_OPEN, (b"",))
    c.expect(2, spec.TX_SELECT)
    c.publish(2, b"", b"s", b"in a transaction")
    assert c.call(2, spec.TX_COMMIT) == []
    node.sync()
    assert names(c.read()) == ["tx.commit-ok"]
    assert delivered(reader.read()) == [(3, b"in a transaction")]


def test_consumers_see_only_what_is_durable_and_confirms_wait_for_it():
    _visible()


@_in_folder
def _forms(folder):
    node = Node(folder)
    c = node.client()
    c.queue(1, b"s", durable=True, arguments=STREAM)
    publish(node, c, bodies(0, 5))
    node.at(100)
    publish(node, c, bodies(5, 10))
    node.at(150)

    def starts(offset, expect, ch=2):
        c.expect(ch, spec.CHANNEL_OPEN, (b"",))
        got = delivered(consume(c, offset, ch=ch))
        c.expect(ch, spec.CHANNEL_CLOSE, (200, b"", 0, 0))
        assert got == expect, (offset, got)

    starts("first", numbered(0, 10))
    starts(b"first", numbered(0, 10))  # a longstr as the broker decodes it
    starts("last", numbered(9, 10))
    starts(5, numbered(5, 10))
    starts(-3, numbered(0, 10))  # below the first: the first
    starts(Timestamp(WALL + 100), numbered(5, 10))
    starts(Timestamp(WALL + 50), numbered(5, 10))
    starts(Timestamp(WALL - 3600), numbered(0, 10))
    starts("1m", numbered(5, 10))  # now (WALL + 150) - 60 s: the second batch
    starts("1h", numbered(0, 10))
    # waiting forms: next, an offset past the end, a time to come
    c.expect(2, spec.CHANNEL_OPEN, (b"",))
    assert delivered(consume(c, None, ch=2, tag=b"default")) == []
    assert delivered(consume(c, "next", ch=2, tag=b"next")) == []
    assert delivered(consume(c, 12, ch=2, tag=b"twelve")) == []
    assert delivered(consume(c, Timestamp(WALL + 3600), ch=2, tag=b"later")) == []
    publish(node, c, bodies(10, 14))
    got = {}
    for event in c.read():
        if event.name == "basic.deliver":
            got.setdefault(event.args[0], []).append(event.properties["headers"]["x-stream-offset"])
    assert got == {
        b"default": [10, 11, 12, 13],
        b"next": [10, 11, 12, 13],
        b"twelve": [12, 13],
        b"later": [10, 11, 12, 13],
    }, got
    # refused forms, in RabbitMQ's words (3.10 crashes with 541 on "banana" and true; 406 since)
    # (b"firs\x80": a mutated "first" that is no UTF-8, which raised UnicodeDecodeError)
    for bad, shown in (
        ("5", '{longstr,<<"5">>}'),
        ("banana", '{longstr,<<"banana">>}'),
        (True, "{bool,true}"),
        (b"firs\x80", "{longstr,<<102,105,114,115,128>>}"),
    ):
        text = refusal(consume(c, bad, ch=2), spec.PRECONDITION_FAILED)
        assert text == (
            "PRECONDITION_FAILED - invalid arg 'x-stream-offset' for queue 's' in vhost '/': "
            "{invalid_stream_offset_arg,%s}" % shown
        ), text
        c.reopen(2)
    c.call(2, spec.BASIC_QOS, (0, 10, False))
    events = c.call(2, spec.BASIC_CONSUME, (0, b"s", b"", False, False, False, False, {"x-priority": 5}))
    text = refusal(events, spec.PRECONDITION_FAILED)
    assert text == (
        "PRECONDITION_FAILED - invalid arg 'x-priority' for queue 's' in vhost '/' of queue type rabbit_stream_queue"
    ), text


def test_every_x_stream_offset_form():
    _forms()


@_in_folder
def _credit(folder):
    node = Node(folder)
    c = node.client()
    c.queue(1, b"s", durable=True, arguments=STREAM)
    publish(node, c, bodies(0, 10))
    events = consume(c, "first", prefetch=3)
    assert delivered(events) == numbered(0, 3)  # exactly the prefetch (RabbitMQ 4.0's rule)
    assert delivered(c.ack(1, 1)) == numbered(3, 4)
    assert delivered(c.call(1, spec.BASIC_NACK, (2, False, True))) == numbered(4, 5)  # credit, not a requeue
    assert delivered(c.call(1, spec.BASIC_REJECT, (3, False))) == numbered(5, 6)
    assert delivered(c.ack(1, 6, True)) == numbered(6, 9)
    text = refusal(c.ack(1, 42), spec.PRECONDITION_FAILED)
    assert text == "PRECONDITION_FAILED - unknown delivery tag 42", text


def test_prefetch_is_exact_and_ack_nack_reject_only_move_the_window():
    _credit()


@_in_folder
def _budget_of_deliveries(folder):
    node = Node(folder, limits=Limits(total_max_messages=5))
    c = node.client()
    c.queue(1, b"s", durable=True, arguments=STREAM)
    publish(node, c, bodies(0, 20))  # a stream's records are on disk: they hold no budget
    assert node.broker.flow.held_messages == 0 and not node.broker.flow.blocked
    # what a consumer was given and has not acked is in memory: it counts, and reading stops
    # once the broker is over its budget (a board's heap stays bounded, whatever the prefetch)
    assert delivered(consume(c, "first", prefetch=100)) == numbered(0, 6)
    assert node.broker.flow.blocked and "low on memory" in node.broker.flow.reason
    assert delivered(c.ack(1, 6, True)) == numbered(6, 12)  # the acks give it back
    assert node.broker.flow.held_messages == 6


def test_deliveries_not_yet_acked_count_in_the_brokers_budget():
    _budget_of_deliveries()


@_in_folder
def _refusals(folder):
    node = Node(folder)
    c = node.client()
    c.queue(1, b"s", durable=True, arguments=STREAM)
    publish(node, c, bodies(0, 3))
    what = "queue 's' in vhost '/'"
    text = refusal(c.get(1, b"s"), spec.NOT_IMPLEMENTED, "connection.close")
    assert text == "NOT_IMPLEMENTED - basic.get not supported by stream queues " + what, text
    c = node.client()
    text = refusal(c.call(1, spec.QUEUE_PURGE, (0, b"s", False)), spec.NOT_IMPLEMENTED, "connection.close")
    assert text == "NOT_IMPLEMENTED - queue.purge not supported by stream queues " + what, text
    c = node.client()
    text = refusal(c.consume(1, b"s"), spec.PRECONDITION_FAILED)  # no prefetch
    assert text == "PRECONDITION_FAILED - consumer prefetch count is not set for '%s'" % what, text
    c.reopen(1)
    c.call(1, spec.BASIC_QOS, (0, 10, False))
    text = refusal(c.consume(1, b"s", no_ack=True), spec.NOT_IMPLEMENTED, "connection.close")
    assert text == "NOT_IMPLEMENTED - automatic acknowledgement not supported by stream queues " + what, text
    c = node.client()
    c.call(1, spec.BASIC_QOS, (0, 10, False))
    c.call(1, spec.BASIC_QOS, (0, 5, True))
    text = refusal(c.consume(1, b"s"), spec.NOT_IMPLEMENTED, "connection.close")
    assert text == "NOT_IMPLEMENTED - %s does not support global qos" % what, text
    c = node.client()
    consume(c, "first")
    text = refusal(c.call(1, spec.BASIC_RECOVER, (True,)), spec.NOT_IMPLEMENTED, "connection.close")
    assert text == "NOT_IMPLEMENTED - basic.recover not supported by stream queues " + what, text


def test_what_a_stream_does_not_do_is_refused_with_rabbitmqs_codes():
    _refusals()


@_in_folder
def _several(folder):
    node = Node(folder)
    c = node.client()
    c.queue(1, b"s", durable=True, arguments=STREAM)
    publish(node, c, bodies(0, 10))
    c.expect(2, spec.CHANNEL_OPEN, (b"",))
    other = node.client()
    assert delivered(consume(c, "first", prefetch=4, tag=b"a")) == numbered(0, 4)
    assert delivered(consume(c, 7, prefetch=2, ch=2, tag=b"b")) == numbered(7, 9)
    assert delivered(consume(other, "next", prefetch=5)) == []
    publish(node, c, bodies(10, 12))
    assert delivered(other.read()) == numbered(10, 12)
    assert delivered(c.ack(2, 2, True)) == numbered(9, 11)  # b's window moves, a's does not
    assert delivered(c.ack(1, 4, True)) == numbered(4, 8)


def test_several_consumers_read_at_their_own_offsets():
    _several()


@_in_folder
def _reattach(folder):
    node = Node(folder)
    c = node.client()
    c.queue(1, b"s", durable=True, arguments=STREAM)
    publish(node, c, bodies(0, 6))
    got = delivered(consume(c, "first", prefetch=4, tag=b"t"))
    c.ack(1, 4, True)
    saved = got[-1][0]  # the offset it last processed
    c.expect(1, spec.BASIC_CANCEL, (b"t", False))
    publish(node, c, bodies(6, 8))
    node.stop()
    node = Node(folder)  # and a restart in between
    c = node.client()
    assert delivered(consume(c, saved + 1)) == numbered(4, 8)


def test_a_consumer_reattaches_at_the_offset_it_last_processed():
    _reattach()


# ---------------------------------------------------------------- retention


@_in_folder
def _by_size(folder):
    node = Node(folder)
    c = node.client()
    arguments = dict(STREAM, **{"x-stream-max-segment-size-bytes": 400, "x-max-length-bytes": 1200})
    c.queue(1, b"s", durable=True, arguments=arguments)
    publish(node, c, [b"%03d" % i + b"." * 60 for i in range(60)])
    node.at(1)
    stream = node.broker.queues[b"s"]
    assert stream.bytes <= 1200 + 400 and len(node.segments()) == len(stream.segments) <= 4, node.segments()
    first = stream.first
    assert first > 0 and first == stream.segments[0][0]
    assert node.segments()[0] == "%020d.seg" % first  # the files are gone with them
    count = c.declare_queue(1, b"s", passive=True)[0].args[1]
    assert count == 60 - first  # exact
    got = delivered(consume(c, 3))  # below the floor: from the first retained, and the offset says so
    assert got[0][0] == first and [o for o, _ in got] == list(range(first, 60)), got
    # the newest segment always stays: with a limit of 0, only it
    c.queue(1, b"zero", durable=True, arguments=dict(arguments, **{"x-max-length-bytes": 0}))
    publish(node, c, [b"." * 60] * 30, name=b"zero")
    node.at(2)
    zero = node.broker.queues[b"zero"]
    assert len(zero.segments) == 1 and zero.message_count() > 0 and zero.first + zero.message_count() == 30


def test_retention_by_size_drops_whole_segments_and_keeps_the_newest():
    _by_size()


@_in_folder
def _by_age(folder):
    node = Node(folder)
    c = node.client()
    arguments = dict(STREAM, **{"x-stream-max-segment-size-bytes": 400, "x-max-age": "10s"})
    c.queue(1, b"s", durable=True, arguments=arguments)
    publish(node, c, [b"old" + b"." * 60] * 12)
    node.at(5)
    publish(node, c, [b"new" + b"." * 60] * 12)
    stream = node.broker.queues[b"s"]
    segments = len(stream.segments)
    node.at(12)  # the old records are older than 10 s, the new ones not yet
    assert 0 < len(stream.segments) < segments
    got = delivered(consume(c, "first", tag=b"x"))
    assert got[0][0] == stream.first > 0 and got[-1][0] == 23, got
    # what is left of the old records shares the first segment kept with new ones
    old = [offset for offset, body in got if body.startswith(b"old")]
    assert not old or old[-1] < stream.segments[1][0] and stream.segments[1][1] >= (WALL + 2) * 1000, (old, got)
    node.at(100)  # everything is old: the newest segment stays all the same
    assert len(stream.segments) == 1 and stream.message_count() > 0


def test_retention_by_age_follows_the_brokers_clock():
    _by_age()


@_in_folder
def _by_age_across_a_jump(folder):
    node = Node(folder)
    c = node.client()
    arguments = dict(STREAM, **{"x-stream-max-segment-size-bytes": 400, "x-max-age": "10s"})
    c.queue(1, b"s", durable=True, arguments=arguments)
    year = 365 * 86400
    publish(node, c, [b"old" + b"." * 60] * 12)  # on the clock the board booted with
    node.broker.tick(1000, WALL + 1 + year)  # NTP answers: a year forward (and the second that passed)
    publish(node, c, [b"new" + b"." * 60] * 12)
    stream = node.broker.queues[b"s"]
    segments = len(stream.segments)
    node.broker.tick(5000, WALL + 5 + year)  # 5 s lived: none is 10 s old, though stamped a year ago
    assert len(stream.segments) == segments and stream.first == 0
    node.broker.tick(12000, WALL + 12 + year)  # the old records are 12 s old now
    assert 0 < len(stream.segments) < segments and stream.first > 0
    assert [text for _level, text in node.logs if "clock: the wall clock moved +%d s" % year in text]


def test_retention_by_age_counts_what_a_segment_lived_across_a_jump_of_the_clock():
    _by_age_across_a_jump()


# ---------------------------------------------------------------- restarts


@_in_folder
def _restarts(folder):
    node = Node(folder)
    c = node.client()
    c.queue(1, b"s", durable=True, arguments=dict(STREAM, **{"x-stream-max-segment-size-bytes": 300}))
    publish(node, c, bodies(0, 5))
    node.stop()
    node = Node(folder)  # a clean stop: the offsets go on where they were
    c = node.client()
    publish(node, c, bodies(5, 6))
    assert delivered(consume(c, "first", tag=b"a")) == numbered(0, 6)
    for body in bodies(6, 9):
        c.publish(1, b"", b"s", body)
    node.crash()  # written, not synced: and the last write was torn
    newest = node.stream_dir() + "/" + node.segments()[-1]
    with open(newest, "rb") as f:
        data = f.read()
    with open(newest, "wb") as f:
        f.write(data[:-7])
    node = Node(folder)
    c = node.client()
    report = open(folder + "/recovery.txt").read()
    assert "torn tail cut" in report, report
    got = delivered(consume(c, "first"))
    assert got == numbered(0, 8), got  # offset 8's record was cut
    publish(node, c, [b"after"])
    offset = delivered(c.read())[0][0]
    assert offset > 8, offset  # never given again, not even to the next record
    node.crash()
    node = Node(folder)
    c = node.client()
    publish(node, c, [b"again"])
    offsets = [o for o, _ in delivered(consume(c, "first"))]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets) == 10 and offsets[-1] > offset, offsets


def test_a_restart_keeps_every_offset_and_never_reuses_one_after_a_torn_tail():
    _restarts()


@_in_folder
def _damage(folder):
    node = Node(folder)
    c = node.client()
    c.queue(1, b"s", durable=True, arguments=dict(STREAM, **{"x-stream-max-segment-size-bytes": 300}))
    publish(node, c, bodies(0, 30))
    node.stop()
    segments = node.segments()
    middle = node.stream_dir() + "/" + segments[1]
    with open(middle, "rb") as f:
        data = bytearray(f.read())
    data[len(data) // 2] ^= 0x40
    with open(middle, "wb") as f:
        f.write(data)
    newest = node.stream_dir() + "/" + segments[-1]
    with open(newest, "ab") as f:
        f.write(b"garbage that is no record at all, followed by more")
    node = Node(folder)
    report = open(folder + "/recovery.txt").read()
    assert "corrupt" in report and "quarantined" in report, report
    # (named as ports/recovery.py Repair names what it sets aside: the number on 8 digits)
    assert os.listdir(folder + "/quarantine/stream-" + folder_name(b"s")) == ["%08d.seg" % int(segments[-1][:-4])]
    c = node.client()
    offsets = [o for o, _ in delivered(consume(c, "first"))]
    assert 0 in offsets and 29 in offsets and len(offsets) < 30 and offsets == sorted(offsets), offsets
    assert any(level == "warning" and "damaged" in text for level, text in node.logs), node.logs


def test_damage_is_cut_quarantined_or_read_past_and_the_rest_served():
    _damage()


# ---------------------------------------------------------------- deleting


@_in_folder
def _deleting(folder):
    node = Node(folder)
    c = node.client()
    c.queue(1, b"s", durable=True, arguments=STREAM)
    publish(node, c, bodies(0, 4))
    reader = node.client()
    consume(reader, "first", tag=b"r")
    events = c.call(1, spec.QUEUE_DELETE, (0, b"s", False, False, False))
    assert names(events) == ["queue.delete-ok"] and events[0].args == [4], events
    assert [(e.name, e.args) for e in reader.read()] == [("basic.cancel", [b"r", False])]
    assert folder_name(b"s") not in os.listdir(folder + "/streams")  # set aside at once ...
    c.queue(1, b"other", durable=True, arguments=STREAM)
    node.sync()
    assert os.listdir(folder + "/streams") == [folder_name(b"other")]  # ... and gone once the deletion is durable
    c.queue(1, b"s", durable=True, arguments=STREAM)  # a new stream of the same name starts afresh
    publish(node, c, [b"new"])
    assert delivered(consume(c, "first")) == [(0, b"new")]


def test_deleting_a_stream_cancels_its_consumers_and_removes_its_files():
    _deleting()


@_in_folder
def _gone_at_restart(folder):
    node = Node(folder)
    c = node.client()
    c.queue(1, b"s", durable=True, arguments=STREAM)
    c.queue(1, b"kept", durable=True, arguments=STREAM)
    publish(node, c, bodies(0, 2))
    c.call(1, spec.QUEUE_DELETE, (0, b"s", False, False, False))
    node.crash()  # the deletion written, never synced: it may or may not have survived
    node = Node(folder)
    # it did here (the process was killed, the data written): the folder set aside is removed
    assert b"s" not in node.broker.queues and sorted(os.listdir(folder + "/streams")) == [folder_name(b"kept")]


def test_a_stream_deleted_before_a_crash_leaves_no_files_behind():
    _gone_at_restart()


# ---------------------------------------------------------------- with the rest of the broker


@_in_folder
def _routing(folder):
    node = Node(folder)
    c = node.client()
    c.queue(1, b"s", durable=True, arguments=STREAM)
    c.declare_exchange(1, b"x", b"fanout", durable=True)
    c.bind(1, b"s", b"x")
    c.queue(1, b"q", durable=True)
    c.bind(1, b"q", b"x")
    c.queue(1, b"dead", arguments={"x-dead-letter-exchange": "x", "x-message-ttl": 0})
    c.publish(1, b"x", b"rk", b"fanned", {"delivery-mode": 2})
    c.publish(1, b"", b"dead", b"dead-lettered")
    node.at(1)  # its TTL is up: dead-lettered through x, into the stream
    node.sync()
    got = [(e.args[3], e.args[4], e.body) for e in consume(c, "first") if e.name == "basic.deliver"]
    assert got == [(b"x", b"rk", b"fanned"), (b"x", b"dead", b"dead-lettered")], got
    assert c.get(1, b"q")[0].body == b"fanned"  # the durable queue has it too
    node.stop()
    node = Node(folder)
    c = node.client()
    assert len(delivered(consume(c, "first"))) == 2
    c.publish(1, b"x", b"rk", b"after a restart")  # the binding came back
    node.sync()
    assert delivered(c.read()) == [(2, b"after a restart")]


def test_exchanges_and_dead_lettering_route_into_a_stream_and_it_survives_a_restart():
    _routing()


@_in_folder
def _budget(folder):
    node = Node(folder, max_bytes=8192)
    c = node.client()
    c.queue(1, b"s", durable=True, arguments=STREAM)
    c.call(1, spec.CONFIRM_SELECT, (False,))
    nacked = 0
    for _ in range(200):
        events = c.publish(1, b"", b"s", b"x" * 100)
        node.sync()
        nacked += len([e for e in events + c.read() if e.name == "basic.nack"])
        if nacked:
            break
    assert nacked and "low on disk" in node.broker.flow.reason, node.broker.flow.reason


def test_a_streams_bytes_count_against_the_disk_budget():
    _budget()


def test_a_client_without_a_channel_sees_the_streams_count_move_with_its_confirms():
    # passive declare is the cheap way to a stream's extent: first + message_count = next
    folder = scratch_folder("streams")
    try:
        node = Node(folder)
        c = Client(node.broker)
        assert names(c.open()) == ["connection.open-ok"]
        c.channel(1)
        c.queue(1, b"s", durable=True, arguments=dict(STREAM, **{"x-stream-max-segment-size-bytes": 200}))
        assert c.declare_queue(1, b"s", passive=True)[0].args[1] == 0
        publish(node, c, bodies(0, 7))
        assert c.declare_queue(1, b"s", passive=True)[0].args[1] == 7
    finally:
        remove_tree(folder)


def _identified(c, n):
    """A bridge's message and a sensor's reading, both numbered n, into the stream."""
    c.publish(1, b"", b"s", b"bridged %d" % n, {"headers": {"x-hutch-origin": b"edge/up", "x-hutch-seq": n}})
    c.publish(1, b"", b"s", b"reading %d" % n, {"headers": {"x-sensor-id": "s1", "x-sensor-seq": n}})


def _killed_between(segment_bytes=None):
    folder = scratch_folder("streams")
    try:
        _kill_between(folder, segment_bytes)
    finally:
        remove_tree(folder)


def _kill_between(folder, segment_bytes):
    node = Node(folder)
    c = node.client()
    arguments = STREAM if segment_bytes is None else stream_args(x_stream_max_segment_size_bytes=segment_bytes)
    c.queue(1, b"s", durable=True, arguments=arguments)
    for n in (1, 2, 3):
        _identified(c, n)
    node.sync()
    for n in (4, 5, 6):
        _identified(c, n)
    # Killed in the middle of a group commit: the stream's records written, the journal's record
    # of their numbers not (the port writes a stream's chunks first)
    chunks = node.writer.journal.take()[0]
    streams = 1 if segment_bytes is None else 2  # (a commit that begins a segment of the stream)
    assert [type(target) is int for target, *_ in chunks] == [False] * streams + [True], chunks
    for target, parts in chunks[:streams]:
        target.append(parts)
    node = Node(folder)
    c = node.client()
    c.call(1, spec.CONFIRM_SELECT, (False,))
    for n in range(1, 8):  # never confirmed: sent again, with one more
        _identified(c, n)
    node.sync()
    acks = c.read()
    assert names(acks) == ["basic.ack"] and acks[0].args == [14, True], acks
    got = [body for _, body in delivered(consume(c, "first"))]
    expected = [b"%s %d" % (kind, n) for n in range(1, 8) for kind in (b"bridged", b"reading")]
    assert got == expected, got
    assert (node.broker.dedup.dropped, node.broker.sensors.dropped) == (6, 6)
    node.stop()
    node = Node(folder)  # a clean stop: the state the start after the crash found is in the journal
    c = node.client()
    for n in (5, 6, 7):
        _identified(c, n)
    node.sync()
    assert (node.broker.dedup.dropped, node.broker.sensors.dropped) == (3, 3)


def test_a_kill_between_a_streams_records_and_the_journals_leaves_no_repeat():
    _killed_between()
    _killed_between(1100)
