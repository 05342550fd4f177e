"""`hutch passwd`: a password hash for the config file, printed or written into it.

    hutch passwd                                   asks twice, prints the hash
    hutch passwd --password PW                     the hash of PW
    echo PW | hutch passwd                         the hash of a line on standard input
    hutch passwd --config FILE --user NAME [--password PW]
                                                   writes [users.NAME] password_hash into FILE

With --config, as `mosquitto_passwd -b` does for its password file: the user's table gets the
new hash (made if missing, the file too), the rest of the file is kept as it was, and the
file is read back (as a config, with that user's new hash) before it replaces the old one. A file with the user
in a form this does not edit (an inline table) is left alone, with the hash printed for the
user to paste. The broker reads the file at its start and at `hutch ctl reload`.
"""

import json
import os
import re
import sys

from ..core.auth import hash_password
from ..server import config

BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")  # a TOML key that needs no quotes


def add_options(parser):
    parser.add_argument("--password", help="the password (default: a line on standard input, or asked twice)")
    parser.add_argument("--config", metavar="FILE", help="write the hash into this config file (needs --user)")
    parser.add_argument("--user", metavar="NAME", help="the user whose password_hash --config gets")


def run(args):
    if (args.config is None) != (args.user is None):
        print("hutch passwd: --config and --user go together (the file, and the user to write)", file=sys.stderr)
        return 2
    password = read_password(args.password)
    if password is None:
        return 1
    password_hash = hash_password(password, os.urandom(4))
    if args.config is None:
        print(password_hash)
        return 0
    try:
        write_user(args.config, args.user, password_hash)
    except OSError as e:
        print("hutch passwd: %s: %s" % (args.config, e.strerror or e), file=sys.stderr)
        return 1
    except (config.ConfigError, ValueError) as e:
        print("hutch passwd: %s" % e, file=sys.stderr)
        return 1
    print(
        "wrote the password of user '%s' into %s: hutch ctl reload (or a restart) applies it" % (args.user, args.config)
    )
    return 0


def read_password(given):
    """--password, a line of standard input when it is not a terminal, or one asked twice;
    None after saying why there is none."""
    if given is not None:
        return given
    if not sys.stdin.isatty():
        line = sys.stdin.readline().rstrip("\r\n")
        if not line:
            print("hutch: no password on standard input", file=sys.stderr)
            return None
        return line
    import getpass

    try:
        password = getpass.getpass("password: ")
        if getpass.getpass("again: ") != password:
            print("hutch: the passwords differ", file=sys.stderr)
            return None
    except (EOFError, KeyboardInterrupt):
        print("", file=sys.stderr)
        return None
    return password


def write_user(path, user, password_hash):
    """[users.USER] password_hash = HASH in the config file at path (TOML, or JSON for a board's
    hutch.json), the rest kept; ValueError (or config.ConfigError for a file that does not read
    as a config before or after) without writing anything."""
    exists = os.path.exists(path)
    data = config.read(path) if exists else {}  # (a file that is no config is not made worse)
    text = ""
    if exists:
        with open(path) as f:
            text = f.read()
    by_hand = ValueError(
        "%s has user '%s' in a form hutch passwd does not edit (an inline table?): set its "
        'password_hash = "%s" by hand' % (path, user, password_hash)
    )
    if path.endswith(".json"):
        data.setdefault("users", {}).setdefault(user, {})["password_hash"] = password_hash
        new = json.dumps(data, indent=2) + "\n"
    else:
        new = _toml_with_user(text, user, password_hash, user in data.get("users", {}))
        if new is None:
            raise by_hand
    root, extension = os.path.splitext(path)
    tmp = root + ".passwd-tmp" + extension  # (read back as the file's kind: TOML, or JSON)
    with open(tmp, "w") as f:
        f.write(new)
    if exists:
        os.chmod(tmp, os.stat(path).st_mode & 0o7777)  # (a config with hashes is often 0600)
    try:
        entry = config.read(tmp).get("users", {}).get(user)  # (other users' hashes are their own)
        if not isinstance(entry, dict) or entry.get("password_hash") != password_hash:
            raise by_hand
    except BaseException:
        os.remove(tmp)
        raise
    os.replace(tmp, path)


def _toml_with_user(text, user, password_hash, known):
    """The TOML text with the table [users.USER] holding password_hash = HASH: its line replaced,
    or put first in the table, or the table added at the end; None if the file has the user
    (known) other than as such a table."""
    key = user if BARE_KEY.match(user) else json.dumps(user)
    header = re.compile(
        r"^\s*\[\s*users\s*\.\s*(%s|%s)\s*\]\s*(#.*)?$" % (re.escape(user), re.escape(json.dumps(user)))
    )
    line = 'password_hash = "%s"' % password_hash
    lines = text.splitlines()
    for i, current in enumerate(lines):
        if header.match(current):
            end = i + 1
            while end < len(lines) and not lines[end].lstrip().startswith("["):
                if re.match(r"^\s*password_hash\s*=", lines[end]):
                    lines[end] = line
                    return "\n".join(lines) + "\n"
                end += 1
            lines.insert(i + 1, line)
            return "\n".join(lines) + "\n"
    if known:
        return None
    if lines and lines[-1].strip():
        lines.append("")
    lines += ["[users.%s]" % key, line]
    return "\n".join(lines) + "\n"
