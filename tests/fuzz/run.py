"""One fuzz target under atheris (libFuzzer for CPython), coverage-guided over hutch's code:

    python tests/fuzz/run.py NAME [CORPUS_DIR ...] [libFuzzer options: -max_total_time=N -seed=N ...]

NAME is one of fuzz_targets.TARGETS. The modules the target imports (hutch's, the C
accelerator's Python side) are instrumented as they load; with HUTCH_FUZZ_C_ACCEL naming
clang's instrumented build of the accelerator (c_coverage.py), its C code counts too. libFuzzer writes the inputs that
reach new code into the first CORPUS_DIR, and an input that fails into crash-* (or
-artifact_prefix). `make fuzz` runs every target without end; tests/fuzz/test_fuzzers.py runs
each for a few seeded seconds.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "support")]

import atheris  # noqa: E402 (after the path: the targets import the tests' support modules)
import c_coverage  # noqa: E402

C_ACCEL = os.environ.get(c_coverage.ENVIRONMENT)
if C_ACCEL:
    c_coverage.install(C_ACCEL)

with atheris.instrument_imports(include=["hutch", "fuzz_targets"]):
    import fuzz_targets

    one_input = fuzz_targets.target(sys.argv[1])
    # what a target imports when it first runs (a session's front end) is instrumented too
    one_input(fuzz_targets.WARM_UP)


def main():
    # with the C counters, the libFuzzer they were given to (c_coverage.install)
    same_libfuzzer = {"internal_libfuzzer": True} if C_ACCEL else {}
    atheris.Setup([sys.argv[0]] + sys.argv[2:], one_input, **same_libfuzzer)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
