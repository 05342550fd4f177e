"""Files written durably: synced to the disk, and a file replaced whole so that a crash leaves
the old one or the new one, never half of one. Used by the streams' files (streams.py), a stream
source's offset (server/bridges/offsets.py) and a device's poll numbers (server/devices/polling.py).
"""

import os


def sync_dir(path):
    """A new or renamed entry is durable once its directory is (CPython; a board's flush() of
    the file is all its filesystem offers)."""
    read_only = getattr(os, "O_RDONLY", None)
    if hasattr(os, "fsync") and read_only is not None:
        fd = os.open(path, read_only)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def sync_file(f):
    f.flush()
    if hasattr(os, "fsync"):
        os.fsync(f.fileno())


def replace_file(path, octets):
    """The file at path replaced whole, durably: a new file, synced, renamed over the old one,
    its folder synced. A crash leaves the old file or the new one, never half of one."""
    with open(path + ".new", "wb") as f:
        f.write(octets)
        sync_file(f)
    os.rename(path + ".new", path)
    sync_dir(path.rsplit("/", 1)[0])
