"""AMQP 1.0 addresses as RabbitMQ 4 reads them (its address format v2), names percent-encoded:

    target /exchanges/NAME/ROUTING-KEY   the exchange NAME with that routing key
    target /exchanges/NAME               the exchange NAME, each message's subject its key
    target /queues/NAME                  the queue NAME (through the default exchange)
    target none                          each message's `to`, one of the three above
    source /queues/NAME                  the queue (or stream) NAME

RabbitMQ 3's forms (/amq/queue/NAME, /exchange/NAME/KEY, /topic/KEY, a bare name; RabbitMQ 4.3
refuses them by default) are not served: each is an address error, said with what is served.

    target_of(broker, address) -> (exchange name, routing key or None)
    source_of(address) -> queue name
    AddressError(condition, description)
"""

V2_TARGETS = "/queues/NAME or /exchanges/NAME[/KEY]"


class AddressError(Exception):
    """An address that names nothing here: (condition, description), a link error (or a
    rejected message, for a `to`)."""


def unquote(text):
    """A percent-encoded address segment, decoded (RFC 3986)."""
    if "%" not in text:
        return text
    raw = text.encode()
    out = bytearray()
    i = 0
    while i < len(raw):
        if raw[i] == 0x25:  # %
            try:
                out.append(int(raw[i + 1 : i + 3], 16))
            except ValueError:
                raise AddressError("amqp:invalid-field", "address segment '%s' has a bad percent-encoding" % text)
            i += 3
        else:
            out.append(raw[i])
            i += 1
    try:
        return out.decode()
    except UnicodeError:
        raise AddressError("amqp:invalid-field", "address segment '%s' is not UTF-8" % text)


def target_of(broker, address):
    """(exchange name, routing key or None: the message's subject) of a target address, or
    AddressError: not-found for a queue or exchange that does not exist, invalid-field for an
    address that is none of the forms served."""
    parts = address.split("/") if isinstance(address, str) and address.startswith("/") else []
    if len(parts) == 3 and parts[1] == "queues" and parts[2]:
        name = unquote(parts[2]).encode()
        if name not in broker.queues:
            raise AddressError("amqp:not-found", "no queue '%s' in vhost '/'" % name.decode())
        return b"", name
    if len(parts) in (3, 4) and parts[1] == "exchanges" and parts[2]:
        name = unquote(parts[2]).encode()
        if name == b"amq.default":  # (RabbitMQ 4: the default exchange is /queues/NAME)
            raise AddressError("amqp:invalid-field", "the default exchange is addressed as /queues/NAME")
        if broker.exchange(name) is None:
            raise AddressError("amqp:not-found", "no exchange '%s' in vhost '/'" % name.decode())
        return name, (unquote(parts[3]).encode() if len(parts) == 4 else None)
    raise AddressError("amqp:invalid-field", "address '%s' is not %s" % (address, V2_TARGETS))


def source_of(address):
    """The queue name of a source address (/queues/NAME), or AddressError."""
    parts = address.split("/") if isinstance(address, str) and address.startswith("/") else []
    if len(parts) == 3 and parts[1] == "queues" and parts[2]:
        return unquote(parts[2]).encode()
    raise AddressError("amqp:invalid-field", "source address '%s' is not /queues/NAME" % (address,))
