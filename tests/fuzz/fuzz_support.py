"""What the fuzz tests and `make fuzz` share: where the kept inputs are, a target run under
atheris for a while, and a portable target's outcomes under the `micropython` command, to
compare with CPython's."""

import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def kept_folders(name):
    """The folders of a target's kept inputs: its seed corpus and its findings."""
    return [os.path.join(HERE, kind, name) for kind in ("corpus", "findings")]


OUTCOMES_HEAP = "16M"


def same_outcomes_under_micropython(tmp_path, name, folders):
    """Each input in folders read by the portable target `name` under MicroPython as under
    CPython; how many inputs were compared."""
    from micropython_env import micropython, package_root
    from paths import SUPPORT
    from portable_outcomes import outcomes

    root = package_root(tmp_path, ("codec", "core", "amqp091", "amqp10", "ports", "devices", "mqtt"))
    env = dict(os.environ, MICROPYPATH=":".join([root, HERE, SUPPORT, ".frozen"]))
    # (the outcomes, not the heap, are compared here: every input in one process, in the unix
    # port's default 2 MB heap, left it too fragmented for a 26 KB block after some hundreds)
    done = subprocess.run(
        [micropython(), "-X", "heapsize=%s" % OUTCOMES_HEAP, os.path.join(HERE, "portable_outcomes.py"), name]
        + list(folders),
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    on_board = done.stdout.splitlines()
    here = outcomes(name, folders)
    assert len(here) == len(on_board) > 0, (len(here), len(on_board))
    differ = [(a, b) for a, b in zip(here, on_board) if a != b]
    assert not differ, "%s: outcomes that differ (CPython, MicroPython): %s" % (name, differ[:10])
    return len(here)


def fuzzed(name, folder, seconds, seed, c_accel=None):
    """libFuzzer's figures of a bounded run of a target (its new inputs into folder): {runs,
    per_second, coverage}; AssertionError with its log if an input failed the target. c_accel:
    the C accelerator built with coverage counters (c_coverage.py), for the target to use."""
    from c_coverage import ENVIRONMENT

    command = [sys.executable, os.path.join(HERE, "run.py"), name, str(folder)]
    command += [path for path in kept_folders(name) if os.path.isdir(path)]
    command += ["-max_total_time=%d" % seconds, "-seed=%d" % seed, "-timeout=30", "-rss_limit_mb=2048"]
    command += ["-print_final_stats=1", "-artifact_prefix=%s/" % folder]
    env = dict(os.environ, **({ENVIRONMENT: c_accel} if c_accel else {}))
    done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 120, env=env)
    log = done.stdout + done.stderr
    failed = [entry for entry in os.listdir(folder) if entry.startswith(("crash-", "timeout-", "oom-"))]
    assert done.returncode == 0 and not failed, "%s failed on %s:\n%s" % (name, failed, log[-6000:])
    runs = int(re.search(r"stat::number_of_executed_units: (\d+)", log).group(1))
    per_second = int(re.search(r"stat::average_exec_per_sec:\s+(\d+)", log).group(1))
    coverage = int(re.findall(r"cov: (\d+)", log)[-1])
    return {"runs": runs, "per_second": per_second, "coverage": coverage}
