"""The C message finder, called the way core/store/paging.py's find_messages is.

Importing this module fails with ImportError when the extension was not built
(no compiler at install time, another platform): loader.py then keeps pure Python.
"""

from ..core.store.journal import FIELDS
from ._accel import ffi, lib

# Where the C function reports its stop, status and size: read straight after the call.
_outcome = ffi.new("uint64_t[3]")
_fields = [ffi.new("uint64_t[]", FIELDS * 1024)]  # grown when a page-in wants more


def find_messages(data, pos, first_id, bitmap, want):
    """core.paging.find_messages in C: same arguments, same result (its fields a list)."""
    fields = _fields[0]
    if len(fields) < FIELDS * want:
        fields = _fields[0] = ffi.new("uint64_t[]", FIELDS * want)
    outcome = _outcome
    # from_buffer: no copy of data; bitmap (a bytearray) is written through, as in Python; a
    # dense run's (None) is no bitmap at all
    found = lib.hutch_find_messages(
        ffi.from_buffer(data),
        len(data),
        pos,
        first_id,
        ffi.from_buffer(bitmap, require_writable=True) if bitmap else ffi.NULL,
        len(bitmap) if bitmap else 0,
        want,
        fields,
        outcome,
    )
    return ffi.unpack(fields, FIELDS * found), outcome[0], outcome[1], outcome[2]
