"""One owner per data folder (CPython): an exclusive lock held for as long as a broker uses it.

Two brokers writing one journal lose what the first one confirms (each replays the folder and
then writes segments the other does not know of). `hutch serve` takes this lock before it reads
or writes anything in the folder; a second broker on the same folder is refused with the PID of
the one that holds it, and touches nothing there.

The lock is `flock` on DATA/lock: the kernel releases it when the process ends, however it ends,
so a SIGKILLed broker never blocks its own restart. flock, not lockf: a POSIX record lock is per
process, so a second lock from the same process (a test running two brokers in one interpreter)
would silently succeed; flock is per open file and refuses it too.

A board runs no second process on its filesystem: MicroPython has no fcntl, and this module is
not in a board's bundle (ports/manifest.py).
"""

import fcntl
import os

LOCK_FILE = "lock"


class FolderInUse(Exception):
    """The folder's lock is held by another broker (or another tool writing into it)."""


class FolderLock:
    """The held lock: release() (or the process's end) gives it up."""

    def __init__(self, fd, path):
        self.fd = fd
        self.path = path

    def release(self):
        if self.fd is not None:
            os.close(self.fd)  # closing the last descriptor of the open file releases the flock
            self.fd = None


def lock_folder(folder, holder="broker"):
    """Take the folder's lock or raise FolderInUse naming the folder and the PID that holds it.
    Opening the file changes nothing that is there: the PID inside is rewritten only once the
    lock is ours."""
    path = os.path.join(folder, LOCK_FILE)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = _holder_pid(fd)
        os.close(fd)
        held_by = "another process (pid %d)" % pid if pid else "another process"
        raise FolderInUse(
            "data folder %s is in use by %s: one broker per data folder (stop it, or choose another --data)"
            % (os.path.abspath(folder), held_by)
        )
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, ("%d %s\n" % (os.getpid(), holder)).encode(), 0)
    return FolderLock(fd, path)


def _holder_pid(fd):
    """The PID the holder wrote into the lock file, or None (not written yet, or not a number)."""
    try:
        words = os.pread(fd, 64, 0).split()
        return int(words[0]) if words else None
    except (OSError, ValueError):
        return None
