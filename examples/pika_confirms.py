"""Publish with confirms and consume with acks, with pika, against hutch (or any AMQP 0-9-1 broker).

    pip install pika
    python examples/pika_confirms.py [AMQP_URL] [COUNT]

AMQP_URL defaults to $AMQP_URL, else amqp://guest:guest@127.0.0.1:5672/ (guest logs in
from this machine only). It declares a durable queue, publishes COUNT (default 10)
persistent messages in confirm mode (each publish returns once the broker has it on
disk), then consumes them back, acks each one, and deletes the queue.
"""

import os
import sys

import pika

url = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
count = int(sys.argv[2]) if len(sys.argv) > 2 else 10

connection = pika.BlockingConnection(pika.URLParameters(url))
channel = connection.channel()
channel.queue_declare("hello", durable=True)
channel.confirm_delivery()  # basic_publish now waits for the broker's ack
for i in range(count):
    body = ("reading %d" % i).encode()
    channel.basic_publish("", "hello", body, pika.BasicProperties(delivery_mode=2))  # 2: persistent
print("published %d messages, each confirmed" % count)

received = []
for method, _properties, body in channel.consume("hello", inactivity_timeout=5):
    if method is None:  # nothing for 5 s
        break
    received.append(body)
    channel.basic_ack(method.delivery_tag)
    if len(received) == count:
        break
channel.cancel()
print("consumed %d messages: %s ... %s" % (len(received), received[0].decode(), received[-1].decode()))
channel.queue_delete("hello")
connection.close()
sys.exit(0 if len(received) == count else 1)
