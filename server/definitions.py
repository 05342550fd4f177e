"""Definitions in RabbitMQ's JSON format (`rabbitmqctl export_definitions` / `import_definitions`):
users with their password hashes, tags and permissions, topic permissions, exchanges, queues and
bindings of the virtual host "/".

    parsed = parse(json.load(f))   # Definitions; what hutch does not support is in parsed.unsupported
    parsed.users(loopback)         # core/auth.py Users
    parsed.apply(broker, log)      # declares the exchanges, queues and bindings
    export(broker, users)          # the JSON object RabbitMQ imports

What hutch has no counterpart for (other virtual hosts, policies, parameters, user and vhost
limits, quorum queues, other password hashing algorithms) is named, one line each, in
`unsupported`: a caller says so and, for `hutch ctl import`, exits with a status that says the
import was partial. Runs on boards too (json); loaded only with a definitions file.
"""

import binascii
import os

from ..core.auth import Users, decode_hash, hash_password

SHA256 = "rabbit_password_hashing_sha256"
SUPPORTED_QUEUE_TYPES = ("classic", "stream")
IGNORED = ("rabbit_version", "rabbitmq_version", "rabbitmq_definitions_version")


class DefinitionsError(ValueError):
    """A definitions file that cannot be read as one: one line naming what is wrong."""


class Definitions:
    def __init__(self):
        self.hashes = {}  # user -> stored hash
        self.tags = {}  # user -> [tag]
        self.permissions = {}  # user -> (configure, write, read)
        self.topics = {}  # user -> {exchange name: (write, read)}
        self.exchanges = []  # (name, type, durable, auto_delete, internal, arguments)
        self.queues = []  # (name, durable, auto_delete, arguments)
        self.bindings = []  # (source, destination is a queue, destination, routing key, arguments)
        self.unsupported = []  # one line each: what was left out

    def users(self, loopback_users=()):
        """The users as core/auth.py holds them: a user without a permissions entry may not use
        "/" (530 at connection.open), as in RabbitMQ."""
        from ..core.access import Permissions

        permissions = {}
        for name, (configure, write, read) in self.permissions.items():
            if name not in self.hashes:
                continue
            topics = self.topics.get(name, {})
            if (configure, write, read) == (".*", ".*", ".*") and not topics:
                permissions[name] = None  # every permission: nothing to check
            else:
                permissions[name] = Permissions(configure, write, read, topics)
        return Users(self.hashes, loopback_users, permissions, self.tags)

    def apply(self, broker, log):
        """Declare what the file defines, as a durable definition would be (the journal keeps
        it): one that the broker refuses is logged and left out."""
        from ..codec.errors import Refused
        from ..codec.spec import QUEUE_BIND
        from ..core import topology

        for name, kind, durable, auto_delete, internal, arguments in self.exchanges:
            try:
                topology.declare_exchange(
                    broker,
                    None,
                    name,
                    kind,
                    durable=durable,
                    auto_delete=auto_delete,
                    internal=internal,
                    arguments=arguments,
                )
            except Refused as e:
                log("error", "definitions: exchange '%s' not declared: %s" % (name.decode(), e.text))
        for name, durable, auto_delete, arguments in self.queues:
            try:
                topology.declare_queue(
                    broker, None, name, durable=durable, auto_delete=auto_delete, arguments=arguments
                )
            except Refused as e:
                log("error", "definitions: queue '%s' not declared: %s" % (name.decode(), e.text))
        for source, to_queue, destination, key, arguments in self.bindings:
            try:
                topology.bind(broker, None, source, destination, key, arguments, QUEUE_BIND, to_queue=to_queue)
            except Refused as e:
                log("error", "definitions: binding from '%s' not made: %s" % (source.decode(), e.text))


def read_file(path):
    """parse() of a definitions file; config.ConfigError in one line for one that cannot be read
    or is not definitions."""
    import json

    from .config import ConfigError

    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as e:
        raise ConfigError("cannot read definitions file %s: %s" % (path, getattr(e, "strerror", None) or e))
    except ValueError as e:
        raise ConfigError("definitions file %s is not JSON: %s" % (path, e))
    try:
        return parse(data)
    except DefinitionsError as e:
        raise ConfigError("definitions file %s: %s" % (path, e))


def parse(data, salt=None):
    """A definitions object (json.load's dict) as Definitions; DefinitionsError for one that is
    not definitions. salt: for plaintext passwords (default: os.urandom)."""
    if not isinstance(data, dict):
        raise DefinitionsError("definitions must be a JSON object")
    parsed = Definitions()
    for key in data:
        if key not in KNOWN and key not in IGNORED:
            parsed.unsupported.append("%s (no such section in hutch)" % key)
    for vhost in _list(data, "vhosts"):
        if vhost.get("name") != "/":
            parsed.unsupported.append("vhost '%s' (hutch has the virtual host '/' only)" % vhost.get("name"))
        elif vhost.get("limits"):
            parsed.unsupported.append("limits of vhost '/' (set [limits] in the config instead)")
    for section, what in (
        ("policies", "policy"),
        ("parameters", "parameter"),
        ("global_parameters", "global parameter"),
    ):
        for entry in _list(data, section):
            parsed.unsupported.append("%s '%s'" % (what, entry.get("name")))
    for user in _list(data, "users"):
        _user(parsed, user, salt)
    for entry in _list(data, "permissions"):
        if _here(parsed, entry, "permissions of user '%s'" % entry.get("user")):
            parsed.permissions[_text(entry, "user")] = tuple(
                _text(entry, k, "") for k in ("configure", "write", "read")
            )
    for entry in _list(data, "topic_permissions"):
        if _here(parsed, entry, "topic permissions of user '%s'" % entry.get("user")):
            topics = parsed.topics.setdefault(_text(entry, "user"), {})
            topics[_text(entry, "exchange").encode()] = (_text(entry, "write", ""), _text(entry, "read", ""))
    for entry in _list(data, "exchanges"):
        name = _text(entry, "name")
        if name.startswith("amq.") or not name or not _here(parsed, entry, "exchange '%s'" % name):
            continue  # the built-in ones exist already (RabbitMQ skips them too)
        parsed.exchanges.append(
            (
                name.encode(),
                _text(entry, "type").encode(),
                bool(entry.get("durable", True)),
                bool(entry.get("auto_delete", False)),
                bool(entry.get("internal", False)),
                _arguments(entry),
            )
        )
    for entry in _list(data, "queues"):
        name = _text(entry, "name")
        if not _here(parsed, entry, "queue '%s'" % name):
            continue
        arguments = _arguments(entry)
        kind = entry.get("type") or arguments.get("x-queue-type") or "classic"
        if kind not in SUPPORTED_QUEUE_TYPES:
            parsed.unsupported.append("queue '%s' of type %s (hutch has classic queues and streams)" % (name, kind))
            continue
        if kind == "stream":
            arguments["x-queue-type"] = "stream"
        parsed.queues.append(
            (name.encode(), bool(entry.get("durable", True)), bool(entry.get("auto_delete")), arguments)
        )
    for entry in _list(data, "bindings"):
        if not _here(parsed, entry, "binding from '%s'" % entry.get("source")):
            continue
        kind = entry.get("destination_type", "queue")
        if kind not in ("queue", "exchange"):
            raise DefinitionsError(
                "binding from '%s': destination_type must be queue or exchange" % entry.get("source")
            )
        parsed.bindings.append(
            (
                _text(entry, "source").encode(),
                kind == "queue",
                _text(entry, "destination").encode(),
                _text(entry, "routing_key", "").encode(),
                _arguments(entry),
            )
        )
    return parsed


KNOWN = (
    "users",
    "vhosts",
    "permissions",
    "topic_permissions",
    "parameters",
    "global_parameters",
    "policies",
    "queues",
    "exchanges",
    "bindings",
)


def _user(parsed, user, salt):
    name = _text(user, "name")
    if "tags" not in user:  # as RabbitMQ: tags_not_present
        raise DefinitionsError("user '%s' has no tags (an empty list will do)" % name)
    tags = user["tags"]
    if isinstance(tags, str):
        tags = [tag for tag in tags.split(",") if tag]
    if not isinstance(tags, list):
        raise DefinitionsError("user '%s': tags must be a list or a comma-separated string" % name)
    if "password" in user and "password_hash" in user:
        raise DefinitionsError("user '%s' has both password and password_hash" % name)
    if "password" in user:
        stored = hash_password(_text(user, "password"), salt or os.urandom(4))
    else:
        stored = user.get("password_hash", "")
        algorithm = user.get("hashing_algorithm", SHA256)
        if algorithm != SHA256:
            parsed.unsupported.append("user '%s' (password hashed with %s; hutch has %s)" % (name, algorithm, SHA256))
            return
        if stored == "":  # a cleared password: no login with a password (EXTERNAL only)
            stored = None
        elif decode_hash(stored) is None:
            raise DefinitionsError("user '%s': password_hash is not a %s hash" % (name, SHA256))
    if user.get("limits"):
        parsed.unsupported.append("limits of user '%s'" % name)
    if stored is not None:
        parsed.hashes[name] = stored
    else:
        parsed.hashes[name] = CLEARED
    parsed.tags[name] = [str(tag) for tag in tags]


# A user whose password was cleared (password_hash ""): it logs in by certificate only.
CLEARED = binascii.b2a_base64(bytes(36)).strip().decode()


def export(broker, users):
    """The broker's users, permissions, exchanges, queues and bindings as RabbitMQ's definitions
    JSON object (what `rabbitmqctl import_definitions` takes)."""
    from ..core.snapshot import text

    out = {"rabbit_version": "3.10.8", "rabbitmq_version": "3.10.8", "vhosts": [{"name": "/", "limits": []}]}
    out.update(export_users(users))
    out["exchanges"] = [
        {
            "name": text(x.name),
            "vhost": "/",
            "type": text(x.kind),
            "durable": x.durable,
            "auto_delete": x.auto_delete,
            "internal": x.internal,
            "arguments": _json_arguments(x.arguments),
        }
        for x in broker.exchanges.values()
        if x.name and not x.name.startswith(b"amq.") and x.durable
    ]
    out["queues"] = [
        {
            "name": text(q.name),
            "vhost": "/",
            "type": "stream" if q.is_stream else "classic",
            "durable": q.durable,
            "auto_delete": q.auto_delete,
            "arguments": _json_arguments(q.arguments),
        }
        for q in broker.queues.values()
        if q.durable and q.owner is None
    ]
    bindings = []
    for exchange in broker.exchanges.values():
        for binding in exchange.bindings.values():
            destination = binding.destination
            if not (exchange.durable and destination.durable):
                continue
            bindings.append(
                {
                    "source": text(exchange.name),
                    "vhost": "/",
                    "destination": text(destination.name),
                    "destination_type": "queue" if destination.is_queue else "exchange",
                    "routing_key": text(binding.key),
                    "arguments": _json_arguments(binding.arguments),
                }
            )
    out["bindings"] = bindings
    return out


def export_users(users):
    """core/auth.py Users as the users, permissions and topic_permissions of RabbitMQ's
    definitions."""
    from ..core.snapshot import text

    out = {}
    out["users"] = [
        {
            "name": name,
            "password_hash": "" if stored == CLEARED else stored,
            "hashing_algorithm": SHA256,
            "tags": users.tags.get(name, []),
            "limits": {},
        }
        for name, stored in sorted(users.hashes.items())
    ]
    permissions, topics = [], []
    for name in sorted(users.hashes):
        allowed, granted = users.access(name)
        if not allowed:
            continue
        patterns = granted.patterns if granted is not None else (".*", ".*", ".*")
        permissions.append(dict(user=name, vhost="/", configure=patterns[0], write=patterns[1], read=patterns[2]))
        for exchange, pair in sorted((granted.topic_patterns if granted is not None else {}).items()):
            topics.append(dict(user=name, vhost="/", exchange=text(exchange), write=pair[0], read=pair[1]))
    out["permissions"] = permissions
    out["topic_permissions"] = topics
    return out


def _json_arguments(arguments):
    return {key: value.decode() if isinstance(value, bytes) else value for key, value in (arguments or {}).items()}


def _list(data, key):
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(entry, dict) for entry in value):
        raise DefinitionsError("%s must be a list of objects" % key)
    return value


def _text(entry, key, default=None):
    value = entry.get(key, default)
    if not isinstance(value, str):
        raise DefinitionsError("%s must be a string, not %r, in %r" % (key, value, entry))
    return value


def _here(parsed, entry, what):
    """Whether an entry is of the virtual host "/" (others are named as unsupported)."""
    vhost = entry.get("vhost", "/")
    if vhost != "/":
        parsed.unsupported.append("%s in vhost '%s' (hutch has the virtual host '/' only)" % (what, vhost))
        return False
    return True


def _arguments(entry):
    arguments = entry.get("arguments") or {}
    if not isinstance(arguments, dict):
        raise DefinitionsError("arguments must be an object, not %r" % (arguments,))
    return dict(arguments)
