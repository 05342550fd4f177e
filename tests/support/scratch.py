"""Folders for tests that also run under MicroPython, which has no tempfile module or shutil."""

from hutch.ports.streams import remove_tree  # noqa: F401 (the tests' too)


def scratch_folder(tag="journal"):
    """A new empty folder under /tmp (MicroPython has no tempfile module)."""
    import os

    name = "/tmp/hutch-test-%s-%s" % (tag, "".join("%02x" % b for b in os.urandom(6)))
    os.mkdir(name)
    return name
