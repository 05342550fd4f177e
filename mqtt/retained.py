"""Retained messages: the last message published with RETAIN to each topic, given to every later
subscription whose filter matches it, wildcards included (MQTT 3.3.1.3).

Each is kept in a durable queue of its own, `mqtt-retained.<topic>` (the topic as published,
so `v1.2/x` and `v1/2/x` keep one each), holding one message (x-max-length 1, drop-head: a new one replaces it), persistent
whatever its QoS: so the journal keeps it through a restart as it keeps any queue's message,
and a QoS 1 PUBLISH with RETAIN is acknowledged once it is on disk there too. A retained
PUBLISH with an empty payload deletes that queue (it is delivered to current subscribers,
and not kept). The queues are the broker's own (no user's permission is asked for them) and
`hutch ctl list queues` shows them.
"""

from . import own_queues
from .topics import matches

PREFIX = b"mqtt-retained."


def queue_name(topic):
    """The queue that keeps the retained message of a topic (None: its name would be longer
    than a queue name may be)."""
    name = PREFIX + topic
    return name if len(name) <= 255 else None


def retain(broker, topic, properties, payload):
    """Keep payload (with the stored form's properties of its publish) as the retained message of
    a topic, or forget it (an empty payload). Returns the journal sequence number its
    acknowledgement waits for (0: none), or None when the topic is too long to keep."""
    name = queue_name(topic)
    if name is None:
        return None
    if not payload:
        own_queues.drop(broker, (name,))
        return 0
    own_queues.queue(broker, name, {"x-max-length": 1, "x-overflow": "drop-head"})
    return own_queues.put(broker, name, properties, payload)  # (persistent: kept through a restart, whatever its QoS)


def matching(broker, topic_filter):
    """(topic, message, when it expires or None) of each retained message whose topic the filter
    matches by MQTT's rules."""
    found = []
    for name, queue in broker.queues.items():
        if not name.startswith(PREFIX):
            continue
        topic = name[len(PREFIX) :]
        if not matches(topic_filter, topic):
            continue
        if not queue.messages.length and queue.paged:
            queue.page_in()  # (just after a restart its message may still be on disk)
        if queue.messages.length:
            entry = queue.messages.peek()  # (message, redelivered, expires_at)
            found.append((topic, entry[0], entry[2]))
    serving = broker.front_ends.get("mqtt")
    latest = serving.sys_latest if serving is not None else None
    if latest and topic_filter.startswith(b"$"):  # (the $SYS topics', kept in memory: mqtt/sys_topics.py)
        for topic, message in latest.items():
            if matches(topic_filter, topic):
                found.append((topic, message, None))
    return found
