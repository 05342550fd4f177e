"""A sensor's reading's identity, from what an MQTT client can send (core/dedup.py reads it).

A version 5 client sets the user properties `x-sensor-id` and `x-sensor-seq`: they become the
headers of those names like any user property (the sequence, a string in MQTT, as the integer
its digits say, as an AMQP publisher would set it). A 3.1.1 client (`umqtt`, Tasmota) has no
properties: it puts the two in its JSON payload, under the fields `[mqtt] sensor_id_field` and
`sensor_seq_field` name, and the broker copies them into the headers. Only a payload in
which the sequence field's quoted name appears is parsed.

Loaded with the first publish that carries an identity.
"""

import json
import struct

from ..codec.wire import encode_table
from ..core.dedup import SENSOR_ID, SENSOR_SEQ, sequence


def from_json(payload, fields):
    """The headers {x-sensor-id, x-sensor-seq} a JSON payload's fields give (fields: Serving's
    sensor_fields), or None: not a JSON object, or without a usable id and sequence."""
    try:
        found = json.loads(payload)
    except ValueError:  # (MicroPython's json raises ValueError too)
        return None
    if not isinstance(found, dict):
        return None
    sensor = found.get(fields[0])
    seq = sequence(found.get(fields[1]))
    if isinstance(sensor, int) and not isinstance(sensor, bool):
        sensor = str(sensor)
    if seq is None or not isinstance(sensor, str) or not sensor:
        return None
    return {SENSOR_ID: sensor, SENSOR_SEQ: seq}


def user_sequence(value):
    """A version 5 client's x-sensor-seq user property as an integer header (its digits), or as
    it came when it is not one (then the reading is not deduplicated)."""
    seq = sequence(value)
    return value if seq is None else seq


def with_identity(plain, identity):
    """A publish's encoded properties (publishing.PLAIN's: property flags, the headers table,
    delivery-mode) with identity's headers added to the table, its other entries as encoded
    once: what a numbered 3.1.1 reading costs is its two headers, not a whole encoding."""
    extra = encode_table(identity)[4:]  # (the entries, without the table's length)
    size = struct.unpack_from(">I", plain, 2)[0] + len(extra)
    return plain[:2] + struct.pack(">I", size) + plain[6:-1] + extra + plain[-1:]
