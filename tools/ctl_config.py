"""`hutch ctl config`: the configuration a broker runs, each value with where it comes from: the
config file, or a fleet document (server/fleet/: the sections a document sets lie over the
file's, which stays what the person wrote).

    hutch ctl config [--config FILE] [--data DIR] [--json]

    server.name = "pump-house-2"                               file /etc/hutch/hutch.toml
    server.disk_free_limit = 500000000                         fleet group:pumps version 4
    bridge[0].uri = "amqps://gw:${secret:cloud}@central..."    fleet node:pump-house-2 version 7

A password in a URI and a password hash are shown as ***.
"""

import json
import os
import sys

from ..fleet.document import SECRET

SERVICE_CONFIG = "/etc/hutch/hutch.toml"  # (what `hutch install-service` writes)


def add_options(commands, data_option):
    config = commands.add_parser("config", help="the configuration in effect, each value with its origin (file or fleet document)")  # fmt: skip
    config.add_argument(
        "--config",
        default=os.environ.get("HUTCH_CONFIG") or ("hutch.toml" if os.path.exists("hutch.toml") else SERVICE_CONFIG),
        help="the config file (default: $HUTCH_CONFIG, else ./hutch.toml if there is one, else %s)" % SERVICE_CONFIG,
    )
    data_option(config)
    config.add_argument("--json", action="store_true", help="print it as one JSON object: [key, value, origin] rows")
    config.set_defaults(run=config_command)


def config_command(args):
    from ..server.config import ConfigError

    try:
        rows = effective(args.config, args.data)
    except ConfigError as e:
        print("hutch ctl config: %s" % e, file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"config": args.config, "rows": rows}, indent=2))
        return 0
    width = max([len("%s = %s" % (key, json.dumps(value))) for key, value, _ in rows] + [0])
    for key, value, origin in rows:
        print("%-*s  %s" % (width, "%s = %s" % (key, json.dumps(value)), origin))
    return 0


def effective(path, data):
    """[(key, value, origin)] of the config file at path with the fleet documents the data folder
    holds over it; the folder is the file's [server] data when it names one."""
    from ..server import config

    if not os.path.exists(path):
        raise config.ConfigError("no config file %s (--config FILE)" % path)
    sections = config.read(path)
    origins = {section: "file %s" % path for section in sections}
    if "fleet" in sections:
        from ..server.fleet.state import State, overlay

        folder = (sections.get("server") or {}).get("data") or data
        sections = overlay(sections, State(folder).read()["applied"], None, origins)
    rows = []
    for section, value in sections.items():
        for key, leaf in _flat(section, value):
            origin = origins.get(key) if section == "server" else None  # (a document's [server] key)
            rows.append([key, _hidden(key, leaf), origin or origins[section]])
    return rows


def _flat(prefix, value):
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _flat("%s.%s" % (prefix, key), inner)
    elif isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
        for i, item in enumerate(value):
            yield from _flat("%s[%d]" % (prefix, i), item)
    else:
        yield prefix, value if isinstance(value, (str, int, float, bool, list)) or value is None else str(value)


def _hidden(key, value):
    """A value as the listing shows it: a password hash, and a URI's password, as ***."""
    if key.endswith("password_hash") or key.endswith(".password"):
        return "***"
    if isinstance(value, list):
        return [_hidden(key, item) for item in value]
    if isinstance(value, str) and "://" in value and SECRET not in value:  # (a reference is no secret)
        from ..server.bridges.config import hide_password

        return hide_password(value)
    return value
