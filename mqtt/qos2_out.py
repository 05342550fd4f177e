"""A session's QoS 2 deliveries to its client, kept on disk from PUBLISH to PUBCOMP, so that a
subscriber never gets a message twice once it has answered PUBREC, through a reconnect or a
restart of the broker (4.3.3: the packet id, not the message, is what a receiver remembers).

Each step is a persistent message of a durable queue of the session's, `mqtt-qos2-out-<client
id>` (own_queues.OUTBOUND_PREFIX), whose body starts with the packet id and the step:

    SENT      a copy of the delivered message (the topic, then the payload; its properties):
              written before its PUBLISH goes out, which waits for the journal to have it,
              and the message leaves its subscription's queue in the same journal pass after
              it (core/store/journal.py writes a removal after the publish it follows)
    RELEASED  the packet id alone, written at the client's PUBREC, before the PUBREL that
              answers it is sent (the same wait), and the copy settled after it

PUBCOMP settles the RELEASED step: the exchange is over. While the client is connected the
queue's messages are all delivered to this object and held unsettled; when it goes they go
back to the queue, and the session's next connection (after a restart too) is given them
again: a SENT step is sent again as a PUBLISH with DUP and the same packet id, a RELEASED one
as a PUBREL (4.4). A crash between the steps leaves the earlier one on disk: the client is
asked again what it may already have answered, never given the message under a new id.

Loaded with a session's first QoS 2 delivery or with a session that has such steps on disk.
"""

import struct

from ..core.broker import ACCEPT
from ..core.session import MESSAGE
from . import own_queues, packets
from .held import Held
from .publishing import QOS_HEADER, properties_5

SENT = 0x50  # "P": a copy of the message, its PUBLISH sent or to be sent
RELEASED = 0x52  # "R": its PUBREC came, the PUBREL sent or to be sent
UNFINISHED = (None, None, "qos 2")  # what the session's inflight holds for a packet id of ours (mqtt/session.py)


class Unfinished(Held):
    """The session's QoS 2 deliveries between PUBLISH and PUBCOMP: what mqtt/session.py hands
    over to send, and the client's PUBREC and PUBCOMP. Also its queue's consumer's session
    (core/session.py). held: packet id -> [step, queue, entry], the entry None until the queue
    has handed the step's message over; the session's inflight holds UNFINISHED for each."""

    def __init__(self, session):
        Held.__init__(self, session, own_queues.OUTBOUND_PREFIX, b"mqtt-qos2-out")
        self.settle_on_arrival = []  # (packet id, step) of steps settled before the queue handed them over

    def held_entries(self):
        return [(queue, entry) for _step, queue, entry in self.held.values() if entry is not None]

    def send(self, packet_id, message, topic, packet, queue=None, entry=None):
        """A QoS 2 delivery of message (of topic) under packet_id, packet its PUBLISH: a copy is
        kept, then the entry leaves queue (None: a retained message, which stays), and packet
        goes out once the copy is on disk."""
        session = self.session
        session.inflight[packet_id] = UNFINISHED
        properties = dict(message.properties())
        properties.pop("expiration", None)  # (an exchange under way ends, whatever the message's expiry)
        self.held[packet_id] = [SENT, None, None]  # (first: the queue may hand it over at once)
        body = struct.pack(">HBH", packet_id, SENT, len(topic)) + topic + bytes(message.body())
        seq = self.keep(properties, body)
        if queue is not None:
            session.consumers_by_qos[2].unacked += 1  # (its window counts deliveries until their PUBCOMP)
            self.broker.delivered(queue, entry, True)  # (after its copy: the journal writes that first)
        session.publishing.after_sync(seq, packet)

    def qos_of(self, message):
        """What a QoS 2 subscription delivers message at: the QoS it was published at (an MQTT
        publish's x-mqtt-publish-qos, 1 for another)."""
        if not message.has_header(QOS_HEADER):
            return 1
        return (message.properties().get("headers") or {}).get("x-mqtt-publish-qos", 1)

    def pubrec(self, packet_id, code):
        """The client's PUBREC: the release replaces the copy, and the PUBREL goes out once it is
        on disk. A version 5 client's reason code of 0x80 or more ends the delivery there; a
        PUBREC for no delivery of ours is answered PUBREL with 0x92 (a version 5 client's)."""
        session = self.session
        found = self.held.get(packet_id)
        if found is None or session.inflight.get(packet_id) is not UNFINISHED:
            session.conn.send(
                packets.ack(packets.PUBREL, packet_id, packets.PACKET_IDENTIFIER_NOT_FOUND, session.level)
            )
            return
        seq = 0
        if found[0] == RELEASED:  # (a PUBREC again: the PUBREL again)
            pass
        elif code < 0x80:
            self.held[packet_id] = [RELEASED, None, None]  # (first: the queue may hand it over at once)
            seq = self.keep({}, struct.pack(">HB", packet_id, RELEASED))
            self._settle(packet_id, found)  # (after the RELEASED step: the journal writes it first)
        else:
            del self.held[packet_id]
            self._settle(packet_id, found)
            self._finished(packet_id)
            return
        session.publishing.after_sync(seq, packets.ack(packets.PUBREL, packet_id, packets.SUCCESS, session.level))

    def pubcomp(self, packet_id):
        """The client's PUBCOMP: the delivery is over (one it does not hold is let be)."""
        found = self.held.get(packet_id)
        if found is None or found[0] != RELEASED:
            return
        del self.held[packet_id]
        self._settle(packet_id, found)
        self._finished(packet_id)

    def _finished(self, packet_id):
        session = self.session
        session.inflight.pop(packet_id, None)
        consumer = session.consumers_by_qos[2]
        if consumer is not None and consumer.unacked:
            consumer.unacked -= 1
            consumer.queue.dispatch()

    def _settle(self, packet_id, found):
        step, queue, entry = found
        if entry is None:  # (not handed over yet, a paged queue's: settled when it is)
            self.settle_on_arrival.append((packet_id, step))
            return
        self.consumer.unacked -= 1
        self.broker.settle(queue, [entry], ACCEPT, None)

    def end(self, forget):
        Held.end(self, forget)
        self.settle_on_arrival = []

    def deliver(self, consumer, queue, entry):
        message = entry[MESSAGE]
        body = message.body()
        packet_id, step = struct.unpack_from(">HB", body)
        consumer.unacked += 1
        if message.journal_id:
            self.broker.delivered(queue, entry, False)
        if (packet_id, step) in self.settle_on_arrival:
            self.settle_on_arrival.remove((packet_id, step))
            self._settle(packet_id, (step, queue, entry))
            return
        found = self.held.get(packet_id)
        if found is not None and found[0] == step and found[2] is None:  # (written by this connection)
            found[1], found[2] = queue, entry
            return
        # a step its last connection left: the exchange goes on where it was, with the same id
        self.held[packet_id] = [step, queue, entry]
        session = self.session
        session.inflight[packet_id] = UNFINISHED
        if step == SENT:  # its PUBLISH again, with DUP
            (length,) = struct.unpack_from(">H", body, 3)
            topic, payload = bytes(body[5 : 5 + length]), bytes(body[5 + length :])
            props = properties_5(message, None) if session.level == packets.V5 else None
            session.conn.send(packets.publish(topic, payload, 2, False, True, packet_id, props, session.level))
        else:
            session.conn.send(packets.ack(packets.PUBREL, packet_id, packets.SUCCESS, session.level))
