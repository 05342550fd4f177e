"""What `hutch ctl list KIND [COLUMN ...]` shows of the running broker: one dict per object with
rabbitmqctl's column names, so a script written for `rabbitmqctl list_queues name messages`
reads hutch's too. CPython only (server/control.py asks).

    rows("queues", broker)   # [{"name": ..., "messages_ready": ..., ...}, ...]
    DEFAULT["queues"]        # the columns printed when none are named (rabbitmqctl's)
"""

from ..core.snapshot import text


def _queues(broker):
    unacked = {}
    for conn in broker.connections:
        for queue, _entry in conn.unsettled():
            unacked[queue] = unacked.get(queue, 0) + 1
    out = []
    for queue in broker.queues.values():
        ready = queue.message_count()
        pending = unacked.get(queue, 0)
        out.append(
            {
                "name": text(queue.name),
                "type": "stream" if queue.is_stream else "classic",
                "durable": queue.durable,
                "auto_delete": queue.auto_delete,
                "exclusive": queue.owner is not None,
                "arguments": _arguments(queue.arguments),
                "messages_ready": ready,
                "messages_unacknowledged": pending,
                "messages": ready + pending,
                "consumers": len(queue.consumers),
            }
        )
    return out


def _exchanges(broker):
    return [
        {
            "name": text(x.name),
            "type": text(x.kind),
            "durable": x.durable,
            "auto_delete": x.auto_delete,
            "internal": x.internal,
            "arguments": _arguments(x.arguments),
        }
        for x in broker.exchanges.values()
    ]


def _bindings(broker):
    out = []
    # the default exchange's implicit binding to every queue, as rabbitmqctl lists it
    for queue in broker.queues.values():
        out.append(_binding("", queue.name, True, queue.name, {}))
    for exchange in broker.exchanges.values():
        for binding in exchange.bindings.values():
            destination = binding.destination
            out.append(_binding(exchange.name, destination.name, destination.is_queue, binding.key, binding.arguments))
    return out


def _binding(source, destination, to_queue, key, arguments):
    return {
        "source_name": text(source),
        "source_kind": "exchange",
        "destination_name": text(destination),
        "destination_kind": "queue" if to_queue else "exchange",
        "routing_key": text(key),
        "arguments": _arguments(arguments),
    }


def _connections(broker):
    out = []
    for conn in broker.connections:
        host, _, port = conn.name.rpartition(":")
        client = conn.client
        out.append(
            {
                "name": conn.name,
                "user": text(client.user) if client is not None else "",
                "peer_host": host,
                "peer_port": int(port) if port.isdigit() else port,
                "ssl": getattr(conn, "tls", None) is not None,
                "channels": len(getattr(conn, "channels", ())),
                "state": "running" if client is not None else "starting",
                "auth_mechanism": text(getattr(conn, "auth_mechanism", b"") or b""),
                "protocol": conn.protocol,
                # an MQTT client's id (rabbitmqctl list_mqtt_connections's column); other protocols: ""
                "client_id": text(getattr(conn, "client_id", b"") or b""),
                # the name a 0-9-1 client gave its connection (its connection_name property)
                "user_provided_name": text(getattr(conn, "provided_name", b"") or b""),
            }
        )
    return out


def _channels(broker):
    out = []
    for conn in broker.connections:
        client = conn.client
        for number, channel in sorted(getattr(conn, "channels", {}).items()):
            out.append(
                {
                    "name": "%s (%d)" % (conn.name, number),
                    "connection": conn.name,
                    "number": number,
                    "user": text(client.user) if client is not None else "",
                    "consumer_count": len(channel.consumers),
                    "messages_unacknowledged": len(channel.unacked),
                    "prefetch_count": channel.prefetch_consumer,
                    "global_prefetch_count": channel.prefetch_global,
                    "confirm": channel.confirming,
                    "transactional": channel.tx is not None,
                }
            )
    return out


def _consumers(broker):
    out = []
    for queue in broker.queues.values():
        for consumer in queue.consumers:
            session = consumer.session
            conn = getattr(session, "conn", None)
            out.append(
                {
                    "queue_name": text(queue.name),
                    "channel_pid": "%s (%d)" % (conn.name, session.number) if conn is not None else "bridge",
                    "consumer_tag": text(consumer.tag),
                    "ack_required": not consumer.no_ack,
                    "exclusive": consumer.exclusive,
                    "prefetch_count": consumer.prefetch,
                    "active": True,
                    "arguments": {},
                }
            )
    return out


def _users(broker):
    users = broker.users
    return [{"user": name, "tags": sorted(users.tags.get(name, []))} for name in sorted(users.hashes)]


def _permissions(broker):
    """rabbitmqctl list_permissions (on /): each user who may use the virtual host, with its
    patterns (".*" each for a user with every permission)."""
    out = []
    for name in sorted(broker.users.hashes):
        allowed, granted = broker.users.access(name)
        if allowed:
            patterns = granted.patterns if granted is not None else (".*", ".*", ".*")
            out.append({"user": name, "configure": patterns[0], "write": patterns[1], "read": patterns[2]})
    return out


def _user_permissions(broker, user):
    """rabbitmqctl list_user_permissions USER: the user's patterns, by virtual host (one: /)."""
    if user not in broker.users.hashes:
        raise LookupError("no user '%s'" % user)
    return [
        dict(vhost="/", **{k: v for k, v in row.items() if k != "user"})
        for row in _permissions(broker)
        if row["user"] == user
    ]


def _topic_permissions(broker):
    """rabbitmqctl list_topic_permissions (on /): user, exchange, write and read patterns."""
    out = []
    for name in sorted(broker.users.hashes):
        granted = broker.users.access(name)[1]
        for exchange, (write, read) in sorted((granted.topic_patterns if granted is not None else {}).items()):
            out.append({"user": name, "exchange": text(exchange), "write": write, "read": read})
    return out


def _streams(broker):
    from ..core.snapshot import snapshot

    return snapshot(broker, each_connection=False)["streams"]


def _bridges(broker):
    from ..core.snapshot import snapshot

    return snapshot(broker, each_connection=False)["bridges"]


def _arguments(arguments):
    return {key: text(value) for key, value in (arguments or {}).items()}


KINDS = {
    "queues": _queues,
    "exchanges": _exchanges,
    "bindings": _bindings,
    "connections": _connections,
    "channels": _channels,
    "consumers": _consumers,
    "streams": _streams,
    "bridges": _bridges,
    "users": _users,
    "permissions": _permissions,
    "user_permissions": _user_permissions,
    "topic_permissions": _topic_permissions,
}

# The columns shown when none are named: rabbitmqctl 3.10's for its list_* commands
DEFAULT = {
    "queues": ("name", "messages"),
    "exchanges": ("name", "type"),
    "bindings": ("source_name", "source_kind", "destination_name", "destination_kind", "routing_key", "arguments"),
    "connections": ("user", "peer_host", "peer_port", "state"),
    "channels": ("name", "user", "consumer_count", "messages_unacknowledged"),
    "consumers": ("queue_name", "channel_pid", "consumer_tag", "ack_required", "prefetch_count", "active", "arguments"),
    "streams": ("name", "first", "last", "bytes", "consumers"),
    "bridges": ("name", "state", "upstream", "forwarded", "backlog", "last_error"),
    "users": ("user", "tags"),
    "permissions": ("user", "configure", "write", "read"),
    "user_permissions": ("vhost", "configure", "write", "read"),
    "topic_permissions": ("user", "exchange", "write", "read"),
}


# Every column of each kind (what a row has), for naming an unknown one when there is no row
COLUMNS = {
    "queues": ("name", "type", "durable", "auto_delete", "exclusive", "arguments", "messages_ready",
               "messages_unacknowledged", "messages", "consumers"),
    "exchanges": ("name", "type", "durable", "auto_delete", "internal", "arguments"),
    "bindings": DEFAULT["bindings"],
    "connections": (
        "name",
        "user",
        "peer_host",
        "peer_port",
        "ssl",
        "channels",
        "state",
        "auth_mechanism",
        "protocol",
        "client_id",
        "user_provided_name",
    ),
    "channels": ("name", "connection", "number", "user", "consumer_count", "messages_unacknowledged",
                 "prefetch_count", "global_prefetch_count", "confirm", "transactional"),
    "consumers": ("queue_name", "channel_pid", "consumer_tag", "ack_required", "exclusive", "prefetch_count",
                  "active", "arguments"),
    "streams": ("name", "first", "last", "next", "segments", "bytes", "max_length_bytes", "max_age",
                "segment_bytes", "consumers", "unacked", "published", "delivered"),
    "bridges": ("name", "direction", "state", "upstream", "queue", "forwarded", "in_flight", "backlog",
                "oldest_age_s", "last_error"),
    "users": ("user", "tags"),
    "permissions": DEFAULT["permissions"],
    "user_permissions": DEFAULT["user_permissions"],
    "topic_permissions": DEFAULT["topic_permissions"],
}  # fmt: skip

# The kinds that list one user's: `hutch ctl list user_permissions USER`
FOR_A_USER = ("user_permissions",)


def rows(kind, broker, user=None):
    """The rows of a kind; LookupError naming what it lists that is not there (a user)."""
    if kind in FOR_A_USER:
        return KINDS[kind](broker, user)
    return KINDS[kind](broker)
