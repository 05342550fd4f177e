"""Stream queues with pika against `hutch serve`, and the same client code against the run's
RabbitMQ (Debian's 3.10.8, conftest.py's rabbitmq fixture): what each x-stream-offset form
delivers, several consumers, a consumer re-attaching at a saved offset, retention, and the
reply code (and words) of every refusal, compared broker against broker.

Where RabbitMQ 3.10 crashes (541) or has since changed, hutch does what later releases do
(the research notes, /work/shared/research/streams.md §1.5 and §1.7), and the test says so.
"""

import datetime
import math
import time
import uuid

import pika
import pytest
from brokers import pika_connection, pump_until, wait_until
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker

# Each test here talks to the run's RabbitMQ: one worker runs them (conftest.py).
pytestmark = pytest.mark.timeout(180)

STREAM = {"x-queue-type": "stream"}


def fresh(prefix="s"):
    """A stream name no other test (nor a previous run on the shared RabbitMQ) uses."""
    return "%s-%s" % (prefix, uuid.uuid4().hex[:10])


def declare(target, name, arguments=None):
    connection = pika_connection(target)
    connection.channel().queue_declare(name, durable=True, arguments=dict(STREAM, **(arguments or {})))
    connection.close()


def publish(target, name, bodies, properties=None):
    """Publish with confirms, one at a time (so RabbitMQ writes one message per chunk)."""
    connection = pika_connection(target)
    channel = connection.channel()
    channel.confirm_delivery()
    for body in bodies:
        channel.basic_publish("", name, body, properties)
    connection.close()


def bodies(start, stop):
    return [b"m%d" % i for i in range(start, stop)]


class Reader:
    """A pika consumer of a stream (tags consumers on one channel) on a connection of its own. It
    acks the first `acks` deliveries (all, if None) and no more: it stops a consumer without
    leaving deliveries in flight, which pika would reject on closing, and RabbitMQ 3.10 answers
    a reject on a stream with 540."""

    def __init__(self, target, name, offset=None, prefetch=100, tags=1, acks=None):
        self.connection = pika_connection(target)
        self.channel = self.connection.channel()
        self.channel.basic_qos(prefetch_count=prefetch)
        self.got = []
        self.by_tag = {}
        self.redelivered = []
        self.acks = acks
        arguments = {} if offset is None else {"x-stream-offset": offset}
        for _ in range(tags):
            self.by_tag[self.channel.basic_consume(name, self._on, arguments=arguments)] = []

    def _on(self, channel, method, properties, body):
        record = (properties.headers["x-stream-offset"], body)
        self.got.append(record)
        self.by_tag[method.consumer_tag].append(record)
        self.redelivered.append(method.redelivered)
        if self.acks is None or len(self.got) <= self.acks:
            channel.basic_ack(method.delivery_tag)

    def until(self, body, timeout=15):
        """Everything delivered up to the record whose body is body (in order), for each consumer."""
        pump_until(
            self.connection,
            lambda: all(any(b == body for _, b in got) for got in self.by_tag.values()),
            timeout,
            "%r delivered" % body,
        )
        return list(self.got)

    def close(self):
        self.connection.close()


def numbered(start, stop):
    return [(i, b"m%d" % i) for i in range(start, stop)]


def utc(seconds):
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)


def offset_forms(target):
    """What each x-stream-offset form delivers, on one stream, in one broker."""
    name = fresh()
    declare(target, name)
    publish(target, name, bodies(0, 10))
    # a second batch from the next whole second on: a timestamp between the two picks the second
    boundary = math.ceil(time.time())
    wait_until(lambda: time.time() >= boundary + 0.5, 5, "the next second")  # the scenario: time passes
    publish(target, name, bodies(10, 20))
    seen = {}
    for label, offset in (
        ("first", "first"),
        ("last", "last"),
        ("5", 5),
        ("-3", -3),
        ("timestamp before", utc(time.time() - 3600)),
        ("timestamp between", utc(boundary)),
        ("interval 1h", "1h"),
    ):
        reader = Reader(target, name, offset)
        seen[label] = reader.until(b"m19")
        reader.close()
    # the forms that wait for what is to come: each gets only what is published after it attached
    waiting = {
        "none": Reader(target, name),
        "next": Reader(target, name, "next"),
        "22, past the end": Reader(target, name, 22),
        "timestamp to come": Reader(target, name, utc(time.time() + 3600)),
    }
    publish(target, name, bodies(20, 24))
    for label, reader in waiting.items():
        seen[label] = reader.until(b"m23")
        assert not any(reader.redelivered), label
        reader.close()
    return seen


def test_every_x_stream_offset_form_as_rabbitmq_delivers_it(broker, rabbitmq):
    hutch = offset_forms(broker)
    assert hutch == {
        "first": numbered(0, 20),
        "last": numbered(19, 20),
        "5": numbered(5, 20),
        "-3": numbered(0, 20),
        "timestamp before": numbered(0, 20),
        "timestamp between": numbered(10, 20),
        "interval 1h": numbered(0, 20),
        "none": numbered(20, 24),
        "next": numbered(20, 24),
        "22, past the end": numbered(22, 24),
        "timestamp to come": numbered(20, 24),
    }, hutch
    assert offset_forms(rabbitmq) == hutch


def several_and_reattach(target):
    name = fresh()
    declare(target, name)
    publish(target, name, bodies(0, 10))
    # two consumers on one channel and one on another connection, each at its own offset
    both = Reader(target, name, "first", prefetch=3, tags=2)
    later = Reader(target, name, 7, prefetch=2)
    first_two = both.until(b"m9")
    rest = later.until(b"m9")
    both.close()
    later.close()
    # a consumer that processed up to offset 4 (acked 0 to 3, then stopped) comes back for the rest
    reader = Reader(target, name, "first", prefetch=1, acks=4)
    pump_until(reader.connection, lambda: len(reader.got) >= 5)
    saved = reader.got[4][0]
    reader.close()
    publish(target, name, bodies(10, 12))
    again = Reader(target, name, saved + 1)
    resumed = again.until(b"m11")
    again.close()
    return sorted(first_two), rest, saved, resumed


def test_several_consumers_and_a_consumer_that_comes_back(broker, rabbitmq):
    hutch = several_and_reattach(broker)
    assert hutch == (sorted(numbered(0, 10) * 2), numbered(7, 10), 4, numbered(5, 12)), hutch
    assert several_and_reattach(rabbitmq) == hutch


# ---------------------------------------------------------------- refusals


def outcome(target, attempt):
    """What the broker answers to attempt(connection, channel): ("ok", result), or the close's
    (code, text), and whether it closed the channel or the connection."""
    connection = pika_connection(target)
    channel = connection.channel()
    try:
        result = attempt(connection, channel)
        return ("ok", result)
    except ChannelClosedByBroker as e:
        return ("channel", e.reply_code, e.reply_text)
    except ConnectionClosedByBroker as e:
        return ("connection", e.reply_code, e.reply_text)
    finally:
        if connection.is_open:
            connection.close()


def refusals(target, name):
    """Every operation RabbitMQ refuses of a stream (or of a stream's declare), on stream name."""
    declare(target, name)
    publish(target, name, bodies(0, 3))

    def declaring(arguments, queue=name + "-x", durable=True, exclusive=False, auto_delete=False):
        return lambda connection, channel: (
            channel.queue_declare(
                queue, durable=durable, exclusive=exclusive, auto_delete=auto_delete, arguments=arguments
            ).method.queue
        )

    def consuming(arguments=None, prefetch=10, global_prefetch=0, auto_ack=False):
        def attempt(connection, channel):
            if prefetch:
                channel.basic_qos(prefetch_count=prefetch)
            if global_prefetch:
                channel.basic_qos(prefetch_count=global_prefetch, global_qos=True)
            return bool(channel.basic_consume(name, lambda *a: None, auto_ack=auto_ack, arguments=arguments))

        return attempt

    attempts = {
        "declare non-durable": declaring(STREAM, durable=False),
        "declare exclusive": declaring(STREAM, exclusive=True),
        "declare auto-delete": declaring(STREAM, auto_delete=True),
        "declare server-named": declaring(STREAM, queue=""),
        "declare x-message-ttl": declaring(dict(STREAM, **{"x-message-ttl": 1000})),
        "declare x-dead-letter-exchange": declaring(dict(STREAM, **{"x-dead-letter-exchange": "dlx"})),
        "declare x-max-length": declaring(dict(STREAM, **{"x-max-length": 10})),
        "declare x-max-priority": declaring(dict(STREAM, **{"x-max-priority": 5})),
        "declare x-expires": declaring(dict(STREAM, **{"x-expires": 5000})),
        "declare x-overflow": declaring(dict(STREAM, **{"x-overflow": "reject-publish"})),
        "declare x-max-age 1w": declaring(dict(STREAM, **{"x-max-age": "1w"})),
        "declare x-max-age 0s": declaring(dict(STREAM, **{"x-max-age": "0s"})),
        "declare x-max-age 5 (a number)": declaring(dict(STREAM, **{"x-max-age": 5})),
        "declare x-max-length-bytes -1": declaring(dict(STREAM, **{"x-max-length-bytes": -1})),
        "declare segment size too large": declaring(dict(STREAM, **{"x-stream-max-segment-size-bytes": 3000000001})),
        "redeclare with another x-max-age": declaring(dict(STREAM, **{"x-max-age": "2h"}), queue=name),
        "redeclare as a classic queue": declaring({}, queue=name),
        "basic.get": lambda connection, channel: channel.basic_get(name),
        "queue.purge": lambda connection, channel: channel.queue_purge(name),
        "consume without prefetch": consuming(prefetch=0),
        "consume with no-ack": consuming(auto_ack=True),
        "consume with a global prefetch": consuming(global_prefetch=5),
        "consume with x-priority": consuming({"x-priority": 5}),
        "consume at offset '5' (no unit)": consuming({"x-stream-offset": "5"}),
        "ack an unknown tag": lambda connection, channel: (
            channel.basic_qos(prefetch_count=10),
            channel.basic_consume(name, lambda *a: None),
            channel.basic_ack(42),
            channel.queue_declare(name, passive=True),
        ),
    }
    return {label: outcome(target, attempt) for label, attempt in attempts.items()}


def test_every_refusal_has_rabbitmqs_code_and_words(broker, rabbitmq):
    name = fresh()
    hutch = refusals(broker, name)
    reference = refusals(rabbitmq, name)
    for label in hutch:
        if label == "redeclare with another x-max-age":
            # same code and field; hutch words the values as it does for every queue argument
            assert hutch[label][:2] == reference[label][:2] == ("channel", 406), (hutch[label], reference[label])
            assert (
                "inequivalent arg 'x-max-age'" in hutch[label][2]
                and "inequivalent arg 'x-max-age'" in reference[label][2]
            )
            continue
        if label == "redeclare as a classic queue":
            assert hutch[label][:2] == reference[label][:2] == ("channel", 406), (hutch[label], reference[label])
            assert "inequivalent arg 'x-queue-type'" in hutch[label][2], hutch[label]
            continue
        assert hutch[label] == reference[label], (label, hutch[label], reference[label])
    assert reference["basic.get"][:2] == ("connection", 540) and reference["consume without prefetch"][1] == 406


def where_they_differ(target, name):
    """What RabbitMQ 3.10 does otherwise than later releases (and hutch, which follows those)."""
    declare(target, name)
    publish(target, name, bodies(0, 4))

    def settle(how):
        def attempt(connection, channel):
            channel.basic_qos(prefetch_count=2)
            got = []
            channel.basic_consume(
                name, lambda ch, m, p, b: got.append(m.delivery_tag), arguments={"x-stream-offset": "first"}
            )
            pump_until(connection, lambda: len(got) >= 2)
            how(channel, got[0])
            pump_until(connection, lambda: len(got) >= 3)  # the settlement gave credit: one more comes
            return len(got)

        return attempt

    def recover(connection, channel):
        channel.basic_qos(prefetch_count=2)
        channel.basic_consume(name, lambda *a: None, arguments={"x-stream-offset": "first"})
        channel.basic_recover(requeue=True)

    return {
        "nack": outcome(target, settle(lambda channel, tag: channel.basic_nack(tag, requeue=True))),
        "reject": outcome(target, settle(lambda channel, tag: channel.basic_reject(tag, requeue=False))),
        "recover": outcome(target, recover),
        "offset banana": outcome(
            target,
            lambda connection, channel: (
                channel.basic_qos(prefetch_count=1),
                channel.basic_consume(name, lambda *a: None, arguments={"x-stream-offset": "banana"}),
            ),
        ),
        "max-age h": outcome(
            target,
            lambda connection, channel: channel.queue_declare(
                name + "-h", durable=True, arguments=dict(STREAM, **{"x-max-age": "h"})
            ),
        ),
    }


def test_where_rabbitmq_310_differs_hutch_does_what_later_releases_do(broker, rabbitmq):
    name = fresh()
    hutch = where_they_differ(broker, name)
    old = where_they_differ(rabbitmq, name)
    # nack and reject: 540 up to 3.12; credit, like an ack, from 3.13 (the channel stays open)
    what = "queue '%s' in vhost '/'" % name
    nacked = ("connection", 540, "NOT_IMPLEMENTED - basic.nack and basic.reject not supported by stream queues " + what)
    assert old["nack"] == old["reject"] == nacked, old
    assert hutch["nack"] == hutch["reject"] == ("ok", 3), hutch
    # basic.recover: 3.10 crashes (541); hutch refuses it as the other operations a stream lacks
    assert old["recover"][:2] == ("connection", 541), old
    assert hutch["recover"] == (
        "connection",
        540,
        "NOT_IMPLEMENTED - basic.recover not supported by stream queues " + what,
    )
    # strings that are neither a keyword nor a duration: 3.10 crashes (541); 406 since (upstream df231bf82f)
    assert old["offset banana"][:2] == ("connection", 541) and old["max-age h"][:2] == ("connection", 541), old
    assert hutch["offset banana"] == (
        "channel",
        406,
        "PRECONDITION_FAILED - invalid arg 'x-stream-offset' for %s: {invalid_stream_offset_arg,{longstr,<<\"banana\">>}}"
        % what,
    ), hutch
    assert hutch["max-age h"] == (
        "channel",
        406,
        "PRECONDITION_FAILED - invalid arg 'x-max-age' for queue '%s-h' in vhost '/': invalid_max_age" % name,
    ), hutch


# ---------------------------------------------------------------- retention, and what hutch adds


def first_offset(target, name):
    reader = Reader(target, name, "first", prefetch=1, acks=0)
    pump_until(reader.connection, lambda: reader.got)
    reader.close()
    return reader.got[0][0]


def retention(target):
    name = fresh()
    declare(target, name, {"x-stream-max-segment-size-bytes": 20000, "x-max-length-bytes": 50000})
    publish(target, name, [b"%03d" % i + b"." * 1000 for i in range(200)])

    def moved():
        first = first_offset(target, name)
        return first if first > 100 else 0

    # RabbitMQ applies retention when a segment fills (hutch also at its next tick): the limit
    # and a segment stay, and a consumer asking for offset 3 is told where it starts instead
    first = wait_until(moved, 15, "%s: the oldest segments dropped" % target.kind)
    reader = Reader(target, name, 3)
    got = reader.until(b"199" + b"." * 1000)
    reader.close()
    # (RabbitMQ may drop one more segment meanwhile: its retention runs in the background)
    now_first = first_offset(target, name)
    assert first <= got[0][0] <= now_first and len(got) < 100, (target.kind, first, got[0][0], now_first, len(got))
    aged = fresh()
    declare(target, aged, {"x-stream-max-segment-size-bytes": 5000, "x-max-age": "1s"})
    publish(target, aged, [b"old" + b"." * 1000 for _ in range(20)])
    start = time.time()
    wait_until(lambda: time.time() - start > 2.2, 5, "two seconds")  # the scenario: the records grow old
    publish(target, aged, [b"new" + b"." * 1000 for _ in range(20)])  # RabbitMQ looks when segments roll
    wait_until(lambda: first_offset(target, aged) >= 15, 15, "%s: the old segments dropped" % target.kind)


def test_retention_by_size_and_by_age_with_a_consumer_told_of_the_jump(broker, rabbitmq):
    retention(broker)
    retention(rabbitmq)


def test_a_passive_declare_counts_a_streams_records_exactly(broker):
    # RabbitMQ's count comes from metrics and lags by seconds; hutch's is next - first, at once
    name = fresh()
    declare(broker, name)
    connection = pika_connection(broker)
    channel = connection.channel()
    assert channel.queue_declare(name, passive=True).method.message_count == 0
    channel.confirm_delivery()
    for i in range(7):
        channel.basic_publish("", name, b"x", pika.BasicProperties(headers={"n": i}))
        assert channel.queue_declare(name, passive=True).method.message_count == i + 1
    connection.close()
    # the ends a reader needs: first from a consumer at "first", next = first + count
    assert first_offset(broker, name) == 0
    reader = Reader(broker, name, "last", prefetch=1, acks=0)
    pump_until(reader.connection, lambda: reader.got)
    assert reader.got[0][0] == 6
    reader.close()
