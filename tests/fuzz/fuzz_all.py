"""`make fuzz`: every fuzz target under atheris, without end (or for --rounds), a turn of
--seconds each, one after another; each target's corpus grows in build/fuzz/NAME/ (its kept
inputs read too), and an input that fails a target is written to build/fuzz/findings/ and
ends the run, said with the command that replays it.

    .venv/bin/python tests/fuzz/fuzz_all.py [--seconds 300] [--rounds N] [--only NAME ...]

After each turn, one line: the target, the inputs run (all turns), per second, coverage.
Where clang is installed (`make fuzz` installs it), the C accelerator is built with coverage
counters (c_coverage.py) and the targets' C paths count in their coverage.
A finding is kept as a regression input in tests/fuzz/findings/NAME/ once fixed.
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "support")]

from c_coverage import build  # noqa: E402
from fuzz_support import fuzzed  # noqa: E402
from fuzz_targets import TARGETS  # noqa: E402

BUILD = os.path.normpath(os.path.join(HERE, "..", "..", "build", "fuzz"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=300, help="each target's turn (default 300)")
    parser.add_argument("--rounds", type=int, default=0, help="turns of every target (default 0: without end)")
    parser.add_argument("--only", nargs="*", choices=sorted(TARGETS), help="these targets alone")
    options = parser.parse_args()
    names = options.only or sorted(TARGETS)
    totals = dict.fromkeys(names, 0)
    c_accel = build(os.path.join(BUILD, "c_accel"))
    print("fuzz: the C accelerator %s" % ("with coverage counters: " + c_accel if c_accel else "without coverage counters (no clang)"))  # fmt: skip
    round_ = 0
    while not options.rounds or round_ < options.rounds:
        round_ += 1
        for name in names:
            folder = os.path.join(BUILD, name)
            os.makedirs(folder, exist_ok=True)
            try:
                figures = fuzzed(name, folder, options.seconds, round_, c_accel)
            except AssertionError as e:
                findings = os.path.join(BUILD, "findings")
                os.makedirs(findings, exist_ok=True)
                for entry in os.listdir(folder):
                    if entry.startswith(("crash-", "timeout-", "oom-")):
                        os.replace(os.path.join(folder, entry), os.path.join(findings, "%s-%s" % (name, entry)))
                print(str(e)[-4000:])
                print("fuzz: %s failed; the input is in %s (replay: python tests/fuzz/run.py %s FILE)" % (name, findings, name))  # fmt: skip
                return 1
            totals[name] += figures["runs"]
            print("round %d: %s: %d inputs (%d/s), coverage %d edges" % (round_, name, totals[name], figures["per_second"], figures["coverage"]), flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
