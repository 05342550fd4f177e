"""An AMQP 1.0 message (its sections, part 3.2 of the specification) and the broker's message
(core/message.py: the 0-9-1 publisher's content header and body), converted both ways as
RabbitMQ 4 converts them (its mc_amqpl module), so 1.0 and 0-9-1 clients meet in one queue:

    AMQP 1.0                           AMQP 0-9-1
    header.durable                     delivery-mode 2 (false: 1)
    header.priority, header.ttl        priority, expiration (milliseconds)
    properties.message-id              message-id (a uuid as urn:uuid:..., a ulong as digits;
                                       binary or longer than 255 octets: header x-message-id)
    properties.correlation-id          correlation-id (likewise, header x-correlation-id)
    properties.user-id                 user-id
    properties.reply-to                reply-to
    properties.content-type, -encoding content-type, content-encoding
    properties.creation-time           timestamp (seconds)
    properties.group-id                app-id
    application-properties             headers
    message-annotations x-...          headers x-... (x-cc: CC); x-basic-type: type
    data sections                      the body, joined
    amqp-value, amqp-sequence          the body as its AMQP 1.0 encoding, type "amqp-1.0"

and back, a 0-9-1 message to a 1.0 consumer: headers whose name starts with x- (and CC, as
x-cc) become message annotations, the others application properties (a table or array value
has no application-property form and stays behind); type is the annotation x-basic-type; a
body of type "amqp-1.0" is read back as its sections. properties.to, subject,
absolute-expiry-time, group-sequence and reply-to-group-id have no 0-9-1 place.

A message a 1.0 client published keeps its own octets too (Message.native): a 1.0 consumer
gets the bare message (properties, application-properties, body, footer) exactly as it was
sent, with the header and message annotations the delivery needs.
"""

import struct
import sys

from ..codec.wire import Timestamp as Seconds
from ..codec.wire import encode_properties
from . import spec
from .frames import check_fields
from .types import (
    FIXED,
    DecodeError,
    Described,
    Symbol,
    Timestamp,
    Ubyte,
    Uint,
    Ulong,
    Uuid,
    _Scalar,
    decode,
    encode,
)

CLASS_BASIC = 60
FRAME_END = b"\xce"
AMQP10_TYPE = b"amqp-1.0"  # the 0-9-1 type of a body that is 1.0 sections (RabbitMQ 4's)
MAX_SHORTSTR = 255
URN_UUID = b"urn:uuid:"

FIXED_SIZES = {code: entry[0] for code, entry in FIXED.items()}
HEADER = Ulong(spec.HEADER)
MESSAGE_ANNOTATIONS = Ulong(spec.MESSAGE_ANNOTATIONS)
PROPERTIES = Ulong(spec.PROPERTIES)
APPLICATION_PROPERTIES = Ulong(spec.APPLICATION_PROPERTIES)
DATA = Ulong(spec.DATA)
BODY_SECTIONS = (spec.DATA, spec.AMQP_SEQUENCE, spec.AMQP_VALUE)
# where the bare message starts: the sections a delivery may rewrite come before it (3.2)
ANNOTATED = (spec.HEADER, spec.DELIVERY_ANNOTATIONS, spec.MESSAGE_ANNOTATIONS)


class Sections:
    """A 1.0 message's octets read section by section: what routing and conversion ask of it,
    and where its bare message starts (the octets a 1.0 consumer gets unchanged)."""

    __slots__ = ("header", "annotations", "properties", "application", "body", "footer", "bare_at")

    def __init__(self, payload):
        self.header = self.annotations = self.properties = self.application = self.footer = None
        self.body = []  # (code, value) of each body section, in order
        self.bare_at = len(payload)
        pos = 0
        end = len(payload)
        while pos < end:
            start = pos
            section, pos = decode(payload, pos)
            if type(section) is not Described or type(section.descriptor) is not Ulong:
                raise NotMessage("a message section must be a described value")
            code = section.descriptor.value
            if code not in ANNOTATED and self.bare_at == end:
                self.bare_at = start
            if code == spec.HEADER:
                self.header = _list(section.value, "header")
                check_fields(code, self.header, "the header section")
            elif code == spec.MESSAGE_ANNOTATIONS:
                self.annotations = _map(section.value, "message-annotations")
            elif code == spec.PROPERTIES:
                self.properties = _list(section.value, "properties")
                check_fields(code, self.properties, "the properties section")
            elif code == spec.APPLICATION_PROPERTIES:
                self.application = _map(section.value, "application-properties")
            elif code in BODY_SECTIONS:
                value = section.value
                if code == spec.DATA and type(value) is not bytes:
                    raise NotMessage("a data section must be binary")
                if code == spec.AMQP_SEQUENCE and type(value) is not list:
                    raise NotMessage("an amqp-sequence section must be a list")
                self.body.append((code, value))
            elif code == spec.FOOTER:
                self.footer = _map(section.value, "footer")
            elif code == spec.DELIVERY_ANNOTATIONS:
                _map(section.value, "delivery-annotations")
            else:
                raise NotMessage("0x%02x is not a message section" % code)

    def prop(self, index):
        """A field of the properties section (amqp10/spec.py TYPES names them), or None."""
        properties = self.properties
        return properties[index] if properties is not None and len(properties) > index else None

    def durable(self):
        header = self.header
        return bool(header) and header[0] is True


class NotMessage(ValueError):
    """Transfer octets that are not a message: said to the publisher as a rejection."""


def _list(value, name):
    if value is None:
        return []
    if type(value) is not list:
        raise NotMessage("the %s section must be a list" % name)
    return value


def _map(value, name):
    if value is None:
        return {}
    if type(value) is not dict:
        raise NotMessage("the %s section must be a map" % name)
    return value


def _plain(value):
    return value.value if isinstance(value, _Scalar) else value


# ---------------------------------------------------------------- 1.0 -> 0-9-1


def properties_091(found):
    """The 0-9-1 properties (a dict as codec/wire.py encodes it) of a 1.0 message's sections."""
    props = {}
    headers = {}
    header = found.header
    annotations = found.annotations or {}
    if header is not None:
        props["delivery-mode"] = 2 if header and header[0] is True else 1
        if len(header) > 1 and header[1] is not None:
            props["priority"] = _plain(header[1])
        if len(header) > 2 and header[2] is not None:
            props["expiration"] = str(_plain(header[2])).encode()
    _from_annotation(props, "delivery-mode", annotations, "x-basic-delivery-mode")
    _from_annotation(props, "priority", annotations, "x-basic-priority")
    _from_annotation(props, "expiration", annotations, "x-basic-expiration", bytes_=True)
    if found.body and found.body[0][0] != spec.DATA:
        props["type"] = AMQP10_TYPE
    else:
        _from_annotation(props, "type", annotations, "x-basic-type", bytes_=True)
    for key, value in annotations.items():  # x- annotations as headers (x-cc: CC)
        name = _plain(key)
        if type(key) is not Symbol or not name.startswith("x-") or name.startswith("x-basic-"):
            continue
        if name == "x-cc":
            headers[b"CC"] = value_091(value)
        elif name not in ("x-exchange", "x-routing-key") and len(name) <= MAX_SHORTSTR:
            headers[name.encode()] = value_091(value)
    for key, value in (found.application or {}).items():
        if type(key) is str and len(key.encode()) <= MAX_SHORTSTR:
            headers[key.encode()] = value_091(value)
    _identifier(props, headers, "message-id", found.prop(0), b"x-message-id")
    user_id = found.prop(1)
    if type(user_id) is bytes and len(user_id) <= MAX_SHORTSTR:
        props["user-id"] = user_id
    reply_to = found.prop(4)
    if type(reply_to) is str and len(reply_to.encode()) <= MAX_SHORTSTR:
        props["reply-to"] = reply_to.encode()
    _identifier(props, headers, "correlation-id", found.prop(5), b"x-correlation-id")
    for index, name in ((6, "content-type"), (7, "content-encoding")):
        value = found.prop(index)
        if value is not None:
            props[name] = str(_plain(value)).encode()
    created = found.prop(9)
    if created is not None:
        props["timestamp"] = _plain(created) // 1000  # (the basic property is a plain number of seconds)
    group = found.prop(10)
    if type(group) is str and len(group.encode()) <= MAX_SHORTSTR:
        props["app-id"] = group.encode()
    if headers:
        props["headers"] = headers
    return props


def _from_annotation(props, name, annotations, key, bytes_=False):
    if name in props or not annotations:
        return
    value = annotations.get(Symbol(key))
    if value is not None:
        value = _plain(value)
        props[name] = (value.encode() if isinstance(value, str) else value) if bytes_ else value


def _identifier(props, headers, name, value, header):
    """message-id or correlation-id: a uuid as urn:uuid:..., a ulong as digits, a string of a
    short string's length as itself; binary or longer, the header instead (RabbitMQ 4's)."""
    if value is None:
        return
    kind = type(value)
    if kind is Uuid:
        props[name] = URN_UUID + _uuid_text(value.value)
    elif kind is Ulong:
        props[name] = str(value.value).encode()
    elif kind is str and len(value.encode()) <= MAX_SHORTSTR:
        props[name] = value.encode()
    elif kind is str:
        headers[header] = value.encode()
    elif kind is bytes:
        headers[header] = bytearray(value)


def _uuid_text(raw):
    h = raw.hex()
    return ("%s-%s-%s-%s-%s" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:])).encode()


def value_091(value):
    """A 1.0 value as a 0-9-1 field-table value (codec/wire.py's Python forms)."""
    kind = type(value)
    if kind is str:
        return value.encode()
    if kind is Symbol:
        return value.value.encode()
    if kind is bytes:
        return bytearray(value)
    if kind is Timestamp:
        return Seconds(value.value // 1000)
    if kind is Uuid:
        return URN_UUID + _uuid_text(value.value)
    if kind is list:
        return [value_091(item) for item in value]
    if kind is dict:
        return {_key_text(k): value_091(v) for k, v in value.items()}
    if kind is Described:
        return value_091(value.value)
    if isinstance(value, _Scalar):
        return value.value if type(value.value) is not list else [value_091(v) for v in value.value]
    return value  # None, bool, int, float


def _key_text(key):
    key = _plain(key)
    return key.encode() if isinstance(key, str) else str(key).encode()


def body_091(found):
    """The 0-9-1 body: the data sections joined, or any other body as its 1.0 octets."""
    body = found.body
    if body and body[0][0] == spec.DATA:
        return b"".join(bytes(value) for code, value in body if code == spec.DATA)
    return b"".join(encode(Described(Ulong(code), value)) for code, value in body)


# ---------------------------------------------------------------- the common message, read quickly

DATA_SECTION = b"\x00\x53\x75"


def data_body(payload):
    """Where the body of the common message lies: its sections before one data section that
    ends it (no footer), as (where that section starts, where its octets start); None for any
    other message (several data sections, an amqp-value, a footer: Sections reads those).
    Only the section headers are looked at, none of their values is decoded."""
    pos = 0
    end = len(payload)
    try:
        while pos < end:
            if payload[pos] != 0 or payload[pos + 1] != 0x53:
                return None
            code = payload[pos + 2]
            if code == spec.DATA:
                kind = payload[pos + 3]
                if kind == 0xA0:
                    start = pos + 5
                    size = payload[pos + 4]
                elif kind == 0xB0:
                    start = pos + 8
                    size = (
                        (payload[pos + 4] << 24) | (payload[pos + 5] << 16) | (payload[pos + 6] << 8) | payload[pos + 7]
                    )
                else:
                    return None
                return (pos, start) if start + size == end else None
            if code in BODY_SECTIONS or code == spec.FOOTER:
                return None
            pos = skip(payload, pos + 3)
    except IndexError:
        return None
    return None


def skip(data, pos):
    """Where the value at pos ends, from its constructor alone (DecodeError or IndexError if it
    cannot be told)."""
    code = data[pos]
    if code == 0x00:
        return skip(data, skip(data, pos + 1))
    fixed = FIXED_SIZES.get(code)
    if fixed is not None:
        return pos + 1 + fixed
    if code in (0xA0, 0xA1, 0xA3, 0xC0, 0xC1, 0xE0):
        return pos + 2 + data[pos + 1]
    if code in (0xB0, 0xB1, 0xB3, 0xD0, 0xD1, 0xF0):
        return pos + 5 + ((data[pos + 1] << 24) | (data[pos + 2] << 16) | (data[pos + 3] << 8) | data[pos + 4])
    raise DecodeError("0x%02x is not an AMQP 1.0 constructor" % code)


def header_tail(encoded_properties, body_size):
    """A 0-9-1 content header frame's tail (core/message.py) from its encoded properties."""
    header = struct.pack(">HHQ", CLASS_BASIC, 0, body_size) + encoded_properties
    return struct.pack(">I", len(header)) + header + FRAME_END


def body_tail(body):
    """A 0-9-1 body frame's tail (its size, the octets, frame-end), or None for no body."""
    return b"".join((struct.pack(">I", len(body)), body, FRAME_END)) if len(body) else None


def tails(props, body):
    """(header_tail, body_tail, body_size) as core/message.py Message holds a 0-9-1 publish:
    the content header frame's and the body frame's octets after their type and channel."""
    return header_tail(encode_properties(props), len(body)), body_tail(body), len(body)


# ---------------------------------------------------------------- 0-9-1 -> 1.0


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
        if name.startswith("x-"):
            out[Symbol(name)] = value_10(value)
        elif name == "CC" and isinstance(value, list):
            out[Symbol("x-cc")] = value_10(value)
    return out


def header_10(durable, priority, ttl, redelivered):
    header = [durable, priority, ttl, None, Uint(1) if redelivered else None]
    while header and header[-1] is None:
        header.pop()
    return encode(Described(HEADER, header))


def from_message(message, redelivered):
    """The octets of a broker's message (core/message.py) delivered to a 1.0 consumer: a
    message a 1.0 client published, its bare message as sent behind a header and annotations
    of this delivery; any other, converted from its 0-9-1 form. What comes before the body is
    made once for each kind of message (its properties, where it was published, whether it
    was delivered before) and kept (FRONTS): most of a queue's messages are alike but for
    their bodies."""
    native = message.native
    if native is not None:
        payload, bare_at = native
        key = (payload[:bare_at], message.exchange, message.routing_key, redelivered)
        front = FRONTS.get(key)
        if front is None:
            front = _remember(key, _native_front(message, payload[:bare_at], redelivered))
        return b"".join((front, memoryview(payload)[bare_at:]))
    tail = message.header_tail
    key = (tail[16:], message.exchange, message.routing_key, redelivered)  # (past the body's size)
    known = FRONTS.get(key)
    if known is None:
        known = _remember(key, _converted_front(message, redelivered))
    front, own_sections = known
    body = message.body()
    if own_sections:  # its body is 1.0 sections already (type amqp-1.0)
        return b"".join((front, body))
    size = len(body)
    head = (b"\x00\x53\x75\xa0" + bytes((size,))) if size < 256 else (b"\x00\x53\x75\xb0" + struct.pack(">I", size))
    return b"".join((front, head, body))


FRONTS = {}  # (what a delivery's front depends on) -> its octets (a 0-9-1 message's: and its kind)
FRONTS_MOST = 256 if sys.implementation.name != "micropython" else 8


def _remember(key, front):
    if len(FRONTS) >= FRONTS_MOST:
        FRONTS.clear()
    FRONTS[key] = front
    return front


def _converted_front(message, redelivered):
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
        None,
        None,
        _text(props.get("reply-to")),
        _identifier_10(props.get("correlation-id")),
        Symbol(_text(props["content-type"])) if props.get("content-type") else None,
        Symbol(_text(props["content-encoding"])) if props.get("content-encoding") else None,
        None,
        Timestamp(timestamp * 1000) if timestamp is not None else None,
        _text(props.get("app-id")),
    ]
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


def _native_front(message, annotated, redelivered):
    """A 1.0 publisher's message to a 1.0 consumer: its header (durable, priority, ttl) and
    annotations (annotated: its sections before the bare message, as it sent them), with this
    delivery's count and where it was published."""
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
