"""`$SYS/broker/...`: the broker's figures under Mosquitto's topic names, for the dashboards that
read them (MQTT Explorer, Node-RED's), every `[mqtt] sys_interval` seconds (10; 0: none).

Each is published through the MQTT exchange to the MQTT subscribers' queues it matches (not to
an AMQP queue bound with `#`: a bridge's, a stream's) as the broker's own message (QoS 0, not
counted as a client's publish), and kept as that topic's retained message in memory only, not in the
journal: fifty topics every ten seconds would wear a gateway's SD card for figures that are
stale after a restart anyway. A subscription made later gets the latest at once
(mqtt/retained.py matching asks `latest`). A filter that starts with `+` or `#` matches none of
them (mqtt/topics.py); a user who may subscribe to the MQTT exchange may read them, as any
topic of it.

The figures are the broker's, every protocol's together (core/counters.py, core/snapshot.py):

    version                               hutch version 0.1.0
    uptime                                N seconds
    clients/connected, disconnected       MQTT clients connected, persistent sessions without one
    clients/total, maximum                the two together; the most connected at once
    messages/received, sent               publishes taken (every protocol's), deliveries made
    publish/messages/received, sent       the same (mosquitto counts PUBLISH packets there and
                                          every packet under messages/)
    publish/messages/dropped              publishes no queue took
    subscriptions/count                   MQTT subscriptions (a shared one once per member)
    retained messages/count               retained messages kept (these included)
    load/messages/received/1min, 5min, 15min    per minute, moving averages over those spans
    load/messages/sent/..., load/publish/dropped/..., load/connections/...

CPython only (mqtt/serving.py): a board publishes none, and its bundle leaves this
module out. Bytes are not among them: the broker does not count them.
"""

import math

from ..core import counters
from ..core.broker import VERSION
from ..core.content import made
from . import retained, shared
from .publishing import properties_091
from .session import QUEUE_PREFIX
from .topics import routing_key

ROOT = b"$SYS/broker/"
SPANS = ((b"1min", 60.0), (b"5min", 300.0), (b"15min", 900.0))
DELIVERED = (
    counters.DELIVERED_CONSUME_MANUAL_ACK,
    counters.DELIVERED_CONSUME_AUTO_ACK,
    counters.DELIVERED_GET_MANUAL_ACK,
    counters.DELIVERED_GET_AUTO_ACK,
)
# what each load/... average follows: a total of the counters
LOADS = (
    (b"messages/received", (counters.RECEIVED,)),
    (b"messages/sent", DELIVERED),
    (b"publish/dropped", (counters.UNROUTABLE,)),
    (b"connections", (counters.CONNECTIONS_OPENED,)),
)


class SysTopics:
    """The broker's ticker (Broker.tickers) that publishes the `$SYS` topics of serving (mqtt/
    connection.py Serving), every interval seconds."""

    def __init__(self, broker, serving, interval):
        self.broker = broker
        self.serving = serving
        self.interval_ms = interval * 1000
        self.started = None  # (the broker's ms clock at the first tick: uptime counts from it)
        self.next_at = 0
        self.most_connected = 0
        self.last = None  # (ms clock, the LOADS' totals) of the last publication
        self.averages = {}  # load name -> [its average per minute over each span]
        serving.sys_latest = {}  # topic -> its latest message (mqtt/retained.py)

    def tick(self, now):
        if self.started is None:
            self.started = now
        if now < self.next_at:
            return
        self.next_at = now + self.interval_ms
        for topic, value in self.figures(now):
            self._publish(ROOT + topic, value)

    def figures(self, now):
        """[(topic under $SYS/broker/, its value as text)]."""
        broker = self.broker
        totals = _totals(broker)
        connected = len(self.serving.clients)
        self.most_connected = max(self.most_connected, connected)
        sessions = _sessions(broker)
        disconnected = len(sessions - set(self.serving.clients))
        received = totals[counters.RECEIVED]
        sent = sum(totals[i] for i in DELIVERED)
        found = [
            (b"version", b"hutch version " + VERSION.encode()),
            (b"uptime", b"%d seconds" % ((now - self.started) // 1000)),
            (b"clients/connected", b"%d" % connected),
            (b"clients/disconnected", b"%d" % disconnected),
            (b"clients/total", b"%d" % (connected + disconnected)),
            (b"clients/maximum", b"%d" % self.most_connected),
            (b"messages/received", b"%d" % received),
            (b"messages/sent", b"%d" % sent),
            (b"publish/messages/received", b"%d" % received),
            (b"publish/messages/sent", b"%d" % sent),
            (b"publish/messages/dropped", b"%d" % totals[counters.UNROUTABLE]),
            (b"subscriptions/count", b"%d" % _subscriptions(broker, self.serving.exchange)),
            (b"retained messages/count", b"%d" % _retained(broker, self.serving.sys_latest)),
        ]
        found.extend(self._loads(now, totals))
        return found

    def _loads(self, now, totals):
        """The load/... averages: each span's exponentially weighted average of the rate per
        minute, moved on by what was counted since the last publication (mosquitto's)."""
        current = [sum(totals[i] for i in indices) for _name, indices in LOADS]
        last, self.last = self.last, (now, current)
        found = []
        for k, (name, _indices) in enumerate(LOADS):
            averages = self.averages.setdefault(name, [0.0] * len(SPANS))
            if last is not None and now > last[0]:
                seconds = (now - last[0]) / 1000.0
                per_minute = (current[k] - last[1][k]) * 60.0 / seconds
                for j, (_label, span) in enumerate(SPANS):
                    weight = math.exp(-seconds / span)
                    averages[j] = per_minute + weight * (averages[j] - per_minute)
            for j, (label, _span) in enumerate(SPANS):
                found.append((b"load/" + name + b"/" + label, b"%.2f" % averages[j]))
        return found

    def _publish(self, topic, value):
        broker = self.broker
        key = routing_key(topic)
        exchange = broker.exchange(self.serving.exchange)
        if exchange is None:
            return
        message = made(exchange.name, key, properties_091(0, False, None), value)
        self.serving.sys_latest[topic] = message
        # MQTT subscribers' queues only: an AMQP queue bound with `#` (a bridge's, a stream the
        # pipeline reads) is not given the broker's figures
        others = [queue.name for queue in broker.route(exchange, message) if not _of_mqtt(queue.name)]
        broker.publish(exchange, message, None, others)


def _totals(broker):
    totals = list(broker.stats)
    for stats in (broker.stats_by or {}).values():
        for i in range(len(stats)):
            totals[i] += stats[i]
    return totals


def _of_mqtt(name):
    return name.startswith(QUEUE_PREFIX) or name.startswith(shared.QUEUE_PREFIX)


def _sessions(broker):
    """The client ids of the MQTT sessions the broker holds (their subscription queues)."""
    found = set()
    for name in broker.queues:
        if name.startswith(QUEUE_PREFIX):
            found.add(name[len(QUEUE_PREFIX) : -4])  # (less its "qos0", "qos1" or "qos2")
    return found


def _subscriptions(broker, exchange):
    count = 0
    for name, queue in broker.queues.items():
        if _of_mqtt(name):
            count += sum(1 for binding in queue.inbound if binding.source.name == exchange)
    return count


def _retained(broker, latest):
    count = len(latest)
    for name, queue in broker.queues.items():
        if name.startswith(retained.PREFIX) and queue.message_count():
            count += 1
    return count
