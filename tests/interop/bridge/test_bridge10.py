"""Bridges that forward over AMQP 1.0 (amqp10:// URIs): to the run's RabbitMQ 3.10.8 through
its rabbitmq_amqp1_0 plugin (v1 addresses), to another hutch (RabbitMQ 4's v2 addresses), and
to a server written here in Azure IoT Hub's shape (TLS, SASL PLAIN with a SAS token, or $cbs).

pika publishes with confirms at the edge; what arrives upstream is read with pika too
(RabbitMQ, hutch) or collected by the test's server. The faults are real: a TCP proxy that
cuts, resets and black-holes the link (tests/support/tcp_proxy.py).
"""

import os

import pytest
from bridging import (
    consume_all,
    edge_with_bridge,
    publish_confirmed,
    upstream_queue,
)
from brokers import BIN, RunningBroker, failed_attempts, fresh_status, wait_until

pytestmark = [pytest.mark.timeout(240)]


def rabbitmq_url(rabbitmq):
    return "amqp://guest:guest@127.0.0.1:%d/" % rabbitmq.port


# ---------------------------------------------------------------- RabbitMQ 3.10.8's plugin


def test_a_1_0_bridge_forwards_to_rabbitmq_3_10_through_its_v1_addresses(tmp_path, rabbitmq):
    """The plugin takes RabbitMQ 3.x's v1 addresses (`address`); properties arrive as its
    conversion makes them (the body as it was, persistent, the content type)."""
    import pika

    upstream = rabbitmq_url(rabbitmq)
    connection = pika.BlockingConnection(pika.URLParameters(upstream))
    channel = connection.channel()
    channel.exchange_declare("sensors10", "topic", durable=True)
    channel.queue_declare("bridged10", durable=True)
    channel.queue_purge("bridged10")
    channel.queue_bind("bridged10", "sensors10", "site.#")
    connection.close()
    edge = edge_with_bridge(
        tmp_path,
        {
            "name": "up10",
            "uri": "amqp10://guest:guest@127.0.0.1:%d" % rabbitmq.port,
            "queue": "readings10",
            "address": "/exchange/sensors10/site.7",
            "prefetch": 200,
        },
    )
    try:
        bodies = [b"reading-%05d" % i + b"x" * (i % 300) for i in range(3000)]
        publish_confirmed(edge, "readings10", bodies)
        got = consume_all(upstream, "bridged10", len(bodies))
        assert [body for body, _h, _m in got] == bodies
        assert {mode for _b, _h, mode in got} == {2}, "persistent"
        wait_until(lambda: "bridge up10: running (upstream amqp10://guest:***@127.0.0.1" in edge.log(), timeout=10)
        wait_until(lambda: _backlog_empty(edge), timeout=30, what="every message settled at the edge")
    finally:
        edge.stop()
    assert not edge.errors(), edge.log()[-3000:]


def _backlog_empty(edge):
    bridge = fresh_status(edge)["bridges"][0]
    return bridge["backlog"] == 0 and bridge["in_flight"] == 0


def test_a_v2_address_refused_by_rabbitmq_3_10_is_logged_and_retried_with_nothing_lost(tmp_path, rabbitmq):
    """RabbitMQ 3.10 knows no v2 address: it ends the session (invalid-field), the bridge says
    so and backs off; the messages wait at the edge."""
    edge = edge_with_bridge(
        tmp_path,
        {
            "name": "v2at310",
            "uri": "amqp10://guest:guest@127.0.0.1:%d" % rabbitmq.port,
            "queue": "waiting10",
            "exchange": "amq.topic",
            "routing_key": "x",
            "reconnect_delay": 0.2,
        },
    )
    try:
        publish_confirmed(edge, "waiting10", [b"kept-%d" % i for i in range(20)])
        wait_until(lambda: failed_attempts(edge, "v2at310") >= 2, timeout=30, what="two attempts")
        log = edge.log()
        assert "upstream ended the session: amqp:invalid-field" in log, log[-3000:]
        assert "/exchanges/amq.topic/x" in log
        status = fresh_status(edge)["bridges"][0]
        assert status["backlog"] == 20 and status["forwarded"] == 0
    finally:
        edge.stop()


def test_rabbitmq_3_10_accepts_over_1_0_what_it_cannot_route(tmp_path, rabbitmq):
    """What docs/bridges.md warns of: RabbitMQ 3.10's plugin says `accepted` for a message its
    exchange routes nowhere (RabbitMQ 4 and hutch say `released`, and the bridge keeps it), so
    the edge lets it go and it is gone. `/amq/queue/Q` checks the queue exists instead."""
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(rabbitmq_url(rabbitmq)))
    connection.channel().exchange_declare("nowhere10", "direct", durable=True)
    connection.close()
    edge = edge_with_bridge(
        tmp_path,
        {
            "name": "lost10",
            "uri": "amqp10://guest:guest@127.0.0.1:%d" % rabbitmq.port,
            "queue": "unroutable10",
            "address": "/exchange/nowhere10/nobody",
        },
    )
    try:
        publish_confirmed(edge, "unroutable10", [b"gone-%d" % i for i in range(10)])
        wait_until(lambda: fresh_status(edge)["bridges"][0]["forwarded"] == 10, timeout=30, what="10 accepted")
        assert "refused" not in edge.log()
    finally:
        edge.stop()


# ---------------------------------------------------------------- hutch to hutch over 1.0


def hutch_upstream(tmp_path, queue="central"):
    folder = tmp_path / "up"
    folder.mkdir()
    upstream = RunningBroker([os.path.join(BIN, "hutch"), "serve"], folder).start()
    upstream_queue(upstream.url, queue)
    return upstream


def test_without_a_target_each_message_goes_where_its_own_exchange_and_routing_key_say(tmp_path):
    """No address, exchange or routing_key: a null target, and each message's `to` is the v2
    address of its own exchange and routing key."""
    import pika

    upstream = hutch_upstream(tmp_path, "kept-name")
    connection = pika.BlockingConnection(pika.URLParameters(upstream.url))
    channel = connection.channel()
    channel.queue_declare("by-topic", durable=True)
    channel.queue_bind("by-topic", "amq.topic", "site.*")
    connection.close()
    edge_folder = tmp_path / "edge"
    edge_folder.mkdir()
    config = edge_folder / "hutch.toml"
    config.write_text(
        '[[bridge]]\nname = "own"\nuri = "amqp10://guest:guest@127.0.0.1:%d"\nsource_exchange = "amq.topic"\n'
        'binding_key = "#"\n' % upstream.port
    )
    edge = RunningBroker([os.path.join(BIN, "hutch"), "serve", "--config", str(config)], edge_folder).start()
    try:
        connection = pika.BlockingConnection(pika.URLParameters(edge.url))
        channel = connection.channel()
        channel.confirm_delivery()
        for i in range(50):
            channel.basic_publish("amq.topic", "site.%d" % (i % 3), b"t%02d" % i)
        connection.close()
        got = consume_all(upstream.url, "by-topic", 50)
        assert [body for body, _h, _m in got] == [b"t%02d" % i for i in range(50)]
    finally:
        edge.stop()
        upstream.stop()
    assert not edge.errors(), edge.log()[-3000:]


# ---------------------------------------------------------------- the config's keys

KEY = "a2tra2tra2tra2tra2tra2tra2tra2tra2tra2tra2s="


def one_bridge(**table):
    from hutch.server.bridges.config import bridges_from

    table.setdefault("name", "b")
    table.setdefault("queue", "q")
    return bridges_from({"bridge": [table]}, "hutch.toml")[0]


def test_1_0_uris_and_keys_read_as_their_defaults_say():
    bridge = one_bridge(uri=["amqps10://edge:pw@central:5999?heartbeat=10", "amqps10://backup"])
    assert bridge["protocol"] == "1.0" and [u["protocol"] for u in bridge["uris"]] == ["1.0", "1.0"]
    first, second = bridge["uris"]
    assert (first["tls"], first["port"], first["user"], first["heartbeat"]) == (True, 5999, "edge", 10)
    assert second["port"] == 5671 and first["uri"] == "amqps10://edge:***@central:5999?heartbeat=10"
    assert (bridge["address"], bridge["sas_key"], bridge["cbs"]) == (None, None, False)
    assert one_bridge(uri="amqp://central", protocol="1.0")["uris"][0]["protocol"] == "1.0"
    assert one_bridge(uri="amqp://central")["protocol"] == "0-9-1"
    assert one_bridge(uri="amqp10://central/")["uris"][0]["port"] == 5672
    iot = one_bridge(uri="amqps10://hub.azure-devices.net", device_id="d-1", sas_key=KEY)
    assert iot["address"] == "/devices/d-1/messages/events" and iot["token_lifetime"] == 3600
    assert one_bridge(uri="amqp10://h", address="/amq/queue/q")["address"] == "/amq/queue/q"


@pytest.mark.parametrize(
    "table, words",
    [
        ({"uri": "amqp://h", "protocol": "1.1"}, 'protocol must be "0-9-1" or "1.0", not \'1.1\''),
        ({"uri": "amqp10://h", "protocol": "0-9-1"}, 'protocol = "0-9-1", but a uri is AMQP 1.0'),
        ({"uri": ["amqp10://h", "amqp://g"]}, "all its URIs must speak one protocol"),
        ({"uri": "amqp://h", "address": "/queues/q"}, "address is for links over AMQP 1.0"),
        ({"uri": "amqp://h", "cbs": True}, "cbs is for links over AMQP 1.0"),
        ({"uri": "amqp10://h/sensors"}, "names a vhost: an AMQP 1.0 link has none"),
        ({"uri": "amqp://h/?auth_mechanism=anonymous"}, "auth_mechanism=anonymous in 'amqp://h/?auth_mechanism=anonymous' is AMQP 1.0's only"),
        ({"uri": "amqp10://h", "direction": "down"}, "a down bridge speaks AMQP 0-9-1 or MQTT, not AMQP 1.0"),
        ({"uri": "amqp10://h", "declare": {"queue": "x"}}, "declare is for links over AMQP 0-9-1 (amqp:// or amqps://); this bridge speaks AMQP 1.0"),
        ({"uri": "amqp10://h", "address": "/queues/q", "routing_key": "k"}, "address or exchange/routing_key, not both"),
        ({"uri": "amqp10://h", "address": ""}, "address must name a target"),
        ({"uri": "amqp10://h", "address": 7}, "address must be a string, not 7"),
        ({"uri": "amqps10://h", "device_id": "d"}, "device_id and sas_key go together"),
        ({"uri": "amqps10://h", "device_id": "d", "sas_key": "not base64!"}, "sas_key must be the device's key in base64"),
        ({"uri": "amqp10://h", "device_id": "d", "sas_key": KEY}, "a SAS token goes over TLS only (amqps10://)"),
        ({"uri": "amqps10://u:p@h", "device_id": "d", "sas_key": KEY}, "names a user: with device_id and sas_key"),
        ({"uri": "amqps10://h", "token_lifetime": 600}, "token_lifetime needs sas_key"),
        ({"uri": "amqps10://h", "device_id": "d", "sas_key": KEY, "token_lifetime": 5}, "token_lifetime must be a whole number from 10"),
        ({"uri": "amqps10://h", "device_id": "d", "sas_key": KEY, "cbs": "yes"}, "cbs must be true or false, not 'yes'"),
        ({"uri": "http10://h"}, "is not an amqp://, amqps://, amqp10://, amqps10://, mqtt:// or mqtts:// URI"),
    ],
)  # fmt: skip
def test_each_mistake_in_a_1_0_bridge_is_one_error_naming_the_bridge_and_the_key(table, words):
    from hutch.server.config import ConfigError

    with pytest.raises(ConfigError) as raised:
        one_bridge(**table)
    message = str(raised.value)
    assert message.startswith("hutch.toml: bridge 'b'") and words in message, message


def test_a_wrong_1_0_bridge_stops_hutch_serve_with_one_line_and_exit_code_2(tmp_path):
    import subprocess

    config = tmp_path / "hutch.toml"
    config.write_text(
        '[[bridge]]\nname = "iot"\nuri = "amqp10://hub"\nqueue = "q"\ndevice_id = "d"\nsas_key = "%s"\n' % KEY
    )
    done = subprocess.run(
        [os.path.join(BIN, "hutch"), "serve", "--config", str(config), "--port", "0", "--data", str(tmp_path / "d")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        "hutch: %s: bridge 'iot': 'amqp10://hub': a SAS token goes over TLS only (amqps10://)" % config
    ), done.stderr
