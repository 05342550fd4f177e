"""What `hutch ctl` may ask of a running broker over its control socket (ports/control_socket.py),
and the users it imported, kept in the data folder. CPython only.

    control = Control(runtime, data_folder)
    control.handle({"command": "export"})                     # RabbitMQ's definitions JSON
    control.handle({"command": "import", "definitions": {...}})

Users come from two places. The config file (its [users], and a --definitions file named
there) is the operator's: `hutch ctl import` does not change a user defined there (it names it
and the import is partial). Users imported at run time are kept in DATA/users.json (RabbitMQ's
format: users, permissions, topic_permissions) and come back at the next start, after the
config's. Exchanges, queues and bindings an import declares are durable: the journal keeps
them, as it keeps a client's declarations.
"""

import json
import os

from . import definitions

USERS_FILE = "users.json"


class Control:
    def __init__(self, runtime, data_folder, config_users):
        self.runtime = runtime
        self.broker = runtime.broker
        self.folder = data_folder
        self.config_users = set(config_users)  # names the config file defines
        self.commands = {"export": self.export, "import": self.import_definitions}

    def handle(self, request):
        if self.runtime.stop_event.is_set():  # shutting down: the journal may be closing
            return {"error": "the broker is stopping"}
        command = self.commands.get(request["command"])
        if command is None:
            return {
                "error": "unknown command '%s' (known: %s)" % (request["command"], ", ".join(sorted(self.commands)))
            }
        return command(request)

    def export(self, request):
        return {"definitions": definitions.export(self.broker, self.broker.users)}

    def import_definitions(self, request):
        data = request.get("definitions")
        try:
            parsed = definitions.parse(data)
        except definitions.DefinitionsError as e:
            return {"error": "not definitions: %s" % e}
        left_out = list(parsed.unsupported)
        for name in sorted(parsed.hashes):
            if name in self.config_users:
                left_out.append("user '%s' (one of the broker's config: change it there)" % name)
                _drop_user(parsed, name)
        errors = []
        users = self.broker.users
        imported = parsed.users(users.loopback_users)
        users.merge(imported)
        parsed.apply(self.broker, lambda level, text: errors.append(text))
        if imported.hashes:
            try:
                save_users(self.folder, imported)
            except (OSError, ValueError) as e:  # in use until the broker stops, but not kept
                errors.append("the users were not kept in %s: %s" % (users_path(self.folder), e))
        return {
            "imported": {
                "users": len(imported.hashes),
                "exchanges": len(parsed.exchanges),
                "queues": len(parsed.queues),
                "bindings": len(parsed.bindings),
            },
            "left_out": left_out,
            "errors": errors,
        }


def _drop_user(parsed, name):
    for table in (parsed.hashes, parsed.tags, parsed.permissions, parsed.topics):
        table.pop(name, None)


def users_path(folder):
    return os.path.join(folder, USERS_FILE)


def save_users(folder, users):
    """Add users (core/auth.py Users) to DATA/users.json, replacing entries of the same names:
    written whole to a temporary file, synced and renamed, so a crash leaves the old file or the
    new one."""
    path = users_path(folder)
    kept = _read(path) or {"users": [], "permissions": [], "topic_permissions": []}
    names = set(users.hashes)
    out = {key: [entry for entry in kept.get(key, []) if entry.get(_NAME[key]) not in names] for key in _NAME}
    export = definitions.export_users(users)
    for key in _NAME:
        out[key].extend(export[key])
    with open(path + ".tmp", "w") as f:
        json.dump(out, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)


_NAME = {"users": "name", "permissions": "user", "topic_permissions": "user"}


def load_users(folder, loopback_users):
    """The users an earlier `hutch ctl import` kept in DATA/users.json (core/auth.py Users), or
    None without one. A file that cannot be read as definitions stops the start (StartError,
    exit 2), naming it: its users would otherwise be locked out without a word."""
    path = users_path(folder)
    try:
        data = _read(path)
        if data is None:
            return None
        return definitions.parse(data).users(loopback_users)
    except (OSError, ValueError) as e:  # DefinitionsError is a ValueError
        from .runtime import StartError

        why = getattr(e, "strerror", None) or e
        raise StartError("cannot use %s (users imported by hutch ctl import): %s" % (path, why), 2)


def _read(path):
    """The JSON in path, or None without the file."""
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
