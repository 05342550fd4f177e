"""MQTT's control packets, 3.1, 3.1.1 and 5.0, as bytes: sans-IO, the server's side (what a
client sends is read, what a server sends is written; the client's packets are written too,
for tests and tools).

A packet is a fixed header (type << 4 | flags, then the remaining length as a variable byte
integer) and a body. split() finds a whole packet in a buffer; the readers take its body;
the writers give whole packets as bytes. A version 5 packet carries properties (read into a
dict: id -> value, the user properties as a list of (name, value) under USER_PROPERTY).

Anything malformed raises Malformed(reason code, text): a 5.0 client is told that code in its
DISCONNECT (or CONNACK), an older one is hung up on (MQTT 3.1.1 4.8, 5.0 4.13).
"""

import struct
import sys

MICROPYTHON = sys.implementation.name == "micropython"

# Packet types (the fixed header's high nibble).
CONNECT = 1
CONNACK = 2
PUBLISH = 3
PUBACK = 4
PUBREC = 5
PUBREL = 6
PUBCOMP = 7
SUBSCRIBE = 8
SUBACK = 9
UNSUBSCRIBE = 10
UNSUBACK = 11
PINGREQ = 12
PINGRESP = 13
DISCONNECT = 14
AUTH = 15

NAMES = ("reserved", "CONNECT", "CONNACK", "PUBLISH", "PUBACK", "PUBREC", "PUBREL", "PUBCOMP", "SUBSCRIBE",
         "SUBACK", "UNSUBSCRIBE", "UNSUBACK", "PINGREQ", "PINGRESP", "DISCONNECT", "AUTH")  # fmt: skip

# Protocol levels (CONNECT's): 3.1 (MQIsdp), 3.1.1, 5.0.
V31 = 3
V311 = 4
V5 = 5

# Version 5 reason codes (2.4) the server sends; 3.1.1's CONNACK return codes are noted.
SUCCESS = 0x00
GRANTED_QOS_1 = 0x01
GRANTED_QOS_2 = 0x02
DISCONNECT_WITH_WILL = 0x04
NO_MATCHING_SUBSCRIBERS = 0x10
NO_SUBSCRIPTION_EXISTED = 0x11
UNSPECIFIED_ERROR = 0x80
MALFORMED_PACKET = 0x81
PROTOCOL_ERROR = 0x82
IMPLEMENTATION_SPECIFIC_ERROR = 0x83
UNSUPPORTED_PROTOCOL_VERSION = 0x84  # 3.1.1: 1
CLIENT_IDENTIFIER_NOT_VALID = 0x85  # 3.1.1: 2
BAD_USER_NAME_OR_PASSWORD = 0x86  # 3.1.1: 4
NOT_AUTHORIZED = 0x87  # 3.1.1: 5
SERVER_UNAVAILABLE = 0x88  # 3.1.1: 3
SERVER_BUSY = 0x89
BANNED = 0x8A
SERVER_SHUTTING_DOWN = 0x8B
BAD_AUTHENTICATION_METHOD = 0x8C
KEEP_ALIVE_TIMEOUT = 0x8D
SESSION_TAKEN_OVER = 0x8E
TOPIC_FILTER_INVALID = 0x8F
TOPIC_NAME_INVALID = 0x90
PACKET_IDENTIFIER_IN_USE = 0x91
PACKET_IDENTIFIER_NOT_FOUND = 0x92
RECEIVE_MAXIMUM_EXCEEDED = 0x93
TOPIC_ALIAS_INVALID = 0x94
PACKET_TOO_LARGE = 0x95
QUOTA_EXCEEDED = 0x97
ADMINISTRATIVE_ACTION = 0x98
PAYLOAD_FORMAT_INVALID = 0x99
RETAIN_NOT_SUPPORTED = 0x9A
QOS_NOT_SUPPORTED = 0x9B
SHARED_SUBSCRIPTIONS_NOT_SUPPORTED = 0x9E
CONNECTION_RATE_EXCEEDED = 0x9F
MAXIMUM_CONNECT_TIME = 0xA0
SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED = 0xA1
WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED = 0xA2

# A version 5 CONNACK refusal -> the 3.1.1 return code that says the same (3.1.1 3.2.2.3).
OLD_RETURN_CODES = {
    UNSUPPORTED_PROTOCOL_VERSION: 1,
    CLIENT_IDENTIFIER_NOT_VALID: 2,
    SERVER_UNAVAILABLE: 3,
    SERVER_BUSY: 3,
    SERVER_SHUTTING_DOWN: 3,
    QUOTA_EXCEEDED: 3,
    CONNECTION_RATE_EXCEEDED: 3,
    BAD_USER_NAME_OR_PASSWORD: 4,
    BAD_AUTHENTICATION_METHOD: 4,
    NOT_AUTHORIZED: 5,
    BANNED: 5,
}

# Version 5 properties (2.2.2.2), by identifier.
PAYLOAD_FORMAT_INDICATOR = 0x01
MESSAGE_EXPIRY_INTERVAL = 0x02
CONTENT_TYPE = 0x03
RESPONSE_TOPIC = 0x08
CORRELATION_DATA = 0x09
SUBSCRIPTION_IDENTIFIER = 0x0B
SESSION_EXPIRY_INTERVAL = 0x11
ASSIGNED_CLIENT_IDENTIFIER = 0x12
SERVER_KEEP_ALIVE = 0x13
AUTHENTICATION_METHOD = 0x15
AUTHENTICATION_DATA = 0x16
REQUEST_PROBLEM_INFORMATION = 0x17
WILL_DELAY_INTERVAL = 0x18
REQUEST_RESPONSE_INFORMATION = 0x19
RESPONSE_INFORMATION = 0x1A
SERVER_REFERENCE = 0x1C
REASON_STRING = 0x1F
RECEIVE_MAXIMUM = 0x21
TOPIC_ALIAS_MAXIMUM = 0x22
TOPIC_ALIAS = 0x23
MAXIMUM_QOS = 0x24
RETAIN_AVAILABLE = 0x25
USER_PROPERTY = 0x26
MAXIMUM_PACKET_SIZE = 0x27
WILDCARD_SUBSCRIPTION_AVAILABLE = 0x28
SUBSCRIPTION_IDENTIFIER_AVAILABLE = 0x29
SHARED_SUBSCRIPTION_AVAILABLE = 0x2A

# Each property's kind: 1, 2, 4 (a big-endian integer of that many octets), "v" (a variable
# byte integer), "s" (a UTF-8 string), "b" (binary data), "p" (a string pair).
KINDS = {
    0x01: 1, 0x02: 4, 0x03: "s", 0x08: "s", 0x09: "b", 0x0B: "v", 0x11: 4, 0x12: "s", 0x13: 2,
    0x15: "s", 0x16: "b", 0x17: 1, 0x18: 4, 0x19: 1, 0x1A: "s", 0x1C: "s", 0x1F: "s", 0x21: 2,
    0x22: 2, 0x23: 2, 0x24: 1, 0x25: 1, 0x26: "p", 0x27: 4, 0x28: 1, 0x29: 1, 0x2A: 1,
}  # fmt: skip

MAX_REMAINING = 268435455  # the largest remaining length four octets say


class Malformed(Exception):
    """(reason code, text): the packet cannot be read; the connection ends."""


# ------------------------------------------------------------------ finding packets


def split(data, pos, limit):
    """The packet that starts at data[pos]: (first octet, body start, end), or None while it is
    not whole. A remaining length longer than four octets, or a packet larger than limit
    octets, raises Malformed."""
    n = len(data)
    if n - pos < 2:
        return None
    length = 0
    shift = 0
    i = pos + 1
    while True:
        if i >= n:
            return None
        octet = data[i]
        length |= (octet & 0x7F) << shift
        i += 1
        if not octet & 0x80:
            break
        shift += 7
        if shift > 21:
            raise Malformed(MALFORMED_PACKET, "a remaining length longer than four octets")
    end = i + length
    if end - pos > limit:
        raise Malformed(PACKET_TOO_LARGE, "a packet of %d octets, larger than %d" % (end - pos, limit))
    if end > n:
        return None
    return data[pos], i, end


def wanted(pending):
    """How many more octets complete the packet pending starts (0: not known yet, or whole)."""
    n = len(pending)
    length = 0
    shift = 0
    i = 1
    while i < n and i <= 4:
        octet = pending[i]
        length |= (octet & 0x7F) << shift
        i += 1
        if not octet & 0x80:
            return max(0, i + length - n)
        shift += 7
    return 0


def remaining_length(n):
    out = bytearray()
    while True:
        octet = n & 0x7F
        n >>= 7
        if n:
            out.append(octet | 0x80)
        else:
            out.append(octet)
            return bytes(out)


def packet(first, body):
    return bytes((first,)) + remaining_length(len(body)) + body


# ------------------------------------------------------------------ fields


def read_u16(buf, pos, end):
    if end - pos < 2:
        raise Malformed(MALFORMED_PACKET, "a two-octet field past the packet's end")
    return (buf[pos] << 8) | buf[pos + 1], pos + 2


def read_binary(buf, pos, end):
    size, pos = read_u16(buf, pos, end)
    if pos + size > end:
        raise Malformed(MALFORMED_PACKET, "a field of %d octets past the packet's end" % size)
    return bytes(buf[pos : pos + size]), pos + size


def read_string(buf, pos, end):
    """A UTF-8 string (as bytes, which topics and ids stay): not valid UTF-8, or holding U+0000,
    is malformed (1.5.4)."""
    raw, pos = read_binary(buf, pos, end)
    try:
        raw.decode()
    except UnicodeError:
        raise Malformed(MALFORMED_PACKET, "a string that is not UTF-8")
    if b"\x00" in raw:
        raise Malformed(MALFORMED_PACKET, "a string holding U+0000")
    return raw, pos


def read_varint(buf, pos, end):
    value = 0
    shift = 0
    while True:
        if pos >= end:
            raise Malformed(MALFORMED_PACKET, "a variable byte integer past the packet's end")
        octet = buf[pos]
        pos += 1
        value |= (octet & 0x7F) << shift
        if not octet & 0x80:
            return value, pos
        shift += 7
        if shift > 21:
            raise Malformed(MALFORMED_PACKET, "a variable byte integer longer than four octets")


def binary(value):
    if isinstance(value, str):
        value = value.encode()
    return struct.pack(">H", len(value)) + value


# ------------------------------------------------------------------ version 5 properties


def read_properties(buf, pos, end):
    """A version 5 property list: ({id: value}, where it ends; USER_PROPERTY: a list of pairs,
    SUBSCRIPTION_IDENTIFIER: a list of numbers). A property given twice (but those two) or one
    unknown is a protocol error."""
    length, pos = read_varint(buf, pos, end)
    stop = pos + length
    if stop > end:
        raise Malformed(MALFORMED_PACKET, "properties past the packet's end")
    found = {}
    while pos < stop:
        ident, pos = read_varint(buf, pos, stop)
        kind = KINDS.get(ident)
        if kind is None:
            raise Malformed(MALFORMED_PACKET, "unknown property 0x%02x" % ident)
        if kind == 1:
            if pos >= stop:
                raise Malformed(MALFORMED_PACKET, "a property past the properties' end")
            value = buf[pos]
            pos += 1
        elif kind == 2:
            value, pos = read_u16(buf, pos, stop)
        elif kind == 4:
            if stop - pos < 4:
                raise Malformed(MALFORMED_PACKET, "a property past the properties' end")
            value = (buf[pos] << 24) | (buf[pos + 1] << 16) | (buf[pos + 2] << 8) | buf[pos + 3]
            pos += 4
        elif kind == "v":
            value, pos = read_varint(buf, pos, stop)
        elif kind == "s":
            value, pos = read_string(buf, pos, stop)
        elif kind == "b":
            value, pos = read_binary(buf, pos, stop)
        else:
            name, pos = read_string(buf, pos, stop)
            value, pos = read_string(buf, pos, stop)
            found.setdefault(USER_PROPERTY, []).append((name, value))
            continue
        if ident == SUBSCRIPTION_IDENTIFIER:  # (a PUBLISH to a client carries one per subscription)
            found.setdefault(ident, []).append(value)
            continue
        if ident in found:
            raise Malformed(PROTOCOL_ERROR, "property 0x%02x given twice" % ident)
        found[ident] = value
    return found, stop


def properties(props):
    """A version 5 property list's octets, from {id: value} (USER_PROPERTY: a list of pairs;
    SUBSCRIPTION_IDENTIFIER: a number or a list of them)."""
    out = bytearray()
    for ident, value in props.items():
        kind = KINDS[ident]
        if kind == "p":
            for name, text in value:
                out.append(ident)
                out += binary(name) + binary(text)
            continue
        if kind == "v":
            for one in value if isinstance(value, list) else (value,):
                out.append(ident)
                out += remaining_length(one)
            continue
        out.append(ident)
        if kind == 1:
            out.append(value)
        elif kind == 2:
            out += struct.pack(">H", value)
        elif kind == 4:
            out += struct.pack(">I", value)
        else:
            out += binary(value)
    return remaining_length(len(out)) + bytes(out)


# ------------------------------------------------------------------ what a client sends


class Connect:
    """A CONNECT's fields (3.1): protocol level, clean start, keep alive (s), client id, will
    (None or (topic, payload, qos, retain, properties)), user name, password, properties."""

    def __init__(self, buf, pos, end):
        name, pos = read_binary(buf, pos, end)
        if pos >= end:
            raise Malformed(MALFORMED_PACKET, "CONNECT ends after its protocol name")
        level = buf[pos]
        if (name, level) not in ((b"MQTT", V311), (b"MQTT", V5), (b"MQIsdp", V31)):
            raise Malformed(UNSUPPORTED_PROTOCOL_VERSION, "protocol %r level %d" % (name, level))
        self.level = level
        if end - pos < 4:
            raise Malformed(MALFORMED_PACKET, "CONNECT ends in its variable header")
        flags = buf[pos + 1]
        if flags & 1:
            raise Malformed(MALFORMED_PACKET, "CONNECT's reserved flag is set")
        self.clean = bool(flags & 2)
        self.keep_alive = (buf[pos + 2] << 8) | buf[pos + 3]
        pos += 4
        self.properties = {}
        if level == V5:
            self.properties, pos = read_properties(buf, pos, end)
        self.client_id, pos = read_string(buf, pos, end)
        self.will = None
        will_qos = (flags >> 3) & 3
        if flags & 4:
            if will_qos == 3:
                raise Malformed(MALFORMED_PACKET, "will QoS 3")
            will_props = {}
            if level == V5:
                will_props, pos = read_properties(buf, pos, end)
            topic, pos = read_string(buf, pos, end)
            payload, pos = read_binary(buf, pos, end)
            self.will = (topic, payload, will_qos, bool(flags & 0x20), will_props)
        elif will_qos or flags & 0x20:
            raise Malformed(MALFORMED_PACKET, "will QoS or retain set without a will")
        self.user = self.password = None
        if flags & 0x80:
            self.user, pos = read_string(buf, pos, end)
        if flags & 0x40:
            if level != V5 and self.user is None:
                raise Malformed(MALFORMED_PACKET, "a password without a user name")
            self.password, pos = read_binary(buf, pos, end)
        if pos != end:
            raise Malformed(MALFORMED_PACKET, "%d octets after CONNECT's payload" % (end - pos))


def read_publish(first, buf, pos, end, level):
    """A PUBLISH: (topic, packet id or 0, properties, payload). QoS 3, or DUP at QoS 0, is
    malformed."""
    qos = (first >> 1) & 3
    if qos == 3:
        raise Malformed(MALFORMED_PACKET, "PUBLISH with QoS 3")
    topic, pos = read_string(buf, pos, end)
    packet_id = 0
    if qos:
        packet_id, pos = read_u16(buf, pos, end)
    props = {}
    if level == V5:
        props, pos = read_properties(buf, pos, end)
    return topic, packet_id, props, bytes(buf[pos:end])


def read_subscribe(buf, pos, end, level):
    """A SUBSCRIBE: (packet id, properties, [(filter, options octet)]); none is a protocol error."""
    packet_id, pos = read_u16(buf, pos, end)
    props = {}
    if level == V5:
        props, pos = read_properties(buf, pos, end)
    found = []
    while pos < end:
        topic, pos = read_string(buf, pos, end)
        if pos >= end:
            raise Malformed(MALFORMED_PACKET, "a topic filter without its options")
        options = buf[pos]
        pos += 1
        if options & (0xC0 if level == V5 else 0xFC) or options & 3 == 3 or (options >> 4) & 3 == 3:
            raise Malformed(MALFORMED_PACKET, "subscription options 0x%02x" % options)
        found.append((topic, options))
    if not found:
        raise Malformed(PROTOCOL_ERROR, "SUBSCRIBE with no topic filter")
    return packet_id, props, found


def read_unsubscribe(buf, pos, end, level):
    """An UNSUBSCRIBE: (packet id, [filter])."""
    packet_id, pos = read_u16(buf, pos, end)
    if level == V5:
        _props, pos = read_properties(buf, pos, end)
    found = []
    while pos < end:
        topic, pos = read_string(buf, pos, end)
        found.append(topic)
    if not found:
        raise Malformed(PROTOCOL_ERROR, "UNSUBSCRIBE with no topic filter")
    return packet_id, found


def read_ack(buf, pos, end, level):
    """PUBACK, PUBREC, PUBREL or PUBCOMP: (packet id, reason code)."""
    packet_id, pos = read_u16(buf, pos, end)
    code = SUCCESS
    if level == V5 and pos < end:
        code = buf[pos]
    return packet_id, code


def read_disconnect(buf, pos, end, level):
    """A DISCONNECT: (reason code, properties)."""
    if level != V5 or pos >= end:
        return SUCCESS, {}
    code = buf[pos]
    props = {}
    if pos + 1 < end:
        props, _ = read_properties(buf, pos + 1, end)
    return code, props


# ------------------------------------------------------------------ what a server sends


def connack(level, session_present, code, props=None):
    if level == V5:
        return packet(CONNACK << 4, bytes((1 if session_present else 0, code)) + properties(props or {}))
    if code:
        code = OLD_RETURN_CODES.get(code, 3)
    return packet(CONNACK << 4, bytes((1 if session_present and not code else 0, code)))


def publish_parts(first, encoded_topic, packet_id, props, level, payload):
    """A PUBLISH from its first octet, its topic already encoded (binary()) and its payload (a
    memoryview will do): the broker's deliveries, built with one copy of the payload."""
    head = encoded_topic
    if first & 6:
        head += bytes((packet_id >> 8, packet_id & 0xFF))
    if level == V5:
        head += properties(props or {})
    size = len(head) + len(payload)
    if MICROPYTHON and type(payload) is not bytes:
        payload = bytes(payload)  # (MicroPython's join takes bytes only)
    return b"".join((bytes((first,)), remaining_length(size) if size > 127 else bytes((size,)), head, payload))


def publish(topic, payload, qos=0, retain=False, dup=False, packet_id=0, props=None, level=V311):
    body = binary(topic)
    if qos:
        body += struct.pack(">H", packet_id)
    if level == V5:
        body += properties(props or {})
    first = PUBLISH << 4 | qos << 1 | (8 if dup else 0) | (1 if retain else 0)
    return packet(first, body + payload)


def ack(kind, packet_id, code=SUCCESS, level=V311, reason=None):
    """PUBACK, PUBREC, PUBREL or PUBCOMP (kind): the packet id, and in version 5 the reason code
    where it is not success (3.4.2.1)."""
    first = kind << 4 | (2 if kind == PUBREL else 0)
    body = struct.pack(">H", packet_id)
    if level == V5 and (code or reason):
        body += bytes((code,))
        if reason:
            body += properties({REASON_STRING: reason})
    return packet(first, body)


def suback(packet_id, codes, level=V311):
    body = struct.pack(">H", packet_id)
    if level == V5:
        body += b"\x00"
    return packet(SUBACK << 4, body + bytes(codes))


def unsuback(packet_id, codes, level=V311):
    body = struct.pack(">H", packet_id)
    if level == V5:
        body += b"\x00" + bytes(codes)
    return packet(UNSUBACK << 4, body)


PINGRESP_PACKET = bytes((PINGRESP << 4, 0))


def disconnect(code, reason=None, props=None):
    """A version 5 DISCONNECT from the server (3.1.1 has none: the server hangs up)."""
    props = dict(props or {})
    if reason:
        props[REASON_STRING] = reason
    return packet(DISCONNECT << 4, bytes((code,)) + properties(props))


# ------------------------------------------------------------------ what a client sends, written
# (for tests, tools and the bench: the same codec both ways)


def connect(client_id, clean=True, keep_alive=60, user=None, password=None, will=None, level=V311, props=None):
    """A CONNECT; will: (topic, payload, qos, retain[, version 5 will properties]) or None."""
    flags = 2 if clean else 0
    name = b"MQIsdp" if level == V31 else b"MQTT"
    body = binary(name) + bytes((level,))
    payload = binary(client_id)
    if will is not None:
        topic, message, qos, retain = will[:4]
        flags |= 4 | qos << 3 | (0x20 if retain else 0)
        if level == V5:
            payload += properties(will[4] if len(will) > 4 else {})
        payload += binary(topic) + binary(message)
    if user is not None:
        flags |= 0x80
        payload += binary(user)
    if password is not None:
        flags |= 0x40
        payload += binary(password)
    body += bytes((flags,)) + struct.pack(">H", keep_alive)
    if level == V5:
        body += properties(props or {})
    return packet(CONNECT << 4, body + payload)


def subscribe(packet_id, filters, level=V311, props=None):
    """filters: [(filter, options octet: QoS | no local 4 | retain as published 8 | handling << 4)]."""
    body = struct.pack(">H", packet_id)
    if level == V5:
        body += properties(props or {})
    for topic, options in filters:
        body += binary(topic) + bytes((options,))
    return packet(SUBSCRIBE << 4 | 2, body)


def unsubscribe(packet_id, filters, level=V311):
    body = struct.pack(">H", packet_id)
    if level == V5:
        body += b"\x00"
    for topic in filters:
        body += binary(topic)
    return packet(UNSUBSCRIBE << 4 | 2, body)
