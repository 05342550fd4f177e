"""The C message finder (c_accel/messages.c) against its pure-Python reference
(core/store/paging.py's find_messages).

Differential tests: on the same bytes, start, bitmap and want, both give the same fields,
stop, status and size, and leave the same bits cleared, call after call as a page-in
makes them, whatever the bytes: segments of sound records, cut anywhere, flipped, zeroed,
messages whose fields do not fit, random bytes; with a bitmap, and for a dense run (None:
the ids from first_id on, one after the other). CPython only; `make setup` builds the
extension, so an import failure here is a failed build.
"""

import struct

from hypothesis import given, settings
from hypothesis import strategies as st
from paths import PORTABLE_TESTS

from hutch.c_accel import messages as c_messages
from hutch.core.message import Message
from hutch.core.store import paging
from hutch.core.store.journal import EXCHANGE, FIELDS, MESSAGE, message_parts
from hutch.core.store.records import CLEAN, CORRUPT, INCOMPLETE, TORN, encode_record, record_parts

EXAMPLES = 400


def message_record(journal_id, flags, body, names=(b"\x01q",), exchange=b"", key=b"q", properties=b"\x10\x00\x02"):
    """A MESSAGE record as the journal writes it (core/store/journal.py message_parts)."""
    payload = struct.pack(">HHQ", 60, 0, len(body)) + properties
    header_tail = struct.pack(">I", len(payload)) + payload + b"\xce"
    body_tail = struct.pack(">I", len(body)) + body + b"\xce" if body else None
    route = bytes((len(exchange),)) + exchange + bytes((len(key),)) + key
    message = Message(exchange, key, route, header_tail, body_tail, len(body))
    return b"".join(record_parts(MESSAGE, message_parts(message, journal_id, flags, 1234567, list(names))))


def find_all(find, data, pos, first_id, bitmap, want):
    """Every call a page-in makes on data: [(fields, stop, status, size)] until the scan stops
    short of want or at the end; and the bitmap after them (None: a dense run's, whose next
    call starts after the ids found, as Run.took moves it on)."""
    calls = []
    while True:
        fields, stop, status, size = find(data, pos, first_id, bitmap, want)
        calls.append((list(fields), stop, status, size))
        if status != CLEAN or len(fields) < FIELDS * want or stop >= len(data) or not want:
            return calls, None if bitmap is None else bytes(bitmap)
        assert stop > pos
        pos = stop
        if not bitmap:
            first_id += len(fields) // FIELDS


def both(data, pos, first_id, bitmap, want):
    """find_all in Python and in C, the same; bitmap None for a dense run."""
    python = find_all(paging.find_messages, data, pos, first_id, _copy(bitmap), want)
    c = find_all(c_messages.find_messages, data, pos, first_id, _copy(bitmap), want)
    assert c == python
    return python


def _copy(bitmap):
    return None if bitmap is None else bytearray(bitmap)


def found_ids(calls):
    return [fields[i] for fields, *_ in calls for i in range(0, len(fields), FIELDS)]


messages = st.builds(
    lambda journal_id, flags, body, names: (journal_id, message_record(journal_id, flags, body, names)),
    st.integers(0, 200),
    st.sampled_from([0, 1, 2, 4, 6]),
    st.binary(max_size=60),
    st.lists(st.sampled_from([b"\x01q", b"\x02qq", b"\x00"]), min_size=1, max_size=3),
)
others = st.builds(lambda payload: (None, encode_record(EXCHANGE, payload)), st.binary(max_size=40))
segments = st.lists(st.one_of(messages, messages, messages, others), max_size=30)
bitmaps = st.one_of(st.none(), st.binary(max_size=30))  # None (or empty): a dense run
wants = st.integers(0, 40)


def joined(records):
    return b"".join(record for _id, record in records)


@settings(max_examples=EXAMPLES)
@given(segments, st.integers(0, 64), bitmaps, wants)
def test_sound_segments(records, first_id, bitmap, want):
    data = joined(records)
    calls, left = both(data, 0, first_id, bitmap, want)
    if want:
        assert calls[-1][2] == CLEAN
    # the messages found are those whose bit was set, in order, each once (dense: the ids
    # from first_id on, each the next one)
    wanted = []
    for journal_id, _record in records:
        i = -1 if journal_id is None else journal_id - first_id
        if not bitmap:
            if i == len(wanted):
                wanted.append(i)
        elif 0 <= i < 8 * len(bitmap) and bitmap[i >> 3] & (1 << (i & 7)) and i not in wanted:
            wanted.append(i)
    ids = found_ids(calls)
    assert ids == [first_id + i for i in wanted][: len(ids)]


def dense_run(first_id, steps, flags, body):
    """Records of a dense run's ids from first_id, one after the other, with other records
    between them (a step False)."""
    records = []
    for step in steps:
        if step:
            records.append((first_id, message_record(first_id, flags, body)))
            first_id += 1
        else:
            records.append((None, encode_record(EXCHANGE, b"x")))
    return records


dense_runs = st.builds(
    dense_run,
    st.integers(0, 2**64 - 100),
    st.lists(st.booleans(), max_size=40),
    st.sampled_from([0, 4]),
    st.binary(max_size=20),
)


@settings(max_examples=EXAMPLES)
@given(dense_runs, st.integers(-2, 2), wants, st.lists(st.tuples(st.integers(0, 40), messages), max_size=3))
def test_dense_runs(records, shift, want, strays):
    """A dense run's ids one after the other (other records between them), from first_id near
    theirs (before: the first ones are missing, after: the first ones are others'), with
    messages of other ids here and there: the next id only, each in turn, both sides."""
    for where, stray in strays:
        records.insert(min(where, len(records)), stray)
    ids = [journal_id for journal_id, _record in records if journal_id is not None]
    first_id = max(0, (ids[0] if ids else 0) + shift)
    calls, left = both(joined(records), 0, first_id, None, want)
    assert left is None
    expected = []
    for journal_id in ids:
        if journal_id == first_id + len(expected):
            expected.append(journal_id)
    assert found_ids(calls) == (expected if want else [])  # (sound records: each call goes on)


@settings(max_examples=EXAMPLES)
@given(segments, bitmaps, wants, st.data())
def test_cut_segments(records, bitmap, want, data):
    whole = joined(records)
    cut = data.draw(st.integers(0, len(whole)))
    calls, _left = both(whole[:cut], 0, 0, bitmap, want)
    assert calls[-1][2] in (CLEAN, INCOMPLETE, TORN)


@settings(max_examples=EXAMPLES)
@given(segments, bitmaps, wants, st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=4))
def test_flipped_segments(records, bitmap, want, flips):
    data = bytearray(joined(records))
    for where, octet in flips:
        if data:
            data[where % len(data)] = octet
    both(bytes(data), 0, 0, bitmap, want)


@settings(max_examples=EXAMPLES)
@given(segments, bitmaps, wants, st.integers(1, 300))
def test_zeroed_tails(records, bitmap, want, zeros):
    both(joined(records) + bytes(zeros), 0, 0, bitmap, want)


@settings(max_examples=EXAMPLES)
@given(st.lists(st.binary(max_size=60), max_size=10), st.binary(min_size=1, max_size=4), wants)
def test_messages_whose_fields_do_not_fit(payloads, bitmap, want):
    """MESSAGE records that pass their CRC but whose fields run past their end (a bug, or a
    newer format): CORRUPT at the first one the bitmap asks for, both sides."""
    data = b"".join(encode_record(MESSAGE, bytes(8) + payload) for payload in payloads)
    both(data, 0, 0, bitmap, want)


@settings(max_examples=EXAMPLES * 2)
@given(st.binary(max_size=2000), st.integers(0, 2005), st.integers(0, 2**64 - 1), bitmaps, wants)
def test_random_bytes(raw, pos, first_id, bitmap, want):
    both(raw, pos, first_id, bitmap, want)


def test_each_field_is_where_the_message_has_it():
    record = message_record(9, 4, b"hello", names=(b"\x01q", b"\x02qq"), exchange=b"amq.direct", key=b"k")
    data = encode_record(EXCHANGE, b"x") + record
    calls, left = both(data, 0, 8, b"\x02", 5)
    fields, stop, status, size = calls[0]
    journal_id, flags, arrived, route, key, names, header, body, end = fields
    assert (journal_id, flags, arrived, stop, status, size, left) == (9, 4, 1234567, len(data), CLEAN, 0, b"\x00")
    assert data[route:key] == b"\x0aamq.direct" and data[key:names] == b"\x01k"
    assert data[names : names + 2] == b"\x00\x02"
    assert data[body:end] == b"\x00\x00\x00\x05hello\xce"
    assert data[header - 4 : header] == struct.pack(">I", body - header)


def test_a_record_larger_than_the_read_says_its_size():
    record = message_record(0, 0, b"x" * 100)
    calls, _left = both(record[:50], 0, 0, b"\x01", 1)
    assert calls == [([], 0, INCOMPLETE, len(record))]
    assert both(record[:5], 0, 0, b"\x01", 1)[0] == [([], 0, INCOMPLETE, 0)]
    assert both(b"\x07" + record[1:], 0, 0, b"\x01", 1)[0] == [([], 0, CORRUPT, 0)]


def test_a_content_header_without_its_property_flags_does_not_fit():
    for properties, status in ((b"", CORRUPT), (b"\x00", CORRUPT), (b"\x00\x00", CLEAN)):
        calls, _left = both(message_record(0, 0, b"x", properties=properties), 0, 0, b"\x01", 1)
        assert calls[-1][2] == status, properties


def test_every_paging_scenario_with_the_c_finder(monkeypatch):
    """tests/portable/test_paging.py's tests with the C finder in read_run's place, as a served
    broker pages on CPython: runs dense and with bitmaps, across segments, cut under a running
    broker, replayed, and every queue feature with a window of one message."""
    monkeypatch.syspath_prepend(PORTABLE_TESTS)
    import test_paging

    monkeypatch.setattr(paging, "find_messages", c_messages.find_messages)
    tests = [name for name in dir(test_paging) if name.startswith("test_")]
    for name in tests:
        getattr(test_paging, name)()
    assert len(tests) >= 18
