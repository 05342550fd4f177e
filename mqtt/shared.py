"""Shared subscriptions, `$share/{group}/{filter}` (MQTT 5 4.8.2): each message matching the
filter goes to one of the group's member sessions.

A group's subscription to a filter is one queue, `mqtt-shared/{group}/{filter}`, bound to the
MQTT exchange by the filter's key; each member session consumes it (the queue hands its
messages to its consumers in turn, as to any AMQP consumers of one queue). A member's QoS 0
subscription takes its messages at most once, a QoS 1 one holds them until its PUBACK, and
what a member held when its connection went goes to the other members.

Who is a member is kept in the queue's bindings: each member has a binding of its own, with the
same key, whose arguments name it (`x-mqtt-shared-member`) and the QoS it was granted
(`x-mqtt-shared-qos`); a message is routed to the queue once however many members it has. So
a member whose session outlives its connection consumes again when it is back, after a
restart too, and the queue is deleted with its last member's binding. The queue is durable,
kept `[mqtt] max_session_expiry` after its last consumer goes, when the member that made it
has a session that outlives its connection; else it ends with its last consumer.

Retained messages are not delivered to a new shared subscription (MQTT 5 4.8.2), and no local
on one is a protocol error (3.8.3.1).
"""

from ..core import topology

QUEUE_PREFIX = b"mqtt-shared/"
MEMBER = "x-mqtt-shared-member"
QOS = "x-mqtt-shared-qos"


def queue_name(group, topic_filter):
    return QUEUE_PREFIX + group + b"/" + topic_filter


def member_arguments(client_id, granted):
    return {MEMBER: client_id, QOS: granted}


def is_member(binding, client_id):
    found = binding.arguments.get(MEMBER) if binding.arguments else None
    return found is not None and bytes(found) == client_id


def memberships(broker, exchange, client_id):
    """[(queue, granted QoS)] of the shared subscriptions the client id is a member of."""
    found = []
    for name, queue in broker.queues.items():
        if not name.startswith(QUEUE_PREFIX):
            continue
        for binding in queue.inbound:
            if binding.source.name == exchange and is_member(binding, client_id):
                found.append((queue, binding.arguments.get(QOS, 1)))
                break
    return found


def join(session, group, topic_filter, key, granted, extra, method):
    """The session is a member (at the QoS granted, with the binding arguments `extra`: its
    subscription options, mqtt/options.py) of the group's subscription to the filter: the
    queue, declared if it is not there, and whether it was a member already."""
    broker = session.broker
    who = session.conn.client
    exchange = session.serving.exchange
    name = queue_name(group, topic_filter)
    queue = broker.queues.get(name)
    if queue is None:
        if session.expiry:
            arguments = {"x-expires": session.serving.max_session_expiry * 1000}
            queue = topology.declare_queue(broker, who, name, durable=True, arguments=arguments)
        else:
            queue = topology.declare_queue(broker, who, name, auto_delete=True)
    arguments = member_arguments(session.client_id, granted)
    arguments.update(extra)
    existed = False
    for binding in list(queue.inbound):
        if binding.source.name == exchange and is_member(binding, session.client_id):
            existed = True
            if binding.arguments == arguments:
                return queue, True
            topology.unbind(broker, who, exchange, name, binding.key, binding.arguments, method, to_queue=True)
    topology.bind(broker, who, exchange, name, key, arguments, method, to_queue=True)
    return queue, existed


def leave(session, queue, method):
    """The session is no member of that shared subscription any more: its binding goes, and the
    queue with the last one. Whether it was a member."""
    broker = session.broker
    exchange = session.serving.exchange
    was = False
    for binding in list(queue.inbound):
        if binding.source.name == exchange and is_member(binding, session.client_id):
            was = True
            topology.unbind(
                broker, session.conn.client, exchange, queue.name, binding.key, binding.arguments, method, to_queue=True
            )
    if not queue.inbound and not queue.deleted:
        topology.delete_queue(broker, queue)
    return was
