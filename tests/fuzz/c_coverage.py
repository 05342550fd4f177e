"""The C accelerator built with libFuzzer's coverage instrumentation, for `make fuzz`.

The accelerator that `pip install` builds (gcc, -O2) has no coverage counters: atheris sees
only the Python side of a target, and the C scanner and runs are checked against Python
differentially but explored blind. Built by clang with -fsanitize=fuzzer-no-link, every edge
of c_accel/*.c gets a counter that libFuzzer reads beside the Python ones, so inputs that
reach new C branches are kept too.

    path = build(folder)   # clang's build of the accelerator, or None where clang is missing
    install(path)          # before the targets import hutch.c_accel: they get this build

An instrumented module calls libFuzzer's __sanitizer_cov_* functions as it loads, so atheris's
libFuzzer is loaded first with its symbols global (Python loads extensions with theirs
local), and the fuzzer is then set up to use that same libFuzzer (internal_libfuzzer=True).
"""

import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
C_ACCEL = os.path.join(HERE, "..", "..", "c_accel")
ENVIRONMENT = "HUTCH_FUZZ_C_ACCEL"  # the instrumented module's path, for tests/fuzz/run.py


def build(folder):
    """The path of the accelerator built by clang with coverage counters in folder (built again
    when a C file is newer), or None when clang is not installed."""
    clang = shutil.which("clang")
    if clang is None:
        return None
    os.makedirs(folder, exist_ok=True)
    built = [os.path.join(folder, name) for name in os.listdir(folder) if name.startswith("_accel.")]
    sources = [os.path.join(C_ACCEL, name) for name in os.listdir(C_ACCEL) if name.endswith((".c", ".h"))]
    if built and os.path.getmtime(built[0]) >= max(os.path.getmtime(path) for path in sources):
        return built[0]
    # a process of its own: distutils reads CC, CFLAGS and LDSHARED from the environment once
    script = (
        "import os, sys; sys.path.insert(0, %r); import build;"
        "b = build.make_builder(%r); target = b.compile(tmpdir=%r);"
        "os.replace(target, os.path.join(%r, os.path.basename(target))); print(os.path.basename(target))"
    ) % (C_ACCEL, C_ACCEL, os.path.join(folder, "tmp"), folder)
    flags = "-fsanitize=fuzzer-no-link -g"
    env = dict(os.environ, CC=clang, CFLAGS=flags, LDSHARED="%s -shared %s" % (clang, flags))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    if done.returncode != 0:
        raise RuntimeError("clang's build of the C accelerator failed:\n" + (done.stdout + done.stderr)[-3000:])
    return os.path.join(folder, done.stdout.split()[-1])


def install(path):
    """Load atheris's libFuzzer with its symbols global, then the instrumented module at path as
    hutch.c_accel._accel (before anything imports the ordinary build)."""
    import importlib.util

    flags = sys.getdlopenflags()
    sys.setdlopenflags(flags | os.RTLD_GLOBAL)
    try:
        import atheris.core_with_libfuzzer  # noqa: F401 (its symbols, for the module's counters)

        spec = importlib.util.spec_from_file_location("hutch.c_accel._accel", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.setdlopenflags(flags)
    sys.modules["hutch.c_accel._accel"] = module
