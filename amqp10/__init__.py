"""The AMQP 1.0 front end (amqp10/connection.py), beside the 0-9-1 one (amqp091/).

HEADERS      the protocol headers it serves (SASL's, and the plain one it answers with SASL's)
connection   its connection factory, (broker, peer) -> a Connection, importing it on first use
"""

HEADERS = (b"AMQP\x03\x01\x00\x00", b"AMQP\x00\x01\x00\x00")


def connection(broker, peer):
    """A 1.0 client's connection (amqp10/connection.py loaded with the first: a broker no 1.0
    client talks to does not hold it)."""
    from .connection import Connection  # pyright: ignore[reportMissingImports] (host only: a board serves no 1.0)

    return Connection(broker, peer)
