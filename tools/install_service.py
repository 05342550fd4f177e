"""`hutch install-service [--root DIR]`: hutch as a systemd service on a Raspberry Pi or another
Linux gateway.

Writes, under ROOT (default /):

    etc/systemd/system/hutch.service   a Type=notify unit, hardened (systemd-analyze security)
    etc/sysusers.d/hutch.conf          the dedicated user hutch, in the dialout group (serial links)
    etc/hutch/hutch.toml               a config to start from (kept if there is one)

and prints what to run next (systemd-sysusers, systemctl daemon-reload, systemctl enable --now).
It runs `hutch serve` from this installation, as user hutch, with its data in /var/lib/hutch
(StateDirectory: systemd makes it, owned by hutch). With --root it never touches the real /etc:
the files go under DIR, for a system image or a look before installing.

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
ExecReload=/bin/kill -HUP $MAINPID
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
        "--hutch", default=None, help="the hutch command the service runs (default: this installation's)"
    )


def run(args):
    hutch = os.path.abspath(args.hutch or os.path.join(os.path.dirname(sys.executable), "hutch"))
    if not os.access(hutch, os.X_OK):
        print("hutch install-service: %s is not an executable hutch command (--hutch PATH)" % hutch, file=sys.stderr)
        return 1
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
    files = (
        ("etc/systemd/system/hutch.service", UNIT.format(hutch=hutch, board=board), True),
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
