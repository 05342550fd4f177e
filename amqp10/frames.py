"""AMQP 1.0 frames (part 2.3 of the specification): an 8-octet header, then a performative and,
for a transfer, the message's octets.

    SIZE(4) DOFF(1) TYPE(1) CHANNEL(2) [extended header] PERFORMATIVE [PAYLOAD]

TYPE 0 is an AMQP frame, 1 a SASL frame; DOFF is the header's length in 4-octet words (2 at
least). A frame with no body is a heartbeat.

    frame(channel, performative_code, fields, payload=b"", sasl=False) -> bytes
    split(data, pos, max_size) -> (frame or None, position after it)
"""

import struct

from . import spec
from .types import Array, DecodeError, Described, Symbol, Timestamp, Ubyte, Uint, Ulong, Ushort, decode, encode

AMQP_FRAME = 0
SASL_FRAME = 1


class Frame:
    __slots__ = ("kind", "channel", "code", "fields", "payload", "transfer")

    def __init__(self, kind, channel, code, fields, payload, transfer=None):
        self.kind = kind  # AMQP_FRAME or SASL_FRAME
        self.channel = channel
        self.code = code  # the performative's descriptor code (amqp10/spec.py), None: a heartbeat
        self.fields = fields  # the performative's fields, a list (trailing ones may be absent)
        self.payload = payload  # what follows the performative: a transfer's message octets
        # a transfer's (handle, delivery id or None, settled, more, aborted) as plain values (each
        # flag True, False or None: absent)
        self.transfer = transfer


def frame(channel, code, fields, payload=b"", sasl=False):
    """The octets of one frame: the performative `code` with `fields` (a list; trailing Nones
    left out, as the specification allows), then payload."""
    while fields and fields[-1] is None:
        fields = fields[:-1]
    body = encode(Described(Ulong(code), list(fields))) + payload
    return struct.pack(">IBBH", 8 + len(body), 2, SASL_FRAME if sasl else AMQP_FRAME, channel) + body


def split(data, pos, max_size):
    """The frame at pos in data: (Frame, the position after it), or (None, pos) when it has not
    all arrived. DecodeError for one that is not a frame, or larger than max_size."""
    if len(data) - pos < 8:
        return None, pos
    size, doff, kind, channel = struct.unpack_from(">IBBH", data, pos)
    if size < 8 or doff < 2 or doff * 4 > size:
        raise DecodeError("a frame of %d octets with a header of %d: not a frame" % (size, doff * 4))
    if size > max_size:
        raise DecodeError("a frame of %d octets is larger than the %d agreed" % (size, max_size))
    end = pos + size
    if end > len(data):
        return None, pos
    body_at = pos + doff * 4
    if body_at == end:
        return Frame(kind, channel, None, None, b""), end
    if kind == AMQP_FRAME:
        fast = transfer_at(data, body_at, end)
        if fast is not None:
            return Frame(kind, channel, spec.TRANSFER, None, bytes(data[fast[5] : end]), fast[:5]), end
    performative, at = decode(data, body_at)
    if type(performative) is not Described or type(performative.descriptor) is not Ulong:
        raise DecodeError("a frame's body must be a performative (a described list)")
    code = performative.descriptor.value
    fields = performative.value if type(performative.value) is list else []
    check_fields(code, fields)
    transfer = None
    if code == spec.TRANSFER:  # (its handle is there: check_fields saw to it)
        delivery_id = fields[1].value if len(fields) > 1 and fields[1] is not None else None
        settled, more, aborted = [fields[i] if len(fields) > i else None for i in (4, 5, 9)]
        transfer = (fields[0].value, delivery_id, settled, more, aborted)
    return Frame(kind, channel, code, fields, bytes(data[at:end]), transfer), end


# What a value of each primitive type the specification names decodes to (amqp10/types.py);
# "*" (any) and types not listed are not checked.
PYTHON_TYPES = {
    "uint": Uint, "ushort": Ushort, "ubyte": Ubyte, "ulong": Ulong, "boolean": bool, "string": str,
    "symbol": Symbol, "binary": bytes, "map": dict, "list": list, "timestamp": Timestamp, "described": Described,
}  # fmt: skip


def check_fields(code, fields, what=None):
    """DecodeError unless each field of the composite `code` (a performative, a message section,
    an outcome) is of the type the specification's table (spec.FIELD_TYPES) says, and each
    mandatory one is there: what a peer sends wrongly is said as such, never met later as a
    Python error."""
    kinds = spec.FIELD_TYPES.get(code)
    if kinds is None:
        return
    count = len(fields)
    for i, kind in enumerate(kinds):
        value = fields[i] if i < count else None
        mandatory = kind[-1] == "!"
        if mandatory:
            kind = kind[:-1]
        multiple = kind[-1] == "+"
        if multiple:
            kind = kind[:-1]
        if value is None:
            if mandatory:
                raise DecodeError("%s's field '%s' is mandatory" % (what or _name(code), spec.TYPES[code][1][i]))
            continue
        expected = PYTHON_TYPES.get(kind)
        if expected is None or type(value) is expected:
            continue
        if multiple and (type(value) is Array or type(value) is list):
            items = value.value if isinstance(value, Array) else value  # type: list
            if all(type(item) is expected for item in items):
                continue
        raise DecodeError(
            "%s's field '%s' must be %s, not %r" % (what or _name(code), spec.TYPES[code][1][i], kind, value)
        )


def _name(code):
    return spec.TYPES[code][0]


def field(frame, index, default=None):
    """A performative's field by position (amqp10/spec.py TYPES gives the order); absent or null
    is the default."""
    fields = frame.fields
    if fields is None:  # a transfer read directly (transfer_at): its fields as the decoder gives them
        fields = frame.fields = transfer_fields(frame.transfer)
    if index < len(fields) and fields[index] is not None:
        return fields[index]
    return default


def transfer_fields(transfer):
    """A transfer's fields (but its delivery-tag and message-format, which transfer_at does not
    keep) from the values transfer_at read."""
    handle, delivery_id, settled, more, aborted = transfer
    return [Uint(handle), Uint(delivery_id) if delivery_id is not None else None, None, None, settled, more, None,
            None, None, aborted]  # fmt: skip


# ---------------------------------------------------------------- the transfer, read directly

TRANSFER_START = b"\x00\x53\x14"  # a transfer performative's descriptor, as every client writes it


def transfer_at(data, at, end):
    """A transfer's fields read straight from its octets at data[at:end] (after the frame
    header), the common way clients write them: (handle, delivery id or None, settled, more,
    aborted (each True, False or None), where its payload starts); None for any other layout, which split() then reads
    and checks (the same values, or a DecodeError). Every message a client sends comes in a
    transfer: this spares each the general decoder's objects."""
    if data[at : at + 3] != TRANSFER_START:
        return None
    try:
        return _transfer_fields(data, at + 3, end)
    except IndexError:  # (octets that end too soon: split() says how)
        return None


def _transfer_fields(data, pos, end):
    code = data[pos]
    if code == 0xC0:
        if pos + 3 > end:
            return None
        stop = pos + 2 + data[pos + 1]
        count = data[pos + 2]
        pos += 3
    elif code == 0xD0:
        if pos + 9 > end:
            return None
        stop = pos + 5 + ((data[pos + 1] << 24) | (data[pos + 2] << 16) | (data[pos + 3] << 8) | data[pos + 4])
        count = (data[pos + 5] << 24) | (data[pos + 6] << 16) | (data[pos + 7] << 8) | data[pos + 8]
        pos += 9
    else:
        return None
    if stop > end or count > 11 or count == 0:
        return None
    values = [None] * 11  # type: list
    for i in range(count):
        if pos >= stop:
            return None
        code = data[pos]
        if code == 0x40:  # null
            pos += 1
            continue
        if i in (0, 1, 3):  # handle, delivery-id, message-format: uint
            if code == 0x43:
                values[i] = 0
                pos += 1
            elif code == 0x52:
                values[i] = data[pos + 1]
                pos += 2
            elif code == 0x70:
                values[i] = (data[pos + 1] << 24) | (data[pos + 2] << 16) | (data[pos + 3] << 8) | data[pos + 4]
                pos += 5
            else:
                return None
        elif i == 2:  # delivery-tag: binary
            if code == 0xA0:
                pos += 2 + data[pos + 1]
            elif code == 0xB0:
                pos += 5 + ((data[pos + 1] << 24) | (data[pos + 2] << 16) | (data[pos + 3] << 8) | data[pos + 4])
            else:
                return None
        elif i == 6:  # rcv-settle-mode: ubyte
            if code != 0x50:
                return None
            pos += 2
        elif i == 7:  # state: not in the common way
            return None
        elif code == 0x41:  # the booleans: settled, more, resume, aborted, batchable
            values[i] = True
            pos += 1
        elif code == 0x42:
            values[i] = False
            pos += 1
        elif code == 0x56:
            values[i] = data[pos + 1] == 1
            pos += 2
        else:
            return None
    if pos != stop or values[0] is None:
        return None
    return values[0], values[1], values[4], values[5], values[9], stop
