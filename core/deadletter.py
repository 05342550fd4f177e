"""Dead-lettering: a message that leaves a queue undelivered goes to the queue's
dead-letter exchange, as RabbitMQ does it.

Why it left (the reason): rejected (basic.reject/nack without requeue), expired (a TTL),
maxlen (x-max-length/x-max-length-bytes, or x-overflow reject-publish-dlx). The dead
letter is a new message, published through Broker.publish like any other: the same body and
properties, but
- the expiration property is gone (it would expire again wherever it goes), and the x-death
  entry keeps it as original-expiration, whatever the reason;
- x-death, an array with an entry per (queue, reason): count, reason, queue, time, exchange,
  routing-keys (the routing key and the CC keys), original-expiration; an entry already there
  for the same queue and reason counts one more death and moves first, its other fields as
  they were (RabbitMQ 3.10's rabbit_dead_letter);
- x-first-death-reason, -queue and -exchange, set with the first x-death entry;
- x-last-death-reason, -queue and -exchange: those of x-death's first entry, after every
  death (RabbitMQ 3.13 and 4.x; 3.10 does not add them);
- routed with x-dead-letter-routing-key, when the queue has one (then without its CC header),
  else with its own routing key, CC and BCC keys.
Every other header stays byte for byte (core/headers.py edits the encoded table).

A message that would come back to a queue where it died, with no client rejection since,
would go round for ever: it does not go to that queue (RabbitMQ's cycle check).
"""

import struct

from ..codec.wire import Timestamp, encode_table, shortstr
from . import counters
from .message import Message

REJECTED = b"rejected"
_FIRST = ("x-first-death-reason", "x-first-death-queue", "x-first-death-exchange")
_LAST = ("x-last-death-reason", "x-last-death-queue", "x-last-death-exchange")


def dead_letter(broker, queue, message, reason):
    """Republish a message dropped from queue to the queue's dead-letter exchange, with x-death."""
    exchange = broker.exchange(queue.dead_letter_exchange)
    if exchange is None:
        return  # RabbitMQ drops it too when the DLX is missing
    stats = broker.stats
    stats[counters.DEAD_LETTERED] += 1
    if reason == b"expired":
        stats[counters.DEAD_LETTERED_EXPIRED] += 1
    elif reason == b"maxlen":
        stats[counters.DEAD_LETTERED_MAXLEN] += 1
    from . import headers as encoded  # loaded with the first dead letter: an idle board keeps its heap

    props = message.properties()
    headers = props.get("headers") or {}
    cc = encoded.routes(message.header_tail, b"CC")[1] if headers else []
    death = {
        "count": 1,
        "reason": reason,
        "queue": queue.name,
        "time": Timestamp(broker.wall_seconds),
        "exchange": message.exchange,
        "routing-keys": [message.routing_key] + cc,
    }
    expiration = props.get("expiration")
    if expiration is not None:
        death["original-expiration"] = expiration
    deaths = headers.get("x-death")
    first = deaths is None
    if isinstance(deaths, list):
        deaths = list(deaths)
        for i in range(len(deaths)):
            old = deaths[i]
            if isinstance(old, dict) and old.get("queue") == queue.name and old.get("reason") == reason:
                death = dict(old)
                count = old.get("count")
                death["count"] = count + 1 if isinstance(count, int) and count > 0 else 1
                del deaths[i]
                break
        deaths.insert(0, death)
    else:
        deaths = [death]  # none yet, or not an array (a client rewrote it): RabbitMQ starts again
    entries = [shortstr(b"x-death") + _array(deaths)]
    keys = [b"x-death"]
    facts = (reason, queue.name, death.get("exchange"))
    if first:
        entries.append(encode_table(dict(zip(_FIRST, facts)))[4:])
        keys += [key.encode() for key in _FIRST]
    entries.append(encode_table(dict(zip(_LAST, facts)))[4:])
    keys += [key.encode() for key in _LAST]
    routing_key = queue.dead_letter_routing_key
    also = None
    if routing_key is None:
        routing_key = message.routing_key
        also = message.cc if message.cc is not None else cc or None  # CC and BCC keys, as published
    else:
        keys.append(b"CC")  # routed by the queue's key alone: CC would misstate where it went
    header_tail = encoded.with_entries(message.header_tail, b"".join(entries), keys, drop_expiration=True)
    route = shortstr(exchange.name) + shortstr(routing_key)
    dead = Message(exchange.name, routing_key, route, header_tail, message.body_tail, message.body_size)
    dead.cc = also
    broker.publish(exchange, dead, None, cycle(deaths))


def cycle(deaths):
    """The queues the dead letter must not go to (RabbitMQ's is_cycle): each queue it died in
    where every death since, that one included, was automatic (not rejected by a client)."""
    out = []
    for death in deaths:  # the latest first
        if not isinstance(death, dict) or death.get("reason") == REJECTED:
            return out  # a client had its say: any cycle from here on is its choice
        out.append(death.get("queue"))
    return out


def _array(deaths):
    """x-death's value, encoded: an array of tables, count as a 64-bit long as RabbitMQ has it."""
    items = []
    for death in deaths:
        if isinstance(death, dict):
            payload = b"".join(_entry(key, death[key]) for key in death)
            items.append(b"F" + struct.pack(">I", len(payload)) + payload)
        else:
            items.append(encode_table({"v": death})[6:])  # kept as it was (tag and value)
    payload = b"".join(items)
    return b"A" + struct.pack(">I", len(payload)) + payload


def _entry(key, value):
    if key == "count" and isinstance(value, int) and not isinstance(value, bool):
        return shortstr(b"count") + b"l" + struct.pack(">q", value)
    return encode_table({key: value})[4:]
