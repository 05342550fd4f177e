"""Type checks of the code that runs on boards, against MicroPython's stubs.

What goes onto a board (the modules firmware/build.py puts in the bundle, and
firmware/boot.py, main.py) is checked by basedpyright (pyright, from PyPI with
its own Node.js) against the micropython-stubs packages of the ESP32 and RP2
ports: their stdlib replaces CPython's, so `time.ticks_ms`, MicroPython's
asyncio, `machine.UART(...)` and `network.WLAN` are checked as the boards have
them, and a CPython-only API used on the board path is an error. The stubs are
installed into build/typings/ with `pip install --target`, as micropython-stubs
recommends (installed into the virtualenv they would shadow CPython's modules).

Rules: pyright's "basic" set, less the reportOptional* family (hutch sets many
attributes to None until first use; each access would be flagged). The code is
checked laid out as on a board (hutch/core/..., main.py at the root).

Known errors live in tests/typecheck/typecheck_baseline.txt, one per line ("file: rule:
message"); the test fails on any error not listed there. After fixing some,
or to accept new ones deliberately, rewrite it:

    .venv/bin/python tests/typecheck/test_typecheck.py --update-baseline
"""

import collections
import json
import os
import shutil
import subprocess
import sys

import pytest
from paths import ROOT

BASELINE = os.path.join(ROOT, "tests", "typecheck", "typecheck_baseline.txt")
STDLIB_STUBS = "micropython-stdlib-stubs==1.29.0.post2"
PORT_STUBS = {
    "esp32": "micropython-esp32-stubs==1.29.0.post1",
    "rp2": "micropython-rp2-stubs==1.29.0.post1",
}
RULES = {
    "typeCheckingMode": "basic",
    "pythonVersion": "3.8",  # as micropython-stubs configure it; MicroPython's syntax is older still
    "pythonPlatform": "Linux",
    "reportMissingModuleSource": "none",  # stubs without source: every MicroPython module
    "reportOptionalMemberAccess": "none",
    "reportOptionalSubscript": "none",
    "reportOptionalIterable": "none",
    "reportOptionalCall": "none",
    "reportOptionalOperand": "none",
    "reportOptionalContextManager": "none",
}


def board_files():
    """{path as on the board: path in the checkout} for everything the bundle holds."""
    from hutch.firmware import build

    files = {}
    for bundle in build.BUNDLES:  # the broker's and a sensor node's
        for package, name in build.modules(bundle):
            files["hutch/%s/%s" % (package, name)] = os.path.join(ROOT, package, name)
    for script in build.BOARD_SCRIPTS:
        files[script] = os.path.join(ROOT, "firmware", script)
    return files


def stubs(port):
    """build/typings/<port>: the port's stubs and MicroPython's stdlib stubs (pip install --target)."""
    pins = [PORT_STUBS[port], STDLIB_STUBS]
    folder = os.path.join(ROOT, "build", "typings", port)
    stamp = os.path.join(folder, "installed.txt")
    if os.path.exists(stamp):
        with open(stamp) as f:
            if f.read().split() == pins:
                return folder
    staging = folder + ".partial"
    shutil.rmtree(staging, ignore_errors=True)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "--target",
            staging,
        ]
        + pins,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, "could not install %s:\n%s" % (" ".join(pins), result.stdout + result.stderr)
    with open(os.path.join(staging, "installed.txt"), "w") as f:
        f.write("\n".join(pins))
    shutil.rmtree(folder, ignore_errors=True)
    os.rename(staging, folder)
    return folder


def check(port, workdir):
    """basedpyright's errors: [(baseline key, "file:line")]."""
    files = board_files()
    for board_path, source in files.items():  # the layout of the board's filesystem, linked to the checkout
        target = os.path.join(workdir, board_path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.symlink(source, target)
    typings = stubs(port)
    config = dict(RULES, include=sorted(files), typeshedPath=typings, stubPath=typings, extraPaths=["."])
    with open(os.path.join(workdir, "pyrightconfig.json"), "w") as f:
        json.dump(config, f, indent=1)
    result = subprocess.run(
        [sys.executable, "-m", "basedpyright", "--outputjson", "-p", workdir],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=workdir,
    )
    try:
        report = json.loads(result.stdout)
    except ValueError:
        raise AssertionError(
            "basedpyright did not answer in JSON (exit %d):\n%s"
            % (result.returncode, (result.stdout + result.stderr)[-3000:])
        )
    assert report["summary"]["filesAnalyzed"] >= len(files), report["summary"]
    found = []
    for d in report["generalDiagnostics"]:
        if d["severity"] != "error":
            continue
        board_path = os.path.relpath(d["file"], workdir)
        source = os.path.relpath(files.get(board_path, d["file"]), ROOT)
        key = "%s: %s: %s" % (source, d.get("rule", "error"), d["message"].splitlines()[0])
        found.append((key, "%s:%d" % (source, d["range"]["start"]["line"] + 1)))
    return found


def baseline():
    if not os.path.exists(BASELINE):
        return collections.Counter()
    with open(BASELINE) as f:
        return collections.Counter(line.rstrip("\n") for line in f if line.strip() and not line.startswith("#"))


@pytest.mark.parametrize("port", sorted(PORT_STUBS))
def test_board_code_type_checks_against_micropython_stubs(port, tmp_path):
    found = check(port, str(tmp_path))
    known = baseline()
    seen = collections.Counter(key for key, _ in found)
    new = [(key, where) for key, where in found if seen[key] > known[key]]
    fixed = sorted((known - seen).elements())
    if fixed:
        print("fixed since tests/typecheck/typecheck_baseline.txt was written (--update-baseline drops them):")
        print("\n".join("  " + key for key in fixed))
    assert not new, (
        "type errors against the MicroPython %s stubs, not in tests/typecheck/typecheck_baseline.txt:\n%s"
        % (
            port,
            "\n".join("  %s  (%s)" % (key, where) for key, where in new),
        )
    )


def update_baseline():
    import tempfile

    union = collections.Counter()
    for port in sorted(PORT_STUBS):
        with tempfile.TemporaryDirectory() as workdir:
            union |= collections.Counter(key for key, _ in check(port, workdir))
    with open(BASELINE, "w") as f:
        f.write(
            "# Known type errors of the board code against MicroPython's stubs (tests/typecheck/test_typecheck.py).\n"
            "# Fix them and run `.venv/bin/python tests/typecheck/test_typecheck.py --update-baseline`.\n"
        )
        f.write("".join(key + "\n" for key in sorted(union.elements())))
    print("%d known errors written to %s" % (sum(union.values()), BASELINE))


if __name__ == "__main__":
    if sys.argv[1:] != ["--update-baseline"]:
        sys.exit("usage: python tests/typecheck/test_typecheck.py --update-baseline")
    update_baseline()
