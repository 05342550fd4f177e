"""The outcome of a portable fuzz target (fuzz_targets.PORTABLE: code a board runs) on each
input in some folders, one line each, so that CPython's and MicroPython's can be compared
(tests/fuzz/test_replay.py, test_fuzzers.py): the same inputs, the same outcomes.

    micropython tests/fuzz/portable_outcomes.py NAME FOLDER [FOLDER ...]
    (MICROPYPATH: hutch's package root, tests/fuzz, tests/support)

Each line: FOLDER/FILE and the CRC-32 of the outcome's text. Plain Python that MicroPython
runs: no os.path, no pathlib.
"""

import binascii
import os
import sys

from fuzz_targets import target


def outcomes(name, folders):
    run = target(name)
    lines = []
    for folder in folders:
        try:
            entries = sorted(os.listdir(folder))
        except OSError:  # (a target with no findings)
            continue
        for entry in entries:
            with open("%s/%s" % (folder, entry), "rb") as f:
                data = f.read()
            lines.append("%s/%s %08x" % (folder, entry, binascii.crc32(run(data).encode()) & 0xFFFFFFFF))
    return lines


if __name__ == "__main__":
    for line in outcomes(sys.argv[1], sys.argv[2:]):
        print(line)
