"""`hutch ctl`: look at a broker's data folder (running or not).

    hutch ctl status [--data DIR]

prints what the journal holds (segments and bytes), what the last start recovered and
set aside (recovery.txt, written by ports/storage.recover), and the quarantined
segments: the files a damaged journal left for a person to look at.
"""

import os
import sys

from ..ports.storage import SEGMENT_SUFFIX

DEFAULT_DATA = "hutch-data"


def add_options(parser):
    commands = parser.add_subparsers(dest="ctl_command", metavar="COMMAND")
    commands.required = True
    status = commands.add_parser("status", help="the journal, the last recovery and the quarantine")
    status.add_argument("--data", default=DEFAULT_DATA, help="the data folder (default ./%s)" % DEFAULT_DATA)
    status.set_defaults(run=status_command)


def _files(folder, suffix=""):
    try:
        names = sorted(os.listdir(folder))
    except FileNotFoundError:
        return []
    return [(name, os.path.getsize(os.path.join(folder, name))) for name in names if name.endswith(suffix)]


def status_command(args):
    data = args.data
    if not os.path.isdir(data):
        print("hutch ctl: no data folder %s (start the broker with --data %s first)" % (data, data), file=sys.stderr)
        return 2
    segments = _files(os.path.join(data, "journal"), SEGMENT_SUFFIX)
    print("data folder: %s" % os.path.abspath(data))
    print("journal: %d segments, %d bytes" % (len(segments), sum(size for _, size in segments)))
    for name, size in segments:
        print("  %s  %d bytes" % (name, size))
    print("last start:")
    try:
        with open(os.path.join(data, "recovery.txt")) as f:
            for line in f.read().splitlines():
                print("  " + line)
    except FileNotFoundError:
        print("  (no recovery report: the broker has not started on this folder)")
    quarantined = _files(os.path.join(data, "quarantine"))
    print("quarantine: %s" % ("%d files" % len(quarantined) if quarantined else "empty"))
    for name, size in quarantined:
        print("  %s  %d bytes" % (os.path.join(data, "quarantine", name), size))
    return 0
