"""A fleet's configuration document: a fragment of a gateway's config file (TOML), a
[document] header, and a last line that signs everything above it.

    [document]
    version = 7                       # above the one the gateway runs for this target
    target = "group:greenhouses"      # or "node:pump-house-2"
    expires = 2026-12-31T00:00:00Z    # optional: refused after this instant
    keys = ["ed25519:..."]            # optional: the keys trusted from now on (a rotation)

    [[bridge]]
    name = "cloud"
    uri = "amqps://edge:${secret:cloud}@central.example"
    ...
    #signature ed25519:<public key, base64> <signature, base64>

Every refusal is a Refused(reason, text): the reason is one word a status carries (signature,
key, stale, target, expired, failed, restart, forbidden, password, format), the text one line.
The sections a document may set are those a reload applies (SETS); one that needs a restart or
that would change the fleet itself is refused as such. A bridge's password travels as a
reference, ${secret:NAME}, which the gateway reads from its own data folder: a document holds
no password, and a user only a password_hash.
"""

import binascii

from . import ed25519

SIGNATURE = b"#signature ed25519:"
KEY_PREFIX = "ed25519:"
# The sections a document may set: a section it names replaces the config file's (for [server],
# only these keys of it). What a reload applies (server/reload.py), bar the listeners' TLS files,
# which name files on the gateway.
SETS = ("bridge", "device", "uplink", "users")
SERVER_KEYS = ("disk_free_limit",)
FORBIDDEN = ("fleet", "document", "wifi")  # (the fleet itself; its own header; a board's network)
HEADER_KEYS = ("version", "target", "expires", "keys")
SECRET = "${secret:"
MOST_BYTES = 64 * 1024  # a document's size at most (a gateway's config fragment is a few KiB)


class Refused(Exception):
    """A document not taken: args (reason, one line saying why)."""

    @property
    def reason(self):
        return self.args[0]

    @property
    def text(self):
        return self.args[1]


def key_bytes(text):
    """The 32 bytes of a key written "ed25519:<base64>"; ValueError if it is not one."""
    if not isinstance(text, str) or not text.startswith(KEY_PREFIX):
        raise ValueError("a key is written ed25519:<base64 of its 32 bytes>, not %r" % (text,))
    try:
        raw = binascii.a2b_base64(text[len(KEY_PREFIX) :])
    except ValueError:  # (binascii.Error is one; MicroPython raises ValueError)
        raw = b""
    if len(raw) != 32:
        raise ValueError("a key is written ed25519:<base64 of its 32 bytes>, not %r" % (text,))
    return raw


def key_text(raw):
    return KEY_PREFIX + binascii.b2a_base64(raw).decode().strip()


def signature_line(public_key, signature):
    """The last line of a signed document (bytes, with its newline)."""
    b64 = binascii.b2a_base64
    return SIGNATURE + b64(public_key).strip() + b" " + b64(signature).strip() + b"\n"


def split(data):
    """(body, public key, signature) of a signed document's bytes: the body is every byte above
    the signature line, which is the last. Refused("signature", ...) if there is none."""
    data = bytes(data)
    end = data.rstrip(b"\n")
    at = end.rfind(b"\n") + 1
    line = end[at:]
    if not line.startswith(SIGNATURE):
        raise Refused("signature", "not signed: its last line must be #signature ed25519:KEY SIGNATURE")
    fields = line[len(SIGNATURE) :].split(b" ")
    try:
        key, signature = (binascii.a2b_base64(field) for field in fields) if len(fields) == 2 else (b"", b"")
    except ValueError:  # (binascii.Error is one; MicroPython raises ValueError)
        key = signature = b""
    if len(key) != 32 or len(signature) != 64:
        raise Refused("signature", "its signature line is damaged (expected a 32-byte key and a 64-byte signature)")
    return data[:at], key, signature


def verified(data, trusted):
    """The body of a signed document whose signature is one of trusted's (keys' 32 bytes), or
    Refused: an unknown key ("key"), a changed byte ("signature")."""
    if len(data) > MOST_BYTES:
        raise Refused("format", "%d bytes, more than a document may hold (%d)" % (len(data), MOST_BYTES))
    body, key, signature = split(data)
    if key not in trusted:
        raise Refused("key", "signed by a key this gateway does not trust (%s)" % key_text(key))
    if not ed25519.verify(key, body, signature):
        raise Refused("signature", "its signature does not match its bytes (changed on the way, or forged)")
    return body


def checked(body, node, groups, running, failed, now, known=None):
    """The document a verified body is, as {"version", "target", "keys", "sections"}, if it is
    for this gateway and may be applied now; else Refused. running: {target: the version this
    gateway runs}; failed: the (target, version)s that failed here; now: seconds since the
    epoch (UTC). CPython only: a board's firmware has no TOML parser."""
    import tomllib

    try:
        data = tomllib.loads(body.decode())
    except (UnicodeError, ValueError, RecursionError) as e:  # (nested past the recursion limit)
        raise Refused("format", "not a TOML document: %s" % e)
    header = data.pop("document", None)
    if not isinstance(header, dict):
        raise Refused("format", "it has no [document] table (version, target)")
    unknown = [key for key in header if key not in HEADER_KEYS]
    if unknown:
        raise Refused("format", "unknown key '%s' in [document] (known: %s)" % (unknown[0], ", ".join(HEADER_KEYS)))
    version, target = header.get("version"), header.get("target")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise Refused("format", "[document] version must be a whole number from 1, not %r" % (version,))
    kind, _, name = target.partition(":") if isinstance(target, str) else ("", "", "")
    if kind not in ("node", "group") or not name:
        raise Refused("format", '[document] target must be "node:NAME" or "group:NAME", not %r' % (target,))
    if (kind == "node" and name != node) or (kind == "group" and name not in groups):
        mine = ["node:" + node] + ["group:" + group for group in groups]
        raise Refused("target", "it is for %s; this gateway is %s" % (target, ", ".join(mine)))
    expires = _instant(header.get("expires"))
    if expires is not None and expires <= now:
        raise Refused("expired", "it expired at %s" % header["expires"])
    if version <= running.get(target, 0):
        raise Refused(
            "stale", "version %d is not above %d, which this gateway runs for %s" % (version, running[target], target)
        )
    if (target, version) in failed:
        raise Refused(
            "failed", "version %d for %s failed on this gateway before: it is never applied again" % (version, target)
        )
    keys = header.get("keys")
    if keys is not None:
        if not isinstance(keys, list) or not keys:
            raise Refused("format", "[document] keys must be a list of one or more ed25519:<base64> keys")
        for key in keys:
            try:
                key_bytes(key)
            except ValueError as e:
                raise Refused("format", "[document] keys: %s" % e)
    for section, value in data.items():
        if known is not None and section not in known:
            raise Refused("format", "unknown section [%s] (known: %s)" % (section, ", ".join(sorted(known))))
        _settable(section, value)
    return {"version": version, "target": target, "keys": keys, "sections": data}


def _instant(value):
    """Seconds since the epoch of a TOML date-time with its offset (or such a string); None."""
    if value is None:
        return None
    import datetime

    if isinstance(value, str):
        try:
            value = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            value = None
    if not isinstance(value, datetime.datetime) or value.tzinfo is None:
        raise Refused("format", "[document] expires must be a date and time with its offset (2026-12-31T00:00:00Z)")
    return value.timestamp()


def _settable(section, value):
    """Refused unless a document may set this section to this value."""
    if section in FORBIDDEN:
        raise Refused("forbidden", "a document cannot set [%s]: it is the gateway's own" % section)
    if section == "server":
        others = [key for key in value if key not in SERVER_KEYS] if isinstance(value, dict) else ["server"]
        if others:
            raise Refused("restart", "[server] %s needs a restart: a document sets only %s of [server]" % (others[0], ", ".join(SERVER_KEYS)))  # fmt: skip
        return
    if section not in SETS:
        raise Refused(
            "restart",
            "[%s] is applied only at a start: a document sets %s and [server] %s"
            % (section, ", ".join("[%s]" % name for name in SETS), ", ".join(SERVER_KEYS)),
        )
    if section == "users" and isinstance(value, dict):
        for user, table in value.items():
            if isinstance(table, dict) and "password" in table:
                raise Refused("password", "[users.%s] carries a password: a document holds password_hash only (hutch passwd)" % user)  # fmt: skip
    if section == "bridge" and isinstance(value, list):
        for bridge in value:
            uris = bridge.get("uri") if isinstance(bridge, dict) else None
            for uri in [uris] if isinstance(uris, str) else uris if isinstance(uris, list) else []:
                password = _password(uri) if isinstance(uri, str) else None
                if password and not _is_reference(password):
                    raise Refused(
                        "password",
                        "bridge %s: its uri carries a password; write ${secret:NAME} for it, kept in the "
                        "gateway's data folder as fleet/secrets/NAME" % bridge.get("name", "?"),
                    )


def _is_reference(password):
    """Whether a URI's password is ${secret:NAME}, NAME a file's name in fleet/secrets/ (letters,
    digits, '-', '_', '.': never a path out of it)."""
    name = password[len(SECRET) : -1]
    allowed = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_."
    return password.startswith(SECRET) and password.endswith("}") and name.strip(".") != "" and all(c in allowed for c in name) and ".." not in name  # fmt: skip


def _password(uri):
    """The password a URI carries, or None."""
    authority = uri.partition("://")[2].partition("/")[0].partition("?")[0]
    credentials, at, _ = authority.rpartition("@")
    return credentials.partition(":")[2] if at else None
