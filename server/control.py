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

from ..codec.wire import text
from ..ports.files import replace_file
from . import definitions
from .open_logins import apply_users

USERS_FILE = "users.json"
# What each command takes: {argument: (JSON type, required)}. handle() answers a request that
# does not fit (an argument missing, or of another type) with an error naming it, before any
# command reads it: whatever reaches the socket is answered, never raised. (dict: an object;
# list: an array of strings.)
ARGUMENTS = {
    "export": {},
    "import": {"definitions": (dict, True)},
    "list": {"kind": (str, True), "user": (str, False), "columns": (list, False)},
    "purge": {"name": (str, True)},
    "delete": {"name": (str, True), "kind": (str, False)},
    "close-connection": {"name": (str, True), "reason": (str, False)},
    "add-user": {"name": (str, True), "password": (str, True), "tags": (list, False)},
    "change-password": {"name": (str, True), "password": (str, True)},
    "clear-permissions": {"name": (str, True)},
    "set-permissions": {"name": (str, True), "configure": (str, True), "write": (str, True), "read": (str, True)},
    "delete-user": {"name": (str, True)},
    "ping": {},
    "status": {},
    "reload": {},
}
JSON_TYPES = {str: "a string", dict: "an object", list: "an array of strings"}


class Control:
    def __init__(self, runtime, data_folder, user_origins):
        self.runtime = runtime
        self.broker = runtime.broker
        self.folder = data_folder
        # the users the operator's files define (server/options.py user_origins): changed there
        self.config_users = user_origins
        self.commands = {
            "export": self.export,
            "import": self.import_definitions,
            "list": self.list,
            "purge": self.purge,
            "delete": self.delete,
            "close-connection": self.close_connection,
            "add-user": self.add_user,
            "change-password": self.change_password,
            "clear-permissions": self.clear_permissions,
            "set-permissions": self.set_permissions,
            "delete-user": self.delete_user,
            "ping": self.ping,
            "status": self.status,
            "reload": self.reload,
        }

    def handle(self, request):
        if self.runtime.stop_event.is_set():  # shutting down: the journal may be closing
            return {"error": "the broker is stopping"}
        command = self.commands.get(request["command"])
        if command is None:
            return {
                "error": "unknown command '%s' (known: %s)" % (request["command"], ", ".join(sorted(self.commands)))
            }
        error = _misfit(request)
        if error is not None:
            return {"error": error}
        return command(request)

    async def reload(self, request):
        """The config read again (server/reload.py): {"reloaded": [lines]} or {"error": why}."""
        reloader = self.runtime.reloader
        if reloader is None:
            return {"error": "this broker was started without a config file to read again"}
        ok, lines = await reloader.reload()
        return {"reloaded": lines} if ok else {"error": lines[0]}

    def ping(self, request):
        return {
            "pid": os.getpid(),
            "listeners": [[listener.host, listener.port] for listener in self.runtime.listeners],
        }

    def status(self, request):
        """What status.json holds, as it is now (hutch ctl status: a publish confirmed a moment
        ago is in it, not two seconds later)."""
        from ..ports.status_file import snapshot

        return {"status": snapshot(self.broker)}

    def list(self, request):
        from . import listing

        kind = request.get("kind")
        if kind not in listing.KINDS:
            return {"error": "cannot list '%s' (one of: %s)" % (kind, ", ".join(listing.KINDS))}
        try:
            rows = listing.rows(kind, self.broker, request.get("user"))
        except LookupError as e:
            return {"error": str(e)}
        columns = request.get("columns") or list(listing.DEFAULT[kind])
        known = set(rows[0]) if rows else set(listing.COLUMNS[kind])
        unknown = [c for c in columns if c not in known]
        if unknown:
            return {
                "error": "no such column for %s: %s (known: %s)" % (kind, ", ".join(unknown), ", ".join(sorted(known)))
            }
        return {"columns": columns, "rows": [[row.get(c) for c in columns] for row in rows]}

    def purge(self, request):
        from ..codec.spec import QUEUE_PURGE
        from ..core import topology

        def purge():
            return {"purged": topology.purge_queue(self.broker, None, request["name"].encode(), QUEUE_PURGE)}

        return _as_answer(purge)

    def delete(self, request):
        from ..codec.spec import QUEUE_DELETE
        from ..core import topology

        name = request["name"].encode()
        if request.get("kind") == "queue":
            if name not in self.broker.queues:
                return {"error": "no queue '%s' in vhost '/'" % request["name"]}
            return _as_answer(
                lambda: {"messages": topology.delete_queue_named(self.broker, None, name, False, False, QUEUE_DELETE)}
            )
        if request.get("kind") == "exchange":
            if self.broker.exchange(name) is None:
                return {"error": "no exchange '%s' in vhost '/'" % request["name"]}
            return _as_answer(lambda: topology.delete_exchange_named(self.broker, None, name, False) or {"deleted": 1})
        return {"error": "delete what: queue or exchange, not '%s'" % request.get("kind")}

    def close_connection(self, request):
        for conn in list(self.broker.connections):
            if conn.name == request["name"]:
                conn.close(request.get("reason", "closed by hutch ctl"))
                return {"closed": conn.name}
        return {"error": "no connection '%s' (hutch ctl list connections name)" % request["name"]}

    def add_user(self, request):
        name = request["name"]
        refused = self._config_user(name, "add")
        if refused or name in self.broker.users.hashes:
            return {"error": refused or "user '%s' already exists" % name}
        return self._keep_user(name, None, _hashed(request["password"]), request.get("tags") or [])

    def set_permissions(self, request):
        name = request["name"]
        refused = self._unchangeable(name, "permissions")
        if refused:
            return refused
        patterns = (request["configure"], request["write"], request["read"])
        for pattern in patterns:
            error = _bad_pattern(pattern)
            if error:
                return {"error": error}
        return self._keep_user(name, patterns)

    def change_password(self, request):
        name = request["name"]
        return self._unchangeable(name, "password") or self._keep_user(name, None, _hashed(request["password"]))

    def clear_permissions(self, request):
        """As rabbitmqctl clear_permissions: the user may no longer open "/" (530), and its
        connections already open are refused every operation (403)."""
        name = request["name"]
        return self._unchangeable(name, "permissions") or self._keep_user(name, ())

    def delete_user(self, request):
        name = request["name"]
        users = self.broker.users
        refused = self._unchangeable(name, "delete")
        if refused:
            return refused
        for table in (users.hashes, users.tags, users.permissions or {}):
            table.pop(name, None)
        closed = apply_users(self.broker)  # its connections: 320 "user '...' is deleted"
        try:
            forget_user(self.folder, name)
        except (OSError, ValueError) as e:
            return {
                "error": "user '%s' deleted until the broker stops, not in %s: %s" % (name, users_path(self.folder), e)
            }
        return {"deleted": name, "closed": closed}

    def _unchangeable(self, name, change):
        """{"error": why} when this user cannot be changed here (see _config_user), or is not
        there; None when it can."""
        refused = self._config_user(name, change)
        if refused or name not in self.broker.users.hashes:
            return {"error": refused or "no user '%s'" % name}
        return None

    def _config_user(self, name, change):
        """Why a user the operator's files define is not changed here (change: add, password,
        permissions, delete), naming the file and what to change in it; None for any other user."""
        if name not in self.config_users:
            return None
        kind, path = self.config_users[name]
        if kind == "built-in":
            return (
                "user '%s' is the broker's built-in user (its config has no [users] table): give the config "
                "a [users] table with the users it needs, or add a user of your own with hutch ctl add-user" % name
            )
        if kind == "definitions":
            what = {
                "add": "its entry in users",
                "password": "its password_hash in users",
                "permissions": "its entry in permissions",
                "delete": "its entries",
            }
            return "user '%s' is defined in the definitions file %s: change %s there" % (name, path, what[change])
        what = {
            "add": "change password_hash or tags in [users.%s]",
            "password": "change password_hash in [users.%s]",
            "permissions": "change permissions (and topic_permissions) in [users.%s]",
            "delete": "remove [users.%s]",
        }
        return "user '%s' is defined in the config file %s: %s there, then hutch ctl reload" % (
            name,
            path,
            what[change] % name,
        )

    def _keep_user(self, name, patterns, password_hash=None, tags=None):
        """A user added or changed at run time: in use at once, and kept in DATA/users.json.
        patterns: its (configure, write, read) on "/", its topic permissions kept (as
        rabbitmqctl set_permissions leaves them); None: those it has (a new user: none, until
        set-permissions); (): none at all. password_hash, tags: None for those it has."""
        users = self.broker.users
        if password_hash is None:
            password_hash = users.hashes[name]
        if tags is None:
            tags = users.tags.get(name, [])
        entry = {"name": name, "password_hash": password_hash, "hashing_algorithm": definitions.SHA256, "tags": tags}
        data = {"users": [entry], "permissions": [], "topic_permissions": []}
        allowed, granted = users.access(name) if name in users.hashes else (False, None)
        if patterns is None and allowed:
            patterns = granted.patterns if granted is not None else (".*", ".*", ".*")
        if patterns:
            configure, write, read = patterns
            data["permissions"].append(dict(user=name, vhost="/", configure=configure, write=write, read=read))
            for exchange, (topic_write, topic_read) in (granted.topic_patterns if granted is not None else {}).items():
                data["topic_permissions"].append(
                    dict(user=name, vhost="/", exchange=text(exchange), write=topic_write, read=topic_read)
                )
        kept = definitions.parse(data).users(users.loopback_users)
        users.merge(kept)
        if not patterns:  # none on "/" (merge keeps what it had)
            users.permissions.pop(name, None)
        apply_users(self.broker)  # the user's open connections: its new permissions
        try:
            save_users(self.folder, kept)
        except (OSError, ValueError) as e:
            return {
                "error": "user '%s' in use until the broker stops, not kept in %s: %s"
                % (name, users_path(self.folder), e)
            }
        return {"user": name}

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
                left_out.append(self._config_user(name, "add"))
                _drop_user(parsed, name)
        errors = []
        users = self.broker.users
        imported = parsed.users(users.loopback_users)
        users.merge(imported)
        apply_users(self.broker)
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


def _as_answer(action):
    """action()'s answer, or the broker's refusal of it (a Refused's text) as the error."""
    from ..codec.errors import Refused

    try:
        return action()
    except Refused as e:
        return {"error": e.text}


def _bad_pattern(pattern):
    import re

    try:
        re.compile(pattern)
    except (re.error, TypeError) as e:
        return "not a regular expression: %r (%s)" % (pattern, e)
    return None


def _drop_user(parsed, name):
    for table in (parsed.hashes, parsed.tags, parsed.permissions, parsed.topics):
        table.pop(name, None)


def users_path(folder):
    return os.path.join(folder, USERS_FILE)


def _hashed(password):
    """A password as RabbitMQ stores it (salted SHA-256), with a fresh salt."""
    from ..core.auth import hash_password

    return hash_password(password, os.urandom(4))


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
    _write(path, out)


_NAME = {"users": "name", "permissions": "user", "topic_permissions": "user"}


def forget_user(folder, name):
    """Take a user out of DATA/users.json (if it is there)."""
    path = users_path(folder)
    kept = _read(path)
    if kept is None:
        return
    out = {key: [entry for entry in kept.get(key, []) if entry.get(_NAME[key]) != name] for key in _NAME}
    _write(path, out)


def _write(path, data):
    replace_file(path, json.dumps(data, indent=1).encode())  # (whole, and its new name durable)


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


def _misfit(request):
    """Why a request does not fit its command's ARGUMENTS, or None."""
    command = request["command"]
    for argument, (kind, required) in ARGUMENTS[command].items():
        value = request.get(argument)
        if value is None:
            if required:
                return "%s needs '%s'" % (command, argument)
            continue
        if not isinstance(value, kind) or (kind is list and not all(isinstance(item, str) for item in value)):
            return "%s: '%s' must be %s, not %s" % (command, argument, JSON_TYPES[kind], json.dumps(value)[:60])
    return None
