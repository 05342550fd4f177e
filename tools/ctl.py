"""`hutch ctl`: look at a broker's data folder (running or not).

    hutch ctl status [--data DIR] [--json]
    hutch ctl bridges [--data DIR] [--json]
    hutch ctl devices [--data DIR] [--json]
    hutch ctl health [--data DIR] [--json]
    hutch ctl config [--config FILE] [--data DIR] [--json]   (tools/ctl_config.py)
    hutch ctl export [FILE] [--data DIR], hutch ctl import FILE [--data DIR]   (tools/ctl_live.py)

prints whether publishers are blocked (a disk or memory alarm: why, with the figures of now,
and for how long), what the journal holds (segments and bytes), what the last start recovered and
set aside (recovery.txt, written by ports/recovery.py), the quarantined segments: the
files a damaged journal left for a person to look at, and each stream (DATA/streams/,
ports/streams.py): its first and last offset, segments, bytes and retention settings; and
each queue as the running broker has it (asked through its control socket: figures of the
moment), or as the broker last wrote it (DATA/status.json, every two seconds while it runs
and once at its stop: ports/status_file.py): messages ready in memory and on disk, bytes on
disk, unacked, consumers and the oldest ready message's age.
`bridges` prints each [[bridge]] the same way (asked, or from status.json): its state
(connecting, running, blocked, backoff, stopped), the upstream in use, messages forwarded
since the start and in flight, the backlog waiting in its source queue, the oldest waiting
message's age, the last error and, for a stream source, the offset up to which upstream
confirmed every record. `devices` prints each [[device]] polled (devices/device.py): up or
down and since when (and why), its last poll's number and time, and its polls by how they
ended. `health` says ok, degraded or failing, with the reasons (core/health.py), and exits 0,
1 or 2 (3 when not known) as a monitoring plugin does. --json prints the same as one JSON
object.
"""

import json
import os
import sys
import time

from ..core.snapshot import text as as_text
from ..core.streams.streamlog import scan
from ..ports.control_request import request
from ..ports.segments import SEGMENT_SUFFIX
from ..ports.status_file import STATUS_EVERY_MS, STATUS_FILE
from ..ports.streams import GONE, read_meta

DEFAULT_DATA = "hutch-data"
# The unit `hutch install-service` writes: hutch ctl reads the service's data folder from it
SERVICE_UNIT = "/etc/systemd/system/hutch.service"


def add_options(parser):
    default = default_data()  # (once: every command takes --data)

    def data_option(command):
        command.add_argument(
            "--data",
            default=default,
            help="the data folder (default: $HUTCH_DATA, else ./%s if there is one, else the service's)" % DEFAULT_DATA,
        )

    commands = parser.add_subparsers(dest="ctl_command", metavar="COMMAND")
    commands.required = True
    status = commands.add_parser("status", help="the journal, the last recovery, the quarantine and the streams")
    data_option(status)
    status.add_argument("--json", action="store_true", help="print it as one JSON object")
    status.set_defaults(run=status_command)
    bridges = commands.add_parser("bridges", help="each bridge: state, upstream, forwarded, backlog, last error")
    data_option(bridges)
    bridges.add_argument("--json", action="store_true", help="print it as one JSON object")
    bridges.set_defaults(run=bridges_command)
    devices = commands.add_parser("devices", help="each Modbus device: up or down, last poll, polls by result")
    data_option(devices)
    devices.add_argument("--json", action="store_true", help="print it as one JSON object")
    devices.set_defaults(run=devices_command)
    health = commands.add_parser(
        "health",
        help="ok, degraded or failing, and why; exit 0, 1 or 2 (3: not known), as a monitoring plugin's",
    )
    data_option(health)
    health.add_argument("--json", action="store_true", help="print it as one JSON object")
    health.set_defaults(run=health_command)
    from . import ctl_config, ctl_live  # (ctl_live's commands ask the running broker)

    ctl_config.add_options(commands, data_option)
    ctl_live.add_options(commands, data_option)


def default_data():
    """The data folder when --data is not given, found as rabbitmqctl finds its node: $HUTCH_DATA;
    ./hutch-data when there is one (`make serve`'s); else the data folder of the installed
    service (the --data of its unit's ExecStart; the unit is $HUTCH_SERVICE_UNIT, by default
    /etc/systemd/system/hutch.service); else ./hutch-data."""
    if os.environ.get("HUTCH_DATA"):
        return os.environ["HUTCH_DATA"]
    if os.path.isdir(DEFAULT_DATA):
        return DEFAULT_DATA
    return service_data(os.environ.get("HUTCH_SERVICE_UNIT") or SERVICE_UNIT) or DEFAULT_DATA


def service_data(unit):
    """The data folder the service of this unit runs on (its ExecStart's --data, which `hutch
    install-service` always writes), or None."""
    try:
        with open(unit) as f:
            lines = [line for line in f.read().splitlines() if line.startswith("ExecStart=")]
    except OSError:
        return None
    words = lines[-1].split() if lines else []
    return words[words.index("--data") + 1] if "--data" in words[:-1] else None


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
    broker = broker_status(data)
    return {
        "data": os.path.abspath(data),
        "publishers": publishers(broker),
        "journal": {
            "segments": [{"file": name, "bytes": size} for name, size in segments],
            "bytes": sum(size for _, size in segments),
        },
        "last_start": last_start,
        "quarantine": _quarantine(os.path.join(data, "quarantine")),
        "streams": streams(data),
        "broker": broker,
    }


def publishers(broker):
    """Whether the broker's publishers are blocked (its disk or memory alarms: core/flow.py), as
    its snapshot says: {"blocked", "reason" (with the figures of that moment), "for_s"}; None when
    no broker answers and it left no status.json."""
    if broker is None or "error" in broker:
        return None
    reason = broker.get("blocked")
    return {"blocked": bool(reason), "reason": reason, "for_s": broker.get("blocked_for_s")}


def broker_status(data):
    """The running broker's snapshot, asked through its control socket (`asked`: figures of
    this moment); else what it last wrote (status.json), with `live`: written by a process still
    running, within a few of its intervals. None if neither answers."""
    try:
        answer = request(data, "status", timeout=5)
    except (OSError, ValueError):  # no broker answers there: what it left
        answer = {}
    if "status" in answer:
        found = answer["status"]
        found.update(age_s=0.0, live=True, asked=True)
        return found
    try:
        with open(os.path.join(data, STATUS_FILE)) as f:
            found = json.load(f)
    except FileNotFoundError:
        return None
    except (ValueError, RecursionError) as e:
        return {"error": "%s does not read as JSON: %s" % (STATUS_FILE, e)}
    found["age_s"] = round(max(0.0, time.time() - found.get("written_at", 0)), 1)
    found["live"] = (
        bool(found.get("running")) and _alive(found.get("pid")) and found["age_s"] * 1000 < 5 * STATUS_EVERY_MS
    )
    return found


def _alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except (OSError, TypeError):
        return False


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
                "name": as_text(name) if name is not None else None,
                "folder": entry,
                "first": int(segments[0][0][: -len(SEGMENT_SUFFIX)]) if segments else None,
                "last": last if last is not None and last >= 0 else None,
                "segments": len(segments),
                "bytes": sum(size for _, size in segments),
                "max_length_bytes": arguments.get("x-max-length-bytes"),
                "max_age": as_text(arguments.get("x-max-age")),
                "segment_bytes": arguments.get("x-stream-max-segment-size-bytes"),
            }
        )
    return out


def _no_folder(data):
    """Said when the data folder is missing, or not this user's to read (True: the command
    exits with 2)."""
    if os.path.isdir(data) and not os.access(data, os.R_OK | os.X_OK):
        from .ctl_live import not_yours

        print("hutch ctl: cannot read data folder %s: %s" % (os.path.abspath(data), not_yours(data)), file=sys.stderr)
        return True
    if os.path.isdir(data):
        return False
    where = os.path.abspath(data)
    if data == DEFAULT_DATA:  # the default is relative: the folder the command runs in
        hint = "run hutch ctl in the folder the broker runs in, or give --data DIR (no service is installed)"
    else:
        hint = "start the broker with --data %s first" % data
    print("hutch ctl: no data folder %s (%s)" % (where, hint), file=sys.stderr)
    return True


def _when(found):
    """How fresh what status.json says is: live, or as the broker left it."""
    if found.get("asked"):
        return "live, asked the broker now, pid %d" % found["pid"]
    if found["live"]:
        return "live, %.1f s ago, pid %d" % (found["age_s"], found["pid"])
    return "as the broker left them %s ago; it is not running" % _duration(found["age_s"])


def status_command(args):
    data = args.data
    if _no_folder(data):
        return 2
    info = status(data)
    if args.json:
        print(json.dumps(info, indent=1))
        return 0
    journal = info["journal"]
    broker = info["broker"]
    if broker is not None and "name" in broker:  # (a status.json of an older hutch has none)
        print("gateway: %s" % broker["name"])
    print("data folder: %s" % info["data"])
    _print_publishers(info["publishers"], broker)
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
    _print_queues(info["broker"])
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


def _print_publishers(said, broker):
    """The line that says whether publishers are blocked, and why: first, as it matters most."""
    if said is None:
        return  # (the queues' line says why nothing is known)
    if not said["blocked"]:
        print("publishers: not blocked (%s)" % _when(broker))
        return
    since = "" if said["for_s"] is None else " for %s" % _duration(said["for_s"])
    print("publishers: BLOCKED%s: %s (%s)" % (since, said["reason"], _when(broker)))


def _print_queues(broker):
    if broker is None:
        print("queues: not known (no %s: the broker has not run on this folder since it writes one)" % STATUS_FILE)
        return
    if "error" in broker:
        print("queues: not known (%s)" % broker["error"])
        return
    print("queues: %d (%s)" % (len(broker["queues"]), _when(broker)))
    for q in broker["queues"]:
        age = "-" if q["oldest_age_s"] is None else _duration(q["oldest_age_s"])
        print(
            "  %s: %s ready (%s in memory, %s on disk, %s bytes on disk), %s unacked, consumers %d, oldest %s"
            % (
                q["name"] or '""',
                _n(q["messages"]),
                _n(q["in_memory"]),
                _n(q["on_disk"]),
                _n(q["bytes_on_disk"]),
                _n(q["unacked"]),
                q["consumers"],
                age,
            )
        )


def _n(value):
    return "{:,}".format(value)


def _duration(seconds):
    if seconds < 120:
        return "%.1f s" % seconds
    if seconds < 7200:
        return "%.1f min" % (seconds / 60)
    if seconds < 172800:
        return "%.1f h" % (seconds / 3600)
    return "%.1f days" % (seconds / 86400)


def bridges(data):
    """The bridges as the running broker has them, or as it last wrote them (core/snapshot.py:
    each with the age of the oldest message waiting in its source queue): a dict with `live`
    and `bridges`, or None when no broker answers and there is no status.json."""
    broker = broker_status(data)
    info = _part(broker, "bridges")
    if info is not None and "error" not in info:
        info["left_behind"] = broker.get("left_behind", [])
    return info


def _part(broker, key):
    """broker_status()'s answer cut to its `key` (a list) and how fresh it is; None or the error
    as they are."""
    if broker is None or "error" in broker:
        return broker
    info = {"live": broker["live"], "age_s": broker["age_s"], "pid": broker.get("pid"), key: broker.get(key, [])}
    if broker.get("asked"):
        info["asked"] = True
    return info


def _said_whole_or_unknown(args, kind, info):
    """True once info is said: whole as JSON (--json), or in one line when it is not known (no
    status.json, or one that cannot be read)."""
    if args.json:
        print(json.dumps(info, indent=1))
        return True
    if info is None:
        print("%s: not known (no %s: the broker has not run on this folder since it writes one)" % (kind, STATUS_FILE))
        return True
    if "error" in info:
        print("%s: not known (%s)" % (kind, info["error"]))
        return True
    return False


def _last_error(bridge):
    """A running link has no error: what ended an earlier link is shown as that, not as if the
    bridge were failing now."""
    error = bridge["last_error"]
    if error is None:
        return "none"
    if bridge["state"] in ("running", "blocked"):
        return "none on this link (an earlier link ended: %s)" % error
    return error


def _class_line(b):
    """A class's priority, time-to-live and disk use, a plain bridge's priority (when not 0),
    and what it dropped and refused."""
    parts = []
    if "ttl_s" in b or b.get("priority"):
        parts.append("priority %d" % b["priority"])
    if "ttl_s" in b:
        parts.append("ttl %s" % (_duration(b["ttl_s"]) if b["ttl_s"] else "none"))
        budget = " of %s" % _n(b["max_bytes"]) if b["max_bytes"] else ""
        parts.append("%s bytes waiting%s" % (_n(b["bytes"]), budget))
    parts.append("dropped %s (expired or over its budget), refused %s" % (_n(b["dropped"]), _n(b["refused"])))
    return "; ".join(parts)


def bridges_command(args):
    data = args.data
    if _no_folder(data):
        return 2
    info = bridges(data)
    if _said_whole_or_unknown(args, "bridges", info):
        return 0
    print("bridges: %s (%s)" % (len(info["bridges"]) or "none", _when(info)))
    for b in info["bridges"]:
        age = "-" if b.get("oldest_age_s") is None else _duration(b["oldest_age_s"])
        print(
            "  %s (%s, queue %s): %s, upstream %s; forwarded %s, in flight %s, backlog %s, oldest waiting %s; last error: %s%s"
            % (
                b["name"],
                b["direction"],
                b["queue"],
                b["state"],
                b["upstream"] or "-",
                _n(b["forwarded"]),
                _n(b["in_flight"]),
                _n(b["backlog"]) if b["backlog"] is not None else "-",  # (down: not known before a link)
                age,
                _last_error(b),
                # a stream source: the offset every record up to which upstream confirmed
                "; confirmed up to offset %d" % b["confirmed_offset"] if "confirmed_offset" in b else "",
            )
        )
        if b.get("upstream_s") is not None:  # the node (URI) this link is on, since when
            moves = [("%d fail-overs" % b[key] if key == "failovers" else "%d moves back" % b[key])
                     for key in ("failovers", "failbacks") if b.get(key)]  # fmt: skip
            print("    on %s for %s%s" % (b["upstream"], _duration(b["upstream_s"]), "".join("; " + m for m in moves)))
        if b["state"] == "unconfirmed":
            print("    no confirms from any node for %s: what waits stays here" % _duration(b.get("down_s") or 0))
        if b.get("failed_attempts"):  # (an outage: the log says it once, then every few minutes)
            print("    down: %s attempts failed since a link last ran" % _n(b["failed_attempts"]))
        if b.get("window"):  # (an [uplink] schedule)
            print("    window: %s" % b["window"])
        if b.get("budget"):  # (an [uplink] or the bridge's own byte rate holds it back for long)
            print("    budget: %s" % b["budget"])
        if b.get("alarm") and b["alarm"] != b.get("budget"):
            print("    ALARM: %s" % b["alarm"])
        if "ttl_s" in b or b.get("priority") or b.get("dropped") or b.get("refused"):
            print("    %s" % _class_line(b))
    for left in info["left_behind"]:  # (core/bridge/leftovers.py)
        print(
            "  left behind: queue %s, %s messages: no bridge forwards it (hutch ctl delete queue %s drops them)"
            % (left["queue"], _n(left["messages"]), left["queue"])
        )
    return 0


def devices_command(args):
    data = args.data
    if _no_folder(data):
        return 2
    info = _part(broker_status(data), "devices")
    if _said_whole_or_unknown(args, "devices", info):
        return 0
    print("devices: %s (%s)" % (len(info["devices"]) or "none", _when(info)))
    now = time.time()
    for d in info["devices"]:
        since = "" if d["since"] is None else " for %s" % _duration(now - d["since"])
        why = " (%s)" % d["reason"] if d["reason"] else ""
        last = "none"
        if d["last_poll"] is not None:
            last = "#%d, %s ago" % (d["last_poll_number"], _duration(now - d["last_poll"]))
        polls = ", ".join("%s %s" % (result, _n(count)) for result, count in d["polls"].items())
        print(
            "  %s (%s, unit %d): %s%s%s; last poll %s" % (d["name"], d["uri"], d["unit"], d["state"], since, why, last)
        )
        print("    polls: %s; readings refused %s" % (polls, _n(d["refused"])))
    return 0


# `hutch ctl health`'s exit codes, as a Nagios (or Icinga, Zabbix...) plugin's: ok, warning,
# critical, unknown
HEALTH_EXIT = {"ok": 0, "degraded": 1, "failing": 2, "unknown": 3}


def health(data):
    """{"state", "reasons", "gateway", "live"} of the broker's data folder (core/health.py's
    verdict of its snapshot, asked or from status.json): a broker that is not running is
    failing; one that left no status is not known."""
    from ..core.health import FAILING, verdict

    broker = broker_status(data)
    if broker is None or "error" in broker:
        why = broker["error"] if broker else "the broker has not run on this folder since it writes %s" % STATUS_FILE
        return {"state": "unknown", "reasons": [why], "gateway": None, "live": False}
    state, reasons = verdict(broker)
    if not broker["live"]:
        state, reasons = FAILING, ["the broker is not running (%s)" % _when(broker)]
    return {"state": state, "reasons": reasons, "gateway": broker.get("name"), "live": broker["live"]}


def health_command(args):
    data = args.data
    if _no_folder(data):
        return 2
    said = health(data)
    if args.json:
        print(json.dumps(said, indent=1))
    else:
        gateway = " (gateway %s)" % said["gateway"] if said["gateway"] else ""
        print("health: %s%s" % (said["state"], gateway))
        for reason in said["reasons"]:
            print("  " + reason)
    return HEALTH_EXIT[said["state"]]
