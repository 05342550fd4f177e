"""The journal's record format (core/store/records.py): round trips, and every way a segment can end
after a power cut or damage: torn at any byte, zero-filled, flipped bytes, garbage.
(Plain loops rather than hypothesis: these tests also run under micropython.)"""

from hutch.core.store.records import CLEAN, CORRUPT, TORN, encode_record, scan_records

RECORDS = [(1, b"declare queue q"), (2, b""), (3, b"x" * 300), (255, bytes(range(256)))]
SEGMENT = b"".join(encode_record(kind, payload) for kind, payload in RECORDS)
ENDS = []
_at = 0
for _kind, _payload in RECORDS:
    _at += len(encode_record(_kind, _payload))
    ENDS.append(_at)


def test_records_round_trip():
    assert scan_records(SEGMENT) == (RECORDS, len(SEGMENT), CLEAN)
    assert scan_records(b"") == ([], 0, CLEAN)
    assert scan_records(memoryview(SEGMENT)) == (RECORDS, len(SEGMENT), CLEAN)


def test_a_segment_cut_anywhere_keeps_every_whole_record_and_is_torn():
    for cut in range(len(SEGMENT)):
        records, good_end, ending = scan_records(SEGMENT[:cut])
        whole = [end for end in ENDS if end <= cut]
        assert records == RECORDS[: len(whole)], cut
        assert good_end == (whole[-1] if whole else 0), cut
        assert ending == (CLEAN if cut == good_end else TORN), cut


def test_a_zero_filled_tail_is_torn():
    for zeros in (1, 5, 6, 100, 4096):
        assert scan_records(SEGMENT + bytes(zeros)) == (RECORDS, len(SEGMENT), TORN)
    # the last record's bytes never written (zeros where it should be): torn there
    assert scan_records(SEGMENT[: ENDS[2]] + bytes(len(SEGMENT) - ENDS[2])) == (RECORDS[:3], ENDS[2], TORN)


def test_a_flipped_byte_in_the_middle_is_corrupt_and_in_the_last_record_torn():
    starts = [0] + ENDS[:-1]
    for index in range(len(SEGMENT)):
        damaged = bytearray(SEGMENT)
        damaged[index] ^= 0x40
        records, good_end, ending = scan_records(bytes(damaged))
        hit = max(i for i, start in enumerate(starts) if start <= index)
        assert records == RECORDS[:hit] and good_end == starts[hit], index
        if hit == len(RECORDS) - 1 and index >= starts[hit] + 8:
            assert ending == TORN, index  # the last payload or CRC: as from a write cut short
        else:
            assert ending == CORRUPT, index  # a damaged header, or good records after it


def test_garbage_after_the_records_is_corrupt():
    assert scan_records(SEGMENT + b"\x01\x02garbage") == (RECORDS, len(SEGMENT), CORRUPT)


def test_record_kind_must_be_an_octet():
    for kind in (-1, 256):
        try:
            encode_record(kind, b"")
        except ValueError:
            continue
        raise AssertionError("kind %d accepted" % kind)
