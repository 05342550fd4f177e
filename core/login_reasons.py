"""Why a login was refused, for the broker's log: the client is told only 403, as by RabbitMQ,
whose log's words each line starts with, and goes on to say which of the reasons it was.
Loaded with the first refused login (core/auth.py, core/passwordless.py): a board whose
clients log in holds none of it."""


def no_such_user(user):
    if user == "guest":  # it exists unless a [users] table (or a definitions file) leaves it out
        return (
            "user 'guest' - invalid credentials: no such user "
            "(a config with a [users] table has only the users it lists)"
        )
    return "user '%s' - invalid credentials: no such user" % user


def not_from_afar(user):
    return "user '%s' can only connect via localhost ([auth] loopback_users)" % user
