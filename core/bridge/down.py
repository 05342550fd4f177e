"""A down bridge's decisions: an upstream queue brought here (commands).

Its local side is core/bridge/inbox.py; the state, URIs and backoff are core/bridge/machine.py's.
Per link, after the handshake: set-up (has-queue, the upstream queue checked, its count the
backlog shown; prefetch; consume: codec/upstream.py's steps), then each delivery is
published here (`delivered`: a refusal to send upstream at once, if any) and acked upstream
once held here as promised (`to_ack`), in neutral words each client says in its protocol's
(ack and nack: client/protocol.py, mqtt/client.py). A message that no local queue takes is refused
upstream (nack without requeue: its dead-letter exchange there, if any); one this broker
refuses for now (memory, disk, a full queue) goes back (nack, requeue) and the link ends, to
back off.

Sans-IO and MicroPython-clean.
"""

from .inbox import DROP, REQUEUE, Inbox
from .machine import BridgeError, Machine


class DownMachine(Machine):
    def __init__(self, broker, settings, log, random_bits, wake=None):
        destination = settings["exchange"]
        check_destination(broker, settings)
        Machine.__init__(self, broker, settings, log, random_bits)
        routing_key = settings["routing_key"]
        self.inbox = Inbox(
            broker,
            destination.encode() if destination is not None else None,
            routing_key.encode() if routing_key is not None else None,
            wake,
        )
        self.upstream_backlog = None  # the upstream queue's count at the last connect
        self.acked = 0  # the highest delivery tag acked on this link
        self.refused = None  # why a delivery was sent back: the link then ends, to back off

    def set_up_steps(self):
        if not self.settings["set_up"]:
            return []  # (the MQTT client subscribes once connected)
        queue = self.settings["queue"]
        return [("has-queue", queue), ("prefetch", self.prefetch), ("consume", queue, "hutch.bridge." + self.name)]

    def link_opened(self, now):
        self.acked = 0
        self.refused = None

    def backlog(self, count):
        """The upstream queue's count, as its has-queue step was answered."""
        self.upstream_backlog = count

    def delivered(self, tag, exchange, routing_key, header_tail, body_tail, body_size):
        """A delivery from upstream, published here: None (acked once held: to_ack), or
        (tag, requeue): refuse it upstream now (the client's nack), back to its queue there or
        not."""
        outcome = self.inbox.receive(tag, exchange, routing_key, header_tail, body_tail, body_size)
        if outcome == DROP:
            self.log(
                "warning",
                "bridge %s: no local queue takes a message routed '%s': refused to upstream (its dead-letter exchange, if any)"
                % (self.name, routing_key.decode() if isinstance(routing_key, bytes) else routing_key),
            )
            return (tag, False)
        if outcome == REQUEUE:
            self.refused = "this broker refused a message (memory, disk or a full queue): back to upstream"
            return (tag, True)
        return None

    def to_ack(self):
        """The tag to ack upstream now with every delivery before it (the client's ack, multiple),
        all held here as promised; 0: none."""
        tag = self.inbox.ackable()
        if tag > self.acked:
            self.acked = tag
            return tag
        return 0

    def running(self):
        pass

    def stalled(self, now):
        return None  # (a down bridge's link is watched by its heartbeats)

    def check(self):
        return self.refused

    def link_down(self):
        self.inbox.link_down()  # upstream takes its unacked deliveries back

    def close(self):
        pass

    def unsettled(self):
        return 0  # (what upstream delivered and this broker has not acked comes again: nothing to wait for)


def check_destination(broker, settings):
    """BridgeError if a down bridge's local exchange is missing (a reload asks before it stops
    the bridge it replaces)."""
    destination = settings["exchange"]
    if destination is not None and broker.exchange(destination.encode()) is None:
        raise BridgeError("bridge %s: no local exchange '%s' to publish to" % (settings["name"], destination))
