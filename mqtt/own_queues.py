"""What the MQTT front end keeps in the broker's own durable queues (retained messages,
mqtt/retained.py; a session's QoS 2 packet ids, mqtt/qos2.py and mqtt/qos2_out.py), and the journal sequence number
an acknowledgement waits for: one place for each, for every MQTT module that keeps something."""

from ..core import topology
from ..core.broker import JOURNALLED
from ..core.content import made

PERSISTENT = {"delivery-mode": 2}
# a session's QoS 2 packet ids between PUBREC and PUBREL (mqtt/qos2.py), and its QoS 2 deliveries
# between PUBLISH and PUBCOMP (mqtt/qos2_out.py): named here, so that a session finds them
# without loading those modules (a sensor that never uses QoS 2 holds neither)
INBOUND_PREFIX = b"mqtt-qos2-"
OUTBOUND_PREFIX = b"mqtt-outbound-qos2-"


def waits_for(broker, result):
    """The journal sequence number a publish (Broker.publish's result) must be synced to before
    it is acknowledged; 0: nothing to wait for."""
    journal = broker.journal
    return journal.seq if result & JOURNALLED and journal is not None else 0


def queue(broker, name, arguments=None):
    """The broker's own durable queue `name`, declared if it is not there (no user's permission
    is asked)."""
    found = broker.queues.get(name)
    if found is None:
        found = topology.declare_queue(broker, None, name, durable=True, arguments=arguments or {})
    return found


def put(broker, name, properties, body):
    """A persistent message into the queue `name` (through the default exchange). Returns the
    journal sequence number it is on disk at (waits_for)."""
    message = made(b"", name, dict(properties, **PERSISTENT), body)
    expiration = properties.get("expiration")
    if expiration is not None:  # (as a publisher's is read: core/broker.py; a retained message's expiry)
        message.ttl = int(expiration)
    return waits_for(broker, broker.publish(broker.exchange(b""), message))


def drop(broker, names):
    """The queues of these names deleted, where they are."""
    for name in names:
        found = broker.queues.get(name)
        if found is not None:
            topology.delete_queue(broker, found)
