"""MicroPython's WebAssembly port as a 32-bit board, run under Node: the host side (CPython).

    board = Wasm32Board(board_dir).start()     # the broker starts, as main.py starts it
    client = board.open()                      # a client connects (an index)
    answer = board.steps([(client, octets, now_ms), ...])   # one turn of the board's loop each
    answer["out"][client]                      # what the broker sent it meanwhile
    board.close()

The port is npm's @micropython/micropython-webassembly-pyscript (tests/node/package.json): a
32-bit MicroPython (sys.maxsize 2**31-1, so every object, pointer and dict slot is the size it
is on an ESP32 or an RP2040) with an in-memory filesystem and no sockets. hutch's core needs no
socket: emulator/board_in_memory.py is the port that feeds it the clients' octets, inside the
interpreter, and emulator/wasm32_host.mjs runs the interpreter and answers this module's
requests (JSON lines on its stdin and stdout).

make_board_dir() lays out the board's filesystem: the firmware bundle as
`python -m hutch.firmware.build` makes it (the same .mpy files `hutch flash` copies) and
hutch.json, and beside it the harness's own module (not part of the bundle).

Where this port is not a board (emulator/board_in_memory.py and docs/boards.md say what each
costs): hutch's .mpy files are loaded into the heap (a board runs them from flash), so the
heap figures count the code, which census() measures on its own; binascii, os, time, io and
collections are Python modules here (C on a board); it has no os.urandom (the broker's
generated names use its fixed stem); gc.mem_free() counts the 128 MiB the heap may still
grow by, so the broker's heap monitor never sees it run low; and garbage is collected only
between the host's calls, never inside one.
"""

import json
import os
import shutil
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PACKAGE = "@micropython/micropython-webassembly-pyscript"
VERSION = "1.27.0"  # tests/node/package.json pins it
# Where `make test` (npm ci --prefix tests/node) installs it; HUTCH_WASM32_PACKAGE names another.
DEFAULT_PACKAGE = os.path.join(ROOT, "tests", "node", "node_modules", PACKAGE, "micropython.mjs")
HEAP = 96 * 1024  # the heap the port starts with; it grows past it as the broker needs (see census)


class Wasm32Error(Exception):
    """The board cannot run, or Python raised inside it: one line (the board's log follows)."""


def package_path():
    """The port's micropython.mjs; Wasm32Error saying how to install it if it is missing."""
    path = os.environ.get("HUTCH_WASM32_PACKAGE") or DEFAULT_PACKAGE
    if not os.path.exists(path):
        raise Wasm32Error(
            "no MicroPython WebAssembly port at %s: install it with `npm ci --prefix tests/node` "
            "(npm's %s %s; `make setup` does it), or name its micropython.mjs in HUTCH_WASM32_PACKAGE"
            % (path, PACKAGE, VERSION)
        )
    return path


def node_command():
    node = shutil.which("node")
    if node is None:
        raise Wasm32Error("no `node` on PATH: the WebAssembly port runs under Node 20 or later")
    return node


def make_board_dir(folder, config, bundle):
    """folder/board, the board's filesystem: the firmware bundle (bundle: build/firmware/bundle as
    `python -m hutch.firmware.build` makes it) and hutch.json (config, as a dict); and
    folder/harness, emulator/board_in_memory.py (not part of the bundle: the port compiles it
    when it is imported). Returns (board, harness)."""
    board = os.path.join(folder, "board")
    harness = os.path.join(folder, "harness")
    shutil.rmtree(board, ignore_errors=True)
    shutil.copytree(bundle, board)
    with open(os.path.join(board, "hutch.json"), "w") as f:
        json.dump(config, f)
    os.makedirs(harness, exist_ok=True)
    shutil.copy(os.path.join(HERE, "board_in_memory.py"), harness)
    return board, harness


class Wasm32Board:
    """The port under Node, with the board's filesystem loaded; stopped by close().

    Every answer that follows a step carries the live heap after it and how many modules are
    loaded; they are kept in `samples` ((live, modules) pairs, the scenario reads and clears
    them). For each new count of modules, `module_sets` keeps the set (census() sizes their
    code) and `qstr_bytes` the heap the interned names take then."""

    def __init__(self, board_dir, harness_dir, heap=HEAP):
        command = [node_command(), os.path.join(HERE, "wasm32_host.mjs"), package_path(), board_dir, harness_dir]
        self.proc = subprocess.Popen(
            command + [str(heap)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.log = []  # the board's log lines (and anything it printed)
        self.samples = []
        self.module_sets = {}  # count of modules loaded -> the set loaded then
        self.qstr_bytes = {}  # count of modules loaded -> the heap of the interned names then
        self.read_size = 0
        self.started = None  # (live, modules) once started

    def request(self, **request):
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(10)
            raise Wasm32Error(
                "the WebAssembly board exited (code %s): %s" % (self.proc.returncode, self.proc.stderr.read()[-2000:])
            )
        answer = json.loads(line)
        self.log.extend(answer.get("log", ()))
        if "error" in answer:
            raise Wasm32Error("%s (op %s)" % (answer["error"].strip(), request.get("op")))
        return answer

    def _sampled(self, samples):
        samples = [tuple(sample) for sample in samples]
        self.samples.extend(samples)
        if samples and samples[-1][1] not in self.module_sets:
            answer = self.request(op="modules")
            self.module_sets[samples[-1][1]] = frozenset(answer["modules"])
            self.qstr_bytes[samples[-1][1]] = answer["qstr_bytes"]

    def start(self):
        """The broker starts; (its live heap, modules loaded) then are in self.started."""
        answer = self.request(op="start")
        self.read_size = answer["read_size"]
        self._sampled([answer["live"]])
        self.started = self.samples[-1]
        return self

    def open(self, protocol="amqp"):
        """A client of the board's listener of that protocol ("amqp", "mqtt"): its index."""
        if protocol == "amqp":
            return self.request(op="open")["index"]
        return self.request(op="open", protocol=protocol)["index"]

    def steps(self, steps):
        """steps: [(index, octets, now_ms)]; {"out": {index: octets}, "closed": [index]}."""
        answer = self.request(op="steps", steps=[(index, bytes(data).hex(), now) for index, data, now in steps])
        self._sampled(answer["live"])
        answer["out"] = {int(key): bytes.fromhex(value) for key, value in answer["out"].items()}
        return answer

    def call(self, name, now):
        answer = self.request(op="call", name=name, now=now)
        self._sampled(answer["live"])
        return answer["result"]

    def settle(self):
        """A sample that is the live heap exactly (a collection first): a phase starts and ends
        with one (see board_in_memory's sent())."""
        self._sampled(self.request(op="settle")["live"])

    def modules(self):
        return self.request(op="modules")["modules"]

    def imported(self, names):
        """(live heap after importing these modules, the heap of the interned names then): the
        code census, on a board not started."""
        answer = self.request(op="import", names=list(names))
        return answer["live"], answer["qstr_bytes"]

    def frozen_ram(self, names):
        """After importing these modules, the estimate of what every module loaded would take
        with its code frozen into a board's firmware (board_in_memory.frozen_ram)."""
        return self.request(op="import", names=list(names), frozen=True)["frozen_ram"]

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        else:
            self.proc.stdin.close()
        self.proc.stdout.close()
        self.proc.stderr.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def census(board_dir, harness_dir, module_sets):
    """The code census: ({set of modules: (heap its code takes on this port less the interned
    names, what it would take frozen into a board's firmware: board_in_memory.frozen_ram)}, the
    heap of the names a fresh interpreter has). Each set is imported into a board that is not
    started (a fresh interpreter); its code is the heap then less a fresh one's, less what the
    names it interned take: the names are counted where they were interned, in the scenario's
    interpreter (Wasm32Board.qstr_bytes), since a board that imported and then dropped a module
    (what only the start needs) keeps its names. Sets that contain the one before are imported
    on top of it, in one interpreter; a set that does not starts a new one."""
    code = {}
    frozen = {}
    fresh_qstr = 0
    # Two rounds, each in interpreters of its own: the heap figures, then the estimates (what
    # the estimate walks stays in the heap for a while, and would count as the next set's code).
    for estimate in (False, True):
        board = None
        done = frozenset()
        base = 0
        try:
            for modules in sorted(set(module_sets), key=len):
                if board is None or not done <= modules:
                    if board is not None:
                        board.close()
                    board = Wasm32Board(board_dir, harness_dir)
                    if not estimate:
                        base, fresh_qstr = board.imported(())
                    done = frozenset()
                names = sorted(modules - done)
                done = modules
                if estimate:
                    frozen[modules] = board.frozen_ram(names)
                else:
                    live, qstr = board.imported(names)
                    code[modules] = (live - base) - (qstr - fresh_qstr)
        finally:
            if board is not None:
                board.close()
    return {modules: (code[modules], frozen[modules]) for modules in code}, fresh_qstr
