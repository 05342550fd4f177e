"""A wheel made of an installed distribution: its files as the installer wrote them (the package,
its compiled accelerator, its .dist-info with the wheel's own tags and entry points), so that
`hutch install-service` can install the hutch it runs from into a virtualenv of its own after a
plain `pip install .` or a wheel, with no checkout left to build from.

What the installer made for this one environment is left out: the scripts in bin/ (pip writes
them again from entry_points.txt), the compiled bytecode, and the installer's own records
(INSTALLER, REQUESTED, direct_url.json); RECORD is written anew for the files the wheel holds.
"""

import base64
import hashlib
import os
import zipfile
from importlib import metadata

LEFT_OUT = ("INSTALLER", "REQUESTED", "direct_url.json", "RECORD")


def wheel_of_installed(name, folder):
    """The path of a wheel of the installed distribution name, written into folder. ValueError
    (its text one line) if it is not installed or its files cannot be read."""
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        raise ValueError("%s is not installed here" % name)
    files = [f for f in dist.files or () if _kept(f)]
    info = next((f.parent for f in dist.files or () if f.name == "METADATA"), None)
    if info is None or not files:
        raise ValueError("%s's installed files are not listed (no RECORD)" % name)
    tags = [
        line.split(":", 1)[1].strip()
        for line in (dist.read_text("WHEEL") or "").splitlines()
        if line.startswith("Tag:")
    ]
    path = os.path.join(folder, "%s-%s-%s.whl" % (name, dist.version, tags[0] if tags else "py3-none-any"))
    record = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for f in files:
            try:
                data = f.locate().read_bytes()
            except OSError as e:
                raise ValueError("cannot read %s: %s" % (f.locate(), e.strerror or e))
            wheel.writestr(str(f), data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append("%s,sha256=%s,%d" % (f, digest, len(data)))
        record.append("%s/RECORD,," % info)
        wheel.writestr("%s/RECORD" % info, "\n".join(record) + "\n")
    return path


def _kept(f):
    """Whether an installed file goes into the wheel (see the module's docstring)."""
    parts = f.parts
    if parts[0] == ".." or "__pycache__" in parts or f.suffix == ".pyc":
        return False
    return not (parts[0].endswith(".dist-info") and f.name in LEFT_OUT)
