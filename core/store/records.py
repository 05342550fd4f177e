"""The journal's record format: what one append to a segment file holds, and the one reader of its
envelope (envelope(), sound_payload()), which streams' segments share.

A segment file is a run of records, each:

    0xA5  kind(1)  length(4)  check(2)  payload(length)  crc32(4)      (integers big-endian)

check is the low 16 bits of the CRC-32 of kind and length: a damaged length is caught
before it is believed (otherwise it would make the records after it look like the torn
tail of one huge record). The CRC-32 at the end covers kind, length and payload, so a
record whose bytes were torn, flipped or never written is told from a good one. Reading a segment (scan_records) returns the good
records and says how the segment ends:

- CLEAN: the last record ends where the data ends;
- TORN: the data ends inside a record whose header is sound, or the last record's payload
  or CRC does not check out, or after the last good record come only zeros (a power cut
  while writing: the file grew, the bytes never reached the card). Cutting the segment at
  `good_end` loses only the write that was under way, which was never confirmed;
- CORRUPT: a header does not check out (and is not all zeros), or a record with more data
  after it does not. What follows cannot be trusted: the segment is set aside, keeping
  the records before it.

Sans-IO like the rest of core/: bytes in, records out; the storage port reads and writes
the files. Written for MicroPython too (binascii.crc32, byte indexing).
"""

from binascii import crc32
from struct import pack

MAGIC = 0xA5
HEADER_SIZE = 8  # magic, kind, length, check
TRAILER_SIZE = 4  # crc32
MAX_PAYLOAD = 0x7FFFFFFF

CLEAN = 0
TORN = 1
CORRUPT = 2
INCOMPLETE = 3  # (next_record) the data ends inside a sound record, or inside a header
ENDINGS = ("clean", "torn", "corrupt")


def encode_record(kind, payload):
    """The bytes of one record (kind 0-255, payload bytes)."""
    return b"".join(record_parts(kind, (payload,)))


def record_parts(kind, parts):
    """One record as a list of byte strings, its payload given in parts: a message's body
    goes into the journal's write without being copied into a payload first."""
    if not 0 <= kind <= 255:
        raise ValueError("record kind %r is not an octet" % (kind,))
    n = 0
    for part in parts:
        n += len(part)
    if n > MAX_PAYLOAD:
        raise ValueError("record payload of %d bytes is too large" % n)
    # struct packs the header and the trailer in a third of the time bytes() of shifted octets
    # takes: every persistent message is a record
    crc = crc32(pack(">BI", kind, n))
    out = [pack(">BBIH", MAGIC, kind, n, crc & 0xFFFF)]
    for part in parts:
        crc = crc32(part, crc)
        out.append(part)
    out.append(pack(">I", crc & 0xFFFFFFFF))
    return out


def _all_zero(data, start):
    for i in range(start, len(data)):
        if data[i]:
            return False
    return True


def scan_records(data):
    """(records, good_end, ending): records as (kind, payload) in order, the offset just past
    the last good one, and how the data ends (CLEAN, TORN or CORRUPT; see above)."""
    records = []
    pos = 0
    n = len(data)
    while pos < n:
        kind, start, end = next_record(data, pos)
        if kind < 0:
            return records, pos, TORN if kind == -INCOMPLETE else -kind
        records.append((kind, bytes(data[start:end])))
        pos = end + TRAILER_SIZE
    return records, pos, CLEAN


def envelope(data, pos, end):
    """The record envelope at pos, data read up to end: (kind, payload end) for a sound header
    (the payload is data[pos + HEADER_SIZE : payload end], its CRC-32 the 4 octets after: the
    record is whole when they are before end, and sound_payload() checks them); (-INCOMPLETE, 0)
    when fewer than HEADER_SIZE octets are there, (-CORRUPT, 0) when the header does not check
    out. The one reader of the envelope: the journal's records (next_record), page-ins and a
    stream's (core/streams/streamlog.py parse, needed) all read it here."""
    if end - pos < HEADER_SIZE:
        return -INCOMPLETE, 0
    fields = bytes(data[pos + 1 : pos + 6])
    if data[pos] != MAGIC or crc32(fields) & 0xFFFF != (data[pos + 6] << 8) | data[pos + 7]:
        return -CORRUPT, 0
    return fields[0], pos + HEADER_SIZE + ((fields[1] << 24) | (fields[2] << 16) | (fields[3] << 8) | fields[4])


def sound_payload(data, pos, stop):
    """Whether the CRC-32 at stop covers the kind, length and payload of the record at pos."""
    stored = (data[stop] << 24) | (data[stop + 1] << 16) | (data[stop + 2] << 8) | data[stop + 3]
    return (
        crc32(memoryview(data)[pos + HEADER_SIZE : stop], crc32(bytes(data[pos + 1 : pos + 6]))) & 0xFFFFFFFF == stored
    )


def next_record(data, pos):
    """The record at pos in data: (kind, payload start, payload end), the next record starting
    at end + TRAILER_SIZE; or (-TORN, pos, pos) / (-CORRUPT, pos, pos) when there is no good
    record there (see above), (-INCOMPLETE, pos, size) when the data ends inside a sound
    record of that size (size 0: inside its header): more data may make it whole. No copy:
    page-ins read records out of a large buffer with it."""
    n = len(data)
    kind, stop = envelope(data, pos, n)
    if kind == -INCOMPLETE:
        return (-INCOMPLETE if data[pos] in (MAGIC, 0) else -CORRUPT), pos, 0
    if kind == -CORRUPT or stop - pos - HEADER_SIZE > MAX_PAYLOAD:
        return (-TORN if _all_zero(data, pos) else -CORRUPT), pos, pos
    end = stop + TRAILER_SIZE
    if end > n:
        return -INCOMPLETE, pos, end - pos  # a sound header: its record was being written
    if not sound_payload(data, pos, stop):
        # A bad last record is a torn write; a bad one with good data after it is damage.
        return (-TORN if end == n or _all_zero(data, end) else -CORRUPT), pos, pos
    return kind, pos + HEADER_SIZE, stop
