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
    properties.to, subject,            headers x-amqp10-to, x-amqp10-subject,
      absolute-expiry-time,              x-amqp10-absolute-expiry-time (milliseconds),
      group-sequence,                    x-amqp10-group-sequence,
      reply-to-group-id                  x-amqp10-reply-to-group-id
    data sections                      the body, joined
    amqp-value, amqp-sequence          the body as its AMQP 1.0 encoding, type "amqp-1.0"

and back, a 0-9-1 message to a 1.0 consumer: headers whose name starts with x- (and CC, as
x-cc) become message annotations, the others application properties (a table or array value
has no application-property form and stays behind); type is the annotation x-basic-type; a
body of type "amqp-1.0" is read back as its sections, and the x-amqp10-* headers as the
properties they hold. So a 1.0 message keeps every property through the journal, paging, a
restart and streams, which store the 0-9-1 form.

This module reads a 1.0 message into the broker's form; amqp10/delivery.py makes a 1.0
message of the broker's (what a 1.0 consumer, or a bridge's 1.0 uplink, is given). A message
a 1.0 client published keeps its own octets too (Message.native): a 1.0 consumer gets the
bare message (properties, application-properties, body, footer) exactly as it was sent.
"""

from ..codec.wire import Timestamp as Seconds
from . import spec
from .delivery import AMQP10_TYPE, KEPT_AS_HEADERS, MAX_SHORTSTR, URN_UUID, uuid_text
from .types import (
    Described,
    Symbol,
    Timestamp,
    Ulong,
    Uuid,
    _Scalar,
    encode,
)

HEADER = Ulong(spec.HEADER)
MESSAGE_ANNOTATIONS = Ulong(spec.MESSAGE_ANNOTATIONS)
PROPERTIES = Ulong(spec.PROPERTIES)
APPLICATION_PROPERTIES = Ulong(spec.APPLICATION_PROPERTIES)
DATA = Ulong(spec.DATA)


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
    for index, name in KEPT_AS_HEADERS:  # the properties 0-9-1 has no place for
        value = found.prop(index)
        if value is not None and not (index == 11 and _plain(value) == 0):  # (group-sequence 0: proton's default)
            headers[name.encode()] = value_091(value) if type(value) is not Timestamp else value.value
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
        props[name] = URN_UUID + uuid_text(value.value)
    elif kind is Ulong:
        props[name] = str(value.value).encode()
    elif kind is str and len(value.encode()) <= MAX_SHORTSTR:
        props[name] = value.encode()
    elif kind is str:
        headers[header] = value.encode()
    elif kind is bytes:
        headers[header] = bytearray(value)


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
        return URN_UUID + uuid_text(value.value)
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
