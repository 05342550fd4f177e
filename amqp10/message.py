"""An AMQP 1.0 message (its sections, part 3.2 of the specification) as the broker's message
(core/message.py: the publisher's 0-9-1 content header and body), mapped as RabbitMQ 4 maps
them (its mc_amqpl conversions), so a 0-9-1 consumer reads what a 1.0 publisher sent:

    header.durable            -> delivery-mode 2 (else 1)     header.priority -> priority
    header.ttl                -> expiration (milliseconds)
    properties.message-id     -> message-id                   properties.user-id -> user-id
    properties.correlation-id -> correlation-id               properties.reply-to -> reply-to
    properties.content-type   -> content-type                 properties.content-encoding -> content-encoding
    properties.creation-time  -> timestamp (seconds)          properties.subject -> type
    application-properties    -> headers
    data sections             -> the body, joined
    amqp-value of binary / string -> the body (a string as UTF-8)

A body that is another amqp-value, or an amqp-sequence, has no 0-9-1 form here: it is refused
by name (the publisher gets `rejected` with amqp:not-implemented), never turned into something
else without a word.
"""

import struct

from ..codec.wire import Timestamp as Seconds
from ..codec.wire import encode_properties
from . import spec
from .types import DecodeError, Described, Symbol, Timestamp, Ubyte, Uint, Ulong, _Scalar, decode, encode

CLASS_BASIC = 60
FRAME_END = b"\xce"


class NotConvertible(ValueError):
    """A message this broker cannot hold as 0-9-1: said to the publisher as a rejection."""


def sections(payload):
    """{descriptor code: section value} of a transfer's message octets (DecodeError if they are
    not sections; a data section may come more than once: a list of them under DATA)."""
    found = {}
    pos = 0
    while pos < len(payload):
        section, pos = decode(payload, pos)
        if type(section) is not Described or type(section.descriptor) is not Ulong:
            raise DecodeError("a message section must be a described value")
        code = section.descriptor.value
        if code == spec.DATA:
            found.setdefault(spec.DATA, []).append(section.value)
        else:
            found[code] = section.value
    return found


def _text(value):
    """A message-id or correlation-id of any AMQP type, as the 0-9-1 short string it becomes."""
    if isinstance(value, _Scalar):
        value = value.value
    if isinstance(value, bytes):
        return value if len(value) != 16 else value.hex().encode()
    if isinstance(value, str):
        return value.encode()
    return str(value).encode()


def _header_value(value):
    """An application property as a 0-9-1 header value."""
    if isinstance(value, Symbol):
        return value.value.encode()
    if isinstance(value, _Scalar):
        return value.value
    if isinstance(value, str):
        return value.encode()
    return value


def to_parts(payload):
    """(0-9-1 properties dict, body bytes) of a 1.0 message's octets."""
    found = sections(payload)
    props = {}
    header = found.get(spec.HEADER) or []
    props["delivery-mode"] = 2 if len(header) > 0 and header[0] is True else 1
    if len(header) > 1 and header[1] is not None:
        props["priority"] = header[1].value
    if len(header) > 2 and header[2] is not None:
        props["expiration"] = str(header[2].value).encode()
    properties = found.get(spec.PROPERTIES) or []

    def prop(index):
        return properties[index] if len(properties) > index else None

    if prop(0) is not None:
        props["message-id"] = _text(prop(0))
    if prop(1) is not None:
        props["user-id"] = bytes(prop(1))  # pyright: ignore[reportArgumentType] (not None: just checked)
    if prop(3) is not None:
        props["type"] = prop(3).encode()
    if prop(4) is not None:
        props["reply-to"] = prop(4).encode()
    if prop(5) is not None:
        props["correlation-id"] = _text(prop(5))
    if prop(6) is not None:
        props["content-type"] = prop(6).value.encode()
    if prop(7) is not None:
        props["content-encoding"] = prop(7).value.encode()
    if prop(9) is not None:
        props["timestamp"] = Seconds(prop(9).value // 1000)
    application = found.get(spec.APPLICATION_PROPERTIES)
    if application:
        props["headers"] = {str(key).encode() if not isinstance(key, str) else key.encode(): _header_value(v)
                            for key, v in application.items()}  # fmt: skip
    if spec.DATA in found:
        body = b"".join(bytes(part) for part in found[spec.DATA])
    elif spec.AMQP_VALUE in found:
        value = found[spec.AMQP_VALUE]
        if isinstance(value, bytes):
            body = value
        elif isinstance(value, str):
            body = value.encode()
        else:
            raise NotConvertible(
                "an amqp-value body of %s has no AMQP 0-9-1 form here: send a data section" % type(value).__name__
            )
    elif spec.AMQP_SEQUENCE in found:
        raise NotConvertible("an amqp-sequence body has no AMQP 0-9-1 form here: send a data section")
    else:
        body = b""
    return props, body


def tails(props, body):
    """(header_tail, body_tail, body_size) as core/message.py Message holds a 0-9-1 publish:
    the content header frame's and the body frame's octets after their type and channel."""
    encoded = encode_properties(props)
    header = struct.pack(">HHQ", CLASS_BASIC, 0, len(body)) + encoded
    header_tail = struct.pack(">I", len(header)) + header + FRAME_END
    body_tail = struct.pack(">I", len(body)) + body + FRAME_END if body else None
    return header_tail, body_tail, len(body)


def _text_of(value):
    """A 0-9-1 short string as a 1.0 string (bytes that are not UTF-8 stay binary)."""
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeError:
            return value
    return value


def _application_value(value):
    """A 0-9-1 header value as a 1.0 application property (simple types only, as the
    specification allows there; a table or list becomes its text)."""
    if isinstance(value, (bytes, bytearray)):
        return _text_of(bytes(value))
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def from_message(message, redelivered, to=None):
    """The octets of a 1.0 message carrying a broker's message (core/message.py) to a 1.0
    consumer: the reverse of to_parts. to: its `to` property (a bridge's uplink with a null
    target says each message's address there)."""
    props = message.properties()
    header = [props.get("delivery-mode") == 2, Ubyte(props["priority"]) if props.get("priority") is not None else None]
    expiration = props.get("expiration")
    header.append(Uint(int(expiration)) if expiration and expiration.isdigit() else None)
    header += [None, Uint(1) if redelivered else None]
    while header and header[-1] is None:
        header.pop()
    out = [encode(Described(Ulong(spec.HEADER), header))]
    timestamp = props.get("timestamp")
    properties = [
        _text_of(props.get("message-id")),
        props.get("user-id"),
        to,
        _text_of(props.get("type")),
        _text_of(props.get("reply-to")),
        _text_of(props.get("correlation-id")),
        Symbol(props["content-type"].decode()) if props.get("content-type") else None,
        Symbol(props["content-encoding"].decode()) if props.get("content-encoding") else None,
        None,
        Timestamp(timestamp.seconds * 1000) if timestamp is not None else None,
    ]
    while properties and properties[-1] is None:
        properties.pop()
    if properties:
        out.append(encode(Described(Ulong(spec.PROPERTIES), properties)))
    headers = props.get("headers")
    if headers:
        application = {_text_of(k) if isinstance(k, bytes) else k: _application_value(v) for k, v in headers.items()}
        out.append(encode(Described(Ulong(spec.APPLICATION_PROPERTIES), application)))
    body_tail = message.body_tail
    body = bytes(body_tail[4:-1]) if body_tail else b""
    out.append(encode(Described(Ulong(spec.DATA), body)))
    return b"".join(out)
