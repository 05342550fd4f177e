"""A broker's message (core/message.py: a 0-9-1 content header and body) as the AMQP 1.0
message a 1.0 consumer is given (a bridge's 1.0 uplink sends the same), converted as
RabbitMQ 4 converts (its mc_amqpl module; the table is amqp10/message.py's, read the other
way): headers whose name starts with x- (and CC, as x-cc) become message annotations, the
others application properties (a table or array value has no application-property form and
stays behind); type is the annotation x-basic-type; a body of type "amqp-1.0" is its own
sections. A message a 1.0 client published (Message.native) keeps its bare message as sent.

Apart from amqp10/message.py (1.0 into the broker's form), so that a board's bridge to a 1.0
cloud holds only this half.
"""

import struct
import sys

from ..codec.wire import Timestamp as Seconds
from . import spec
from .types import Described, Symbol, Timestamp, Ubyte, Uint, Ulong, Uuid, encode

AMQP10_TYPE = b"amqp-1.0"  # the 0-9-1 type of a body that is 1.0 sections (RabbitMQ 4's)
MAX_SHORTSTR = 255
URN_UUID = b"urn:uuid:"
HEADER = Ulong(spec.HEADER)
MESSAGE_ANNOTATIONS = Ulong(spec.MESSAGE_ANNOTATIONS)
PROPERTIES = Ulong(spec.PROPERTIES)
APPLICATION_PROPERTIES = Ulong(spec.APPLICATION_PROPERTIES)

MICROPYTHON = sys.implementation.name == "micropython"
# The 1.0 properties 0-9-1 has no place for, by their index in the properties section, kept as
# these headers (amqp10/message.py) and read back here (a decoded header table has str keys).
KEPT_AS_HEADERS = (
    (2, "x-amqp10-to"),
    (3, "x-amqp10-subject"),
    (8, "x-amqp10-absolute-expiry-time"),
    (11, "x-amqp10-group-sequence"),
    (12, "x-amqp10-reply-to-group-id"),
)
KEPT_PREFIX = "x-amqp10-"


def joined(parts):
    """Octets joined: memoryviews spare CPython a copy of each body; MicroPython's join takes
    bytes only."""
    return b"".join([bytes(part) for part in parts] if MICROPYTHON else parts)


def uuid_text(raw):
    h = raw.hex()
    return ("%s-%s-%s-%s-%s" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:])).encode()


def value_10(value):
    """A 0-9-1 field-table value as a 1.0 value (a long string that is a short UTF-8 string
    becomes a string, any other one binary, as RabbitMQ 4 converts)."""
    if isinstance(value, (bytes, bytearray)):
        raw = bytes(value)
        if type(value) is bytes and len(raw) <= MAX_SHORTSTR:
            try:
                return raw.decode()
            except UnicodeError:
                pass
        return raw
    if isinstance(value, Seconds):
        return Timestamp(value.seconds * 1000)
    if isinstance(value, list):
        return [value_10(item) for item in value]
    if isinstance(value, dict):
        return {Symbol(_text(k)): value_10(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)  # (a 0-9-1 decimal: no 1.0 decimal is written here)


def _text(value):
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode()
        except UnicodeError:
            return bytes(value).decode("latin-1")
    return value


def _identifier_10(value):
    if value is None:
        return None
    if value.startswith(URN_UUID) and len(value) == 45:
        try:
            return Uuid(bytes.fromhex(value[9:].decode().replace("-", "")))
        except ValueError:
            pass
    return _text(value)


def annotations_10(props, exchange, routing_key):
    """The message-annotations of a delivery: the x- headers (CC as x-cc), x-basic-type, and
    where the message was published (x-exchange, x-routing-key), as RabbitMQ 4 annotates."""
    out = {Symbol("x-exchange"): _text(exchange), Symbol("x-routing-key"): _text(routing_key)}
    kind = props.get("type")
    if kind is not None and kind != AMQP10_TYPE:
        out[Symbol("x-basic-type")] = _text(kind)
    for key, value in (props.get("headers") or {}).items():
        name = _text(key)
        if name.startswith("x-") and not name.startswith(KEPT_PREFIX):
            out[Symbol(name)] = value_10(value)
        elif name == "CC" and isinstance(value, list):
            out[Symbol("x-cc")] = value_10(value)
    return out


def header_10(durable, priority, ttl, redelivered):
    header = [durable, priority, ttl, None, Uint(1) if redelivered else None]
    while header and header[-1] is None:
        header.pop()
    return encode(Described(HEADER, header))


def from_message(message, redelivered, to=None):
    """The octets of a broker's message (core/message.py) delivered to a 1.0 consumer: a
    message a 1.0 client published, its bare message as sent behind a header and annotations
    of this delivery; any other, converted from its 0-9-1 form. What comes before the body is
    made once for each kind of message (its properties, where it was published, whether it
    was delivered before) and kept (FRONTS): most of a queue's messages are alike but for
    their bodies. to: its `to` property (a bridge's uplink with a null target says each
    message's address there; a message with a `to` of our making is converted)."""
    native = message.native
    if native is not None and to is None:
        payload, bare_at = native
        key = (payload[:bare_at], message.exchange, message.routing_key, redelivered)
        front = FRONTS.get(key)
        if front is None:
            front = _remember(key, _native_front(message, payload[:bare_at], redelivered))
        return joined((front, memoryview(payload)[bare_at:]))
    tail = message.header_tail
    key = (tail[16:], message.exchange, message.routing_key, redelivered, to)  # (past the body's size)
    known = FRONTS.get(key)
    if known is None:
        known = _remember(key, _converted_front(message, redelivered, to))
    front, own_sections = known
    body = message.body()
    if own_sections:  # its body is 1.0 sections already (type amqp-1.0)
        return joined((front, body))
    size = len(body)
    head = (b"\x00\x53\x75\xa0" + bytes((size,))) if size < 256 else (b"\x00\x53\x75\xb0" + struct.pack(">I", size))
    return joined((front, head, body))


FRONTS = {}  # (what a delivery's front depends on) -> its octets (a 0-9-1 message's: and its kind)
FRONTS_MOST = 256 if sys.implementation.name != "micropython" else 8


def _remember(key, front):
    if len(FRONTS) >= FRONTS_MOST:
        FRONTS.clear()
    FRONTS[key] = front
    return front


def _converted_front(message, redelivered, to):
    """(the sections of a 0-9-1 message before its body, as RabbitMQ 4 converts them, whether its
    body is 1.0 sections already: type amqp-1.0, so from_message adds no data section)."""
    props = message.properties()
    expiration = props.get("expiration")
    priority = props.get("priority")
    out = [
        header_10(
            props.get("delivery-mode") == 2,
            Ubyte(priority) if priority is not None else None,
            Uint(int(expiration)) if expiration and expiration.isdigit() else None,
            redelivered,
        ),
        encode(Described(MESSAGE_ANNOTATIONS, annotations_10(props, message.exchange, message.routing_key))),
    ]
    timestamp = props.get("timestamp")
    user_id = props.get("user-id")
    properties = [
        _identifier_10(props.get("message-id")),
        bytes(user_id) if user_id is not None else None,
        to,
        None,
        _text(props.get("reply-to")),
        _identifier_10(props.get("correlation-id")),
        Symbol(_text(props["content-type"])) if props.get("content-type") else None,
        Symbol(_text(props["content-encoding"])) if props.get("content-encoding") else None,
        None,
        Timestamp(timestamp * 1000) if timestamp is not None else None,
        _text(props.get("app-id")),
    ]
    headers = props.get("headers")
    if headers:
        _kept_properties(properties, headers, to)
    while properties and properties[-1] is None:
        properties.pop()
    if properties:
        out.append(encode(Described(PROPERTIES, properties)))
    application = {}
    for key, value in (props.get("headers") or {}).items():
        name = _text(key)
        if not name.startswith("x-") and name != "CC" and not isinstance(value, (list, dict)):
            application[name] = value_10(value)
    if application:
        out.append(encode(Described(APPLICATION_PROPERTIES, application)))
    return b"".join(out), props.get("type") == AMQP10_TYPE


def _kept_properties(properties, headers, to):
    """The properties a 1.0 publisher gave that 0-9-1 keeps as x-amqp10-* headers, back in
    their places (a bridge's `to` wins over the message's own)."""
    properties += [None, None]  # (to group-sequence and reply-to-group-id)
    for index, name in KEPT_AS_HEADERS:
        value = headers.get(name)
        if value is None or (index == 2 and to is not None):
            continue
        if index == 8:
            value = Timestamp(value) if isinstance(value, int) else None
        elif index == 11:
            value = Uint(value) if isinstance(value, int) and 0 <= value < 1 << 32 else None
        else:
            value = _text(value)
        properties[index] = value


def _native_front(message, annotated, redelivered):
    """A 1.0 publisher's message to a 1.0 consumer: its header (durable, priority, ttl) and
    annotations (annotated: its sections before the bare message, as it sent them), with this
    delivery's count and where it was published."""
    from .sections import Sections  # (a message a 1.0 client published: this broker serves 1.0)

    found = Sections(annotated) if annotated else None
    header = (found.header if found is not None else None) or []
    annotations = dict((found.annotations if found is not None else None) or {})
    annotations[Symbol("x-exchange")] = _text(message.exchange)
    annotations[Symbol("x-routing-key")] = _text(message.routing_key)
    return header_10(
        len(header) > 0 and header[0] is True,
        header[1] if len(header) > 1 else None,
        header[2] if len(header) > 2 else None,
        redelivered,
    ) + encode(Described(MESSAGE_ANNOTATIONS, annotations))
