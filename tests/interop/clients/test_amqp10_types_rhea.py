"""amqp10/types.py against a real AMQP 1.0 implementation's codec: rhea (Node), the client the
1.0 tests and benchmarks use. What rhea writes, hutch reads as the same values; what hutch
writes, rhea reads as the same values (rhea writes lists and arrays in their wide forms, hutch
in the shortest: the octets differ, the values may not)."""

import json
import os
import shutil
import subprocess

import pytest
from paths import NODE_DIR

from hutch.amqp10.types import (
    Array,
    Byte,
    Described,
    Float,
    Int,
    Short,
    Symbol,
    Timestamp,
    Ubyte,
    Uint,
    Ulong,
    Ushort,
    Uuid,
    decode,
    encode,
)

NODE = shutil.which("node")
UUID = bytes(range(16))

# (rhea's case, the value hutch reads from rhea's octets)
RHEA_WRITES = [
    (["null", None], None),
    (["boolean", True], True),
    (["ubyte", 3], Ubyte(3)),
    (["ushort", 500], Ushort(500)),
    (["uint", 0], Uint(0)),
    (["uint", 70000], Uint(70000)),
    (["ulong", 5], Ulong(5)),
    (["byte", -2], Byte(-2)),
    (["short", -300], Short(-300)),
    (["int", -70000], Int(-70000)),
    (["long", -5], -5),
    (["float", 0.5], Float(0.5)),
    (["double", 1.5], 1.5),
    (["timestamp", 1700000000000], Timestamp(1700000000000)),
    (["uuid", UUID.hex()], Uuid(UUID)),
    (["binary", "0001ff"], b"\x00\x01\xff"),
    (["string", "h\u00e9llo"], "h\u00e9llo"),
    (["symbol", "amqp:accepted:list"], Symbol("amqp:accepted:list")),
    (["list", []], []),
    (["list", [["string", "a"], ["null", None], ["uint", 9]]], ["a", None, Uint(9)]),
    (["map", [["k", ["uint", 7]]]], {"k": Uint(7)}),
    (["symbolic_map", [["k", ["string", "v"]]]], {Symbol("k"): "v"}),
    (["symbol_array", ["a", "bb"]], Array(0xA3, [Symbol("a"), Symbol("bb")])),
    (
        ["described", [16, ["list", [["string", "c1"], ["null", None], ["uint", 131072]]]]],
        Described(Ulong(16), ["c1", None, Uint(131072)]),
    ),
]

# (what hutch writes, what rhea reads from it, as tests/node/amqp10_types.js shows it)
HUTCH_WRITES = [
    (None, None),
    (True, True),
    (Uint(70000), 70000),
    (Ushort(500), 500),
    (-5, -5),
    (1.5, 1.5),
    ("h\u00e9llo", "h\u00e9llo"),
    (Symbol("amqp:accepted:list"), "amqp:accepted:list"),
    (b"\x00\x01", {"binary": "0001"}),
    ([], []),
    (["a", None, Uint(9)], ["a", None, 9]),
    ({Symbol("k"): Uint(7)}, ["k", 7]),  # (rhea's reader gives a map as its keys and values in turn)
    (Array(0xA3, [Symbol("a"), Symbol("bb")]), ["a", "bb"]),
    (Described(Ulong(16), ["c1", None, Uint(131072)]), {"descriptor": 16, "value": ["c1", None, 131072]}),
]


def rhea(requests):
    if NODE is None or not os.path.isdir(os.path.join(NODE_DIR, "node_modules", "rhea")):
        pytest.fail("rhea is not installed: make test runs npm ci in tests/node")
    done = subprocess.run(
        [NODE, os.path.join(NODE_DIR, "amqp10_types.js")],
        input="".join(json.dumps(r) + "\n" for r in requests),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=NODE_DIR,
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_hutch_reads_what_rhea_writes():
    written = rhea([{"encode": case} for case, _ in RHEA_WRITES])
    for (case, expected), octets in zip(RHEA_WRITES, written):
        data = bytes.fromhex(octets)
        assert decode(data) == (expected, len(data)), case


def test_rhea_reads_what_hutch_writes():
    read = rhea([{"decode": encode(value).hex()} for value, _ in HUTCH_WRITES])
    assert read == [shown for _, shown in HUTCH_WRITES]
