"""A session's QoS 2 packet ids between PUBREC and PUBREL, kept on disk: the client may send its
PUBLISH again (with DUP) until it has our PUBREC, and its PUBREL after a reconnect or a restart
of the broker; a PUBLISH with an id held here was taken already, and is not taken again.

The ids are messages of a durable queue of the session's, `mqtt-qos2-<client id>`, each a
persistent message whose body is the id: a PUBREC waits until the journal has it (with the
message it answers), a PUBREL settles it (gone from the journal). While the client is
connected, the queue's messages are all delivered to this object and held unsettled; when it
goes, they go back to the queue, and the next connection of the session (after a restart too)
is given them again.
"""

from ..core.broker import ACCEPT
from ..core.session import MESSAGE
from .held import Held
from .own_queues import INBOUND_PREFIX


class AwaitingRelease(Held):
    """The session's held QoS 2 packet ids: held, packet id -> (queue, entry) of its message."""

    def __init__(self, session):
        Held.__init__(self, session, INBOUND_PREFIX, b"mqtt-qos2")

    def __contains__(self, packet_id):
        return packet_id in self.held

    def hold(self, packet_id):
        """A QoS 2 PUBLISH was taken: hold its id. Returns the journal sequence number its PUBREC
        waits for (0: none)."""
        return self.keep({}, bytes(((packet_id >> 8) & 0xFF, packet_id & 0xFF)))

    def release(self, packet_id):
        """PUBREL: True if the id was held (now let go)."""
        found = self.held.pop(packet_id, None)
        if found is None:
            return False
        queue, entry = found
        self.consumer.unacked -= 1
        self.broker.settle(queue, [entry], ACCEPT, None)
        return True

    def deliver(self, consumer, queue, entry):
        message = entry[MESSAGE]
        body = bytes(message.body())
        consumer.unacked += 1
        if message.journal_id:
            self.broker.delivered(queue, entry, False)
        self.held[(body[0] << 8) | body[1]] = (queue, entry)
