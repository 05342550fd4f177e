"""The MQTT front end (3.1, 3.1.1 and 5.0), beside AMQP's (amqp091/, amqp10/), on the same queues:
RabbitMQ's mapping (rabbitmq_mqtt), so AMQP consumers, bridges, streams and the Spark source
see MQTT data as they would from RabbitMQ, and AMQP publishers reach MQTT subscribers.

    packets.py      the control packets as bytes (sans-IO, both directions)
    topics.py       topics and filters as routing and binding keys on amq.topic
    connection.py   one client: CONNECT, keep alive, will, DISCONNECT (the port's side is
                    core/connections.py's)
    publishing.py   what the client publishes: a message of the broker's, and QoS 1 and 2
                    answered once it is safe
    session.py      what the client subscribes to: its session's queues and their deliveries
    options.py      version 5 subscription options and identifiers, kept in the bindings
    shared.py       shared subscriptions ($share/group/filter): a queue per group and filter
    retained.py     retained messages, each kept in a durable queue of its own
    held.py         a session's own queue whose messages it holds while connected (the next two's base)
    qos2.py         a session's QoS 2 packet ids between PUBREC and PUBREL, kept on disk
    qos2_out.py     a session's QoS 2 deliveries, on disk from PUBLISH to PUBCOMP
    sys_topics.py   the $SYS/broker/... topics (CPython only)
    own_queues.py   the broker's own durable queues these two keep things in

new_connection   the factory a listener with protocol "mqtt" makes its clients' connections with,
             (broker, peer) -> a Connection, importing the front end with the first client
"""


def new_connection(broker, peer):
    """An MQTT client's connection (mqtt/connection.py loaded with the first: a broker no MQTT
    client talks to does not hold it)."""
    from .connection import Connection

    return Connection(broker, peer)
