"""Request and reply with aio-pika over direct reply-to (amq.rabbitmq.reply-to).

    pip install aio-pika
    python examples/aio_pika_rpc.py [AMQP_URL] [COUNT]

AMQP_URL defaults to $AMQP_URL, else amqp://guest:guest@127.0.0.1:5672/. A server
consumes requests from the queue "rpc" and answers each to its reply_to; the client
consumes the pseudo-queue amq.rabbitmq.reply-to (no queue is declared for the replies:
the broker hands each reply straight to the requester's channel) and sends COUNT
(default 5) requests, each waiting for its answer.
"""

import asyncio
import os
import sys

import aio_pika

REPLY_TO = "amq.rabbitmq.reply-to"


async def main(url, count):
    connection = await aio_pika.connect(url)
    async with connection:
        # the server: squares the number in each request
        server_channel = await connection.channel()
        requests = await server_channel.declare_queue("rpc", auto_delete=True)

        async def serve(message):
            async with message.process():
                answer = str(int(message.body) ** 2).encode()
                reply = aio_pika.Message(answer, correlation_id=message.correlation_id)
                await server_channel.default_exchange.publish(reply, routing_key=message.reply_to)

        await requests.consume(serve)

        # the client: consume amq.rabbitmq.reply-to (no_ack) before the first request
        channel = await connection.channel()
        replies = await channel.declare_queue(REPLY_TO, passive=True)
        answers = asyncio.Queue()
        await replies.consume(answers.put, no_ack=True)
        for n in range(count):
            request = aio_pika.Message(str(n).encode(), reply_to=REPLY_TO, correlation_id=str(n))
            await channel.default_exchange.publish(request, routing_key="rpc")
            answer = await asyncio.wait_for(answers.get(), 10)
            assert answer.correlation_id == str(n)
            print("%d squared is %s (reply %s)" % (n, answer.body.decode(), answer.correlation_id))
    print("%d requests answered over %s" % (count, REPLY_TO))


if __name__ == "__main__":
    url = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    asyncio.run(asyncio.wait_for(main(url, count), 60))
