"""aiomqtt (asyncio) against hutch and against Debian's mosquitto (the oracle), MQTT 5: a
request/response over a response topic and correlation data, as an asyncio service answers
its sensors, and a QoS 1 subscriber iterating its messages, compared as the client sees them."""

import asyncio

import aiomqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties


async def scenario(host, port):
    async with aiomqtt.Client(host, port, username="guest", password="guest", identifier="aio-service",
                              protocol=aiomqtt.ProtocolVersion.V5) as service, \
            aiomqtt.Client(host, port, username="guest", password="guest", identifier="aio-sensor",
                           protocol=aiomqtt.ProtocolVersion.V5) as sensor:  # fmt: skip
        await service.subscribe("aio/ask/+", qos=1)
        await sensor.subscribe("aio/replies/sensor", qos=1)

        async def answer():
            answered = 0
            async for message in service.messages:
                props = Properties(PacketTypes.PUBLISH)
                props.CorrelationData = message.properties.CorrelationData
                reply = b"%d" % (int(message.payload) * 2)
                await service.publish(message.properties.ResponseTopic, reply, qos=1, properties=props)
                answered += 1
                if answered == 5:
                    return

        answering = asyncio.create_task(answer())
        replies = []
        for n in range(5):
            props = Properties(PacketTypes.PUBLISH)
            props.ResponseTopic = "aio/replies/sensor"
            props.CorrelationData = b"req-%d" % n
            await sensor.publish("aio/ask/double", b"%d" % n, qos=1, properties=props)
        async for message in sensor.messages:
            replies.append((str(message.topic), message.payload, message.properties.CorrelationData, message.qos))
            if len(replies) == 5:
                break
        await answering  # (each reply PUBACKed)
        return replies


def test_an_asyncio_service_answers_over_response_topics(mqtt_broker):
    replies = asyncio.run(asyncio.wait_for(scenario(mqtt_broker.host, mqtt_broker.port), 30))
    assert replies == [("aio/replies/sensor", b"%d" % (2 * n), b"req-%d" % n, 1) for n in range(5)], mqtt_broker.kind
