"""A message, as the broker holds it whatever protocol brought it.

Its native form is the AMQP 0-9-1 publisher's bytes: `header_tail` and `body_tail` are the
incoming content frames minus their first three octets (type and channel), that is size +
payload + frame-end, and `route` its exchange and routing key as shortstrs. A 0-9-1 delivery
on another channel only puts a new 3-octet prefix in front of each (amqp091/output.py): the
content header is reused byte for byte and the body is never copied; the journal and the
streams store the same bytes. The broker reads a message only through the accessors below
(flags, persistent, has_header, properties, ttl, cost, body_size), as RabbitMQ's message
container (mc) is read, so that another front end can hand it a message of its own making.
Properties are decoded only when a feature asks for them.
"""

import sys

from ..codec.wire import decode_properties

# Heap a queued message costs beyond its body and header: the Message, its byte strings
# and the queue entry. Measured with a 5-byte body: ~356 bytes on 64-bit CPython 3.11
# (tracemalloc), ~580 on the MicroPython unix port (with allocator slack).
MESSAGE_OVERHEAD = 600 if sys.implementation.name == "micropython" else 340

FLAG_EXPIRATION = 0x0100
FLAG_DELIVERY_MODE = 0x1000
FLAG_HEADERS = 0x2000
FLAG_USER_ID = 0x0010
FLAG_REPLY_TO = 0x0200


class Message:
    journal_id = 0  # its id in the journal, once journalled (core/store/journal.py); 0: not journalled
    segment = 0  # the journal segment holding it
    arrived = 0  # wall-clock ms of its publish (Broker.publish; from the journal when paged in); 0: not known
    # milliseconds, from the expiration property when set. (A class default: most messages have
    # none, and on MicroPython an eleventh attribute of its own would cost each message 32 bytes.)
    ttl = None  # type: int | None
    forward_seq = 0  # a transient message's sequence number on a bridge, once forwarded (core/bridge/outbox.py)
    cc = None  # type: list | None  # its CC and BCC headers' keys (sender-selected distribution), routed too
    # A message another protocol's publisher wrote, in that protocol's own octets, besides the
    # 0-9-1 form above (an AMQP 1.0 message: amqp10/message.py), so that a consumer of the
    # same protocol gets it as it was sent; None for a 0-9-1 publish. Kept in memory only: a
    # message read back from the journal, a backlog on disk or a stream has its 0-9-1 form.
    native = None  # type: tuple | None
    # Who published it and whether to be kept for later subscribers, where the front end says
    # (an MQTT client's id and its RETAIN flag: mqtt/options.py's no local and retain as
    # published). Kept in memory only, as native is.
    origin = None  # type: bytes | None
    retain = False
    # Whose record completes its own in the journal, as its flags say it (core/store/journal.py):
    # PAIRED, a QoS 2 publish's packet id (mqtt/publishing.py); NUMBERED, a bridge's or a
    # sensor's number taken (core/dedup.py). A power cut that takes that record takes it too.
    paired = 0

    def with_key(self, routing_key):
        """The same message under another routing key, for routing it by that key alone."""
        other = Message(self.exchange, routing_key, None, self.header_tail, None, 0)
        other._properties = self._properties
        return other

    def __init__(self, exchange, routing_key, route, header_tail, body_tail, body_size):
        self.exchange = exchange  # bytes
        self.routing_key = routing_key  # bytes
        self.route = route  # exchange + routing key as shortstrs, ready for deliver
        self.header_tail = header_tail
        self.body_tail = body_tail  # None when body_size == 0
        self.body_size = body_size
        self.cost = body_size + len(header_tail) + MESSAGE_OVERHEAD  # heap bytes held, for the budgets
        self._properties = None
        # Its place in publish order (Broker.publish numbers every message, and a paged one as it
        # is read back): a queue takes an unacknowledged message back to the place this gives it.
        # Set here, not left to a class default: an attribute first set after __init__ costs
        # CPython's publish path ~0.4 us a message (its instance dict stops sharing keys).
        self.order = 0

    def header(self):
        """The content header payload (class, weight, size, flags, properties)."""
        return memoryview(self.header_tail)[4:-1]

    def body(self):
        if self.body_tail is None:
            return b""
        return memoryview(self.body_tail)[4:-1]

    def flags(self):
        # the property flags read straight from the frame: every publish asks, and
        # the memoryview would cost more than the rest of the check (header_tail is size(4) +
        # class, weight, body size (12) + flags: on_header made sure they are all there).
        tail = self.header_tail
        return (tail[16] << 8) | tail[17]

    def persistent(self):
        """delivery-mode 2, read from the frame (asked per publish and ack): the properties
        before it (content type, encoding, the headers table) are stepped over by their
        lengths, not decoded (an MQTT publish always has headers)."""
        tail = self.header_tail
        high = tail[16]  # the property flags' first octet (see flags())
        if not high & FLAG_DELIVERY_MODE >> 8:
            return False
        pos = 18  # the first property's octet
        if high & 0x80:  # content-type, a shortstr
            pos += 1 + tail[pos]
        if high & 0x40:  # content-encoding
            pos += 1 + tail[pos]
        if high & 0x20:  # headers, a table: its octets' count, then them
            pos += 4 + ((tail[pos] << 24) | (tail[pos + 1] << 16) | (tail[pos + 2] << 8) | tail[pos + 3])
        return tail[pos] == 2

    def has_header(self, key_shortstr):
        """Whether its headers table may hold this key (given as its shortstr encoding): a look
        at the bytes, before any decoding; decode properties() to be sure. Routing asks it of
        every publish: a bridge's x-hutch-seq, CC and BCC (core/headers.py)."""
        tail = self.header_tail
        return tail[16] & 0x20 and key_shortstr in tail

    def properties(self):
        if self._properties is None:
            self._properties = decode_properties(self.header())
        return self._properties
