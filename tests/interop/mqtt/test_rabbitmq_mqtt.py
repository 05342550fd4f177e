"""The AMQP side of MQTT, hutch beside the run's RabbitMQ with its rabbitmq_mqtt plugin: the same
Paho publishes and subscriptions, and a pika client on each broker sees the same routing keys,
headers, delivery modes and session queues, and reaches the MQTT subscribers the same way."""

import pika
from mqtt_brokers import MqttBroker, Paho, start_hutch, stop


def amqp_side(mqtt, amqp_port):
    """What a pika client of the broker sees of MQTT: (deliveries of a queue bound to amq.topic
    with sensors.#, the session queues of a persistent MQTT session, what an AMQP publish
    gave an MQTT subscriber)."""
    amqp = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", amqp_port))
    channel = amqp.channel()
    channel.queue_declare("amqp-side", exclusive=True)
    channel.queue_bind("amqp-side", "amq.topic", "sensors.#")
    sensor = Paho(mqtt, "side-sensor").connect()
    sensor.publish("sensors/greenhouse-3/temp", b"21.5", 0)
    sensor.publish("sensors/greenhouse-3/rh", b"40", 1)
    sensor.publish("sensors/cold/store/temp", b"3.9", 2)
    seen = []
    for method, properties, body in channel.consume("amqp-side", auto_ack=True, inactivity_timeout=10):
        assert method is not None, "nothing delivered"
        headers = {k: v for k, v in (properties.headers or {}).items() if k.startswith("x-mqtt")}
        seen.append((method.exchange, method.routing_key, properties.delivery_mode, headers, body))
        if len(seen) == 3:
            break
    channel.cancel()

    session = Paho(mqtt, "side-session", clean=False).connect()
    session.subscribe("cmd/#", 0)
    session.subscribe("alarm/+/high", 1)
    queues = {}
    for qos in (0, 1):
        name = "mqtt-subscription-side-sessionqos%d" % qos
        declared = channel.queue_declare(name, passive=True)
        queues[name] = declared.method.message_count
    channel.basic_publish("amq.topic", "alarm.greenhouse-3.high", b"too hot")
    got = session.take(1)
    session.stop()
    cleaner = Paho(mqtt, "side-session").connect()  # (a clean session: its queues go)
    cleaner.stop()
    sensor.stop()
    amqp.close()
    return seen, queues, [(t, m, q) for t, m, q, _r, _p in got]


def test_the_amqp_side_of_mqtt_is_rabbitmq_s(rabbitmq, tmp_path):
    hutch = start_hutch(tmp_path)
    try:
        ours = amqp_side(hutch, hutch.running.port)
    finally:
        stop(hutch)
    theirs = amqp_side(MqttBroker("rabbitmq", rabbitmq.mqtt_port), rabbitmq.port)
    # but for one header: a QoS 2 publish says 2 at hutch, which delivers QoS 2, and 1 at
    # RabbitMQ, which takes QoS 2 as 1
    assert ours[0][2][3]["x-mqtt-publish-qos"] == 2 and theirs[0][2][3]["x-mqtt-publish-qos"] == 1
    ours[0][2][3]["x-mqtt-publish-qos"] = 1
    assert ours == theirs
    seen, queues, got = ours
    assert seen == [
        ("amq.topic", "sensors.greenhouse-3.temp", 1, {"x-mqtt-publish-qos": 0, "x-mqtt-dup": False}, b"21.5"),
        ("amq.topic", "sensors.greenhouse-3.rh", 2, {"x-mqtt-publish-qos": 1, "x-mqtt-dup": False}, b"40"),
        ("amq.topic", "sensors.cold.store.temp", 2, {"x-mqtt-publish-qos": 1, "x-mqtt-dup": False}, b"3.9"),
    ]
