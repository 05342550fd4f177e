"""Retained messages: the last message published with RETAIN to each topic, given to every later
subscription whose filter matches it, wildcards included (MQTT 3.3.1.3).

Each is kept in a durable queue of its own, `mqtt-retained.<routing key>` (mqtt/topics.py's
key), holding one message (x-max-length 1, drop-head: a new one replaces it), persistent
whatever its QoS: so the journal keeps it through a restart as it keeps any queue's message,
and a QoS 1 PUBLISH with RETAIN is acknowledged once it is on disk there too. A retained
PUBLISH with an empty payload deletes that queue (it is delivered to current subscribers,
and not kept). The queues are the broker's own (no user's permission is asked for them) and
`hutch ctl list queues` shows them.
"""

from . import own_queues
from .topics import matches, topic_of

PREFIX = b"mqtt-retained."


def queue_name(key):
    """The queue that keeps the retained message of routing key `key` (None: its name would be
    longer than a queue name may be)."""
    name = PREFIX + key
    return name if len(name) <= 255 else None


def retain(broker, key, properties, payload):
    """Keep payload (with the stored form's properties of its publish) as the retained message of
    routing key `key`, or forget it (an empty payload). Returns the journal sequence number its
    acknowledgement waits for (0: none), or None when the topic is too long to keep."""
    name = queue_name(key)
    if name is None:
        return None
    if not payload:
        own_queues.drop(broker, (name,))
        return 0
    own_queues.queue(broker, name, {"x-max-length": 1, "x-overflow": "drop-head"})
    return own_queues.put(broker, name, properties, payload)  # (persistent: kept through a restart, whatever its QoS)


def matching(broker, topic_filter):
    """(topic, message, when it expires or None) of each retained message whose topic the filter
    matches: as live routing
    matches it (the filter's levels split at its dots too, as its binding key is)."""
    found = []
    topic_filter = topic_of(topic_filter)
    for name, queue in broker.queues.items():
        if not name.startswith(PREFIX):
            continue
        topic = topic_of(name[len(PREFIX) :])
        if not matches(topic_filter, topic):
            continue
        if not queue.messages.length and queue.paged:
            queue.page_in()  # (just after a restart its message may still be on disk)
        if queue.messages.length:
            entry = queue.messages.peek()  # (message, redelivered, expires_at)
            found.append((topic, entry[0], entry[2]))
    return found
