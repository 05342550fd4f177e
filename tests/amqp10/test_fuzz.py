"""Fuzzing the AMQP 1.0 decoder and front end (hypothesis): whatever octets a peer sends, the
type decoder and the frame splitter answer with a value or a DecodeError, and a connection
answers with a clean close (amqp:decode-error, a framing error), a session's or a link's end,
or an outcome: never an exception that escapes, never an internal error in the log."""

import struct

from harness10 import Client10, data_message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hutch.amqp10 import spec
from hutch.amqp10.frames import frame, split
from hutch.amqp10.types import (
    DecodeError,
    Described,
    Symbol,
    Timestamp,
    Ubyte,
    Uint,
    Ulong,
    Ushort,
    decode,
    encode,
)
from hutch.core import topology

FUZZ = settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.binary(max_size=200))
def test_any_octets_decode_to_a_value_or_a_decode_error(octets):
    try:
        decode(octets)
    except DecodeError:
        pass


@FUZZ
@given(st.binary(max_size=200), st.integers(0, 2), st.integers(0, 3))
def test_any_frame_body_splits_to_a_frame_or_a_decode_error(body, kind, doff):
    octets = struct.pack(">IBBH", 8 + len(body), 2 + doff, kind, 0) + body
    try:
        split(octets, 0, 1 << 20)
    except DecodeError:
        pass


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(0, 2**32 - 1).map(Uint),
    st.integers(0, 2**64 - 1).map(Ulong),
    st.integers(0, 255).map(Ubyte),
    st.integers(0, 65535).map(Ushort),
    st.text(max_size=20),
    st.binary(max_size=20),
    st.text(alphabet="abcdefgh:-/", max_size=12).map(Symbol),
    st.integers(0, 2**40).map(Timestamp),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(st.text(max_size=5), inner, max_size=4),
        st.tuples(st.integers(0x10, 0x78), st.lists(inner, max_size=6)).map(lambda t: Described(Ulong(t[0]), t[1])),
    ),
    max_leaves=12,
)
PERFORMATIVES = [spec.ATTACH, spec.FLOW, spec.TRANSFER, spec.DISPOSITION, spec.DETACH, spec.END, spec.BEGIN, spec.CLOSE]
small = st.integers(0, 3) | st.integers(0, 2**32 - 1)
OF_TYPE = {
    "uint": small.map(Uint),
    "ushort": st.integers(0, 3).map(Ushort),
    "ubyte": st.integers(0, 2).map(Ubyte),
    "ulong": small.map(Ulong),
    "boolean": st.booleans(),
    "string": st.sampled_from(["/queues/q", "/queues/nope", "/exchanges/amq.direct/q", "x", ""]),
    "symbol": st.sampled_from(["amqp:accepted:list", "x"]).map(Symbol),
    "binary": st.binary(max_size=8),
    "map": st.dictionaries(st.sampled_from(["rabbitmq:stream-offset-spec", "x"]).map(Symbol), scalars, max_size=2),
    "*": st.sampled_from(
        [
            Described(Ulong(spec.SOURCE), ["/queues/q"]),
            Described(Ulong(spec.TARGET), ["/queues/q"]),
            Described(Ulong(spec.TARGET), [None]),
            Described(Ulong(spec.ACCEPTED), []),
            Described(Ulong(spec.RELEASED), []),
            Described(Ulong(spec.REJECTED), []),
            Described(Ulong(spec.MODIFIED), [True, True]),
            Described(Ulong(spec.COORDINATOR), []),
        ]
    ),
}


@st.composite
def performative(draw):
    """A performative whose fields are mostly of their types (so its meaning is reached), now
    and then any value at all."""
    code = draw(st.sampled_from(PERFORMATIVES))
    fields = []
    for kind in spec.FIELD_TYPES[code]:
        kind = kind.rstrip("!+")
        if draw(st.integers(0, 9)) == 0:
            fields.append(draw(values))
        elif draw(st.integers(0, 3)) == 0:
            fields.append(None)
        else:
            fields.append(draw(OF_TYPE.get(kind, st.none())))
    return code, fields, draw(st.binary(max_size=40)) if code == spec.TRANSFER else b""


def ready_client():
    """Logged in, a session, a sending link to a queue and a receiving one from it, a message
    waiting for the receiver."""
    client = Client10()
    topology.declare_queue(client.broker, None, b"q")
    client.login()
    client.begin()
    client.attach_sender("/queues/q", handle=0)
    client.transfer(data_message(b"waiting"))
    client.attach_receiver("/queues/q", handle=1)
    client.flow(1, 1)
    client.read()
    logged = []
    client.broker.log = lambda level, text, exc=None: logged.append((level, text))
    return client, logged


@FUZZ
@given(
    st.lists(
        performative()
        | st.tuples(st.sampled_from(PERFORMATIVES), st.lists(values, max_size=11), st.binary(max_size=40)),
        max_size=6,
    )
)
def test_any_performatives_end_cleanly_at_their_level(frames):
    client, logged = ready_client()
    for code, fields, payload in frames:
        client.send(frame(0, code, fields, payload if code == spec.TRANSFER else b""))
        client.read()
    assert not [line for line in logged if line[0] == "error"], logged


@FUZZ
@given(st.lists(st.tuples(st.integers(0x70, 0x78), values), max_size=5))
def test_any_message_sections_get_an_outcome(sections):
    client, logged = ready_client()
    payload = b"".join(encode(Described(Ulong(code), value)) for code, value in sections)
    client.transfer(payload, delivery_id=1)
    said = client.frames()
    assert [f.name for f in said if f.name in ("disposition", "end", "close")] == ["disposition"], said
    assert not [line for line in logged if line[0] == "error"], logged


@FUZZ
@given(
    st.integers(0, 2**32 - 1),
    st.none() | st.integers(0, 2**32 - 1),
    st.binary(max_size=40),
    st.lists(st.none() | st.booleans(), min_size=6, max_size=6),
    st.integers(0, 6),
    st.binary(max_size=30),
)
def test_a_transfer_read_directly_says_what_the_decoder_says(handle, delivery_id, tag, flags, cut, payload):
    """frames.transfer_at (the fast read) against the decoder and its field checks."""
    settled, more, rcv_mode, resume, aborted, batchable = flags
    fields = [Uint(handle), Uint(delivery_id) if delivery_id is not None else None, tag, Uint(0), settled, more,
              Ubyte(1) if rcv_mode else None, None, resume, aborted, batchable][: 5 + cut]  # fmt: skip
    octets = frame(0, spec.TRANSFER, fields, payload)
    fast, _ = split(octets, 0, 1 << 20)
    body, at = decode(octets, 8)
    assert fast.payload == payload == octets[at:]
    given = fields + [None] * (11 - len(fields))
    expected = (handle, delivery_id, given[4], given[5], given[9])
    assert fast.transfer == expected
    assert body.value[0] == Uint(handle)
