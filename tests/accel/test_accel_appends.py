"""Runs of publishes into a stream made into records in one call (amqp091/batch.py stream_run with
c_accel/appends.c) against the one-by-one path (each publish through the channel, the broker
and Stream.append with core/streams/streamlog.py's message_record).

Differential: two brokers on their own data folders read the same bytes in the same chunks
with the C frame scanner, one with the run path and one without. After every chunk (and a
group commit) they must have sent the same bytes (confirms, returns, errors), and at the end
their streams' segment files must hold the same bytes: the same records at the same
offsets, whatever the publishes (alike or not, bodies empty or large, properties the broker
checks, to the stream alone or to it and a classic queue, unroutable, too large) and however
the reads cut them, with segments small enough to roll inside a run. CPython only.
"""

import os
import shutil
import struct
import tempfile

from broker_state import written_files
from c_path import WALL, journaled_broker
from hypothesis import given, settings
from hypothesis import strategies as st
from raw_amqp import login, method

from hutch.amqp091.connection import Connection
from hutch.codec import spec
from hutch.codec.wire import encode_properties, frame
from hutch.core.limits import Limits


def setup(segment_bytes):
    """Handshake, confirm mode, a stream `s`, a classic queue `q`, a fanout `both` to the two."""
    stream_args = {"x-queue-type": b"stream", "x-stream-max-segment-size-bytes": segment_bytes}
    return (
        login(131072)
        + method(1, spec.CONFIRM_SELECT, "b", [False])
        + method(1, spec.QUEUE_DECLARE, "hsbbbbbt", [0, b"s", False, True, False, False, False, stream_args])
        + method(1, spec.QUEUE_DECLARE, "hsbbbbbt", [0, b"q", False, True, False, False, False, {}])
        + method(1, spec.EXCHANGE_DECLARE, "hssbbbbbt", [0, b"both", b"fanout", False, False, False, False, False, {}])
        + method(1, spec.QUEUE_BIND, "hsssbt", [0, b"s", b"both", b"", False, {}])
        + method(1, spec.QUEUE_BIND, "hsssbt", [0, b"q", b"both", b"", False, {}])
    )


def publish(body, key=b"s", exchange=b"", properties=None, bits=0, channel=1, ticket=0, weight=0):
    props = encode_properties(properties or {})
    return (
        frame(
            1,
            channel,
            struct.pack(">IH", spec.BASIC_PUBLISH, ticket)
            + bytes((len(exchange),))
            + exchange
            + bytes((len(key),))
            + key
            + bytes((bits,)),
        )
        + frame(2, channel, struct.pack(">HHQ", 60, weight, len(body)) + props)
        + (frame(3, channel, body) if body else b"")
    )


PROPERTIES = st.sampled_from(
    [
        None,
        {"delivery-mode": 2},
        {"content-type": b"application/json", "delivery-mode": 2},
        {"headers": {"sensor": b"t1"}},
        {"headers": {"x-stream-offset": 7, "a": 1}},  # replaced by the record's own
        {"expiration": b"60000"},  # checked by the channel (a stream ignores it)
        {"user-id": b"guest"},  # checked against the login
        {"user-id": b"mallory"},  # refused: 406 closes the channel
        {"headers": {"x-hutch-seq": 1, "x-hutch-origin": b"edge"}},  # a bridge's: deduplicated alone
    ]
)
BODIES = st.one_of(st.binary(max_size=40), st.builds(lambda n: b"y" * n, st.sampled_from([0, 3000, 70000])))

alike_run = st.builds(
    lambda props, bodies, ticket: b"".join(publish(b, properties=props, ticket=ticket) for b in bodies),
    PROPERTIES,
    st.lists(BODIES, min_size=1, max_size=60),
    st.sampled_from([0, 1]),  # the ticket is not compared: clients send 0, some 1
)
# Sensors' readings: a property per message. After the headers table (message-id, timestamp,
# correlation-id) they are each record's own in a run; in it (a header per reading) they end it.
PER_MESSAGE = st.sampled_from(
    [
        lambda i: {"message-id": b"m%d" % i},
        lambda i: {"timestamp": 1700000000 + i, "message-id": b"reading-%d" % (i * 7), "delivery-mode": 2},
        lambda i: {"headers": {"sensor": b"t1"}, "timestamp": i, "correlation-id": b"c" * (i % 5)},
        lambda i: {"headers": {"n": i}},
        lambda i: {"content-type": b"text/plain", "app-id": b"a" * (i % 3), "user-id": b"guest"},
    ]
)
varying_run = st.builds(
    lambda props, bodies: b"".join(publish(b, properties=props(i)) for i, b in enumerate(bodies)),
    PER_MESSAGE,
    st.lists(BODIES, min_size=1, max_size=60),
)
pieces = st.one_of(
    alike_run,
    alike_run,
    alike_run,
    varying_run,
    varying_run,
    st.builds(lambda b, p: publish(b, properties=p), BODIES, PROPERTIES),
    st.builds(lambda b: publish(b, key=b"q"), BODIES),  # a classic queue
    st.builds(lambda b: publish(b, exchange=b"both"), BODIES),  # the stream and a classic queue
    st.builds(lambda b: publish(b, key=b"nowhere", bits=1), BODIES),  # mandatory, unroutable: returned
    st.builds(lambda b: publish(b, exchange=b"none"), BODIES),  # no such exchange: 404 closes the channel
    st.just(method(1, spec.TX_SELECT, "", [])),  # tx on a confirm channel: 406
    st.just(method(1, spec.CHANNEL_OPEN, "s", [b""])),  # reopens after a 406 or 404 (else 504)
)
# What closes the connection: only ever last, else it would end most examples early.
endings = st.sampled_from(
    [
        b"",
        publish(b"i", bits=2),  # immediate: 540
        publish(b"2", channel=2),  # a channel not open: 504
        publish(b"w", weight=1),  # a header of weight 1: 505, though like the run's but for that
    ]
)


class Side:
    """A broker on its own data folder and one connection, reading with the C scanner, with or
    without the run path."""

    def __init__(self, folder, runs, limits):
        self.folder = folder
        self.broker, self.writer = journaled_broker(folder, limits, runs)
        self.conn = Connection(self.broker, {"address": "127.0.0.1", "port": 1})

    def feed(self, data, seconds):
        self.broker.tick(seconds * 1000, WALL + seconds)  # the records' timestamps move on
        self.conn.feed(data)
        self.writer.commit()  # a group commit: the confirms it holds are sent
        conn = self.conn
        return conn.take_output(), conn.state, conn.closed, conn.paused

    def segments(self):
        """{file name: bytes} of every stream segment written."""
        segments = written_files(os.path.join(self.folder, "streams"), lambda name: name.endswith(".seg"))
        return {os.path.join("streams", path): content for path, content in segments.items()}

    def close(self):
        self.writer.commit()
        for stream in self.broker.streams:
            stream.close()
        self.writer.files.close()


@settings(max_examples=120)
@given(
    alike_run,
    st.lists(pieces, max_size=12),
    endings,
    st.sampled_from([1, 50, 700, 5000, 1 << 20]),
    st.sampled_from([400, 5000, 1 << 20]),
    st.sampled_from([30, 5000, 1 << 20]),
)
def test_runs_make_the_records_and_replies_the_one_by_one_path_makes(
    first, body, ending, chunk, segment_bytes, max_message
):
    limits = Limits()
    limits.max_message_bytes = max_message
    top = tempfile.mkdtemp(prefix="hutch-appends-")
    try:
        sides = [Side(os.path.join(top, name), runs, limits) for name, runs in (("one", False), ("runs", True))]
        data = setup(segment_bytes) + first + b"".join(body) + ending
        chunk = max(chunk, len(data) // 150)  # (a group commit per read: fsyncs)
        reads = [data[:120]] + [data[i : i + chunk] for i in range(120, len(data), chunk)]
        for n, read in enumerate(reads):
            one, runs = (side.feed(read, n) for side in sides)
            assert runs == one
        for side in sides:
            side.close()
        assert sides[1].segments() == sides[0].segments()
    finally:
        shutil.rmtree(top)


def test_a_run_with_a_property_per_message_takes_them_in_one_call():
    """A run whose publishes each have their own message-id and timestamp is taken as one, as
    a run of identical ones is (test_a_run_takes_its_publishes_in_one_call)."""
    top = tempfile.mkdtemp(prefix="hutch-appends-")
    try:
        seqs, segments = [], []
        for name, runs in (("one", False), ("runs", True)):
            side = Side(os.path.join(top, name), runs, Limits())
            side.feed(setup(1 << 20) + publish(b"first"), 0)
            before = side.broker.journal.seq
            readings = (
                publish(b"%d" % i, properties={"message-id": b"m%d" % (i * 13), "timestamp": i}) for i in range(30)
            )
            side.feed(b"".join(readings), 1)
            seqs.append(side.broker.journal.seq - before)
            assert side.broker.streams[0].next == 31
            side.close()
            segments.append(side.segments())
        assert seqs == [30, 1]
        assert segments[1] == segments[0]  # each record with its own properties, their lengths counted
    finally:
        shutil.rmtree(top)


def test_a_run_takes_its_publishes_in_one_call():
    """The run path is taken: a run of 30 alike publishes in one read leaves the stream's
    journal sequence one record on, where one by one it moves on by 30."""
    top = tempfile.mkdtemp(prefix="hutch-appends-")
    try:
        seqs = []
        for name, runs in (("one", False), ("runs", True)):
            side = Side(os.path.join(top, name), runs, Limits())
            side.feed(setup(1 << 20) + publish(b"first"), 0)  # (the first record starts a segment, alone)
            before = side.broker.journal.seq
            side.feed(b"".join(publish(b"%d" % i) for i in range(30)), 1)
            seqs.append(side.broker.journal.seq - before)
            assert side.broker.streams[0].next == 31
            side.close()
        assert seqs == [30, 1]
    finally:
        shutil.rmtree(top)
