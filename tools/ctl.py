"""`hutch ctl`: look at a broker's data folder (running or not).

    hutch ctl status [--data DIR] [--json]

prints what the journal holds (segments and bytes), what the last start recovered and
set aside (recovery.txt, written by ports/storage.recover), the quarantined segments: the
files a damaged journal left for a person to look at, and each stream (DATA/streams/,
ports/streams.py): its first and last offset, segments, bytes and retention settings.
--json prints the same as one JSON object.
"""

import json
import os
import sys

from ..core.streamlog import scan
from ..ports.storage import SEGMENT_SUFFIX
from ..ports.streams import GONE, read_meta

DEFAULT_DATA = "hutch-data"


def add_options(parser):
    commands = parser.add_subparsers(dest="ctl_command", metavar="COMMAND")
    commands.required = True
    status = commands.add_parser("status", help="the journal, the last recovery, the quarantine and the streams")
    status.add_argument("--data", default=DEFAULT_DATA, help="the data folder (default ./%s)" % DEFAULT_DATA)
    status.add_argument("--json", action="store_true", help="print it as one JSON object")
    status.set_defaults(run=status_command)


def _files(folder, suffix=""):
    try:
        names = sorted(os.listdir(folder))
    except FileNotFoundError:
        return []
    return [(name, os.path.getsize(os.path.join(folder, name))) for name in names if name.endswith(suffix)]


def status(data):
    """What the data folder holds, as a dict (what --json prints)."""
    segments = _files(os.path.join(data, "journal"), SEGMENT_SUFFIX)
    try:
        with open(os.path.join(data, "recovery.txt")) as f:
            last_start = f.read().splitlines()
    except FileNotFoundError:
        last_start = None
    return {
        "data": os.path.abspath(data),
        "journal": {
            "segments": [{"file": name, "bytes": size} for name, size in segments],
            "bytes": sum(size for _, size in segments),
        },
        "last_start": last_start,
        "quarantine": _quarantine(os.path.join(data, "quarantine")),
        "streams": streams(data),
    }


def _quarantine(folder):
    """The files set aside: the journal's, and in a folder each, the streams' (stream-<hex>/)."""
    out = []
    for name, size in _files(folder):
        path = os.path.join(folder, name)
        if os.path.isdir(path):
            out.extend(_quarantine(path))
        else:
            out.append({"path": path, "bytes": size})
    return out


def streams(data):
    """Each stream's folder: its name, offsets, segments, bytes and retention settings."""
    folder = os.path.join(data, "streams")
    out = []
    for entry, _ in _files(folder):
        path = os.path.join(folder, entry)
        if GONE in entry or not os.path.isdir(path):
            continue  # a deleted stream, on its way out
        meta = read_meta(path)
        name, arguments = meta if meta is not None else (None, {})
        segments = _files(path, SEGMENT_SUFFIX)
        last = None
        if segments:
            with open(os.path.join(path, segments[-1][0]), "rb") as f:
                last = scan(f.read())[1]  # the newest record (the broker may be writing after it)
        out.append(
            {
                "name": _text(name) if name is not None else None,
                "folder": entry,
                "first": int(segments[0][0][: -len(SEGMENT_SUFFIX)]) if segments else None,
                "last": last if last is not None and last >= 0 else None,
                "segments": len(segments),
                "bytes": sum(size for _, size in segments),
                "max_length_bytes": arguments.get("x-max-length-bytes"),
                "max_age": _text(arguments.get("x-max-age")),
                "segment_bytes": arguments.get("x-stream-max-segment-size-bytes"),
            }
        )
    return out


def _text(value):
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return value


def status_command(args):
    data = args.data
    if not os.path.isdir(data):
        print("hutch ctl: no data folder %s (start the broker with --data %s first)" % (data, data), file=sys.stderr)
        return 2
    info = status(data)
    if args.json:
        print(json.dumps(info, indent=1))
        return 0
    journal = info["journal"]
    print("data folder: %s" % info["data"])
    print("journal: %d segments, %d bytes" % (len(journal["segments"]), journal["bytes"]))
    for segment in journal["segments"]:
        print("  %s  %d bytes" % (segment["file"], segment["bytes"]))
    print("last start:")
    if info["last_start"] is None:
        print("  (no recovery report: the broker has not started on this folder)")
    for line in info["last_start"] or ():
        print("  " + line)
    quarantined = info["quarantine"]
    print("quarantine: %s" % ("%d files" % len(quarantined) if quarantined else "empty"))
    for item in quarantined:
        print("  %s  %d bytes" % (item["path"], item["bytes"]))
    print("streams: %s" % (len(info["streams"]) or "none"))
    for stream in info["streams"]:
        if stream["first"] is None or stream["last"] is None:
            offsets = "empty"
        else:
            offsets = "offsets %d to %d" % (stream["first"], stream["last"])
        retention = [
            "%s %s" % (label, stream[key])
            for label, key in (
                ("max-length-bytes", "max_length_bytes"),
                ("max-age", "max_age"),
                ("segment-size", "segment_bytes"),
            )
            if stream[key] is not None
        ]
        print(
            "  %s: %s, %d segments, %d bytes; retention: %s"
            % (stream["name"], offsets, stream["segments"], stream["bytes"], ", ".join(retention) or "none")
        )
    return 0
