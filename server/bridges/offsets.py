"""A stream source's offset file (DATA/bridge-NAME.offset): where a bridge that forwards from a
stream queue stands in it, written as it moves and read at start, so a restart goes on from
there (server/bridges/driver.py; loaded only by such a bridge)."""

import binascii


def offset_path(folder, name):
    """DATA/bridge-NAME.offset (the name as hex: any name makes a file name)."""
    return "%s/bridge-%s.offset" % (folder, binascii.hexlify(name.encode()).decode())


def read_offset(path):
    """(offset, lane, stream name) from a bridge's offset file: one line, "OFFSET LANE
    STREAM-NAME-AS-HEX"; None if there is none, or it cannot be read (the machine then starts
    a new lane from the stream's first record: records go again, none is skipped)."""
    try:
        with open(path, "rb") as f:
            parts = f.read().split()
        return int(parts[0]), parts[1], binascii.unhexlify(parts[2])
    except (OSError, ValueError, IndexError):
        return None


def write_offset(path, offset, lane, stream_name):
    """The offset file replaced whole: a new file, synced, renamed over the old one, so a crash
    leaves the old file or the new one, never half of one."""
    from ...ports.files import replace_file

    line = "%d %s %s\n" % (offset, lane.decode(), binascii.hexlify(stream_name).decode())
    replace_file(path, line.encode())
