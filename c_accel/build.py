"""The cffi build of the C accelerator (API mode, out-of-line): hutch.c_accel._accel.

setup.py hands `ffibuilder` to setuptools (cffi_modules), so `pip install` compiles it
when a C compiler is there; without one the build is skipped and hutch runs the
pure-Python code in core/. By hand, to try a change without reinstalling:

    python c_accel/build.py       # writes c_accel/_accel.*.so
"""

import os

from cffi import FFI

# What Python sees of framing.h, crc32.h, streams.h, messages.h, appends.h and runs.h (cffi's parser takes no #include or #ifndef).
CDEF = """
size_t hutch_scan_frames(const uint8_t *buf, size_t len, size_t pos, int64_t max_payload,
                         uint64_t *records, size_t capacity, size_t *outcome);
size_t hutch_stream_deliveries(const uint8_t *buf, size_t end, uint64_t *state, uint64_t visible,
                               uint64_t count, uint64_t space, unsigned number, const uint8_t *tag_ss,
                               size_t tag_len, uint64_t tag, uint64_t max_payload, uint8_t *out,
                               size_t capacity);
uint32_t hutch_crc32(const uint8_t *data, size_t len, uint32_t crc);
size_t hutch_find_messages(const uint8_t *buf, size_t len, size_t pos, uint64_t first_id,
                           uint8_t *bitmap, size_t bitmap_len, size_t want,
                           uint64_t *fields, uint64_t *outcome);
size_t hutch_stream_appends(const uint8_t *buf, size_t len, const uint64_t *records, size_t count,
                            unsigned number, const uint8_t *method, size_t method_len,
                            const uint8_t *header, size_t header_len, size_t fixed_len, uint64_t max_body,
                            const uint8_t *prefix, size_t prefix_len, size_t body_size_at,
                            const uint8_t *after, size_t after_len, uint64_t offset,
                            uint64_t timestamp_ms, size_t max_count, size_t budget, uint8_t *out,
                            size_t capacity, uint64_t *outcome);
void hutch_alike_publishes(const uint8_t *buf, const uint64_t *records, size_t count, unsigned number,
                           const uint8_t *method, size_t method_len, const uint8_t *header,
                           size_t header_len, size_t fixed_len, uint64_t max_body, size_t max_count,
                           uint64_t *outcome);
size_t hutch_queue_deliveries(const uint8_t *buf, const uint64_t *records, size_t count, unsigned number,
                              const uint8_t *tag_ss, size_t tag_len, uint64_t tag, const uint8_t *route,
                              size_t route_len, uint64_t max_payload, uint64_t space, uint8_t *out,
                              size_t capacity, uint64_t *outcome);
"""


def make_builder(folder):
    """The FFI builder, with the C files found in folder (c_accel/)."""
    builder = FFI()
    builder.cdef(CDEF)
    builder.set_source(
        "hutch.c_accel._accel",
        '#include "framing.h"\n#include "crc32.h"\n#include "streams.h"\n#include "messages.h"\n#include "appends.h"\n#include "runs.h"',
        sources=[
            os.path.join(folder, name)
            for name in ("framing.c", "crc32.c", "streams.c", "messages.c", "appends.c", "runs.c")
        ],
        include_dirs=[folder],
        extra_compile_args=["-O2", "-std=c99", "-Wall", "-Wextra"],
        # A compiler that is missing or fails must not fail the install: setuptools then
        # warns and goes on, and the loader falls back to pure Python.
        optional=True,
    )
    return builder


# setuptools runs this from the repository root, and wants paths relative to it.
ffibuilder = make_builder("c_accel")

if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    target = make_builder(here).compile(tmpdir=os.path.join(os.path.dirname(here), "build", "c_accel"))
    # compile() lays the module out by its dotted name under tmpdir: move it beside its sources
    os.replace(target, os.path.join(here, os.path.basename(target)))
    print("built", os.path.join(here, os.path.basename(target)))
