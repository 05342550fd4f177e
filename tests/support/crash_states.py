"""Crash states: what a power cut may leave of the files a program wrote (after ALICE, OSDI '14,
and CrashMonkey, OSDI '18).

A run of the program is recorded with strace (record()): every write, pwrite, writev,
ftruncate, rename, unlink, mkdir, fsync and fdatasync it made, to which file, and what it sent
on its sockets, in the order the kernel saw them. strace rather than a recording layer under
the journal's file calls: it sees every file the broker writes (the journal, the streams, the
users `hutch ctl` keeps, node-id, bridge-runs, a fleet's marker, whatever is added later) from
the outside, in the process that runs on a gateway, with nothing in hutch that a test could
forget to route through it. Its cost (a slower broker while recorded) is paid once per run.

Recording.states() then builds what a disk may hold after a cut at a moment of the run:

- a write, truncate, new file, rename or unlink is durable once an fsync of its file (data) or
  of its directory (a name: created, renamed, unlinked) returned, having started after it;
- of the rest before the cut, any subset persists (applied in the order they were made, so
  what persists of two writes to one place is the later's), and each write that persists
  may be torn: only some of its 512-byte or 4 KiB blocks (by file offset) reach the disk,
  the others read as zeros where the file grew, or keep the old bytes.

And what the program had said before the cut: the bytes it sent on each TCP socket
(`sent_before(cut)`), so a test knows what was confirmed to a client then.
"""

import os
import re
import subprocess

SYSCALLS = (
    "open,openat,creat,write,pwrite64,writev,pwritev,ftruncate,rename,renameat,renameat2,"
    "unlink,unlinkat,mkdir,mkdirat,rmdir,fsync,fdatasync,close,lseek,sendto,sendmsg"
)
_HEX = re.compile(r"(?:\\x[0-9a-f]{2})+")
_CALL = re.compile(r"^(\d+) +(\w+)\((.*)\) += (-?\d+)(?:<.*>)?(?: [A-Z].*)?$")
_UNFINISHED = re.compile(r"^(\d+) +(\w+)\((.*) <unfinished \.\.\.>$")
_RESUMED = re.compile(r"^(\d+) +<\.\.\. (\w+) resumed>(.*)$")
_FD = re.compile(r"(-?\d+)<(.*?)>(?:, |$)")
_STRING = re.compile(r'"((?:\\x[0-9a-f]{2})*)"')


def traced(command, trace_path):
    """command run under strace, its file and socket calls written to trace_path (-xx: every
    byte as \\xNN, so the trace parses whatever was written; -yy: each descriptor's path or
    socket addresses beside it)."""
    return ["strace", "-f", "-qq", "-yy", "-xx", "-s", str(1 << 24), "-o", trace_path, "-e", "trace=" + SYSCALLS] + list(command)  # fmt: skip


def traced_pid(strace_pid):
    """The pid of the program strace started (its child), to stop it by its own pid."""
    out = subprocess.run(["pgrep", "-P", str(strace_pid)], capture_output=True, text=True).stdout.split()
    return int(out[0]) if out else None


def _unhex(text):
    return bytes.fromhex(text.replace("\\x", ""))


def _path(text):
    """A path strace printed (hex-escaped by -xx) as text."""
    return _HEX.sub(lambda m: _unhex(m.group(0)).decode("utf-8", "replace"), text)


def snapshot(root):
    """{path: bytes, or None for a directory} of what is under root: taken before a recorded
    run, the state its crash states start from."""
    found = {}
    if os.path.isdir(root):
        found[root.rstrip("/")] = None
        for parent, dirs, files in os.walk(root):
            for name in dirs:
                found[os.path.join(parent, name)] = None
            for name in files:
                with open(os.path.join(parent, name), "rb") as f:
                    found[os.path.join(parent, name)] = f.read()
    return found


class Op:
    """One change to the files: kind is create, mkdir, write, truncate, rename, unlink or rmdir."""

    __slots__ = ("kind", "ino", "path", "to", "offset", "data", "dirs")

    def __init__(self, kind, ino=None, path=None, to=None, offset=0, data=b""):
        self.kind = kind
        self.ino = ino
        self.path = path
        self.to = to
        self.offset = offset
        self.data = data
        # the directories whose fsync makes this durable (a name's change); data: none
        self.dirs = ()
        if kind in ("create", "mkdir", "unlink", "rmdir"):
            self.dirs = (os.path.dirname(path),)
        elif kind == "rename":
            self.dirs = tuple(sorted({os.path.dirname(path), os.path.dirname(to)}))

    def __repr__(self):
        return "%s(%s)" % (self.kind, self.path or self.ino)


class Recording:
    """A trace read back: the ops under root, the syncs, and what was sent on sockets."""

    def __init__(self, trace_path, root, initial):
        self.root = root.rstrip("/")
        self.ops = []  # changes to the files under root, in the order they were made
        self.syncs = []  # (index the fsync began at, index it returned at, ino or directory path)
        self.sends = []  # (index, socket as strace names it, bytes)
        self.initial = {}  # path: (ino, bytes) of the files under root before the run (dirs: None)
        self._names = {}  # the volatile view while reading: path -> ino (dirs: path -> "dir")
        self._sizes = {}  # ino -> its size now
        self._fds = {}  # fd -> [ino, position, append]
        self._next_ino = 0
        self._began = {}  # pid -> (name, arguments, index) of a call strace printed unfinished
        self._take_initial(initial)
        with open(trace_path, "rb") as f:
            for raw in f:
                self._line(raw.decode("latin-1").rstrip("\n"))

    def _take_initial(self, initial):
        for path, data in sorted(initial.items()):
            if data is None:
                self._names[path] = "dir"
                self.initial[path] = None
            else:
                ino = self._names[path] = self._new_ino()
                self._sizes[ino] = len(data)
                self.initial[path] = (ino, data)

    def _new_ino(self):
        self._next_ino += 1
        return self._next_ino

    def _inside(self, path):
        return path == self.root or path.startswith(self.root + "/")

    def _line(self, line):
        m = _UNFINISHED.match(line)
        if m:
            self._began[m.group(1)] = (m.group(2), m.group(3), len(self.ops))
            return
        m = _RESUMED.match(line)
        if m:
            name, begun, index = self._began.pop(m.group(1), (m.group(2), "", len(self.ops)))
            line = "%s %s(%s%s" % (m.group(1), name, begun, m.group(3))
            m = _CALL.match(line)
            if m:
                self._call(m.group(2), m.group(3), int(m.group(4)), index)
            return
        m = _CALL.match(line)
        if m:
            self._call(m.group(2), m.group(3), int(m.group(4)), len(self.ops))

    def _call(self, name, args, result, began):
        if result < 0:
            return  # refused: changed nothing
        handler = getattr(self, "_" + name, None)
        if handler is not None:
            handler(args, result, began)

    # -- the calls --

    def _fd(self, args):
        m = _FD.match(args)
        return (int(m.group(1)), _path(m.group(2))) if m else (None, "")

    def _strings(self, args):
        """The quoted arguments, after a leading descriptor (whose label may quote a path)."""
        m = _FD.match(args)
        return [_unhex(s) for s in _STRING.findall(args[m.end() :] if m else args)]

    def _at_path(self, args, which=0):
        """The which-th path argument, made absolute (relative ones are under their dirfd or the
        working directory strace names beside AT_FDCWD)."""
        dirs = re.findall(r"(?:AT_FDCWD|\d+)<([^>]*)>", args)
        path = self._strings(args)[which].decode("utf-8", "replace")
        if not path.startswith("/") and dirs:
            path = os.path.join(_path(dirs[min(which, len(dirs) - 1)]), path)
        return os.path.normpath(path)

    def _openat(self, args, fd, began):
        self._opened(self._at_path(args), args.split(", ")[2], fd)

    def _open(self, args, fd, began):
        self._opened(self._at_path(args), args.split(", ")[1], fd)

    def _creat(self, args, fd, began):
        self._opened(self._at_path(args), "O_CREAT|O_TRUNC", fd)

    def _opened(self, path, flags, fd):
        self._fds.pop(fd, None)
        if not self._inside(path) or self._names.get(path) == "dir" or "O_DIRECTORY" in flags:
            if self._inside(path) and self._names.get(path) == "dir":
                self._fds[fd] = [path, 0, False]  # a directory, to fsync
            return
        ino = self._names.get(path)
        if ino is None:
            if "O_CREAT" not in flags:
                return
            ino = self._names[path] = self._new_ino()
            self._sizes[ino] = 0
            self.ops.append(Op("create", ino, path))
        elif "O_TRUNC" in flags and self._sizes.get(ino):
            self._sizes[ino] = 0
            self.ops.append(Op("truncate", ino, offset=0))
        self._fds[fd] = [ino, 0, "O_APPEND" in flags]

    def _close(self, args, result, began):
        self._fds.pop(self._fd(args)[0], None)

    def _lseek(self, args, result, began):
        entry = self._fds.get(self._fd(args)[0])
        if entry is not None:
            entry[1] = result

    def _written(self, args, result, data, offset=None):
        fd, label = self._fd(args)
        entry = self._fds.get(fd)
        if entry is None:
            if label.startswith(("TCP:", "TCPv6:", "UNIX")):
                self.sends.append((len(self.ops), label, data[:result]))
            return
        ino = entry[0]
        if not isinstance(ino, int):
            return
        data = data[:result]
        at = offset if offset is not None else (self._sizes[ino] if entry[2] else entry[1])
        self.ops.append(Op("write", ino, offset=at, data=data))
        self._sizes[ino] = max(self._sizes[ino], at + len(data))
        if offset is None:
            entry[1] = at + len(data)

    def _write(self, args, result, began):
        self._written(args, result, (self._strings(args) or [b""])[0])

    def _sendto(self, args, result, began):
        self._written(args, result, (self._strings(args) or [b""])[0])

    def _sendmsg(self, args, result, began):
        self._written(args, result, b"".join(self._strings(args)))

    def _writev(self, args, result, began):
        self._written(args, result, b"".join(self._strings(args)))

    def _pwrite64(self, args, result, began):
        self._written(args, result, self._strings(args)[0], int(args.rsplit(", ", 1)[1]))

    def _pwritev(self, args, result, began):
        parts = args.rsplit(", ", 2)
        self._written(args, result, b"".join(self._strings(args)), int(parts[-1]))

    def _ftruncate(self, args, result, began):
        entry = self._fds.get(self._fd(args)[0])
        if entry is not None and isinstance(entry[0], int):
            size = int(args.rsplit(", ", 1)[1])
            self._sizes[entry[0]] = size
            self.ops.append(Op("truncate", entry[0], offset=size))

    def _fsync(self, args, result, began):
        entry = self._fds.get(self._fd(args)[0])
        if entry is not None:
            self.syncs.append((began, len(self.ops), entry[0]))

    _fdatasync = _fsync

    def _mkdir(self, args, result, began):
        path = self._at_path(args)
        if self._inside(path):
            self._names[path] = "dir"
            self.ops.append(Op("mkdir", path=path))

    _mkdirat = _mkdir

    def _rename(self, args, result, began):
        source, target = self._at_path(args, 0), self._at_path(args, 1)
        if not (self._inside(source) and self._inside(target)):
            return
        moved = {path: value for path, value in self._names.items() if path == source or path.startswith(source + "/")}
        for path in moved:
            del self._names[path]
        for path, value in moved.items():
            self._names[target + path[len(source) :]] = value
        self.ops.append(Op("rename", path=source, to=target))

    _renameat = _rename
    _renameat2 = _rename

    def _unlink(self, args, result, began):
        path = self._at_path(args)
        if self._inside(path):
            removed = self._names.pop(path, None)
            self.ops.append(Op("rmdir" if removed == "dir" or "AT_REMOVEDIR" in args else "unlink", path=path))

    _unlinkat = _unlink
    _rmdir = _unlink

    # -- the crash states --

    def durable(self, cut):
        """The ops before cut that a cut there keeps for sure (see the module's docstring)."""
        synced_data = {}  # ino -> the index its last fsync before cut began at
        synced_dirs = {}
        for began, returned, target in self.syncs:
            if returned <= cut:
                book = synced_dirs if isinstance(target, str) else synced_data
                book[target] = max(book.get(target, -1), began)
        kept = []
        for i, op in enumerate(self.ops[:cut]):
            if op.dirs:
                kept.append(all(synced_dirs.get(d, -1) > i for d in op.dirs))
            else:
                kept.append(synced_data.get(op.ino, -1) > i)
        return kept

    def state(self, cut, rng, keep=0.5, tear=0.3, block=512):
        """{path: bytes or None for a directory} a disk may hold after a cut before ops[cut]:
        what durable() keeps, and of the rest each op with probability keep, each write kept
        torn with probability tear (a random half of its blocks of `block` bytes)."""
        names = {}
        content = {}
        for path, entry in self.initial.items():
            if entry is None:
                names[path] = "dir"
            else:
                names[path] = entry[0]
                content[entry[0]] = bytearray(entry[1])
        for op, sure in zip(self.ops[:cut], self.durable(cut)):
            if not sure and rng.random() >= keep:
                continue
            data = op.data
            if op.kind == "write" and not sure and len(data) > block and rng.random() < tear:
                _apply_torn(content.setdefault(op.ino, bytearray()), op.offset, data, block, rng)
                continue
            _apply(op, names, content)
        state = {}
        for path, value in names.items():
            state[path] = None if value == "dir" else bytes(content.get(value, b""))
        return state

    def sent_before(self, cut, label_part=""):
        """{socket: the bytes sent on it before ops[cut]} (sockets whose name has label_part)."""
        out = {}
        for index, label, data in self.sends:
            if index <= cut and label_part in label:
                out[label] = out.get(label, b"") + data
        return out


def _apply(op, names, content):
    parent_there = lambda path: names.get(os.path.dirname(path)) == "dir"  # noqa: E731
    if op.kind == "create":
        if parent_there(op.path):
            names[op.path] = op.ino
            content.setdefault(op.ino, bytearray())
    elif op.kind == "mkdir":
        if parent_there(op.path):
            names[op.path] = "dir"
    elif op.kind == "write":
        buf = content.setdefault(op.ino, bytearray())
        if len(buf) < op.offset:
            buf.extend(bytes(op.offset - len(buf)))
        buf[op.offset : op.offset + len(op.data)] = op.data
    elif op.kind == "truncate":
        buf = content.setdefault(op.ino, bytearray())
        del buf[op.offset :]
    elif op.kind == "rename":
        if op.path in names and parent_there(op.to):
            moved = [p for p in names if p == op.path or p.startswith(op.path + "/")]
            values = {p: names.pop(p) for p in moved}
            for p in [p for p in names if p == op.to or p.startswith(op.to + "/")]:
                del names[p]  # what the target named is replaced
            for p, value in values.items():
                names[op.to + p[len(op.path) :]] = value
    elif op.kind in ("unlink", "rmdir"):
        for p in [p for p in names if p == op.path or p.startswith(op.path + "/")]:
            del names[p]


def _apply_torn(buf, offset, data, block, rng):
    """A write of which only some blocks (aligned on the file's offsets) reached the disk."""
    end = offset + len(data)
    start = offset
    while start < end:
        stop = min(end, (start // block + 1) * block)
        if rng.random() < 0.5:
            if len(buf) < stop:
                buf.extend(bytes(stop - len(buf)))
            buf[start:stop] = data[start - offset : stop - offset]
        start = stop


def materialize(state, root, target):
    """Write a crash state (paths under root) into the folder target."""
    for path in sorted(state):
        where = target + path[len(root) :]
        if state[path] is None:
            os.makedirs(where, exist_ok=True)
    for path, data in state.items():
        if data is not None:
            where = target + path[len(root) :]
            os.makedirs(os.path.dirname(where), exist_ok=True)
            with open(where, "wb") as f:
                f.write(data)
