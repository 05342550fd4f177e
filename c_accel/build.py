"""The cffi build of the C accelerator (API mode, out-of-line): hutch.c_accel._accel.

setup.py hands `ffibuilder` to setuptools (cffi_modules), so `pip install` compiles it
when a C compiler is there; without one the build is skipped and hutch runs the
pure-Python code in core/. By hand, to try a change without reinstalling:

    python c_accel/build.py       # writes c_accel/_accel.*.so
"""

import os

from cffi import FFI

# The headers whose functions and enums Python sees. cffi's parser takes their declarations and
# comments but no preprocessor line, so those lines are left out (cdef_of), and each prototype
# is written once, in its header.
HEADERS = ("framing.h", "crc32.h", "streams.h", "messages.h", "appends.h", "runs.h")


def cdef_of(folder):
    """The declarations of HEADERS in folder, without their #ifndef, #define and #include lines."""
    lines = []
    for name in HEADERS:
        with open(os.path.join(folder, name)) as f:
            lines += [line for line in f.read().splitlines() if not line.lstrip().startswith("#")]
    return "\n".join(lines)


def make_builder(folder):
    """The FFI builder, with the C files found in folder (c_accel/)."""
    builder = FFI()
    builder.cdef(cdef_of(folder))
    builder.set_source(
        "hutch.c_accel._accel",
        "".join('#include "%s"\n' % name for name in HEADERS),
        sources=[os.path.join(folder, name[:-2] + ".c") for name in HEADERS],  # (each header's own)
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
