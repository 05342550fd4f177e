"""What a fleet's upstream holds (AMQP 0-9-1: RabbitMQ, or a hutch), named once for both
sides, the gateways (server/fleet/link.py) and `hutch fleet` (tools/fleet.py):

    exchange hutch.fleet (topic)         documents, routed by their target: node.NAME, group.NAME
    stream hutch.fleet.doc.TARGET        the documents for a target, newest last (a few kept):
                                         each member reads it from its last document on, so a
                                         member that was away, or that joins later, finds the
                                         newest when it connects, and the next ones as they
                                         come; reading takes nothing from the others
    exchange hutch.fleet.status (topic)  the members' status, routed node.NAME
    stream hutch.fleet.status            every status, kept for STATUS_AGE (`hutch fleet status`
                                         reads it)

Every side declares what it uses with the same arguments, so either may come first.
"""

DOCUMENTS = "hutch.fleet"
STATUS = "hutch.fleet.status"
STATUS_AGE = "7D"
# a target's documents: a few kept (retention drops whole segments, oldest first)
DOCUMENT_STREAM = {"x-queue-type": "stream", "x-max-length-bytes": 1 << 20, "x-stream-max-segment-size-bytes": 1 << 17}
STREAM = {"x-queue-type": "stream", "x-max-age": STATUS_AGE}


def routing_key(target):
    """node:NAME -> node.NAME (a topic exchange's words)."""
    return target.replace(":", ".", 1)


def document_queue(target):
    return "hutch.fleet.doc." + routing_key(target)


def declare_documents(client, target):
    """The exchange and the target's stream of documents, bound."""
    client.declare_exchange(DOCUMENTS, "topic", durable=True)
    queue = document_queue(target)
    client.declare_queue(queue, durable=True, arguments=DOCUMENT_STREAM)
    client.bind(queue, DOCUMENTS, routing_key(target))
    return queue


def declare_status(client):
    client.declare_exchange(STATUS, "topic", durable=True)
    client.declare_queue(STATUS, durable=True, arguments=STREAM)
    client.bind(STATUS, STATUS, "#")


def connect(uri, name, tls=None, timeout_ms=10000):
    """A hutch.client connection to an amqp:// or amqps:// URI (server/bridges/config.py
    parse_uri's dict), open; OSError or AMQPError if it cannot be. tls: a bridge's TLS settings
    (ca_file, cert_file, key_file, verify), for amqps://."""
    from ...client.simple import Client

    ssl = None
    if uri["tls"]:
        from ...ports.tls import client_context

        tls = tls or {}
        ssl = client_context(tls.get("ca_file"), tls.get("cert_file"), tls.get("key_file"), tls.get("verify", True))
    client = Client(
        uri["host"],
        uri["port"],
        uri["user"],
        uri["password"],
        uri["vhost"],
        heartbeat=uri["heartbeat"] or 30,
        frame_max=131072,
        timeout_ms=min(timeout_ms, uri["connection_timeout"] or timeout_ms),
        name=name,
        ssl=ssl,
        mechanism=uri["auth_mechanism"],
    )
    client.connect()
    return client
