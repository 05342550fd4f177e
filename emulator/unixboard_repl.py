"""The board side of `python -m hutch.emulator.unixboard --board-dir DIR`: runs inside MicroPython.

This makes a unix-port MicroPython process behave like a board at the end of a
serial line, so that mpremote (and `hutch flash`) can drive it:

- the board's filesystem is the host folder DIR, mounted at / (vfs.VfsPosix);
  with a ROM partition, a ROMFS image in it is mounted at /rom as on a board;
- at reset it runs boot.py, then main.py (not after a soft reset from the raw
  REPL, as on a board), then a REPL on stdin/stdout: the friendly REPL, and the
  raw REPL that mpremote uses (Ctrl-A; code, Ctrl-D -> "OK", output, \\x04,
  error, \\x04, ">"; Ctrl-B back; raw-paste mode; Ctrl-D on an empty line is a
  soft reset);
- machine.reset()/soft_reset() and Ctrl-D end this process with an exit code
  that tells the host which reset to do: it starts a new process, so a reset
  really starts from an empty heap.

Ctrl-C reaches MicroPython as SIGINT: the host sends it and holds further input
until this side writes READY, so no byte typed after Ctrl-C is read by code that
the KeyboardInterrupt is about to abandon.

Not imported: the host (emulator/unixboard.py) puts this source after a few
assignments (BOARD_DIR, BOOT, ROM, the exit codes) and runs it with
`micropython -c`. Written for MicroPython only.
"""

import gc
import os
import sys

import machine as _machine
import vfs as _vfs

# Set by the host before this source. Defaults keep the module importable for linting.
BOARD_DIR = globals().get("BOARD_DIR", ".")
BOOT = globals().get("BOOT", "reset")  # "reset": boot.py and main.py; "raw": boot.py, then the raw REPL
ROM = globals().get("ROM", None)  # (address, size) of the writable ROM partition, or None
SOFT_RESET = globals().get("SOFT_RESET", 250)
SOFT_RESET_RAW = globals().get("SOFT_RESET_RAW", 251)
HARD_RESET = globals().get("HARD_RESET", 252)
READY = b"\x00\x00\x06"  # to the host: input may flow again (stripped by the host)
PASTE_WINDOW = 512  # raw-paste flow control window

stdin = sys.stdin.buffer
stdout = sys.stdout.buffer


def write(data):
    stdout.write(data.encode() if isinstance(data, str) else data)


def getc():
    """The next input byte; Ctrl-C (3) when SIGINT interrupted the wait."""
    try:
        c = stdin.read(1)
    except KeyboardInterrupt:
        write(READY)
        return 3
    if not c:
        raise SystemExit(0)  # the host closed the line: power off
    return c[0]


# ---------------------------------------------------------------- the board


class Machine:
    """machine, with reset() and soft_reset() that reset this board."""

    def __getattr__(self, name):
        return getattr(_machine, name)

    def reset(self):
        raise SystemExit(HARD_RESET)

    def soft_reset(self):
        raise SystemExit(SOFT_RESET)


class Vfs:
    """vfs, with rom_ioctl() over the ROM partition when the board has one (mpremote romfs)."""

    def __getattr__(self, name):
        return getattr(_vfs, name)


def rom_ioctl(op, rom_id=0, *args):
    if op == 1:  # number of ROM partitions
        return 1
    if rom_id != 0:
        return -19  # ENODEV
    if op == 2:  # the partition, as a buffer
        return memoryview(rom)
    if op == 3:  # prepare (erase) for writing: (length) or (offset, length)
        offset, length = (0, args[0]) if len(args) == 1 else args
        for i in range(offset, min(offset + length, len(rom)), 4096):
            rom[i : i + 4096] = b"\xff" * min(4096, len(rom) - i)
        return 4  # smallest write
    if op == 4:  # write (offset, data)
        offset, data = args
        rom[offset : offset + len(data)] = data
        return 0
    if op == 5:  # writing done
        return 0
    if op == 6:  # block size
        return 4096
    return -22  # EINVAL


def start():
    """Mount the board's filesystem (and ROMFS), as a board does before boot.py."""
    global rom
    _vfs.umount("/")
    _vfs.mount(_vfs.VfsPosix(BOARD_DIR), "/")
    os.chdir("/")
    sys.path[:] = ["", ".frozen", "/lib"]
    vfs = Vfs()
    if ROM is not None:
        import uctypes

        rom = uctypes.bytearray_at(ROM[0], ROM[1])
        vfs.rom_ioctl = rom_ioctl
        if rom[:3] == b"\xd2\xcd\x31":  # a ROMFS image: mount it, as boards with a ROM partition do
            _vfs.mount(_vfs.VfsRom(memoryview(rom)), "/rom")
            sys.path[1:1] = ["/rom", "/rom/lib"]
    sys.modules["machine"] = Machine()
    sys.modules["vfs"] = vfs


def run_file(name, ns):
    """Run boot.py or main.py if it exists; errors are printed, as on a board."""
    try:
        with open(name) as f:
            source = f.read()
    except OSError:
        return
    try:
        exec(compile(source, name, "exec"), ns)
    except SystemExit as e:
        reset(e)
    except BaseException as e:  # noqa: B036 - a board prints whatever main.py raised, KeyboardInterrupt too
        sys.print_exception(e, sys.stdout)
    source = None
    gc.collect()


def reset(exit, raw=False):
    """sys.exit() and the resets end this process; the host starts the next one."""
    value = exit.args[0] if exit.args else None
    code = value if value in (SOFT_RESET, HARD_RESET) else (SOFT_RESET_RAW if raw else SOFT_RESET)
    if code != HARD_RESET:
        write("MPY: soft reboot\r\n")
    raise SystemExit(code)


def execute(source, ns, raw, mode="exec"):
    """Run REPL input; raw: the raw REPL's framing, output \\x04 error \\x04.
    mode "single" prints the value of an expression, as the friendly REPL does."""
    try:
        code = compile(source, "<stdin>", mode)
        source = None
        exec(code, ns)
    except SystemExit as e:
        if raw:
            write(b"\x04\x04")
        reset(e, raw)
    except BaseException as e:  # noqa: B036 - KeyboardInterrupt too: the REPL reports it and goes on
        if isinstance(e, KeyboardInterrupt):
            write(READY)
        if raw:
            write(b"\x04")
        sys.print_exception(e, sys.stdout)
        if raw:
            write(b"\x04")
        return
    if raw:
        write(b"\x04\x04")


# ---------------------------------------------------------------- raw REPL


def raw_repl(ns):
    """mpremote's REPL; returns when Ctrl-B asks for the friendly one."""
    write(b"raw REPL; CTRL-B to exit\r\n")
    while True:
        write(b">")
        line = bytearray()
        while True:
            c = getc()
            if c == 1:  # Ctrl-A
                if len(line) == 2 and line[0] == 5:  # Ctrl-E X Ctrl-A: raw-paste request
                    raw_paste(line[1], ns)
                    line = bytearray()
                    write(b">")
                    continue
                write(b"raw REPL; CTRL-B to exit\r\n>")
                line = bytearray()
            elif c == 2:  # Ctrl-B
                write(b"\r\n")
                return
            elif c == 3:  # Ctrl-C
                line = bytearray()
            elif c == 4:  # Ctrl-D
                break
            else:
                line.append(c)
        write(b"OK")
        if not line:  # Ctrl-D alone: soft reset
            write(b"\r\n")
            reset(SystemExit(), raw=True)
        execute(bytes(line).decode(), ns, raw=True)


def raw_paste(command, ns):
    if command != ord("A"):
        write(b"R\x00")  # understood, not supported
        return
    # Supported, then the window size; the \x01 grants a second window, as MicroPython does.
    write(b"R\x01" + bytes((PASTE_WINDOW & 0xFF, PASTE_WINDOW >> 8, 1)))
    data = bytearray()
    remain = PASTE_WINDOW
    while True:
        c = getc()
        if c == 3 or c == 4:  # Ctrl-C aborts, Ctrl-D ends the code
            break
        data.append(c)
        remain -= 1
        if remain == 0:
            write(b"\x01")  # one more window
            remain = PASTE_WINDOW
    write(b"\x04")  # end of data seen
    if c == 3:
        write(b"\x04")
        sys.print_exception(KeyboardInterrupt(), sys.stdout)
        write(b"\x04")
        return
    execute(bytes(data).decode(), ns, raw=True)


# ---------------------------------------------------------------- friendly REPL


def readline(prompt):
    """A line typed at the friendly REPL (str), or the control code that ended it (int)."""
    write(prompt)
    line = bytearray()
    while True:
        c = getc()
        if c in (1, 2, 3, 4, 5) and (c != 4 or not line):
            return c
        if c == 13 or c == 10:
            write(b"\r\n")
            return bytes(line).decode()
        if c in (8, 127):  # backspace
            if line:
                line.pop()
                write(b"\x08 \x08")
        elif c == 27:  # escape sequences (arrows...): ignored
            if getc() == ord("["):
                while getc() < 64:
                    pass
        elif c >= 32 or c == 9:
            line.append(c)
            write(bytes((c,)))


def banner():
    write(
        '%s; hutch unix board, %s\r\nType "help()" for more information.\r\n'
        % (sys.version.split("; ")[-1], sys.implementation._machine)
    )


def friendly_repl(ns):
    """The REPL a person types at; returns when Ctrl-A asks for the raw REPL."""
    banner()
    while True:
        line = readline(">>> ")
        if line == 1:  # Ctrl-A
            write(b"\r\n")
            return
        if line == 2:  # Ctrl-B: banner again
            write(b"\r\n")
            banner()
            continue
        if line == 3:  # Ctrl-C
            write(b"\r\n")
            continue
        if line == 4:  # Ctrl-D: soft reset
            write(b"\r\n")
            reset(SystemExit())
        if line == 5:  # Ctrl-E: paste mode
            write(b"\r\npaste mode; Ctrl-C to cancel, Ctrl-D to finish\r\n=== ")
            text = paste()
            if text is not None:
                execute(text, ns, raw=False)
            continue
        assert isinstance(line, str)
        if not line.strip():
            continue
        while line.rstrip().endswith(":") or (line.count("\n") and not line.endswith("\n")):
            more = readline("... ")
            if not isinstance(more, str):
                if more == 3:
                    write(b"\r\n")
                    line = ""
                break
            line += "\n" + more
            if not more.strip():
                break
        if line:
            execute(line + "\n", ns, raw=False, mode="single")


def paste():
    text = bytearray()
    while True:
        c = getc()
        if c == 3:
            write(b"\r\n")
            return None
        if c == 4:
            write(b"\r\n")
            return bytes(text).decode()
        text.append(c)
        write(b"\r\n=== " if c == 13 else bytes((c,)))


# ---------------------------------------------------------------- main


def main():
    ns = {"__name__": "__main__"}
    start()
    write(READY)  # up: a Ctrl-C now is a KeyboardInterrupt, not the end of the process hosting MicroPython
    try:
        run_file("boot.py", ns)
        if BOOT == "reset":
            run_file("main.py", ns)
    except KeyboardInterrupt:  # between the two files
        pass
    raw = BOOT == "raw"
    write(READY)  # the REPL is up: input held after a Ctrl-C may flow (main.py may have caught it)
    while True:
        try:
            if raw:
                raw_repl(ns)
            else:
                friendly_repl(ns)
            raw = not raw
        except KeyboardInterrupt:  # a Ctrl-C that landed in the REPL's own code: a fresh prompt
            write(READY)
            if not raw:
                write(b"\r\n")


main()
