"""A 1.0 message's sections by descriptor code, for tests that look into what a client or a
broker sent (amqp10/sections.py Sections reads them; this lays them out as a dict)."""

from hutch.amqp10 import spec
from hutch.amqp10.message import body_091, properties_091
from hutch.amqp10.sections import Sections


def sections(payload):
    """{descriptor code: section value} (DATA: a list of the data sections)."""
    found = Sections(payload)
    out = {}
    for code, value in (
        (spec.HEADER, found.header),
        (spec.MESSAGE_ANNOTATIONS, found.annotations),
        (spec.PROPERTIES, found.properties),
        (spec.APPLICATION_PROPERTIES, found.application),
        (spec.FOOTER, found.footer),
    ):
        if value is not None:
            out[code] = value
    for code, value in found.body:
        if code == spec.DATA:
            out.setdefault(spec.DATA, []).append(value)
        else:
            out[code] = value
    return out


def to_parts(payload):
    """(0-9-1 properties, body) of a 1.0 message, as the broker converts it."""
    found = Sections(payload)
    return properties_091(found), body_091(found)
