"""The broker's snapshot (core/snapshot.py) in Prometheus' text format (version 0.0.4).

    text = render(snapshot, process, per_object=False)

Series are RabbitMQ's where it has one, with its names and labels (its rabbitmq_prometheus
plugin): `/metrics` aggregates (a queue gauge is the sum over the queues, with no labels),
`/metrics/per-object` labels each queue's `{vhost, queue}`. What RabbitMQ has no series for
(the journal, streams, bridges, a board's heap) is `hutch_*`. Written by hand, on CPython as on a
board: MicroPython has no Prometheus library, and one renderer keeps both alike (checked by
`promtool check metrics` in the tests). Counters only grow; gauges are read when scraped.
"""

PROTOCOL = '{protocol="amqp091"}'

# (series, help, counters' name(s): summed) for the global counters, each {protocol}
GLOBAL = (
    ("received", "Messages published by clients", ("received",)),
    ("received_confirm", "Messages published by clients in confirm mode", ("received_confirm",)),
    ("routed", "Messages routed to at least one queue", ("routed",)),
    ("unroutable_returned", "Unroutable messages returned to their publisher", ("returned",)),
    ("confirmed", "Messages confirmed to their publisher", ("confirmed",)),
    (
        "delivered",
        "Messages delivered to consumers or taken by basic.get",
        (
            "delivered_consume_manual_ack",
            "delivered_consume_auto_ack",
            "delivered_get_manual_ack",
            "delivered_get_auto_ack",
        ),
    ),
    ("delivered_consume_manual_ack", "Messages delivered to consumers that ack", ("delivered_consume_manual_ack",)),
    ("delivered_consume_auto_ack", "Messages delivered to consumers that do not ack", ("delivered_consume_auto_ack",)),
    ("delivered_get_manual_ack", "Messages taken by basic.get, to be acked", ("delivered_get_manual_ack",)),
    ("delivered_get_auto_ack", "Messages taken by basic.get without ack", ("delivered_get_auto_ack",)),
    ("get_empty", "basic.get of an empty queue", ("get_empty",)),
    ("redelivered", "Messages delivered again", ("redeliveries",)),
)


def escape(value):
    """A label value as the text format wants it: backslash, double quote and newline escaped."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Writer:
    def __init__(self):
        self.lines = []

    def family(self, name, kind, help_text):
        self.lines.append("# HELP %s %s" % (name, help_text))
        self.lines.append("# TYPE %s %s" % (name, kind))

    def sample(self, name, value, labels=""):
        self.lines.append("%s%s %s" % (name, labels, _number(value)))

    def one(self, name, kind, help_text, value, labels=""):
        self.family(name, kind, help_text)
        self.sample(name, value, labels)

    def text(self):
        return "\n".join(self.lines) + "\n"


def _number(value):
    if value is None:
        return "NaN"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def render(snap, process, per_object=False):
    """snap: core/snapshot.py's; process: what only the port knows, a dict of hutch_process_*
    figures (resident_memory_bytes, open_fds, heap_free_bytes, heap_used_bytes: those it has)."""
    out = Writer()
    # the gateway's name and hutch's version, as RabbitMQ's rabbitmq_build_info: a fleet's
    # dashboards and alerts name a gateway by it (group_left from this series)
    out.one(
        "hutch_build_info",
        "gauge",
        "This gateway's name ([server] name) and hutch's version",
        1,
        '{gateway="%s",version="%s"}' % (escape(snap["name"]), snap["version"]),
    )
    _health(out, snap)
    counters = snap["counters"]
    protocols = _protocols(snap)
    for name, help_text, parts in GLOBAL:
        series = "rabbitmq_global_messages_%s_total" % name
        out.family(series, "counter", help_text)
        for label, theirs in protocols:
            out.sample(series, sum(theirs[part] for part in parts), '{protocol="%s"}' % label)
    out.family(
        "rabbitmq_global_messages_unroutable_dropped_total", "counter", "Unroutable messages dropped (not mandatory)"
    )
    for label, theirs in protocols:
        out.sample(
            "rabbitmq_global_messages_unroutable_dropped_total",
            theirs["unroutable"] - theirs["returned"],
            '{protocol="%s"}' % label,
        )
    out.family("rabbitmq_global_messages_acknowledged_total", "counter", "Deliveries acknowledged by consumers")
    for label, theirs in protocols:
        out.sample(
            "rabbitmq_global_messages_acknowledged_total",
            theirs["acknowledged"],
            '{protocol="%s",queue_type="classic"}' % label,
        )
    by_reason = (
        ("expired", counters["dead_lettered_expired"]),
        ("maxlen", counters["dead_lettered_maxlen"]),
        (
            "rejected",
            counters["dead_lettered"] - counters["dead_lettered_expired"] - counters["dead_lettered_maxlen"],
        ),
    )
    for reason, value in by_reason:
        out.one(
            "rabbitmq_global_messages_dead_lettered_%s_total" % reason,
            "counter",
            "Messages dead-lettered: %s" % reason,
            value,
            '{protocol="amqp091",queue_type="classic",dead_letter_strategy="at_most_once"}',
        )
    out.one("rabbitmq_global_consumers", "gauge", "Consumers", snap["consumers"], PROTOCOL)
    for series, help_text, value in (
        ("rabbitmq_auth_attempts_total", "Logins tried", lambda c: c["auth_attempts"]),
        ("rabbitmq_auth_attempts_succeeded_total", "Logins that succeeded",
         lambda c: c["auth_attempts"] - c["auth_attempts_failed"]),
        ("rabbitmq_auth_attempts_failed_total", "Logins refused", lambda c: c["auth_attempts_failed"]),
    ):  # fmt: skip
        out.family(series, "counter", help_text)
        for label, theirs in protocols:
            out.sample(series, value(theirs), '{protocol="%s"}' % label)
    open_by_protocol = snap["connections_by_protocol"]
    out.one("rabbitmq_connections", "gauge", "Open connections", sum(open_by_protocol.values()))
    _connections_by_protocol(out, open_by_protocol)
    out.one("rabbitmq_channels", "gauge", "Open channels", snap["channels"])
    out.one("rabbitmq_consumers", "gauge", "Consumers", snap["consumers"])
    out.one("rabbitmq_queues", "gauge", "Queues (streams included)", len(snap["queues"]) + len(snap["streams"]))
    out.one("rabbitmq_connections_opened_total", "counter", "Connections opened", counters["connections_opened"])
    out.one("rabbitmq_connections_closed_total", "counter", "Connections closed", counters["connections_closed"])
    out.one("rabbitmq_channels_opened_total", "counter", "Channels opened", counters["channels_opened"])
    out.one("rabbitmq_channels_closed_total", "counter", "Channels closed", counters["channels_closed"])
    _queues(out, snap["queues"], per_object)
    _streams(out, snap["streams"], per_object)
    _journal(out, snap["journal"], counters)
    _bridges(out, snap["bridges"])
    _devices(out, snap.get("devices"))
    _dedup(out, snap)
    _process(out, process)
    return out.text()


# (series, help, the snapshot queue's key) of each queue
QUEUE_GAUGES = (
    ("rabbitmq_queue_messages_ready", "Messages ready to deliver", "messages"),
    ("rabbitmq_queue_messages_unacked", "Messages delivered and not yet acknowledged", "unacked"),
    ("rabbitmq_queue_messages", "Messages ready and unacknowledged", "total"),
    ("rabbitmq_queue_consumers", "Consumers", "consumers"),
    ("hutch_queue_messages_paged_out", "Ready messages kept on disk, not in memory", "on_disk"),
    ("hutch_queue_messages_paged_out_bytes", "Bytes of ready messages kept on disk", "bytes_on_disk"),
)
QUEUE_COUNTERS = (("rabbitmq_queue_messages_published_total", "Messages published to the queue", "published"),)


def _protocols(snap):
    """[(protocol label, its counters)], 0-9-1's first (core/counters.py: each protocol counts
    its own; together they are the broker's totals)."""
    counted = snap["counters_by_protocol"]
    return [("amqp091", counted["amqp091"])] + sorted((k, v) for k, v in counted.items() if k != "amqp091")


def _connections_by_protocol(out, counts):
    """Open connections per protocol (core/snapshot.py: 0-9-1's always, another while one of its
    clients is here)."""
    out.family("hutch_connections", "gauge", "Open connections by protocol")
    for protocol in sorted(counts):
        out.sample("hutch_connections", counts[protocol], '{protocol="%s"}' % protocol)


def _queues(out, queues, per_object):
    queues = [dict(q, total=q["messages"] + q["unacked"]) for q in queues]
    for series, help_text, key in QUEUE_GAUGES:
        _per_queue(out, series, "gauge", help_text, queues, key, per_object)
    for series, help_text, key in QUEUE_COUNTERS:
        _per_queue(out, series, "counter", help_text, queues, key, per_object)


def _per_queue(out, series, kind, help_text, queues, key, per_object):
    out.family(series, kind, help_text)
    if not per_object:
        out.sample(series, sum(q[key] for q in queues))
        return
    for q in queues:
        out.sample(series, q[key], '{vhost="/",queue="%s"}' % escape(q["name"]))


STREAM_GAUGES = (
    ("hutch_stream_first_offset", "The first offset a stream keeps", "first"),
    ("hutch_stream_last_offset", "The last offset written (NaN: empty)", "last"),
    ("hutch_stream_segments", "Segment files", "segments"),
    ("hutch_stream_bytes", "Bytes on disk", "bytes"),
    ("hutch_stream_consumers", "Consumers", "consumers"),
)


def _streams(out, streams, per_object):
    if not streams or not per_object:  # offsets do not add up: per stream only
        return
    for series, help_text, key in STREAM_GAUGES:
        out.family(series, "gauge", help_text)
        for stream in streams:
            out.sample(series, stream[key], '{vhost="/",queue="%s"}' % escape(stream["name"]))


def _journal(out, journal, counters):
    out.one("hutch_journal_syncs_total", "counter", "Group commits made durable (fsync)", counters["journal_syncs"])
    if journal is None:
        return
    out.one("hutch_journal_appended_bytes_total", "counter", "Bytes appended to the journal", journal["appended"])
    out.one("hutch_journal_bytes", "gauge", "Bytes of journal on disk", journal["bytes"])
    out.one("hutch_journal_segments", "gauge", "Journal segment files", journal["segments"])


BRIDGE_STATES = ("starting", "connecting", "running", "blocked", "backoff", "waiting", "unconfirmed", "stopped")


def _dedup(out, snap):
    """Repeats dropped on arrival (core/dedup.py): sensors' readings and bridges' messages."""
    sensors = snap["sensors"]
    out.one("hutch_sensors", "gauge", "Sensors whose readings are deduplicated now", sensors["known"])
    out.one(
        "hutch_sensor_duplicates_dropped_total",
        "counter",
        "Sensor readings sent again (same x-sensor-id and x-sensor-seq) and dropped",
        sensors["duplicates_dropped"],
    )
    out.one(
        "hutch_sensors_forgotten_total", "counter", "Sensors forgotten to make room (max_sensors)", sensors["forgotten"]
    )
    out.one("hutch_sensor_restarts_total", "counter", "Sensors whose sequence started over", sensors["restarted"])
    out.one(
        "hutch_bridge_duplicates_dropped_total",
        "counter",
        "Messages a bridge sent again that were taken already, dropped",
        snap["duplicates_dropped"],
    )


def _devices(out, devices):
    """The [[device]]s polled (devices/device.py snapshot)."""
    if not devices:
        return
    out.family("hutch_device_polls_total", "counter", "Polls of each device, by how they ended")
    for device in devices:
        for result, count in device["polls"].items():
            out.sample(
                "hutch_device_polls_total", count, '{device="%s",result="%s"}' % (escape(device["name"]), result)
            )
    out.family("hutch_device_up", "gauge", "1 while a device answers its polls, 0 while it is down")
    for device in devices:
        out.sample("hutch_device_up", device["state"] == "up", '{device="%s"}' % escape(device["name"]))
    out.family("hutch_device_poll_seconds", "summary", "How long the polls that answered took")
    for device in devices:
        labels = '{device="%s"}' % escape(device["name"])
        out.sample("hutch_device_poll_seconds_sum", device["poll_seconds"], labels)
        out.sample("hutch_device_poll_seconds_count", device["polls"]["ok"], labels)
    out.family("hutch_device_readings_refused_total", "counter", "Readings the broker refused (a full queue, an alarm)")
    for device in devices:
        out.sample("hutch_device_readings_refused_total", device["refused"], '{device="%s"}' % escape(device["name"]))


def _health(out, snap):
    """The gateway's health (core/health.py: 1 for the state it is in), and whether publishers
    are blocked, for memory (RabbitMQ's series: the memory and budget alarms) and at all."""
    from ..core.health import STATES, verdict

    state, _ = verdict(snap)
    out.family("hutch_health", "gauge", "1 for the gateway's health: ok, degraded or failing (hutch ctl health)")
    for one in STATES:
        out.sample("hutch_health", state == one, '{state="%s"}' % one)
    alarms = snap.get("alarms", ())
    out.one(
        "rabbitmq_alarms_memory_used_watermark",
        "gauge",
        "1 while publishers are blocked for memory (above memory_high_watermark, the heap, or the budget of queued messages)",
        "memory" in alarms or "budget" in alarms,
    )
    out.one("hutch_publishers_blocked", "gauge", "1 while publishers are blocked, for any alarm", bool(snap["blocked"]))


def _bridges(out, bridges):
    if not bridges:
        return
    out.family("hutch_bridge_state", "gauge", "1 for the state each bridge is in")
    for bridge in bridges:
        for state in BRIDGE_STATES:
            labels = '{bridge="%s",state="%s"}' % (escape(bridge["name"]), state)
            out.sample("hutch_bridge_state", bridge["state"] == state, labels)
    for series, kind, help_text, key in (
        ("hutch_bridge_failovers_total", "counter", "Links that ran on another URI than the link before", "failovers"),
        (
            "hutch_bridge_failbacks_total",
            "counter",
            "Moves back to an earlier URI that answered again (prefer_first)",
            "failbacks",
        ),
        ("hutch_bridge_forwarded_total", "counter", "Messages forwarded (up) or received (down)", "forwarded"),
        ("hutch_bridge_in_flight", "gauge", "Messages sent and not yet confirmed", "in_flight"),
        ("hutch_bridge_backlog", "gauge", "Messages waiting to be forwarded (NaN: not known)", "backlog"),
    ):
        out.family(series, kind, help_text)
        for bridge in bridges:
            out.sample(series, bridge[key], '{bridge="%s"}' % escape(bridge["name"]))
    out.family(
        "hutch_bridge_oldest_age_seconds", "gauge", "Age of the oldest message waiting to be forwarded (NaN: none)"
    )
    for bridge in bridges:
        out.sample("hutch_bridge_oldest_age_seconds", bridge["oldest_age_s"], '{bridge="%s"}' % escape(bridge["name"]))
    out.family(
        "hutch_bridge_alarm", "gauge", "1 while a bridge's backlog, oldest age or bytes are past its alarm thresholds"
    )
    for bridge in bridges:
        out.sample("hutch_bridge_alarm", bridge.get("alarm") is not None, '{bridge="%s"}' % escape(bridge["name"]))


PROCESS = (
    ("rabbitmq_process_resident_memory_bytes", "Resident memory of the broker's process", "resident_memory_bytes"),
    ("rabbitmq_resident_memory_limit_bytes", "memory_high_watermark: publishers are blocked above it",
     "resident_memory_limit_bytes"),
    ("rabbitmq_process_open_fds", "Open file descriptors", "open_fds"),
    ("hutch_heap_free_bytes", "Free heap (MicroPython)", "heap_free_bytes"),
    ("hutch_heap_used_bytes", "Heap in use (MicroPython)", "heap_used_bytes"),
    ("rabbitmq_disk_space_available_bytes", "Disk space free for the data folder", "disk_free_bytes"),
    ("rabbitmq_disk_space_available_limit_bytes", "disk_free_limit: publishers are blocked below it",
     "disk_free_limit_bytes"),
    ("rabbitmq_alarms_free_disk_space_watermark", "1 while publishers are blocked for low disk space",
     "disk_free_alarm"),
)  # fmt: skip


def _process(out, process):
    for series, help_text, key in PROCESS:
        if key in process:
            out.one(series, "gauge", help_text, process[key])
