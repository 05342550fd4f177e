"""The [fleet] section, checked: which fleet this gateway belongs to and whom it trusts.

    [fleet]
    uri = "amqps://gw-17:secret@central.example/farm"   # or a list, tried in order
    node = "pump-house-2"        # default: [server] name
    groups = ["greenhouses", "all"]
    keys = ["ed25519:..."]       # the public keys whose documents it takes
    status_interval = 60         # seconds between status messages (and on a change)
    confirm_within = 120         # seconds a new document has to prove itself

Its rows are in server/schema.py's format (docs/configuration.md's reference reads them).
"""

import sys

from ...fleet.document import key_bytes
from .. import schema
from ..schema import ConfigError

# fmt: off
ROWS = (
    ("fleet", "uri", "text", None, None, None,
     "The fleet's upstream, where its documents wait and its status goes: "
     "`amqp://user:password@host:port/vhost` (`amqps://` for TLS), or a list of them tried in "
     "order, as a bridge's. AMQP 0-9-1 (RabbitMQ, or a hutch). Required."),
    ("fleet", "node", "name", None, None, None,
     "This gateway's name in the fleet: documents for `node:NAME` are its own. Default: "
     "`[server] name`."),
    ("fleet", "groups", "strings", (), None, None,
     "The groups it belongs to: documents for `group:NAME` of each apply to it too (a node's own "
     "document over its groups')."),
    ("fleet", "keys", "strings", None, None, None,
     "The public keys whose documents it takes, each `ed25519:<base64>` (`hutch fleet keygen` "
     "prints one). A document may replace them with its own `keys`, once signed by one of "
     "these. Required."),
    ("fleet", "ca_file", "file", None, None, None,
     "For an `amqps://` uri: the CA that signed the upstream's certificate (default: the "
     "system's)."),
    ("fleet", "status_interval", "seconds", 60, None, None,
     "Seconds between two status messages up (one goes at once on a change, too)."),
    ("fleet", "confirm_within", "seconds", 120, None, None,
     "Seconds a newly applied document has to get the fleet link up again and its status "
     "confirmed upstream; else the gateway goes back to the configuration it ran before."),
)
# fmt: on
KEYS = schema.keys_of("fleet", ROWS)


def fleet_from(data, path, name):
    """The [fleet] table as the settings server/fleet/ reads, or None without one. name: the
    gateway's [server] name, the node's by default."""
    table = data.get("fleet")
    if table is None:
        return None
    where = "%s: [fleet]" % path
    if not isinstance(table, dict):
        raise ConfigError("%s must be a table" % where)
    if sys.implementation.name == "micropython":
        raise ConfigError("%s: a board is not a fleet member: its config comes with hutch flash" % where)
    unknown = [key for key in table if key not in KEYS]
    if unknown:
        raise ConfigError("%s: unknown key '%s' (known: %s)" % (where, unknown[0], ", ".join(KEYS)))
    found = {key: schema.table_setting(ROWS, table, key, where, "fleet") for key in KEYS if key != "uri"}
    from ..bridges.config import parse_uri

    uris = table.get("uri")
    uris = [uris] if isinstance(uris, str) else uris if isinstance(uris, list) else []
    if not uris:
        raise ConfigError('%s needs uri = "amqp://user:password@host:port/vhost" (or a list of them)' % where)
    parsed = []
    for uri in uris:
        one = parse_uri(uri, where + " uri")
        if one["protocol"] is not None:
            raise ConfigError("%s: uri '%s': a fleet's upstream speaks AMQP 0-9-1 (amqp:// or amqps://)" % (where, one["uri"]))  # fmt: skip
        parsed.append(one)
    keys = found["keys"]
    if not keys:
        raise ConfigError('%s needs keys = ["ed25519:..."]: the public keys whose documents it takes' % where)
    try:
        trusted = [key_bytes(key) for key in keys]
    except ValueError as e:
        raise ConfigError("%s: keys: %s" % (where, e))
    groups = found["groups"]
    for group in groups:
        schema.check("name", group, lambda: "%s: groups" % where)
    return {
        "uris": parsed,
        "node": found["node"] or name,
        "groups": list(groups),
        "keys": trusted,
        "ca_file": found["ca_file"],
        "status_interval": found["status_interval"],
        "confirm_within": found["confirm_within"],
    }
