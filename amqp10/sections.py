"""An AMQP 1.0 message's octets read section by section (part 3.2 of the specification):
Sections for any message, data_body for the common one (sections, then one data section) read
from its section headers alone. Beside the conversions both ways (amqp10/message.py into the
broker's form, amqp10/delivery.py out of it), which both read messages with it.
"""

from . import spec
from .frames import check_fields
from .types import FIXED, DecodeError, Described, Ulong, decode

FIXED_SIZES = {code: entry[0] for code, entry in FIXED.items()}
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


class NotMessage(DecodeError):
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
