"""`hutch install-service [--root DIR] [--board NAME]`: hutch as a systemd service on a Raspberry
Pi or another Linux gateway.

Writes, under ROOT (default /):

    opt/hutch/                         the service's own virtualenv, with hutch installed in it
    etc/systemd/system/hutch.service   a Type=notify unit, hardened (systemd-analyze security)
    etc/sysusers.d/hutch.conf          the dedicated user hutch, in the dialout group (serial links)
    etc/hutch/hutch.toml               a config to start from (kept if there is one)

and prints what to run next (systemd-sysusers, systemctl daemon-reload, systemctl enable --now).
The service runs as user hutch, with its data in /var/lib/hutch (StateDirectory: systemd makes
it, owned by hutch). User hutch must be able to run what the unit starts: a checkout in a home
folder is not (Debian 12 and Raspberry Pi OS make homes 0700), nor one under /tmp (the unit's
PrivateTmp hides it). So hutch is installed into a virtualenv of its own, /opt/hutch, made with
the system's Python (--python; on Debian it needs the python3-venv package), which the unit
starts as `/opt/hutch/bin/python -m hutch.tools.cli`: from this installation's checkout (`pip
install -e .`, `make serve`), or, after a plain `pip install .` or a wheel, from a wheel made of
the installed files (tools/wheel_of.py). Under --root the virtualenv's scripts name /opt/hutch,
where it will be once the tree is copied to /.
--hutch PATH runs a hutch command installed elsewhere instead (a system-wide `pip install .`).
Either way, every folder on the way to what the unit starts, and its interpreter's, is checked
for what the service user may open; what it could not start is refused in one line, before
anything is written. With --root it never touches the real /etc or /opt: the files go under
DIR, for a system image or a look before installing.

The unit's hardening: the broker needs its data folder, the network, serial devices and
nothing else. It reads the system read-only, sees no other process, cannot gain privileges,
load kernel modules, change the clock or make namespaces, and is limited to the system calls a
service makes. It keeps W^X memory off the list (cffi's compiled accelerator runs either way,
but a pyserial or cffi build of someone else's may want it) and serial devices on it
(DeviceAllow for ttyUSB, ttyACM, ttyAMA, ttyS).
"""

import os
import sys

UNIT = """\
[Unit]
Description=hutch AMQP broker
After=network-online.target
Wants=network-online.target

[Service]
Type=notify
NotifyAccess=main
ExecStart={hutch} serve{board} --config /etc/hutch/hutch.toml --data /var/lib/hutch
# a config that does not load keeps the running one, and `systemctl reload` fails saying why
ExecReload={hutch} ctl reload --data /var/lib/hutch
User=hutch
Group=hutch
SupplementaryGroups=dialout
StateDirectory=hutch
StateDirectoryMode=0750
UMask=0077
WatchdogSec=30
Restart=on-failure
RestartSec=5
TimeoutStartSec=600
TimeoutStopSec=30
LimitNOFILE=65536

# What the broker may touch: its data folder, the network, serial devices
ProtectSystem=strict
ProtectHome=read-only
PrivateTmp=yes
DevicePolicy=closed
DeviceAllow=char-ttyUSB rw
DeviceAllow=char-ttyACM rw
DeviceAllow=char-ttyAMA rw
DeviceAllow=char-ttyS rw
RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX
# and nothing more
NoNewPrivileges=yes
CapabilityBoundingSet=
AmbientCapabilities=
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
ProtectProc=invisible
ProcSubset=pid
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
RemoveIPC=yes
KeyringMode=private
PrivateIPC=yes
SystemCallArchitectures=native
SystemCallFilter=@system-service
SystemCallFilter=~@privileged @resources @mount @obsolete

[Install]
WantedBy=multi-user.target
"""

SYSUSERS = """\
# hutch's own user (systemd-sysusers): no login, its home the data folder; dialout for serial links
u hutch - "hutch AMQP broker" /var/lib/hutch
m hutch dialout
"""

CONFIG = """\
# hutch's config (the configuration reference: docs/configuration.md). The service runs
# hutch serve --config /etc/hutch/hutch.toml --data /var/lib/hutch
[server]
bind = "0.0.0.0"
port = 5672

# [users.sensor]
# password_hash = "..."   # hutch passwd
"""


def add_options(parser):
    parser.add_argument("--root", default="/", help="write under this folder instead of / (default /)")
    parser.add_argument("--board", default=None, help="the board profile to run with (rpi on a Raspberry Pi)")
    parser.add_argument(
        "--hutch", default=None, help="run this hutch command instead of installing one into /opt/hutch"
    )
    parser.add_argument(
        "--python",
        default=None,
        help="the Python that makes /opt/hutch's virtualenv (default /usr/bin/python3, else this one's)",
    )


VENV = "/opt/hutch"  # the service's own virtualenv (as the system sees it)
# What is not copied of a checkout to install it: the copy builds there, not in the user's
# folder (a root-owned build/ left in a user's checkout breaks their next pip install -e)
NOT_COPIED = (".git", ".venv", "node_modules", "build", "dist", "site", "hutch-data", "__pycache__", "*.egg-info")


class Refused(Exception):
    """What install-service will not do, in one line (exit 1)."""


def run(args):
    root = args.root
    board = ""
    if args.board is not None:
        from ..boards import NAMES

        if args.board not in NAMES:
            print(
                "hutch install-service: no board profile '%s' (one of: %s)" % (args.board, ", ".join(NAMES)),
                file=sys.stderr,
            )
            return 2
        board = " --board " + args.board
    try:
        command = _service_command(args, root)
    except Refused as e:
        print("hutch install-service: %s" % e, file=sys.stderr)
        return 1
    files = (
        ("etc/systemd/system/hutch.service", UNIT.format(hutch=command, board=board), True),
        ("etc/sysusers.d/hutch.conf", SYSUSERS, True),
        ("etc/hutch/hutch.toml", CONFIG, False),  # a config there already is the user's
    )
    for relative, text, replace in files:
        path = os.path.join(root, relative)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if not replace and os.path.exists(path):
                print("kept %s" % path)
                continue
            with open(path + ".tmp", "w") as f:
                f.write(text)
            os.replace(path + ".tmp", path)
        except OSError as e:
            print("hutch install-service: cannot write %s: %s" % (path, e.strerror or e), file=sys.stderr)
            return 1
        print("wrote %s" % path)
    if root in ("/", ""):
        print("now: systemd-sysusers && systemctl daemon-reload && systemctl enable --now hutch")
    else:
        print("under %s: copy these into the system's root, then run systemd-sysusers, " % root, end="")
        print("systemctl daemon-reload and systemctl enable --now hutch there")
    return 0


def _service_command(args, root):
    """What ExecStart runs (before " serve"): --hutch as given, or the virtualenv made in
    ROOT/opt/hutch. Refused when the service user could not run it."""
    if args.hutch is not None:
        hutch = os.path.abspath(args.hutch)
        check_runnable(hutch, root)
        return hutch
    python = args.python or ("/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys._base_executable)
    check_runnable(python, "/")  # (the virtualenv's python is a link to it)
    _install(_checkout(), python, _under(root, VENV))
    if root not in ("/", ""):
        _final_paths(_under(root, VENV), VENV)
    command = os.path.join(VENV, "bin", "python")
    check_runnable(command, root)
    return command + " -m hutch.tools.cli"


def _checkout():
    """The checkout this hutch runs from (a `pip install -e .`, or `make serve`'s), or None (it
    was installed: `pip install .`, or from a wheel)."""
    # tools/.. : the checkout, by its own path (a link to it, as make's test venv has, named too)
    folder = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    try:
        with open(os.path.join(folder, "pyproject.toml")) as f:
            return folder if 'name = "hutch"' in f.read() else None
    except OSError:
        return None


def _install(source, python, venv):
    """hutch installed into a virtualenv at venv made by python: from the checkout at source, or
    (source None) from a wheel made of the hutch this command runs (its installed files, as
    `pip install .` or a wheel put them; pip brings what it depends on)."""
    import shutil
    import subprocess
    import tempfile

    print("installing hutch from %s into %s (a virtualenv of %s)" % (source or "this installation", venv, python))
    # what is made must be readable by the service's user, whatever root's umask (077 on some
    # hardened systems): the virtualenv and what pip writes in it
    os.umask(0o022)
    made = subprocess.run([python, "-m", "venv", venv], capture_output=True, text=True)
    if made.returncode != 0:
        raise Refused(
            "cannot make a virtualenv in %s with %s: %s (on Debian: apt install python3-venv; or --python PATH)"
            % (venv, python, (made.stderr.strip().splitlines() or ["exit %d" % made.returncode])[-1])
        )
    with tempfile.TemporaryDirectory(prefix="hutch-install-") as scratch:
        if source is not None:
            copy = os.path.join(scratch, "hutch")
            shutil.copytree(source, copy, ignore=shutil.ignore_patterns(*NOT_COPIED), symlinks=True)
        else:
            from .wheel_of import wheel_of_installed

            try:
                copy = wheel_of_installed("hutch", scratch)
            except ValueError as e:
                raise Refused("cannot install the hutch this command runs from: %s" % e)
        pip = [os.path.join(venv, "bin", "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        done = subprocess.run(pip + [copy], capture_output=True, text=True)
    if done.returncode != 0:
        raise Refused(
            "pip could not install hutch into %s: %s" % (venv, (done.stderr.strip().splitlines() or ["?"])[-1])
        )


def _final_paths(made, final):
    """A virtualenv made at made (under --root) for where it will be, final: its scripts' first
    lines and its activate scripts name final, so that they run once the tree is copied to /."""
    folder = os.path.join(made, "bin")
    for path in [os.path.join(folder, name) for name in os.listdir(folder)] + [os.path.join(made, "pyvenv.cfg")]:
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            data = f.read()
        if made.encode() in data and b"\0" not in data[:1024]:  # (a text file: a script)
            with open(path, "wb") as f:
                f.write(data.replace(made.encode(), final.encode()))


def _under(root, path):
    return os.path.join(root, path.lstrip("/")) if root not in ("/", "") else path


def check_runnable(path, root="/"):
    """Refused, naming the folder at fault, unless a user of neither the owner's user nor group
    (the service's own user, hutch) can run path as the system under root will see it: every
    folder on the way (links followed) searchable by others, the file readable and executable
    by them, a script's interpreter the same, and nothing under /tmp (the unit's PrivateTmp
    hides it)."""
    import stat

    real = os.path.realpath(_under(root, path))
    seen = path if root not in ("/", "") else real  # (the path as the service will see it)
    for hidden in ("/tmp/", "/var/tmp/"):
        if seen.startswith(hidden):
            raise Refused("%s is under %s, which the service's PrivateTmp hides from it" % (path, hidden))
    if not os.path.exists(real):
        raise Refused("%s does not exist" % real)
    folder = "/"
    for part in real.strip("/").split("/")[:-1]:
        folder = os.path.join(folder, part)
        mode = os.stat(folder).st_mode
        if not mode & stat.S_IXOTH:
            raise Refused(
                "user hutch could not run %s: %s is %s (only its owner may enter it); install hutch where the "
                "service user can run it (the default: its own virtualenv in %s), or give --hutch PATH"
                % (path, folder, oct(mode & 0o777)[2:].rjust(4, "0"), VENV)
            )
    mode = os.stat(real).st_mode
    if mode & (stat.S_IROTH | stat.S_IXOTH) != (stat.S_IROTH | stat.S_IXOTH):
        raise Refused(
            "user hutch could not run %s: it is %s, not readable and executable by others"
            % (path, oct(mode & 0o777)[2:].rjust(4, "0"))
        )
    with open(real, "rb") as f:
        first = f.readline(256)
    if first.startswith(b"#!"):  # a script (a console script's wrapper): its interpreter too
        check_runnable(first[2:].split()[0].decode(), root)
