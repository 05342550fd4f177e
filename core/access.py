"""Who may do what: RabbitMQ's permissions, checked in one place.

Each user has, for the virtual host "/", three regular expressions: `configure` (declare and
delete a queue or exchange), `write` (publish to an exchange, bind to a queue or exchange)
and `read` (consume, get or purge a queue, bind from an exchange); and per topic exchange,
topic permissions: `write` on a publish's routing key, `read` on a binding's key. As in
RabbitMQ 3.10:

- a pattern is searched for anywhere in the name (unanchored); "" means "^$" (nothing);
- the default exchange is named `amq.default` for the check;
- the permission comes before the resource's existence (403 before 404);
- a passive declare needs none; a server-named queue needs configure on its generated name;
- a topic exchange without topic permissions for the user allows every key;
- the refusal is 403 ACCESS_REFUSED in 3.10's words: "access to queue 'q' in vhost '/'
  refused for user 'alice'", "access to topic 'k' in exchange 'x' in vhost '/' refused for
  user 'alice'".

A client with every permission (the config's default) has none to check: Login.permissions
is None, and this module is not even loaded. core/broker.py and core/topology.py call check()
where RabbitMQ checks, and nowhere else does.
"""

import re
import sys

from ..codec.errors import ACCESS_REFUSED, Refused
from ..codec.wire import text

CONFIGURE = 0
WRITE = 1
READ = 2


class Permissions:
    """One user's permissions on "/": three patterns, and topic permissions by exchange name."""

    def __init__(self, configure, write, read, topics=None):
        self.patterns = (configure, write, read)  # as written, for export and the log
        self.compiled = (compile_pattern(configure), compile_pattern(write), compile_pattern(read))
        self.topic_patterns = dict(topics or {})  # exchange name (bytes) -> (write, read), as written
        self.topics = {}  # ... compiled
        for exchange, (topic_write, topic_read) in self.topic_patterns.items():
            self.topics[exchange] = (compile_pattern(topic_write), compile_pattern(topic_read))

    def allows(self, permission, name):
        return self.compiled[permission].search(text(name)) is not None


def compile_pattern(pattern):
    """A permission pattern as RabbitMQ matches it ("" is "^$"); ValueError names one that is
    not a regular expression, or, on MicroPython, one its `re` would silently mis-match."""
    if not isinstance(pattern, str):
        raise ValueError("a permission pattern must be a string, not %r" % (pattern,))
    if sys.implementation.name == "micropython":
        for unsupported in ("{", "\\b", "\\B", "(?P"):
            if unsupported in pattern:
                raise ValueError(
                    "permission pattern %r: MicroPython's re does not match %r as CPython's does"
                    % (pattern, unsupported)
                )
    try:
        return re.compile(pattern or "^$")
    except Exception as e:  # re.error on CPython, ValueError on MicroPython
        raise ValueError("permission pattern %r is not a regular expression: %s" % (pattern, e))


def check(who, permission, kind, name, method):
    """Refuse (403) unless who may `permission` the resource `kind` ("queue", "exchange") called
    name. who: core/auth.py Login (its permissions None: everything), or None (the broker)."""
    if who is None or who.permissions is None:
        return
    if not name and kind == "exchange":
        name = b"amq.default"
    if not who.permissions.allows(permission, name):
        raise Refused(
            ACCESS_REFUSED,
            "access to %s '%s' in vhost '/' refused for user '%s'" % (kind, text(name), text(who.user)),
            method,
        )


def check_topic(who, permission, exchange, key, method):
    """Refuse (403) a routing or binding key of a topic exchange that who's topic permissions on
    that exchange do not allow (write: publish; read: bind). No topic permissions: allowed."""
    if who is None or who.permissions is None or exchange.kind != b"topic":
        return
    patterns = who.permissions.topics.get(exchange.name)
    if patterns is None:
        return
    if patterns[0 if permission == WRITE else 1].search(text(key)) is None:
        raise Refused(
            ACCESS_REFUSED,
            "access to topic '%s' in exchange '%s' in vhost '/' refused for user '%s'"
            % (text(key), text(exchange.name), text(who.user)),
            method,
        )
