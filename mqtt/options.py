"""A version 5 subscription's options, kept where the subscription is: in its binding.

A subscription is a binding of the session's queue to the MQTT exchange (mqtt/session.py). Its
options beyond the QoS, which only a version 5 client sets, go in that binding's arguments as
one table, `x-mqtt-subscription-opts` (as RabbitMQ 3.13 keeps them), so they are kept with the
binding through a restart and a plain subscription's binding stays argument-free:

    id                      its Subscription Identifier (3.8.2.1.2), given back in each delivery
    no-local                a message the session itself published is not delivered (3.8.3.1)
    retain-as-published     a delivery keeps the RETAIN flag it was published with

A queue delivers a message once however many of the session's subscriptions match it (MQTT
4.7.1.2 lets a server do so): the delivery carries every matching subscription's identifier,
is dropped by no local only when every matching subscription says no local, and keeps its
RETAIN flag when any says retain as published.

What the two last need to know of a message, who published it and whether it was retained,
is kept on the message in memory (Message.origin, Message.retain) while the broker runs: a
message read back after a restart counts as another client's, published without RETAIN.
"""

from .shared import MEMBER
from .topics import exact_filter, matches

ARGUMENT = "x-mqtt-subscription-opts"


def arguments(options, subscription_id):
    """The binding arguments of a subscription with these options (the SUBSCRIBE's options octet)
    and identifier (None: none)."""
    found = {}
    if subscription_id is not None:
        found["id"] = subscription_id
    if options & 4:
        found["no-local"] = True
    if options & 8:
        found["retain-as-published"] = True
    return {ARGUMENT: found} if found else {}


def of(binding):
    """The options table of a binding, or None for a plain subscription's."""
    return binding.arguments.get(ARGUMENT) if binding.arguments else None


def mine(binding, client_id):
    """Whether a binding is the session's: any of its own queue's, and of a shared
    subscription's queue its member binding (mqtt/shared.py's x-mqtt-shared-member)."""
    member = binding.arguments.get(MEMBER) if binding.arguments else None
    return member is None or bytes(member) == client_id


class Optioned:
    """The subscriptions of one session's queues, to look at per delivery once any of them has
    options: queue name -> [(MQTT filter, options table or None)], remade when its
    subscriptions change; a queue none of whose subscriptions has options is not in it."""

    def __init__(self):
        self.by_queue = {}

    def remake(self, exchange_name, queues, client_id):
        """queues: the session's own and those of the shared subscriptions it is a member of
        (whose bindings but the session's own are other members', not looked at)."""
        by_queue = {}
        for queue in queues:
            if queue is None:
                continue
            found = [
                (exact_filter(binding), of(binding))
                for binding in queue.inbound
                if binding.source.name == exchange_name and mine(binding, client_id)
            ]
            if any(table for _, table in found):
                by_queue[queue.name] = found
        self.by_queue = by_queue

    def delivery(self, queue, message, topic, client_id):
        """(deliver it?, RETAIN as published?, [subscription identifiers] or None) for a message
        of the session's queue, of that topic."""
        found = self.by_queue.get(queue.name) if self.by_queue else None
        if found is None:
            return True, False, None
        all_no_local = True
        keep_retain = False
        ids = []
        for topic_filter, table in found:
            if not matches(topic_filter, topic):
                continue
            if table is None:
                all_no_local = False
                continue
            if not table.get("no-local"):
                all_no_local = False
            if table.get("retain-as-published"):
                keep_retain = True
            sub_id = table.get("id")
            if sub_id is not None:
                ids.append(sub_id)
        if all_no_local and message.origin == client_id:
            return False, False, None
        return True, keep_retain and message.retain, ids or None
