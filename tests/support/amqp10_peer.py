"""The bridge's AMQP 1.0 client driven by hand (tests/amqp10/test_client.py,
test_client_upstream.py): a broker's message as the client is given it, and the events it says
back."""

from hutch.core.content import tails


def message(body, headers=None, **props):
    """(header_tail, body_tail) of a 0-9-1 message as a broker keeps it (core/message.py);
    props by pika's names (content_type)."""
    props = {name.replace("_", "-"): value for name, value in props.items()}
    if headers is not None:
        props["headers"] = headers
    header_tail, body_tail, _size = tails(props, body)
    return header_tail, body_tail


def forward(client, body, exchange=b"", routing_key=b"q", **props):
    header_tail, body_tail = message(body, **props)
    return client.forward(exchange, routing_key, header_tail, body_tail, True)
