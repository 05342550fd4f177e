"""Every kept input of every fuzz target (its seed corpus, tests/fuzz/corpus/NAME/, and what
found a bug once, tests/fuzz/findings/NAME/) through the target, in this process: what the
fuzzers start from is sound, and each finding stays fixed."""

import os

import pytest
from fuzz_support import kept_folders, same_outcomes_under_micropython
from fuzz_targets import PORTABLE, TARGETS, target

HERE = os.path.dirname(os.path.abspath(__file__))
KEPT = [
    (name, os.path.join(HERE, kind, name, entry))
    for name in sorted(TARGETS)
    for kind in ("corpus", "findings")
    if os.path.isdir(os.path.join(HERE, kind, name))
    for entry in sorted(os.listdir(os.path.join(HERE, kind, name)))
]


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_each_target_has_seeds(name):
    assert any(kept == name for kept, _path in KEPT), "no seed for %s (tests/fuzz/record_corpus.py)" % name


@pytest.mark.parametrize("name,path", KEPT, ids=["%s/%s" % (name, os.path.basename(path)) for name, path in KEPT])
def test_a_kept_input_passes_its_target(name, path):
    with open(path, "rb") as f:
        data = f.read()
    target(name)(data)


@pytest.mark.parametrize("name", PORTABLE)
def test_a_portable_target_reads_the_kept_inputs_alike_under_micropython(tmp_path, name):
    """What a board runs reads each kept input as CPython does: the same outcome, input by input
    (tests/fuzz/portable_outcomes.py under the `micropython` command)."""
    print("%s: %d inputs alike" % (name, same_outcomes_under_micropython(tmp_path, name, kept_folders(name))))
