"""Fetch MicroPython's own MQTT clients, umqtt.simple and umqtt.robust (micropython-lib), from
PyPI into a folder a `micropython` command can import them from: `make test` runs it once
(the MQTT tests run these clients, as sensors do, under the unix port). PyPI has them as
source archives without a setup.py, which pip does not install: the archive is read here.

    python tests/support/fetch_umqtt.py build/umqtt    # -> build/umqtt/umqtt/{simple,robust}.py
"""

import io
import json
import os
import sys
import tarfile
import urllib.request

PACKAGES = ("micropython-umqtt.simple", "micropython-umqtt.robust")


def sdist_url(package):
    with urllib.request.urlopen("https://pypi.org/pypi/%s/json" % package, timeout=60) as answer:
        release = json.load(answer)
    for found in release["urls"]:
        if found["packagetype"] == "sdist":
            return found["url"]
    raise SystemExit("fetch_umqtt: PyPI has no source archive of %s" % package)


def fetch(folder):
    target = os.path.join(folder, "umqtt")
    os.makedirs(target, exist_ok=True)
    for package in PACKAGES:
        with urllib.request.urlopen(sdist_url(package), timeout=60) as answer:
            archive = tarfile.open(fileobj=io.BytesIO(answer.read()), mode="r:gz")
        for member in archive.getmembers():
            parts = member.name.split("/")
            if len(parts) == 3 and parts[1] == "umqtt" and parts[2].endswith(".py") and member.isfile():
                with open(os.path.join(target, parts[2]), "wb") as out:
                    out.write(archive.extractfile(member).read())


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: fetch_umqtt.py FOLDER")
    fetch(sys.argv[1])
