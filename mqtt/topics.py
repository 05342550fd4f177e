"""MQTT topics as AMQP routing keys, RabbitMQ's mapping (rabbitmq_mqtt rabbit_mqtt_util): the
level separator `/` is the routing key's `.`, the single-level wildcard `+` is `*`, and the
multi-level `#` stays `#`. So the MQTT publish to `sensors/greenhouse-3/temp` reaches an AMQP
queue bound to `amq.topic` with `sensors.greenhouse-3.*`, and an AMQP publish with routing
key `sensors.greenhouse-3.temp` reaches the MQTT subscriber of `sensors/+/temp`.

A topic level holding a dot (`linux_3.11/x`, `v1.2/x`) is split in two by the mapping, as in
RabbitMQ, so the routing key says less than the topic; an MQTT subscriber still gets the topic
exactly and only what its filter matches by MQTT's rules:

- an MQTT publish to such a topic carries it in the header `x-mqtt-topic` (TOPIC_HEADER), and
  a subscription to such a filter keeps it in its binding's arguments (`x-mqtt-filter`);
- a delivery to an MQTT subscriber is checked against the filters that route there (wanted)
  when its topic, or one of those filters, holds a dot or the topic starts with `$`: a key
  that matched a binding key the filter does not match is not delivered.

AMQP consumers see RabbitMQ's routing keys, as before. Topics and filters stay bytes, as the
codec reads them.
"""

import sys

SHARE_PREFIX = b"$share/"
# Topics (and routing keys) remembered with what they map to, at most, in each table of
# Serving's: sensors publish to a few topics each, again and again. A board keeps none.
KEPT = 0 if sys.implementation.name == "micropython" else 4096


def remember(table, key, value):
    """value, kept in table under key (where KEPT allows; a full table starts again)."""
    if KEPT:
        if len(table) >= KEPT:
            table.clear()
        table[key] = value
    return value


TOPIC_HEADER = "x-mqtt-topic"
TOPIC_HEADER_KEY = b"\x0cx-mqtt-topic"  # (as a shortstr: Message.has_header looks for it so)
FILTER_ARGUMENT = "x-mqtt-filter"


def routing_key(topic):
    """The routing key an MQTT PUBLISH's topic goes to amq.topic with."""
    return topic.replace(b"/", b".")


def binding_key(topic_filter):
    """The binding key of an MQTT subscription's filter."""
    return topic_filter.replace(b"/", b".").replace(b"+", b"*")


def topic_of(key):
    """The MQTT topic a message with routing key `key` is delivered under."""
    return key.replace(b".", b"/")


def filter_of(key):
    """The MQTT filter of a subscription's binding key (binding_key's inverse)."""
    return key.replace(b".", b"/").replace(b"*", b"+")


def carried_topic(message):
    """The MQTT topic a message carries in its x-mqtt-topic header; None where its routing key
    says it (the look at the header's bytes first costs a delivery little)."""
    if message.has_header(TOPIC_HEADER_KEY):
        found = (message.properties().get("headers") or {}).get(TOPIC_HEADER)
        if found is not None:
            return bytes(found)
    return None


def with_filter(arguments, topic_filter):
    """A subscription's binding arguments, with its filter where the binding key cannot say it."""
    if b"." in topic_filter:
        arguments[FILTER_ARGUMENT] = topic_filter
    return arguments


def exact_filter(binding):
    """The MQTT filter of a subscription's binding."""
    found = binding.arguments.get(FILTER_ARGUMENT) if binding.arguments else None
    return bytes(found) if found is not None else filter_of(binding.key)


def wanted(queue, exchange, topic):
    """Whether a message of that topic reached the queue through one of its bindings from the
    MQTT exchange whose filter matches the topic by MQTT's rules: a binding key can route what
    its filter does not match (a `$` topic to a filter starting with a wildcard, MQTT 4.7.2; a
    topic or filter holding a dot, which the mapping splits)."""
    for binding in queue.inbound:
        if binding.source.name == exchange and matches(exact_filter(binding), topic):
            return True
    return False


def valid_topic(topic):
    """A topic a client may publish to: not empty, no wildcard (MQTT 4.7.3, 4.7.1)."""
    return len(topic) > 0 and b"+" not in topic and b"#" not in topic


def valid_filter(topic_filter):
    """A subscription filter: not empty; `#` alone in the last level, `+` alone in its level
    (MQTT 4.7.1)."""
    if not topic_filter:
        return False
    levels = topic_filter.split(b"/")
    last = len(levels) - 1
    for i, level in enumerate(levels):
        if b"#" in level and (level != b"#" or i != last):
            return False
        if b"+" in level and level != b"+":
            return False
    return True


def share_of(topic_filter):
    """(group, filter) of a shared subscription `$share/{group}/{filter}`, (None, filter) for
    any other; a malformed one (no group, or no filter) gives (b"", b"")."""
    if not topic_filter.startswith(SHARE_PREFIX):
        return None, topic_filter
    rest = topic_filter[len(SHARE_PREFIX) :]
    group, slash, found = rest.partition(b"/")
    if not group or not slash or not found or b"+" in group or b"#" in group:
        return b"", b""
    return group, found


def matches(topic_filter, topic):
    """Whether a subscription's filter matches a topic (MQTT 4.7): `+` one level, `#` the rest
    (and the parent level); a filter starting with a wildcard does not match a `$` topic."""
    if topic.startswith(b"$") and topic_filter[:1] in (b"+", b"#"):
        return False
    levels = topic.split(b"/")
    wanted = topic_filter.split(b"/")
    for i, level in enumerate(wanted):
        if level == b"#":
            return True
        if i >= len(levels) or (level != b"+" and level != levels[i]):
            return False
    return len(levels) == len(wanted)
