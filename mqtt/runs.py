"""Runs of alike QoS 0 or QoS 1 PUBLISHes, and of PUBACKs (CPython only): a read's PUBLISHes to
one topic, and its PUBACKs, taken in one go.

A sensor streaming readings sends PUBLISH after PUBLISH to one topic, and a read of its socket
holds many of them (hundreds at QoS 0; at QoS 1 as many as it keeps unacknowledged). Taken one
by one, each is read, admitted, routed, made a Message, enqueued and delivered on its own. Here
(parse, which reads for Connection.parse) the PUBLISHes that follow one alike (the same QoS, 0
or 1, neither DUP nor RETAIN, the same topic, no version 5 properties) go through the broker's
run path (core/runs.py publish_run): the gates and the routing once, for the first, then the
whole run into its queues (persistent ones each into the journal first). At QoS 1 their
PUBACKs go together, once the journal has what they promise. A QoS 0 subscriber that can take
a QoS 0 run gets each PUBLISH as it came (MqttRun.deliver: the same octets, or with the version
5 properties' length, 0, put in or taken out): no Message is made for what is delivered at
once; other deliveries are made one by one.

A QoS 1 subscriber acknowledges what it was sent, and a read of its socket holds its PUBACKs for
a whole prefetch window (20 by default). Those are settled together (acked_run): one settle per
queue, and each queue dispatched once after all of them, where one by one a queue is dispatched
after each PUBACK. A subscriber whose PUBACKs free deliveries of two of its queues in one read
gets the next of the first queue's before the second's; one by one they alternate as the
PUBACKs did. MQTT orders messages within one subscription, not across two. While publishers
are blocked, PUBACKs go one by one (acked_run says why).

The one-by-one path is the reference: a run is taken only where the effect is the same as
publishing its messages one after the other (tests/mqtt/test_mqtt_runs.py feeds the same
octets to both and compares what every client gets, the queues and the counters), and the
broker's run path says where that is (core/runs.py takes_run). A run stops before a
PUBLISH that says who sent it (a sensor's JSON id fields: mqtt/identity.py), before one
larger than the broker takes, and where another packet comes.

server/startup.py hands parse to the MQTT front end on CPython (Serving.parse); a board never
loads this module.
"""

import struct

from ..core import counters
from ..core.broker import ACCEPT, add_to_group
from ..core.content import body_tail, header_tail
from ..core.message import Message
from ..core.runs import publish_run as broker_publish_run
from . import own_queues, packets
from .publishing import plain_properties
from .session import Session
from .topics import topic_of

PLAIN_QOS0 = 0x30  # a PUBLISH's first octet at QoS 0, neither DUP nor RETAIN
PLAIN_QOS1 = 0x32  # ... at QoS 1
PLAIN_PUBACK = 0x40  # a PUBACK's first octet (it has no flags)
PUBACK_SUCCESS = 0x40020000  # a success PUBACK's first octet and remaining length, before its id


def parse(conn, data):
    """(Connection.parse, where Serving.parse is this) Every whole packet of data: where the rest
    begins. The same as Connection.parse's own loop, but that a QoS 0 or QoS 1 PUBLISH with more
    after it may start a run (publish_run), and a PUBACK with more after it a run of them
    (acked_run)."""
    pos = 0
    n = len(data)
    runs = conn.session is not None
    solo = 0  # PUBLISHes to take one by one without trying a run again (one was refused)
    while pos < n and not conn.closed and not conn.paused:
        found = packets.split(data, pos, conn.most_in)
        if found is None:
            break
        first, start, end = found
        if first == PLAIN_PUBACK and runs and end < n and data[end] == PLAIN_PUBACK:
            after = acked_run(conn, data, pos)
            if after > pos:
                pos = after
                continue
        if (first == PLAIN_QOS0 or first == PLAIN_QOS1) and runs and end < n:
            if solo:
                solo -= 1
            else:
                taken, after = publish_run(conn, data, pos, start, end)
                if taken > 0:
                    pos = after
                    continue
                solo = max(0, -taken - 1)
        if conn.packet(first, data, start, end):
            break  # a PUBLISH held back unread (Connection.parse)
        pos = end
    return pos


def acked_run(conn, data, pos):
    """The PUBACKs from data[pos] on, up to the first packet that is not one or is not whole,
    settled together (Session.let_go, as Session.acked settles each): each queue they leave
    dispatched once, after all of them, where one by one it is dispatched after each. Where the
    packet after them starts (pos: none taken, the one-by-one path reads it). While publishers
    are blocked they go one by one: the settle that unblocks them resumes the publishers held back
    there and then (core/flow.py), before the next PUBACK's, and settled together they would find
    more room."""
    if conn.broker.flow.blocked:
        return pos
    session = conn.session
    groups = []
    n = len(data)
    limit = conn.most_in
    # (the loop is alike's, written out: as one generator for both it cost a QoS 0 run's
    # PUBLISH 0.2 µs more, a tenth of what the broker spends on it)
    while pos < n and data[pos] == PLAIN_PUBACK:
        try:
            found = packets.split(data, pos, limit)
        except packets.Malformed:
            break  # (the PUBACKs before it go first, as one by one: then it ends the connection)
        if found is None:
            break
        _first, start, end = found
        if end - start < 2:
            break  # (no packet id: malformed, as the one-by-one path says)
        held = session.let_go((data[start] << 8) | data[start + 1])
        if held is not None:
            add_to_group(groups, held[0], held[1])
        pos = end
    broker = conn.broker
    for queue, entries in groups:
        broker.settle(queue, entries, ACCEPT, session.stats)
    for queue, _entries in groups:
        queue.dispatch()
    return pos


def publish_run(conn, data, pos, start, end):
    """The QoS 0 or QoS 1 PUBLISH at data[pos:end] (its variable header from start on) and the
    alike PUBLISHes right after it in data, through the broker as one run. (taken, where the
    packet after them starts); taken is 0 when the first must go the one-by-one way, -n when
    the n alike PUBLISHes from it must (a run of them was refused: trying again at each would
    only cost more)."""
    if end - start < 2:
        return 0, 0  # malformed: the one-by-one path says so
    first_octet = data[pos]
    topic_size = (data[start] << 8) | data[start + 1]
    head = start + 2 + topic_size
    topic = bytes(data[start + 2 : head])
    five = conn.level == packets.V5
    packet_id, head = packet_id_at(data, head, end, first_octet, five)
    if head is None:
        return 0, 0
    publishing = conn.session.publishing
    found = publishing.routes.get(topic)
    if found is None or conn.serving.origins:
        return 0, 0  # a topic not checked yet (one by one first), or a publish that says who sent it
    key, route, exact = found
    spans = alike(data, end, topic, five, conn.most_in, first_octet)
    if not spans:
        return 0, 0  # (a run of one would only cost more)
    spans.insert(0, (pos, head, end, packet_id))
    qos = (first_octet >> 1) & 3
    if qos and conn.session.consumers:
        # one by one, a PUBACK not waiting for the journal goes out between the publisher's own
        # deliveries: in a run, after all of them
        return -len(spans), 0
    run = MqttRun(publishing, data, spans, key, route, exact, five, qos)
    if run.names_sensor(0):
        return 0, 0  # (Publishing.send reads who sent it: that one goes its way)
    broker = conn.broker
    first = run.first = run.message(0)
    taken, after, result = broker_publish_run(broker, publishing, publishing.exchange, first, run)
    if not taken:
        return -run.take(len(spans))[0], 0
    if qos:  # their PUBACKs, as Publishing.publish answers each, together
        stats = publishing.stats
        stats[counters.RECEIVED_CONFIRM] += taken
        stats[counters.CONFIRMED] += taken
        acks = pubacks([spans[i][3] for i in range(taken)])
        publishing.after_sync(own_queues.waits_for(broker, result), acks)
    if broker.flow.blocked:
        conn.pause()
    return taken, after


def pubacks(packet_ids):
    """The success PUBACKs of these packet ids, as one buffer: each the four octets 0x40, 2 and
    the id, in every version (a version 5 success omits its reason code, as packets.ack does),
    packed in one call where ack() makes each on its own (0.1 against 1.0 µs a PUBACK)."""
    return struct.pack(">%dI" % len(packet_ids), *[PUBACK_SUCCESS | packet_id for packet_id in packet_ids])


def packet_id_at(data, head, end, first_octet, five):
    """(packet id, payload start) of a PUBLISH whose variable header goes on at head, after its
    topic: a QoS 1 one's packet id (not 0: umqtt's wrap goes one by one, which says so), then a
    version 5 client's properties (none: their length 0, or one by one); (0, None) where it
    must go one by one."""
    packet_id = 0
    if first_octet == PLAIN_QOS1:
        if head + 2 > end:
            return 0, None
        packet_id = (data[head] << 8) | data[head + 1]
        if not packet_id:
            return 0, None
        head += 2
    if five:
        if head >= end or data[head]:
            return 0, None
        head += 1
    if head > end:
        return 0, None
    return packet_id, head


def alike(data, pos, topic, five, limit, first_octet):
    """[(packet start, payload start, end, packet id)] of the PUBLISHes from data[pos] on like the
    one before (first_octet: PLAIN_QOS0 or PLAIN_QOS1; to topic; five: with no version 5
    properties), up to the first packet that is not, or not whole."""
    spans = []
    n = len(data)
    prefix = bytes((len(topic) >> 8, len(topic) & 0xFF)) + topic
    while pos < n and data[pos] == first_octet:
        try:
            found = packets.split(data, pos, limit)
        except packets.Malformed:
            break  # (the PUBLISHes before it go first, as one by one: then it ends the connection)
        if found is None:
            break
        _first, start, end = found
        if data[start : start + len(prefix)] != prefix:
            break
        packet_id, head = packet_id_at(data, start + len(prefix), end, first_octet, five)
        if head is None:
            break
        spans.append((pos, head, end, packet_id))
        pos = end
    return spans


class MqttRun:
    """A run of alike QoS 0 or QoS 1 PUBLISHes as the broker's run path takes one (core/runs.py):
    how many go together, their Messages, their deliveries. `first` is the first as a Message
    (the gates and routing look at it)."""

    def __init__(self, publishing, data, spans, key, route, exact, five, qos):
        self.publishing = publishing
        self.data = data
        self.spans = spans  # [(packet start, payload start, end, packet id)]
        self.key = key
        self.route = route
        self.exact = exact  # the topic, where the routing key cannot say it (mqtt/topics.py)
        self.five = five  # whether the PUBLISHes are version 5's (a properties length, 0, before the payload)
        self.qos = qos
        self.encoded = plain_properties(qos, False, exact)
        self.first = None
        self.taken = 0
        self.made = None  # the taken PUBLISHes as Messages, once asked for (messages())
        self.tail = None  # (payload size, the content header tail of a payload that size): a
        # sensor's readings are mostly one size, so the tail is made once, not once a message

    def names_sensor(self, i):
        """Whether the i-th PUBLISH's payload says who sent it (a sensor's JSON id fields, which
        Publishing.send reads: mqtt/identity.py), looked for as Publishing.send looks."""
        fields = self.publishing.session.serving.sensor_fields
        if fields is None:
            return False
        _pos, head, end, _id = self.spans[i]
        data = self.data
        if type(data) is bytes:
            return data.find(fields[2], head, end) >= 0
        return fields[2] in bytes(data[head:end])  # (a memoryview of a large read has no find)

    def message(self, i):
        """The i-th PUBLISH as Publishing.send makes it (one that does not name its sensor)."""
        _pos, head, end, _id = self.spans[i]
        size = end - head
        tail = self.tail
        if tail is None or tail[0] != size:
            tail = self.tail = (size, header_tail(self.encoded, size))
        # (body_tail's join copies the payload out of the read: a memoryview's slice is not copied first)
        return Message(self.publishing.exchange, self.key, self.route, tail[1], body_tail(self.data[head:end]), size)

    def take(self, most, max_body=-1):
        """(taken, where the packet after them starts, content bytes): how many of the PUBLISHes go
        together, at most `most`, each payload at most max_body and none saying who sent it;
        their payloads and header tails added up (what their Messages cost beyond
        MESSAGE_OVERHEAD each)."""
        spans = self.spans
        tail = len(header_tail(self.encoded, 0))
        taken = size = 0
        for _pos, head, end, _id in spans[: min(most, len(spans))]:
            body = end - head
            if (max_body >= 0 and body > max_body) or self.names_sensor(taken):
                break
            taken += 1
            size += body + tail
        self.taken = taken
        return taken, spans[taken - 1][2] if taken else 0, size

    def messages(self, arrived, order):
        """The taken PUBLISHes as Messages (made once), numbered from order on, arrived at
        `arrived` (Broker.publish sets both of each)."""
        made = self.made
        if made is None:
            made = self.made = []
            for i in range(self.taken):
                message = self.first if i == 0 else self.message(i)
                message.arrived = arrived
                message.order = order + i
                made.append(message)
        return made

    def deliver(self, consumer, queue, count, arrived, order):
        """(core/runs.py) Up to count deliveries of the taken PUBLISHes, a QoS 0 run's, to
        consumer, a QoS 0 subscription whose deliveries of them are the PUBLISHes as they came,
        or those with a version 5 properties length (0) put in or taken out, as Session.deliver
        makes them (else 0: the queue hands them one by one, through Session.deliver): as many
        as its connection takes before its output reaches the high-water mark, as
        Session.can_deliver lets one by one. How many."""
        session = consumer.session
        if (
            self.qos
            or session.__class__ is not Session
            or not consumer.no_ack
            or session.most_out  # (a version 5 client's Maximum Packet Size)
            or session.ended
            or self.exact is not None
            or session.dotted
            or self.key.startswith(b"$")
            or (session.optioned is not None and session.optioned.by_queue)
        ):
            return 0
        conn = session.conn
        data = self.data
        spans = self.spans
        given = 0
        if (session.level == packets.V5) == self.five:
            while given < count and conn.out_bytes < conn.high_water:
                pos, _head, end, _id = spans[given]
                conn.send(data[pos:end] if type(data) is bytes else bytes(data[pos:end]))
                given += 1
            return given
        topic = packets.binary(topic_of(self.key))
        if session.level == packets.V5:
            topic += b"\x00"  # (no properties: the message has none a version 5 PUBLISH says)
        while given < count and conn.out_bytes < conn.high_water:
            _pos, head, end, _id = spans[given]
            size = len(topic) + end - head
            conn.send(b"".join((b"\x30", packets.remaining_length(size), topic, data[head:end])))
            given += 1
        return given

    def stream_records(self, stream, template, now_ms, max_body):
        """A stream takes MQTT publishes one by one: (0 taken, 0, None)."""
        return 0, 0, None
