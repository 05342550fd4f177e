"""The AMQP 1.0 front end (amqp10/connection.py), beside the 0-9-1 one (amqp091/).

HEADERS      the protocol headers it takes: SASL's (AMQP 3 1 0 0), which it serves; the plain one
             (AMQP 0 1 0 0) and TLS's (AMQP 2 1 0 0), which it answers with SASL's and hangs up,
             as RabbitMQ 4 does (a TLS listener is TLS from the first octet)
new_connection   its connection factory, (broker, peer) -> a Connection, importing it on first use
"""

HEADERS = (b"AMQP\x03\x01\x00\x00", b"AMQP\x00\x01\x00\x00", b"AMQP\x02\x01\x00\x00")


def new_connection(broker, peer):
    """A 1.0 client's connection (amqp10/connection.py loaded with the first: a broker no 1.0
    client talks to does not hold it)."""
    from .connection import Connection

    return Connection(broker, peer)
