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
        (b"null #0", 2, {"n": 0}),
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
                            "description": "ACCESS_REFUSED - access to exchange 'amq.default' in vhost '/' refused for user 'sensor'",
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
    assert missing == {
        "link_error": {"condition": "amqp:not-found", "description": "NOT_FOUND - no queue 'nope' in vhost '/'"}
    }
    connection.close()
