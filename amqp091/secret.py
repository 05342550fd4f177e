"""connection.update-secret: a client refreshing its secret (an expiring token's) on an open
connection, checked as its login was (core/auth.py).

Loaded with the first one (amqp091/handshake.py): a board whose clients never refresh a secret
does not hold it.
"""

from ..codec import spec
from ..codec.errors import NOT_ALLOWED, Refused
from ..codec.wire import text


def update_secret(conn, new_secret, reason):
    """connection.update-secret (a client refreshing its token): the new secret goes through
    the login's check, for the user who logged in. Refused, the connection closes with
    RabbitMQ's 530 and words (its reply when an auth backend refuses the new secret)."""
    broker = conn.broker
    user = text(conn.client.user)
    try:
        refused = broker.users.check(user, bytes(new_secret).decode(), conn.loopback)
    except UnicodeError:
        refused = "user '%s' - the new secret is not UTF-8" % user
    if refused is not None:
        broker.log("warning", "%s: secret update refused: %s" % (conn.name, refused))
        raise Refused(NOT_ALLOWED, "New secret was refused by one of the backends", spec.CONNECTION_UPDATE_SECRET)
    conn.send_method(0, spec.CONNECTION_UPDATE_SECRET_OK)
    broker.log("info", "%s: user '%s' updated secret, reason: %s" % (conn.name, user, text(reason)))
