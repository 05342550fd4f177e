"""AMQP 1.0 clients on hutch's port, with rhea (Node), a real 1.0 client: it sends to RabbitMQ
4's addresses and a pika consumer reads what it sent; the outcomes are RabbitMQ 4's (accepted,
released when no queue takes it); a missing queue or exchange and an address that is not one
end that link alone (the next sender on the same connection goes on); a wrong password is
refused at SASL."""

import json
import os
import shutil
import subprocess

import pika
import pytest
from brokers import pika_connection
from paths import NODE_DIR

NODE = shutil.which("node")


def rhea_send(broker, *plan, user="guest", password="guest", to_queue=""):
    done = subprocess.run(
        [NODE, os.path.join(NODE_DIR, "amqp10_send.js"), str(broker.port), user, password, *plan],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=NODE_DIR,
        env=dict(os.environ, TO_QUEUE=to_queue),
    )
    return [json.loads(line) for line in done.stdout.splitlines()], done


def test_a_1_0_sender_reaches_0_9_1_consumers_with_rabbitmq_4_s_outcomes(broker):
    connection = pika_connection(broker)
    channel = connection.channel()
    channel.queue_declare("readings", durable=True)
    channel.queue_bind("readings", "amq.direct", "site-7")
    said, done = rhea_send(
        broker,
        "/queues/nope:1",
        "/queues/readings:2",
        "/exchanges/amq.direct/site-7:1",
        "/exchanges/amq.direct/nobody:1",
        "null:1",
        "/exchanges/nope/x:1",
        "bad-address:1",
        to_queue="readings",
    )
    assert said == [
        {
            "address": "/queues/nope",
            "link_error": {"condition": "amqp:not-found", "description": "no queue 'nope' in vhost '/'"},
        },
        {"address": "/queues/readings", "outcomes": ["accepted", "accepted"]},
        {"address": "/exchanges/amq.direct/site-7", "outcomes": ["accepted"]},
        {"address": "/exchanges/amq.direct/nobody", "outcomes": ["released"]},
        {"address": "null", "outcomes": ["accepted"]},
        {
            "address": "/exchanges/nope/x",
            "link_error": {"condition": "amqp:not-found", "description": "no exchange 'nope' in vhost '/'"},
        },
        {
            "address": "bad-address",
            "link_error": {
                "condition": "amqp:invalid-field",
                "description": "address 'bad-address' is not /queues/NAME or /exchanges/NAME[/KEY]",
            },
        },
    ], done.stderr
    got = []
    for _ in range(4):
        method, properties, body = channel.basic_get("readings", auto_ack=True)
        got.append((body, properties.delivery_mode, properties.headers))
    assert got == [
        (b"/queues/readings #0", 2, {"n": 0}),
        (b"/queues/readings #1", 2, {"n": 1}),
        (b"/exchanges/amq.direct/site-7 #0", 2, {"n": 0}),
        (b"null #0", 2, {"n": 0, "x-amqp10-to": "/queues/readings"}),  # (its `to`, kept: docs/amqp10.md)
    ]
    assert channel.basic_get("readings", auto_ack=True)[0] is None
    connection.close()
    assert "AMQP 1.0 connection open (user 'guest')" in broker.log()


def test_a_wrong_password_is_refused_at_sasl(broker):
    said, done = rhea_send(broker, "/queues/x:1", password="wrong")
    assert said and "connection_error" in said[0], (said, done.stderr)
    assert "AMQP 1.0 PLAIN login refused: user 'guest' - invalid credentials" in broker.log()
    pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port)).close()  # the port goes on


def test_a_publish_the_user_may_not_make_is_rejected_with_the_reason(tmp_path):
    from brokers import BIN, RunningBroker

    definitions = tmp_path / "definitions.json"
    definitions.write_text(
        json.dumps(
            {
                "users": [{"name": "sensor", "password": "s-pw", "tags": []}],
                "permissions": [
                    {"user": "sensor", "vhost": "/", "configure": "", "write": "^amq\\.topic$", "read": ""}
                ],
                "queues": [{"name": "readings", "vhost": "/", "durable": True, "auto_delete": False, "arguments": {}}],
            }
        )
    )
    broker = RunningBroker([os.path.join(BIN, "hutch"), "serve", "--definitions", str(definitions)], tmp_path).start()
    try:
        said, done = rhea_send(
            broker, "/queues/readings:1", "/exchanges/amq.topic/site.7:1", user="sensor", password="s-pw"
        )
        assert said == [
            {
                "address": "/queues/readings",
                "outcomes": [
                    {
                        "rejected": {
                            "condition": "amqp:unauthorized-access",
                            "description": "access to exchange 'amq.default' in vhost '/' refused for user 'sensor'",
                        }
                    }
                ],
            },
            {"address": "/exchanges/amq.topic/site.7", "outcomes": ["released"]},  # allowed, no queue bound
        ], done.stderr
    finally:
        broker.stop()


def rhea_receive(broker, address, count, mode=""):
    done = subprocess.run(
        [
            NODE,
            os.path.join(NODE_DIR, "amqp10_receive.js"),
            str(broker.port),
            "guest",
            "guest",
            address,
            str(count),
            mode,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=NODE_DIR,
    )
    return json.loads(done.stdout.splitlines()[0]) if done.stdout else None, done


def test_a_1_0_receiver_reads_what_0_9_1_publishers_sent(broker):
    """Credit, accepted as an ack, released as a requeue (it comes again, its delivery-count
    1), the 0-9-1 properties as 1.0 sections (type as the annotation x-basic-type, as RabbitMQ 4
    converts it); a missing queue is a link error."""
    connection = pika_connection(broker)
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare("commands", durable=True)
    for n in range(3):
        properties = pika.BasicProperties(
            delivery_mode=2, content_type="text/plain", message_id="m%d" % n, type="set-point", headers={"n": n}
        )
        channel.basic_publish("", "commands", b"heat %d" % n, properties)
    got, done = rhea_receive(broker, "/queues/commands", 3, "release-first")
    assert got == [
        {"body": "heat %d" % n, "durable": True, "delivery_count": count, "application_properties": {"n": n},
         "message_id": "m%d" % n, "content_type": "text/plain", "subject": None, "basic_type": "set-point"}
        for n, count in ((1, 0), (2, 0), (0, 1))
    ], done.stderr  # fmt: skip
    assert channel.queue_declare("commands", passive=True).method.message_count == 0  # each accepted: acked
    missing, done = rhea_receive(broker, "/queues/nope", 1)
    assert missing == {"link_error": {"condition": "amqp:not-found", "description": "no queue 'nope' in vhost '/'"}}
    connection.close()


def rhea_flow(broker, mode, *args):
    done = subprocess.run(
        [NODE, os.path.join(NODE_DIR, "amqp10_flow.js"), str(broker.port), mode, *[str(a) for a in args]],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=NODE_DIR,
    )
    assert done.stdout, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def publish_091(broker, queue, bodies, **arguments):
    connection = pika_connection(broker)
    channel = connection.channel()
    channel.queue_declare(queue, durable=True, arguments=arguments or None)
    channel.confirm_delivery()
    for body in bodies:
        channel.basic_publish("", queue, body)
    connection.close()


def test_rhea_s_drain_is_answered_when_the_queue_runs_dry(broker):
    publish_091(broker, "q", [b"m%d" % i for i in range(5)])
    assert rhea_flow(broker, "drain", "q") == {"got": ["m%d" % i for i in range(5)], "drained": True, "credit": 0}


def test_rhea_s_settled_receiver_gets_pre_settled_deliveries(broker):
    publish_091(broker, "q", [b"a", b"b"])
    said = rhea_flow(broker, "settled", "q", 2)
    assert said == {"got": [{"body": "a", "settled": True}, {"body": "b", "settled": True}], "snd_settle_mode": 1}


def test_rhea_s_outcomes_settle_as_rabbitmq_4_settles_them(broker):
    connection = pika_connection(broker)
    channel = connection.channel()
    channel.queue_declare("dead", durable=True)
    connection.close()
    publish_091(
        broker, "work", [b"accept", b"reject", b"release", b"modify-failed", b"modify-undeliverable"],
        **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"},
    )  # fmt: skip
    said = rhea_flow(broker, "outcomes", "work")
    assert sorted(said["again"], key=lambda m: m["body"]) == [
        {"body": "modify-failed", "delivery_count": 1},
        {"body": "release", "delivery_count": 1},
    ]
    connection = pika_connection(broker)
    channel = connection.channel()
    dead = sorted(channel.basic_get("dead", auto_ack=True)[2] for _ in range(2))
    assert dead == [b"modify-undeliverable", b"reject"]
    assert channel.queue_declare("work", passive=True).method.message_count == 0
    connection.close()


@pytest.mark.parametrize("frame_size", [512, 1024, 16384, 131072])
def test_rhea_s_large_messages_in_frames_of_its_size(broker, frame_size):
    publish_091(broker, "big", [])
    # (600 KiB: in 512-octet frames, within the 2,048 frames of rhea's session window, which it
    # does not open again while a delivery comes in parts)
    sizes = [frame_size - 200, frame_size * 2 + 17, 600 * 1024]
    said = rhea_flow(broker, "frames", "big", frame_size, *sizes)
    assert said == {"got": [{"size": size, "intact": True} for size in sizes], "max_frame_size": 131072}
