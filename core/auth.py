"""Users, password hashes and the SASL mechanisms PLAIN and AMQPLAIN (EXTERNAL and ANONYMOUS,
the logins without a password: core/passwordless.py).

Password hashes use RabbitMQ's rabbit_password_hashing_sha256 format,
base64(salt + sha256(salt + password)) with a 4-byte salt, so a hash exported
from a RabbitMQ definitions file works here unchanged.
"""

import binascii
import hashlib

from ..codec.errors import DecodeError
from ..codec.wire import decode_table

MECHANISMS = b"PLAIN AMQPLAIN"


def hash_password(password, salt):
    """The stored form of password with the given 4-byte salt (callers pick a random one)."""
    if isinstance(password, str):
        password = password.encode()
    digest = hashlib.sha256(salt + password).digest()
    return binascii.b2a_base64(salt + digest).strip().decode()


def decode_hash(stored):
    """The 36 bytes (4 of salt, then the SHA-256) of a stored password hash, or None when it is
    not one (the config's start-up check, and each login)."""
    if isinstance(stored, str):
        # As bytes: a port whose binascii is micropython-lib's Python module (the WebAssembly
        # port's) takes no str there, where CPython's and a board's C module take either.
        stored = stored.encode()
    try:
        raw = binascii.a2b_base64(stored)
    except ValueError:  # binascii.Error is a ValueError on CPython; MicroPython raises ValueError
        return None
    return raw if len(raw) == 36 else None


def _same(a, b):
    """Compare without stopping at the first difference (no timing hint)."""
    if len(a) != len(b):
        return False
    diff = 0
    for i in range(len(a)):
        diff |= a[i] ^ b[i]
    return diff == 0


class Login:
    """Who asks the broker, whatever protocol it speaks: a logged-in client connection's user
    and its name (its peer, for the log). Every broker and topology call a client makes names
    it (`who`; None is the broker itself: dead-lettering, recovery, a bridge's local side), and
    it is the owner of the exclusive queues it declares. One per connection, made at login."""

    def __init__(self, user, name, permissions=None):
        self.user = user  # bytes
        self.name = name
        # core/access.py Permissions, checked where RabbitMQ checks them; None: every permission
        self.permissions = permissions


class Users:
    # Set only by a config with [auth] anonymous_login_user: the user a client that asks for
    # ANONYMOUS logs in as (core/passwordless.py). Without it there is no such attribute, read as
    # getattr(users, "anonymous", None): even a class attribute cost a board 96 bytes of heap.
    # (An annotation alone costs nothing at run time.)
    anonymous: "str"

    def __init__(self, hashes=None, loopback_users=("guest",), permissions=None, tags=None):
        # user name (str) -> stored hash (str)
        self.hashes = dict(hashes) if hashes is not None else {"guest": hash_password("guest", b"hutc")}
        self.loopback_users = tuple(loopback_users)
        # user name -> its core/access.py Permissions on "/", or None for every permission; a
        # user not in it may not use "/" (530 at connection.open). permissions None: no user
        # is restricted (a config file without permissions, as RabbitMQ's guest has them all).
        self.permissions = permissions
        self.tags = tags or {}  # user name -> its tags ("administrator", "monitoring", ...)

    def merge(self, other):
        """Add other's users (names not here already) to these."""
        self.hashes.update(other.hashes)
        self.tags.update(other.tags)
        if other.permissions is None:
            other_permissions = {name: None for name in other.hashes}
        else:
            other_permissions = other.permissions
        if self.permissions is None:
            self.permissions = {name: None for name in self.hashes if name not in other.hashes}
        self.permissions.update(other_permissions)

    def access(self, user):
        """(whether user may use the virtual host "/", its Permissions or None for all)."""
        if self.permissions is None:
            return True, None
        if user not in self.permissions:
            return False, None
        return True, self.permissions[user]

    def check(self, user, password, loopback):
        """None if the login is good, else the reason (for the log, never for the client)."""
        stored = self.hashes.get(user)
        if stored is None:
            from .login_reasons import no_such_user  # (loaded with the first refused login)

            return no_such_user(user)
        raw = decode_hash(stored)
        if raw is None:
            return "user '%s' has a malformed password hash in the config" % user
        if not _same(hashlib.sha256(raw[:4] + password.encode()).digest(), raw[4:]):
            return "user '%s' - invalid credentials: wrong password" % user
        if user in self.loopback_users and not loopback:
            from .login_reasons import not_from_afar

            return not_from_afar(user)
        return None


def credentials(mechanism, response):
    """(user, password) from a start-ok response, or raise DecodeError."""
    if mechanism == b"PLAIN":
        parts = bytes(response).split(b"\x00")
        if len(parts) != 3:
            raise DecodeError("PLAIN response must be authzid NUL user NUL password")
        user, password = parts[1], parts[2]
    elif mechanism == b"AMQPLAIN":
        # a field table without its 4-byte length prefix
        table = decode_table(len(response).to_bytes(4, "big") + bytes(response), 0, len(response) + 4)[0]
        user, password = table.get("LOGIN"), table.get("PASSWORD")
        if not isinstance(user, bytes) or not isinstance(password, bytes):
            raise DecodeError("AMQPLAIN response needs LOGIN and PASSWORD strings")
    else:
        raise DecodeError("unknown mechanism")
    try:
        return user.decode(), password.decode()
    except UnicodeError:
        raise DecodeError("user name or password is not UTF-8")


def is_loopback(address):
    if not address:
        return False
    return address.startswith("127.") or address == "::1" or address.startswith("::ffff:127.")
