"""An up bridge's classes of messages, which its one link upstream sends from by priority.

A bridge with `classes` (server/bridges/config.py) takes what its source exchange routes into
one queue per class, hutch.bridge.NAME.CLASS, each bound with the class's binding key and
shown as the bridge NAME.CLASS; a bridge without classes is one class, its own queue, under
its own name. Each class has its outbox (outbox.py: what the queue delivered to the link),
a priority, whether it sends outside the [uplink]'s windows (always_connected), and a
time-to-live and disk budget that its queue keeps as a policy would (`set_policy`).

`sending_order` is the rule between them: the classes that may send now, highest priority
first, and none below a class that still has messages not yet ready to go (held for the
journal or for room in the link's window, or still in its queue): after an outage the alarms
that waited go before any telemetry, whatever moment each was delivered at.

Sans-IO and MicroPython-clean; loaded by every up bridge.
"""


class MessageClass:
    alarm = None  # what crossed the bridge's alarm thresholds (alarms.py), or None
    dropped_seen = 0  # queue.dropped when the last burst of drops was said (alarms.py say_drops)
    dropping = 0  # ... and at the last check

    def __init__(self, settings, outbox):
        """settings: the class's table (classes_of), outbox: its local side."""
        self.name = settings["name"]
        self.settings = settings
        self.priority = settings["priority"]
        self.always_connected = settings["always_connected"]
        self.outbox = outbox
        if self.drops():
            self.dropped_seen = self.dropping = outbox.queue.dropped

    def drops(self):
        """Whether this class drops messages by its own policy (a time-to-live, a disk budget)."""
        return bool(self.settings["ttl"] or self.settings["max_bytes"])  # (a stream's never does)

    def unsent(self):
        """Messages of this class not sent upstream yet (in its queue, held or waiting)."""
        outbox = self.outbox
        return outbox.backlog() - len(outbox.in_flight)


def classes_of(settings):
    """The classes of an up bridge's table: its `classes`, or the bridge itself as the one class
    (its queue, its name, its priority), each a table with name, queue, binding_key, priority,
    always_connected, ttl, max_bytes and when_full."""
    if settings.get("classes"):
        return settings["classes"]
    return [
        {
            "name": settings["name"],
            "queue": settings["queue"],
            "binding_key": settings["binding_key"],
            "priority": settings.get("priority", 0),
            "always_connected": settings.get("always_connected", False),
            "ttl": None,
            "max_bytes": None,
            "when_full": None,
        }
    ]


def sending_order(classes, may_send, floor):
    """The classes that may send now, in the order they send (classes: highest priority first):
    each that may_send(one) and has messages waiting, down to the first whose messages are not
    all waiting (those below it wait for them), and none of a priority below floor (a bridge
    of a higher priority sharing the [uplink] budget has messages: up.py's _outranking)."""
    order = []
    for one in classes:
        if one.priority < floor:
            break
        if not may_send(one):
            continue
        outbox = one.outbox
        if outbox.waiting:
            order.append(one)
        if one.unsent() > len(outbox.waiting):
            break
    return order


def set_policy(broker, queue, one):
    """A class's time-to-live and disk budget, set on its queue at each start and reload as a
    policy would: whatever the queue was declared with, expired messages are dropped (not
    forwarded stale) and, past max_bytes, new ones refused (reject-publish: a publisher's nack)
    or the oldest dropped (drop-head); both counted (Queue.dropped, Queue.refused: `hutch ctl
    bridges`)."""
    ttl = one["ttl"]
    queue.message_ttl = int(ttl * 1000) if ttl else None
    if ttl and queue not in broker.expiring:
        broker.expiring.append(queue)
    queue.max_length_bytes = one["max_bytes"]
    queue.overflow = one["when_full"] or b"drop-head"
