"""Every fuzz target run under atheris (libFuzzer's coverage-guided search) for a few seeded
seconds, from its kept inputs: no input it makes fails the target. A portable target's inputs
(the seeds and what the run found that reaches new code) are then read under MicroPython too,
with the same outcomes. Each prints what it reached: inputs run, per second, and coverage
(libFuzzer's count of code edges reached).

`make fuzz` runs the same targets without end (tests/fuzz/fuzz_all.py); HUTCH_FUZZ_SECONDS
and HUTCH_FUZZ_SEED change the bounds here."""

import os

import pytest
from fuzz_support import fuzzed, kept_folders, same_outcomes_under_micropython
from fuzz_targets import PORTABLE, TARGETS

SECONDS = int(os.environ.get("HUTCH_FUZZ_SECONDS", "2"))
SEED = int(os.environ.get("HUTCH_FUZZ_SEED", "1"))


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_a_target_fuzzed_for_a_few_seconds_holds(tmp_path, name):
    folder = tmp_path / "corpus"
    folder.mkdir()
    figures = fuzzed(name, folder, SECONDS, SEED)
    line = "%s: %d inputs in %d s (%d/s), coverage %d edges" % (
        name, figures["runs"], SECONDS, figures["per_second"], figures["coverage"],
    )  # fmt: skip
    if name in PORTABLE:
        alike = same_outcomes_under_micropython(tmp_path, name, [str(folder)] + kept_folders(name))
        line += "; %d inputs read alike under MicroPython" % alike
    print(line)
