"""kombu (with py-amqp, the transport Celery uses) against hutch: a queue, JSON in and out.

    pip install kombu
    python examples/kombu_queue.py [AMQP_URL]

AMQP_URL defaults to $AMQP_URL, else amqp://guest:guest@127.0.0.1:5672//. It puts three
readings on a durable queue through a topic exchange (persistent, with publisher confirms)
and reads them back with SimpleQueue.
"""

import os
import sys

from kombu import Connection, Exchange, Queue

url = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
sensors = Exchange("sensors", type="topic", durable=True)
readings = Queue("kombu-readings", sensors, routing_key="greenhouse.#", durable=True)

with Connection(url, transport_options={"confirm_publish": True}) as connection:
    producer = connection.Producer()
    for n, value in enumerate((21.5, 21.7, 22.0)):
        producer.publish(
            {"sensor": "greenhouse-1", "n": n, "value": value},
            exchange=sensors,
            routing_key="greenhouse.1.temperature",
            declare=[readings],
            serializer="json",
            delivery_mode=2,
        )
    print("published 3 readings to exchange sensors, confirmed")
    queue = connection.SimpleQueue(readings)
    for _ in range(3):
        message = queue.get(timeout=5)
        print("got", message.payload)
        message.ack()
    queue.close()
    readings(connection.default_channel).delete()
