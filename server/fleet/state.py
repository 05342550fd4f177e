"""What a fleet member keeps in its data folder (fleet/), each file replaced whole and synced
(ports/files.py), so that a crash or a cut leaves the old one or the new one:

    fleet/state.json     the documents it runs, a fragment per target ({target: version, body}),
                         the keys a document made it trust (None: the config file's), the
                         (target, version)s that failed (never applied again) and the last
                         refusal or failure
    fleet/pending.json   the document being tried, with the state to go back to: written
                         before anything changes; its presence at a start means the try
                         was cut short, and the same test runs again
    fleet/secrets/NAME   a password a document's ${secret:NAME} names (put there by hand)

The config file stays what the person wrote: the effective configuration is the file with each
document's sections over it (overlay()), group documents first, by version, and the node's own
last.
"""

import json
import os

from ...fleet.document import SECRET, SERVER_KEYS
from ...ports.files import make_dir, replace_file, sync_dir
from ..schema import ConfigError

EMPTY = {"applied": {}, "keys": None, "failed": [], "last": None}


class State:
    def __init__(self, data_folder):
        self.folder = os.path.join(data_folder, "fleet")
        self.path = os.path.join(self.folder, "state.json")
        self.pending_path = os.path.join(self.folder, "pending.json")

    def read(self):
        """The state (EMPTY's keys), or EMPTY for a member that has applied nothing yet.
        ConfigError naming the file if it is not one this module wrote."""
        return _read(self.path, dict(EMPTY))

    def write(self, state):
        make_dir(self.folder)
        replace_file(self.path, json.dumps(state, sort_keys=True).encode())

    def pending(self):
        """The document being tried ({target, version, body, keys, before: the state to go
        back to}), or None."""
        return _read(self.pending_path, None)

    def set_pending(self, pending):
        make_dir(self.folder)
        replace_file(self.pending_path, json.dumps(pending, sort_keys=True).encode())

    def clear_pending(self):
        try:
            os.remove(self.pending_path)
        except FileNotFoundError:
            return
        sync_dir(self.folder)

    def secret(self, name):
        path = os.path.join(self.folder, "secrets", name)
        try:
            with open(path) as f:
                return f.read().strip()
        except OSError as e:
            raise ConfigError("the secret %s a fleet document names is missing: %s (%s)" % (name, path, e.strerror))


def _read(path, missing):
    try:
        with open(path, "rb") as f:
            return json.loads(f.read())
    except FileNotFoundError:
        return missing
    except (OSError, ValueError, RecursionError) as e:
        raise ConfigError("%s cannot be read: %s; move it away to start without the fleet's documents" % (path, e))


def ordered(applied):
    """The targets of the applied documents, in the order they lay over the file: groups by
    version, then the node's own."""
    return sorted(applied, key=lambda target: (target.startswith("node:"), applied[target]["version"]))


def overlay(data, applied, state=None, origins=None):
    """The config file's sections (data, as config.read gives them) with the applied documents'
    over them ({target: {"version", "body"}}); ${secret:NAME} resolved through state (None: the
    references stay, as `hutch ctl config` shows them). origins: a dict told where each section
    a document set (and each [server] key) comes from ("fleet TARGET version N")."""
    import tomllib

    out = dict(data)
    for target in ordered(applied):
        origin = "fleet %s version %d" % (target, applied[target]["version"])
        sections = tomllib.loads(applied[target]["body"])
        sections.pop("document", None)
        for section, value in sections.items():
            if section == "server":  # (only SERVER_KEYS: fleet/document.py checked it)
                keys = {k: v for k, v in value.items() if k in SERVER_KEYS}
                out["server"] = dict(out.get("server") or {}, **keys)
                if origins is not None:
                    origins.update({"server." + key: origin for key in keys})
                continue
            if section == "bridge" and state is not None:
                value = [_with_secrets(bridge, state) for bridge in value]
            out[section] = value
            if origins is not None:
                origins[section] = origin
    return out


def _with_secrets(bridge, state):
    uris = bridge.get("uri")
    if isinstance(uris, str):
        return dict(bridge, uri=_resolved(uris, state))
    if isinstance(uris, list):
        return dict(bridge, uri=[_resolved(uri, state) if isinstance(uri, str) else uri for uri in uris])
    return bridge


def _resolved(uri, state):
    at = uri.find(SECRET)
    if at < 0:
        return uri
    end = uri.find("}", at)
    from urllib.parse import quote

    return uri[:at] + quote(state.secret(uri[at + len(SECRET) : end]), safe="") + uri[end + 1 :]
