"""AMQP 1.0 clients on hutch's port with Qpid Proton (python-qpid-proton's C core), a real 1.0
client: settled and unsettled sending and receiving, credit and drain, large messages in frames
of several sizes, every outcome on both sides, a missing queue (the session goes on), wrong
credentials, 1.0 and 0-9-1 meeting in one queue both ways with the conversion table's
properties, a stream read from an offset, fair turns between a 1.0 and a 0-9-1 consumer, and an
accepted durable message kept through a SIGKILL."""

import json
import os
import subprocess
import sys
import time
import uuid

import pika
import pytest
from brokers import BIN, RunningBroker, pika_connection, sigkill, wait_until
from proton import Delivery, Message, Timeout, symbol, ulong
from proton.reactor import AtMostOnce, Filter
from proton.utils import BlockingConnection, LinkDetached, SendException

TIMEOUT = 10


def proton(broker, user="guest", password="guest", **options):
    return BlockingConnection("amqp://%s:%s@127.0.0.1:%d" % (user, password, broker.port), timeout=TIMEOUT, **options)


def declare(broker, *names, **arguments):
    connection = pika_connection(broker)
    channel = connection.channel()
    for name in names:
        channel.queue_declare(name, durable=True, arguments=arguments or None)
    connection.close()


def received(receiver):
    """The body of the next message (copied while the message holds proton's buffer), accepted
    if it came unsettled (proton's accept() settles one delivery, the oldest)."""
    message = receiver.receive(TIMEOUT)
    if receiver.fetcher.unsettled:
        receiver.accept()
    return bytes(message.body)


def data(body, **fields):
    return Message(body=body, inferred=True, **fields)


def test_settled_and_unsettled_sending_and_receiving(broker):
    declare(broker, "q")
    conn = proton(broker)
    unsettled = conn.create_sender("/queues/q")
    for i in range(3):
        unsettled.send(data(b"u%d" % i))  # returns once the broker said accepted
    settled = conn.create_sender("/queues/q", name="settled", options=AtMostOnce())
    settled.send(data(b"s0"))
    receiver = conn.create_receiver("/queues/q", credit=10)
    got = []
    for _ in range(2):
        got.append(received(receiver))
    at_most_once = conn.create_receiver("/queues/q", name="presettled", options=AtMostOnce(), credit=10)
    receiver.close()  # what it held (nothing now) goes back
    for _ in range(2):
        got.append(received(at_most_once))
    assert got == [b"u0", b"u1", b"u2", b"s0"]
    conn.close()
    assert queue_depth(broker, "q") == 0  # the pre-settled deliveries needed no accept


def queue_depth(broker, name):
    connection = pika_connection(broker)
    depth = connection.channel().queue_declare(name, passive=True).method.message_count
    connection.close()
    return depth


def test_credit_is_what_the_receiver_grants_and_drain_gives_the_rest_up(broker):
    declare(broker, "q")
    publish_091(broker, "q", [b"m%d" % i for i in range(5)])
    conn = proton(broker)
    receiver = conn.create_receiver("/queues/q", credit=0)
    link = receiver.link
    link.flow(2)
    first = [received(receiver) for _ in range(2)]
    assert first == [b"m0", b"m1"]
    link.drain(10)  # as much as there is, then the rest of the credit given back: none left
    conn.wait(
        lambda: receiver.fetcher.has_message == 3 and link.credit == 0 and not link.draining(),
        timeout=TIMEOUT,
        msg="the three messages left, then the drain's answer",
    )
    rest = []
    while receiver.fetcher.incoming:
        rest.append(received(receiver))
    assert rest == [b"m2", b"m3", b"m4"]
    conn.close()


def publish_091(broker, queue, bodies, properties=None):
    connection = pika_connection(broker)
    channel = connection.channel()
    channel.confirm_delivery()
    for body in bodies:
        channel.basic_publish("", queue, body, properties)
    connection.close()


@pytest.mark.parametrize("frame_size", [512, 4096, 131072])
def test_large_messages_go_both_ways_in_frames_of_the_client_s_size(broker, frame_size):
    declare(broker, "big")
    bodies = [os.urandom(300 * 1024), os.urandom(frame_size - 100), os.urandom(frame_size * 3 + 7)]
    conn = proton(broker, max_frame_size=frame_size)
    sender = conn.create_sender("/queues/big")
    for body in bodies:
        sender.send(data(body))
    receiver = conn.create_receiver("/queues/big", credit=3)
    got = []
    for _ in bodies:
        got.append(received(receiver))
    assert got == bodies
    conn.close()
    publish_091(broker, "big", [bodies[0]])  # a 0-9-1 message as large, to a 1.0 receiver
    conn = proton(broker, max_frame_size=frame_size)
    receiver = conn.create_receiver("/queues/big", credit=1)
    assert received(receiver) == bodies[0]
    conn.close()


def test_each_outcome_a_receiver_gives_settles_as_rabbitmq_4_settles_it(broker):
    connection = pika_connection(broker)
    channel = connection.channel()
    channel.queue_declare("dead", durable=True)
    channel.queue_declare(
        "work", durable=True, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"}
    )
    connection.close()
    publish_091(broker, "work", [b"accept", b"release", b"reject", b"modify-again", b"modify-dead"])
    conn = proton(broker)
    receiver = conn.create_receiver("/queues/work", credit=5)
    for expected in ("accept", "release", "reject", "modify-again", "modify-dead"):
        message = receiver.receive(TIMEOUT)
        assert bytes(message.body) == expected.encode()
        if expected == "accept":
            receiver.accept()
        elif expected == "release":
            receiver.release(delivered=False)  # released: back to the queue as it was
        elif expected == "reject":
            receiver.reject()
        elif expected == "modify-again":
            receiver.release(delivered=True)  # modified, delivery-failed: back to the queue
        else:  # modified with undeliverable-here: a dead letter (the blocking API has no word for it)
            delivery = receiver.fetcher.unsettled.popleft()
            delivery.local.failed = True
            delivery.local.undeliverable = True
            delivery.update(Delivery.MODIFIED)
            delivery.settle()
    again = sorted(received(receiver) for _ in range(2))
    assert again == [b"modify-again", b"release"]
    receiver.close()  # (proton sends what it settled before its detach: a close alone may cut it)
    conn.close()
    connection = pika_connection(broker)
    channel = connection.channel()
    dead = [channel.basic_get("dead", auto_ack=True)[2] for _ in range(2)]
    assert sorted(dead) == [b"modify-dead", b"reject"]
    left = channel.basic_get("work", auto_ack=True)
    assert left[0] is None, left
    connection.close()


def test_a_publisher_is_told_released_for_no_route_and_rejected_by_a_full_queue(broker):
    declare(broker, "small", **{"x-max-length": 1, "x-overflow": "reject-publish"})
    conn = proton(broker)
    sender = conn.create_sender("/queues/small")
    sender.send(data(b"fits"))
    with pytest.raises(SendException) as refused:
        sender.send(data(b"does not"))
    assert str(refused.value.state) == "REJECTED"
    nowhere = conn.create_sender("/exchanges/amq.direct/nobody-bound", name="nowhere")
    for _ in range(2):
        with pytest.raises(SendException) as released:
            nowhere.send(data(b"lost"))
        assert str(released.value.state) == "RELEASED"
    conn.close()
    # the broker's log says why, once for the link
    said = [line for line in broker.log().splitlines() if "went to no queue" in line]
    assert len(said) == 1 and " WARNING " in said[0], said
    assert (
        "AMQP 1.0 link 'nowhere': a message to exchange 'amq.direct' with routing key 'nobody-bound' went to no queue"
        in said[0]
    )


def test_a_missing_queue_ends_its_link_and_the_session_goes_on(broker):
    declare(broker, "q")
    conn = proton(broker)
    with pytest.raises(LinkDetached) as missing:
        conn.create_receiver("/queues/nope")
    assert "amqp:not-found" in str(missing.value)
    with pytest.raises(LinkDetached) as missing:
        conn.create_sender("/queues/nope")
    assert "amqp:not-found" in str(missing.value)
    conn.create_sender("/queues/q", name="after").send(data(b"still here"))
    conn.close()
    assert queue_depth(broker, "q") == 1


def test_wrong_credentials_are_refused(broker):
    from proton import ConnectionException

    with pytest.raises(ConnectionException) as refused:
        proton(broker, password="wrong")
    assert "unauthorized" in str(refused.value) or "Authentication failed" in str(refused.value)
    assert "AMQP 1.0 PLAIN login refused" in broker.log()


def test_a_deleted_user_s_connection_is_closed_as_forced(broker):
    """`hutch ctl delete-user` ends the user's 1.0 connection: close with amqp:connection:forced
    and the reason (a 0-9-1 client gets 320 CONNECTION_FORCED with the same words)."""
    from proton import ConnectionException

    def ctl(*args):
        done = subprocess.run(
            [os.path.join(BIN, "hutch"), "ctl", *args, "--data", broker.data], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    user = "reader-" + uuid.uuid4().hex[:8]
    ctl("add-user", user, "pw")
    ctl("set-permissions", user, ".*", ".*", ".*")
    declare(broker, user + "-q")
    connection = proton(broker, user, "pw")
    receiver = connection.create_receiver("/queues/%s-q" % user)
    assert ctl("delete-user", user) == "deleted user '%s'; closed its 1 connection" % user
    with pytest.raises(ConnectionException) as closed:
        receiver.receive(TIMEOUT)
    assert "amqp:connection:forced" in str(closed.value), closed.value
    assert "user '%s' is deleted" % user in str(closed.value), closed.value


def test_1_0_and_0_9_1_meet_in_one_queue_with_the_table_s_properties(broker):
    declare(broker, "meet")
    conn = proton(broker)
    sender = conn.create_sender("/queues/meet")
    message_uuid = uuid.UUID("12345678-1234-5678-1234-567812345678")
    sender.send(
        Message(
            body=b"from 1.0", inferred=True, durable=True, priority=7, ttl=60, id=message_uuid,
            correlation_id=ulong(42), content_type="text/plain", content_encoding="utf-8",
            reply_to="replies", user_id=b"guest", group_id="app-1", creation_time=1700000000.0,
            properties={"sensor": "s-1", "n": 5, "ok": True},
            annotations={symbol("x-basic-type"): "reading", symbol("x-custom"): "kept"},
        )
    )  # fmt: skip
    connection = pika_connection(broker)
    channel = connection.channel()
    _method, props, body = channel.basic_get("meet", auto_ack=True)
    assert body == b"from 1.0"
    assert (props.delivery_mode, props.priority, props.expiration) == (2, 7, "60000")
    assert (props.message_id, props.correlation_id) == ("urn:uuid:" + str(message_uuid), "42")
    assert (props.content_type, props.content_encoding, props.reply_to) == ("text/plain", "utf-8", "replies")
    assert (props.user_id, props.app_id, props.timestamp, props.type) == ("guest", "app-1", 1700000000, "reading")
    assert props.headers == {"sensor": "s-1", "n": 5, "ok": True, "x-custom": "kept"}
    channel.basic_publish(
        "", "meet", b"from 0-9-1",
        pika.BasicProperties(
            delivery_mode=2, priority=3, expiration="5000", message_id="urn:uuid:" + str(message_uuid),
            correlation_id="c-1", content_type="application/json", reply_to="back", app_id="edge",
            timestamp=1700000001, type="command", headers={"site": "north", "x-trace": "t-9", "level": 2},
        ),
    )  # fmt: skip
    connection.close()
    receiver = conn.create_receiver("/queues/meet", credit=1)
    message = receiver.receive(TIMEOUT)
    receiver.accept()
    assert bytes(message.body) == b"from 0-9-1"
    assert (message.durable, message.priority, message.ttl) == (True, 3, 5.0)
    assert (message.id, message.correlation_id) == (message_uuid, "c-1")
    assert (message.content_type, message.reply_to, message.group_id) == ("application/json", "back", "edge")
    assert message.creation_time == 1700000001.0
    assert message.properties == {"site": "north", "level": 2}
    assert message.annotations[symbol("x-basic-type")] == "command"
    assert message.annotations[symbol("x-trace")] == "t-9"
    assert message.annotations[symbol("x-routing-key")] == "meet"
    conn.close()


def test_a_stream_is_read_from_the_offset_its_filter_asks(broker):
    declare(broker, "log", **{"x-queue-type": "stream"})
    publish_091(broker, "log", [b"r%d" % i for i in range(5)])
    conn = proton(broker)
    spec = symbol("rabbitmq:stream-offset-spec")
    receiver = conn.create_receiver("/queues/log", credit=10, options=Filter({spec: ulong(3)}))
    got = [received(receiver) for _ in range(2)]
    first = conn.create_receiver("/queues/log", name="from-first", credit=10, options=Filter({spec: "first"}))
    from_first = [received(first) for _ in range(5)]
    conn.close()
    assert got == [b"r3", b"r4"]
    assert from_first == [b"r%d" % i for i in range(5)]


def test_a_1_0_and_a_0_9_1_consumer_take_turns_on_one_queue(broker):
    declare(broker, "shared")
    conn = proton(broker)
    receiver = conn.create_receiver("/queues/shared", credit=100)
    connection = pika_connection(broker)
    channel = connection.channel()
    channel.basic_qos(prefetch_count=100)
    got_091 = []
    channel.basic_consume("shared", lambda ch, method, props, body: got_091.append(method.delivery_tag), auto_ack=True)
    publish_091(broker, "shared", [b"x"] * 200)  # each dispatched as it comes: to the next consumer in turn
    deadline = time.monotonic() + 20
    while receiver.fetcher.has_message + len(got_091) < 200 and time.monotonic() < deadline:
        connection.process_data_events(time_limit=0.05)
        try:
            conn.wait(lambda: receiver.fetcher.has_message + len(got_091) >= 200, timeout=0.05)
        except Timeout:
            pass
    got_10 = receiver.fetcher.has_message
    assert got_10 + len(got_091) == 200
    assert 80 <= got_10 <= 120, (got_10, len(got_091))
    connection.close()
    conn.close()


def test_an_accepted_durable_message_is_there_after_a_sigkill(tmp_path):
    running = RunningBroker([os.path.join(os.path.dirname(sys.executable), "hutch"), "serve"], tmp_path).start()
    try:
        declare(running, "kept")
        conn = proton(running)
        sender = conn.create_sender("/queues/kept")
        for i in range(20):
            sender.send(data(b"d%d" % i, durable=True))  # each returns once accepted: on disk
        sigkill(running)
        running.start()
        wait_until(lambda: queue_depth(running, "kept") == 20, what="the 20 accepted messages after the restart")
    finally:
        running.stop()


def every_field(n):
    """A 1.0 message with every property and section a publisher sets (0-9-1 has no place for
    to, subject, absolute-expiry-time, group-sequence and reply-to-group-id)."""
    return Message(
        body=b"reading %d" % n, inferred=True, durable=True, priority=6, id="m-%d" % n,
        correlation_id=uuid.UUID("12345678-1234-5678-1234-567812345678"), user_id=b"guest",
        address="/queues/elsewhere", subject="temperature", reply_to="replies",
        content_type="application/json", content_encoding="utf-8", expiry_time=4102444800.0,
        creation_time=1700000000.0, group_id="greenhouse-3", group_sequence=n,
        reply_to_group_id="replies-3", properties={"sensor": "s-1", "n": n},
        annotations={symbol("x-custom"): "kept"},
    )  # fmt: skip


FIELDS = (
    "body", "durable", "priority", "id", "correlation_id", "user_id", "address", "subject", "reply_to",
    "content_type", "content_encoding", "expiry_time", "creation_time", "group_id", "group_sequence",
    "reply_to_group_id", "properties",
)  # fmt: skip


def fields_of(message):
    seen = {name: getattr(message, name) for name in FIELDS}
    seen["body"] = bytes(seen["body"])
    seen["x-custom"] = message.annotations[symbol("x-custom")]
    return seen


def test_a_1_0_message_keeps_every_field_through_paging_a_sigkill_and_a_stream(tmp_path):
    """Paged out (a queue window of 2), journalled and read back after a SIGKILL, appended to a
    stream: a 1.0 consumer gets the same fields as one served from memory."""
    config = tmp_path / "hutch.toml"
    config.write_text("[limits]\nqueue_window_messages = 2\n")
    running = RunningBroker([os.path.join(os.path.dirname(sys.executable), "hutch"), "serve", "--config", str(config)], tmp_path).start()  # fmt: skip
    try:
        declare(running, "fields")
        declare(running, "fields-log", **{"x-queue-type": "stream"})
        conn = proton(running)
        expected = [fields_of(every_field(n)) for n in range(6)]
        for queue in ("fields", "fields-log"):
            sender = conn.create_sender("/queues/" + queue)
            for n in range(6):
                sender.send(every_field(n))  # each returns once accepted: on disk
        receiver = conn.create_receiver("/queues/fields", name="from-memory", credit=1)
        first = receiver.receive(TIMEOUT)  # (served from memory: its own octets)
        receiver.release()
        assert fields_of(first) == expected[0]
        conn.close()
        sigkill(running)
        running.start()
        conn = proton(running)
        receiver = conn.create_receiver("/queues/fields", credit=10)
        after = []
        for _ in range(6):
            after.append(fields_of(receiver.receive(TIMEOUT)))
            receiver.accept()
        spec = symbol("rabbitmq:stream-offset-spec")
        log = conn.create_receiver("/queues/fields-log", name="log", credit=10, options=Filter({spec: "first"}))
        from_stream = []
        for _ in range(6):
            from_stream.append(fields_of(log.receive(TIMEOUT)))
            log.accept()
        conn.close()
        assert after == expected
        assert from_stream == expected
    finally:
        running.stop()


def test_hutch_ctl_lists_a_1_0_client_its_sessions_and_links(broker):
    declare(broker, "watched")
    conn = proton(broker)
    receiver = conn.create_receiver("/queues/watched", name="watcher", credit=7)

    def listed(kind, *columns):
        done = subprocess.run(
            [os.path.join(BIN, "hutch"), "ctl", "list", kind, *columns, "--json", "--data", broker.data],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    connections = listed("connections", "user", "protocol", "auth_mechanism", "channels")
    assert {"user": "guest", "protocol": "AMQP 1.0", "auth_mechanism": "PLAIN", "channels": 1} in connections
    assert [c["consumer_count"] for c in listed("channels", "consumer_count")] == [1]
    consumers = listed("consumers", "queue_name", "consumer_tag", "ack_required", "prefetch_count")
    assert consumers == [
        {"queue_name": "watched", "consumer_tag": "watcher", "ack_required": True, "prefetch_count": 7}
    ]
    receiver.close()
    conn.close()
