"""A fresh clone of the repository, as a new user gets it (tests/docs/test_getting_started.py,
test_install.py)."""

import subprocess

from paths import ROOT


def clone(tmp_path):
    """A fresh clone of the repository's HEAD, as `git clone` gives it to a user."""
    path = str(tmp_path / "hutch")
    subprocess.run(["git", "clone", "--quiet", ROOT, path], check=True, timeout=60)
    return path
