"""Files written durably: synced to the disk, and a file replaced whole so that a crash leaves
the old one or the new one, never half of one. Used by the streams' files (streams.py), a stream
source's offset (server/bridges/offsets.py) and a device's poll numbers (server/devices/polling.py).
"""

import os

from .segments import make_dir, sync_dir  # noqa: F401 (the folder rules, for this module's users)


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
