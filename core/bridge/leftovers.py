"""The queues bridges leave behind, taken in: a bridge forwarding from a source exchange owns the
queue hutch.bridge.NAME (with classes, one per class: hutch.bridge.NAME.CLASS), bound there, so
a bridge removed from the config, made into classes, or a class removed or renamed leaves a
queue that the exchange still fills and nobody forwards.

At each start and reload (server/bridges/setup.py), for each such queue no bridge owns:

- its messages go to the queues of the bridge that inherits it, the up bridge named NAME (or
  the longest name NAME.CLASS starts with) if it forwards from a source exchange: each to the
  queues among that bridge's that its source exchange routes it to now (by the classes'
  binding keys), in order, each published there before it leaves the old queue (a crash
  between the two leaves it in both: at least once, never lost);
- what no queue of the heir takes, or every message when there is no heir, stays, the queue
  unbound so that it grows no more: said in one line each (`said`), and shown by `hutch ctl
  bridges` (core/snapshot.py `left_behind`) until a bridge takes it or it is deleted;
- an empty queue is deleted.

Sans-IO and MicroPython-clean; loaded only when such a queue exists.
"""

from ..message import Message
from ..session import MESSAGE
from ..topology import delete_queue, remove_binding
from .classes import classes_of

PREFIX = b"hutch.bridge."


def owned(bridges):
    """The names (bytes) of the queues the up bridges of these settings forward."""
    names = set()
    for settings in bridges:
        if settings["direction"] == "up":
            for one in classes_of(settings):
                if one["queue"] is not None:
                    names.add(one["queue"].encode())
    return names


def left_behind(broker, bridges):
    """The queues named as a bridge's own that none of these bridges forwards, by name."""
    mine = owned(bridges)
    return [
        queue
        for name, queue in sorted(broker.queues.items())
        if name.startswith(PREFIX) and name not in mine and not queue.is_stream
    ]


def take_in(broker, bridges):
    """Each queue left behind: its messages moved to its heir's queues, the rest left unbound,
    an empty one deleted. One line for each, said (a reload's answer, the log)."""
    said = []
    for queue in left_behind(broker, bridges):
        name = queue.name.decode()
        heir = _heir(queue.name[len(PREFIX) :].decode(), bridges)
        moved = _move(broker, queue, heir) if heir is not None else 0
        for binding in list(queue.inbound):
            remove_binding(broker, binding)
        left = queue.message_count()
        if not left and not queue.consumers:
            delete_queue(broker, queue)
            if moved:
                said.append(
                    "queue %s: its %d messages went to bridge %s, and it was deleted" % (name, moved, heir["name"])
                )
            continue
        why = "no class of bridge %s takes them" % heir["name"] if heir is not None else "no bridge forwards it"
        said.append(
            "queue %s: %d messages left (%s%s); it is unbound: `hutch ctl delete queue %s` drops them"
            % (name, left, why, ", %d went to bridge %s" % (moved, heir["name"]) if moved else "", name)
        )
    return said


def _heir(name, bridges):
    """The up bridge from a source exchange whose name is name, or the longest that name starts
    with followed by a dot (a class of it), or None."""
    best = None
    for settings in bridges:
        own = settings["name"]
        if settings["direction"] != "up" or settings["source_exchange"] is None:
            continue
        if (name == own or name.startswith(own + ".")) and (best is None or len(own) > len(best["name"])):
            best = settings
    return best


def _move(broker, queue, heir):
    """The messages of queue that heir's source exchange routes to heir's queues, moved there in
    order; the rest kept in queue, in order. How many moved."""
    exchange = broker.exchange(heir["source_exchange"].encode())
    mine = [broker.queues.get(one["queue"].encode()) for one in classes_of(heir)]
    moved = 0
    kept = []
    while True:
        entry = queue.take()
        if entry is None:
            break
        message = entry[MESSAGE]
        others = []  # the queues the exchange routes it to that are not the heir's
        taken = False
        if exchange is not None:
            for target in broker.route(exchange, message):
                if target in mine:
                    taken = True
                else:
                    others.append(target.name)
        if not taken:
            kept.append(entry)
            continue
        copy = Message(
            message.exchange,
            message.routing_key,
            message.route,
            message.header_tail,
            message.body_tail,
            message.body_size,
        )
        copy.cc = message.cc
        broker.publish(exchange, copy, None, others)  # (to the heir's queues alone; before it leaves the old one)
        queue.forget(message)
        moved += 1
    if kept:
        queue.requeue(kept)
    return moved
