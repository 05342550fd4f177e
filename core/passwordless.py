"""The SASL logins without a password (loaded with the first): EXTERNAL, as the user a client's
TLS certificate names (RabbitMQ's rabbitmq_auth_mechanism_ssl), and ANONYMOUS, as the user the
config names ([auth] anonymous_login_user; RabbitMQ 4's anonymous_login_user). As in RabbitMQ,
the user must exist, its password is not used, and the loopback rule holds.

    offered = mechanisms(users, tls)     # what connection.start offers
    user, reason = login(users, mechanism, tls, loopback)   # reason None: logged in

tls is what the port knows of a TLS client (conn.tls, set by server/frontends.py): on CPython
{"login": the name its verified certificate gives (ports/certname.py), or None, ...}; on a
board, whose TLS socket shows no certificate, a dict without "login"; None for plain TCP.
"""

from .auth import MECHANISMS
from .login_reasons import no_such_user, not_from_afar

# The reason a client that asks for EXTERNAL without a verified certificate is refused, in
# RabbitMQ's words (the broker logs "EXTERNAL login refused: " and this).
NO_CERTIFICATE = "connection peer presented no TLS (x.509) certificate"


def mechanisms(users, tls):
    """EXTERNAL first where the port reads the client's certificate: as RabbitMQ does, on every
    such connection, with or without one (asked for without one, it is refused with the reason
    in the log); not on a board's TLS, nor on plain TCP. ANONYMOUS when the config names its user."""
    offered = MECHANISMS
    if tls is not None and "login" in tls:
        offered = b"EXTERNAL " + offered
    if getattr(users, "anonymous", None) is not None:  # (core/auth.py Users says why getattr)
        offered += b" ANONYMOUS"
    return offered


def login(users, mechanism, tls, loopback, anonymous=None):
    """(the user, None if it may log in, else the reason, for the log). anonymous: the user
    ANONYMOUS logs in as where the config names none (MQTT's: guest, as RabbitMQ 4's default)."""
    if mechanism == b"ANONYMOUS":
        user = getattr(users, "anonymous", None) or anonymous
    else:
        user = tls["login"]
    if user is None:
        return "?", NO_CERTIFICATE
    if user not in users.hashes:
        return user, no_such_user(user)
    if user in users.loopback_users and not loopback:
        return user, not_from_afar(user)
    return user, None
