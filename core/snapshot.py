"""One snapshot of the broker: what every port renders (status.json, ports/status_file.py; on a
host, the metrics and the status page). It reads the broker's state and counters
(core/counters.py), never a port's; the ports add what only they know (the process, the heap).
Loaded when something asks for one: an idle board does not hold it.
"""

# The metrics label of the front end whose counters are Broker.stats, the broker's own too (its
# connections say it: amqp091/connection.py metrics_label); the others' are Broker.stats_by's.
BROKER_LABEL = "amqp091"

# The counters' names, in the order of core/counters.py's constants (tests/portable/test_stats.py
# checks that each NAMES[CONSTANT] is the constant's name).
NAMES = (
    "received",
    "received_confirm",
    "routed",
    "unroutable",
    "returned",
    "confirmed",
    "delivered_consume_manual_ack",
    "delivered_consume_auto_ack",
    "delivered_get_manual_ack",
    "delivered_get_auto_ack",
    "get_empty",
    "redeliveries",
    "acknowledged",
    "requeued",
    "rejected",
    "dead_lettered",
    "connections_opened",
    "connections_closed",
    "channels_opened",
    "channels_closed",
    "journal_syncs",
    "auth_attempts",
    "auth_attempts_failed",
    "dead_lettered_expired",
    "dead_lettered_maxlen",
)


def _named(stats):
    return {name: stats[i] for i, name in enumerate(NAMES)}


def snapshot(broker, each_connection=True):
    """The broker as plain data (what status.json holds, and what the metrics and status page
    show): its counters, connections, queues, streams, journal and bridges.
    each_connection: a record of every connection under "connections" (the status page lists
    them); without it, only "connections_by_protocol", how many each protocol has open, which
    both give. status.json is written every two seconds: with 10,000 MQTT sensors connected, their
    records would make each write 1.2 MB of the data folder's flash and 50 ms of CPU."""
    from .broker import VERSION  # (loaded: its module made the broker shown)

    now = broker.now + broker.wall_offset  # wall clock ms, as messages are stamped (Broker.publish)
    unacked = {}
    connections = []
    open_by_protocol = {BROKER_LABEL: 0}  # (0-9-1's always; another once one of its clients is here)
    channels = 0
    for conn in broker.connections:
        for queue, _entry in conn.unsettled():
            unacked[queue] = unacked.get(queue, 0) + 1
        label = conn.metrics_label  # (core/connections.py: "amqp091", "amqp10", "mqtt")
        open_by_protocol[label] = open_by_protocol.get(label, 0) + 1
        its_channels = len(getattr(conn, "channels", ()))
        channels += its_channels
        if each_connection:
            client = conn.client
            connections.append(
                {
                    "name": conn.name,
                    "protocol": label,
                    # the client's name for itself, where its protocol has one (an MQTT client id)
                    "client_id": text(conn.client_id) if getattr(conn, "client_id", None) else None,
                    "user": text(client.user) if client is not None else None,
                    "tls": getattr(conn, "tls", None) is not None,
                    "channels": its_channels,
                }
            )
    queues = []
    streams = []
    for queue in broker.queues.values():
        if queue.is_stream:
            streams.append(_stream(queue, unacked.get(queue, 0)))
        else:
            queues.append(_queue(queue, now, unacked.get(queue, 0)))
    bridges = []
    if broker.bridges:
        from .bridge.machine import NAMES as STATES  # (a broker with bridges has it loaded)

        for bridge in broker.bridges:
            if bridge.settings["direction"] == "up":
                for one in bridge.classes:
                    bridges.append(_up(bridge, one, STATES, now, broker.now))
            else:
                bridges.append(_down(bridge, STATES, broker.now))
    # the broker's totals, and each protocol's counters (core/counters.py): 0-9-1's list is the
    # broker's own too (the bridges' local sides, dead-lettering, the journal)
    totals = list(broker.stats)
    by_protocol = {BROKER_LABEL: _named(broker.stats)}
    for label, stats in (broker.stats_by or {}).items():
        by_protocol[label] = _named(stats)
        for i in range(len(stats)):
            totals[i] += stats[i]
    counters = _named(totals)
    journal = broker.journal
    flow = broker.flow
    out = {
        "name": broker.name,  # this gateway's ([server] name)
        "version": VERSION,
        "counters": counters,
        "counters_by_protocol": by_protocol,
        "connections_by_protocol": open_by_protocol,
        "channels": channels,
        "consumers": broker.consumer_count,
        "exchanges": len(broker.exchanges),
        # messages bridges sent again that this broker had taken already (core/dedup.py)
        "duplicates_dropped": broker.dedup.dropped if broker.dedup is not None else 0,
        "sensors": _sensors(broker.sensors),
        "queues": queues,
        "streams": streams,
        "journal": None
        if journal is None
        else {
            "bytes": journal.total,
            "segments": len(journal.sizes),
            "appended": journal.appended,
            "max_bytes": journal.max_bytes,  # its disk budget (journal_max_bytes)
        },
        "held": {"messages": broker.flow.held_messages, "bytes": broker.flow.held_bytes},
        # why publishers are blocked, with the figures of now (None: they are not), and how long
        "blocked": flow.reasons() if flow.blocked else None,
        "blocked_for_s": (broker.now - flow.blocked_at) / 1000 if flow.blocked else None,
        "alarms": sorted(flow.alarms),  # the alarms raised (core/flow.py: memory, budget, disk...)
        "at": now / 1000,  # (wall seconds) when it was taken: what ages are counted from
        "bridges": bridges,
        "left_behind": _left_behind(broker),
        # [[device]]s polled into the broker (devices/device.py; set by server/devices/polling.py: a board has none)
        "devices": [device.snapshot() for device in getattr(broker, "devices", ())],
    }
    if each_connection:
        out["connections"] = connections
    return out


def _left_behind(broker):
    """Queues named as a bridge's own (hutch.bridge.NAME...) that no bridge forwards: what a bridge
    removed or made into classes left (core/bridge/leftovers.py took in what it could)."""
    owned = set()
    for bridge in broker.bridges:
        if bridge.settings["direction"] == "up":
            for one in bridge.classes:
                owned.add(one.outbox.queue.name)
    out = []
    for name, queue in broker.queues.items():
        if name.startswith(b"hutch.bridge.") and name not in owned and not queue.is_stream:
            out.append({"queue": text(name), "messages": queue.message_count()})
    return out


def _sensors(sensors):
    """What the dedup of sensors' readings (core/dedup.py) has done: sensors known now, repeats
    dropped, sensors forgotten for room, counts that started over."""
    if sensors is None:
        return {"known": 0, "duplicates_dropped": 0, "forgotten": 0, "restarted": 0}
    return {
        "known": len(sensors.order),
        "duplicates_dropped": sensors.dropped,
        "forgotten": sensors.forgotten,
        "restarted": sensors.restarted,
    }


def _queue(queue, now, unacked):
    head = _head(queue)
    return {
        "name": text(queue.name),
        "durable": queue.durable,
        "exclusive": queue.owner is not None,
        "auto_delete": queue.auto_delete,
        "messages": queue.message_count(),
        "in_memory": queue.messages.length,
        "on_disk": queue.paged,
        "bytes_in_memory": queue.ready_bytes,
        "bytes_on_disk": queue.paged_bytes,
        "unacked": unacked,
        "consumers": len(queue.consumers),
        "published": queue.published,
        "delivered": queue.delivered,
        "acknowledged": queue.acknowledged,
        "oldest_age_s": None if head is None or not head.arrived else max(0, now - head.arrived) / 1000,
    }


def _head(queue):
    """The oldest ready message, or None. A queue whose window is empty with a backlog on disk
    reads its head in first, as its next delivery would (just after a restart, say)."""
    if not queue.messages.length and queue.paged:
        queue.page_in()
    if not queue.messages.length:
        return None
    return queue.messages.peek()[0]


def _stream(stream, unacked):
    return {
        "name": text(stream.name),
        "first": stream.first,
        "last": stream.visible - 1 if stream.visible > stream.first else None,
        "next": stream.next,
        "segments": len(stream.segments),
        "bytes": stream.bytes,
        "max_length_bytes": stream.max_bytes,
        "max_age": text(stream.arguments.get("x-max-age")),
        "segment_bytes": stream.segment_bytes,
        "consumers": len(stream.consumers),
        "unacked": unacked,
        "published": stream.published,
        "delivered": stream.delivered,
    }


def _up(bridge, one, states, wall, now_ms):
    """An up bridge's class (core/bridge/classes.py; a bridge without classes is one) as `hutch
    ctl bridges` shows it: forwarded is what upstream confirmed, backlog what waits here, the
    oldest age that of the oldest message not yet confirmed. A class that may not send in the
    [uplink]'s closed window, on a link that others keep open, is waiting. A stream source also
    shows the last offset every record up to which upstream confirmed (what its offset file
    says, once written)."""
    settings = bridge.settings
    outbox = one.outbox
    source = outbox.queue
    oldest = outbox.oldest_arrival()
    state = states[bridge.state]
    if not bridge.may_send(one) and bridge.state != 6:  # (6: STOPPED)
        state = "waiting"
    elif bridge.unconfirmed() and bridge.state != 6:  # no node confirms: a state of its own
        state = "unconfirmed"
    out = {
        "name": one.name,
        "direction": "up",
        "state": state,
        "upstream": bridge.upstream,
        "queue": text(source.name),
        "forwarded": outbox.forwarded,
        "in_flight": len(outbox.in_flight),
        "backlog": outbox.backlog(),
        "oldest_age_s": None if not oldest else max(0, wall - oldest) / 1000,
        "last_error": bridge.last_error,
        "failed_attempts": bridge.failures,  # links tried that did not run, since one last ran
        "down_s": _down_s(bridge, now_ms),  # since when no link runs (None while one does)
        "alarm_age": settings.get("alarm_age"),  # (core/health.py: down this long is failing)
        "upstream_s": _upstream_s(bridge, now_ms),  # how long this link has run (None: none runs)
        "failovers": bridge.failovers,
        "failbacks": bridge.failbacks,  # (prefer_first) moves back to an earlier URI
        "alarm": one.alarm or bridge.budget_held,  # (core/bridge/alarms.py, up.py) or None
        "priority": one.priority,  # (its share of an [uplink] budget, its order among the classes)
    }
    if bridge.window is not None:  # (an [uplink] schedule: when its window opens or closes)
        out["window"] = bridge.window
    if bridge.budget_held is not None:
        out["budget"] = bridge.budget_held
    if bridge.stream is not None:
        out["confirmed_offset"] = bridge.stream.next_offset() - 1
        return out
    out["dropped"] = source.dropped  # what left the queue without going upstream, or was refused
    out["refused"] = source.refused
    if settings.get("classes"):
        out["ttl_s"] = one.settings["ttl"]
        out["bytes"] = source.ready_bytes + source.paged_bytes
        out["max_bytes"] = one.settings["max_bytes"]
    return out


def _upstream_s(bridge, now_ms):
    return None if bridge.running_at is None else max(0, now_ms - bridge.running_at) / 1000


def _down_s(bridge, now_ms):
    """Seconds since the bridge last had a link running (or since the start, if none has), or
    None while it has one (or it waits for its [uplink]'s window, as it should); an up bridge
    no node confirms for: since its last confirm."""
    since = bridge.down_at
    if bridge.settings["direction"] == "up" and bridge.unconfirmed():
        since = bridge.unconfirmed_since()
    elif since is None or bridge.state in (3, 7):  # (RUNNING, WAITING)
        return None
    if since < 0:  # (core/bridge/machine.py SINCE_START)
        since = bridge.broker.started
    return max(0, now_ms - since) / 1000


def _down(bridge, states, now_ms):
    """A down bridge as `hutch ctl bridges` shows it: what was taken here, and what waited
    upstream when the link came up."""
    settings = bridge.settings
    queue = settings["queue"]
    if queue is None:  # (down from MQTT: the topic filters it subscribes to)
        queue = " ".join(settings["filters"])
    inbox = bridge.inbox
    out = {
        "name": bridge.name,
        "direction": "down",
        "state": states[bridge.state],
        "upstream": bridge.upstream,
        "queue": queue,
        "forwarded": inbox.received,
        "in_flight": len(inbox.pending),
        "backlog": bridge.upstream_backlog,
        "oldest_age_s": None,
        "last_error": bridge.last_error,
        "failed_attempts": bridge.failures,
        "down_s": _down_s(bridge, now_ms),
        "alarm_age": settings.get("alarm_age"),
        "upstream_s": _upstream_s(bridge, now_ms),
        "failovers": bridge.failovers,
        "failbacks": bridge.failbacks,
        "alarm": None,
    }
    if bridge.window is not None:
        out["window"] = bridge.window
    return out


def text(value):
    """A name or argument as the snapshot shows it: bytes decoded, anything else as it is."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return value
