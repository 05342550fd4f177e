"""Dead-lettering: a message that leaves a queue undelivered goes to the queue's
dead-letter exchange, as RabbitMQ does it.

Why it left (the reason): rejected (basic.reject/nack without requeue), expired (a TTL),
maxlen (x-max-length/x-max-length-bytes, or x-overflow reject-publish-dlx). The dead
letter is a new message: the same body, the routing key of x-dead-letter-routing-key or
its own, and an x-death header entry per (queue, reason) that counts its deaths, plus
x-first-death-*; it is published through Broker.publish like any other.
"""

from .message import Message
from .wire import Timestamp, encode_properties, shortstr, tail


def dead_letter(broker, queue, message, reason):
    """Republish a message dropped from queue to the queue's dead-letter exchange, with x-death."""
    exchange = broker.exchange(queue.dead_letter_exchange)
    if exchange is None:
        return  # RabbitMQ drops it too when the DLX is missing
    routing_key = queue.dead_letter_routing_key
    if routing_key is None:
        routing_key = message.routing_key
    props = dict(message.properties())
    headers = dict(props.get("headers") or {})
    deaths = list(headers.get("x-death") or [])
    for death in deaths:
        if isinstance(death, dict) and death.get("queue") == queue.name and death.get("reason") == reason:
            death["count"] = death.get("count", 0) + 1
            deaths.remove(death)
            deaths.insert(0, death)
            break
    else:
        deaths.insert(
            0,
            {
                "count": 1,
                "reason": reason,
                "queue": queue.name,
                "time": Timestamp(broker.wall_seconds),
                "exchange": message.exchange,
                "routing-keys": [message.routing_key],
            },
        )
    headers["x-death"] = deaths
    for key, value in (
        ("x-first-death-reason", reason),
        ("x-first-death-queue", queue.name),
        ("x-first-death-exchange", message.exchange),
    ):
        if key not in headers:
            headers[key] = value
    props["headers"] = headers
    if reason == b"expired":
        props.pop("expiration", None)  # per-message TTL does not follow the message (RabbitMQ)
    header = bytes(message.header()[:12]) + encode_properties(props)
    route = shortstr(exchange.name) + shortstr(routing_key)
    dead = Message(exchange.name, routing_key, route, tail(header), message.body_tail, message.body_size)
    # A cycle back to a queue the message already died in, with no client rejection
    # in between, would spin forever: RabbitMQ drops it, and so do we.
    visited = [d.get("queue") for d in deaths if isinstance(d, dict)] if reason != b"rejected" else None
    broker.publish(exchange, dead, None, visited)
