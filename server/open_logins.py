"""What a change of users does to the connections already open, as RabbitMQ 3.10 does it
(measured against the RabbitMQ `make test` installs):

- a deleted user's connections are closed: 320 CONNECTION_FORCED "user 'alice' is deleted"
  (AMQP 1.0: amqp:connection:forced; MQTT 5: a DISCONNECT with that reason string);
- changed permissions apply to the next operation of every connection the user has open;
- a user left without permissions on "/" keeps its connections, and each operation is refused
  (403 ACCESS_REFUSED), as after `rabbitmqctl clear_permissions`.

Called after `hutch ctl add-user`, `set-permissions`, `delete-user` and `import`
(server/control.py), and after a reload (server/reload.py). CPython only, as they are.
"""

from ..codec.wire import text


def apply_users(broker):
    """Give every open connection its user's permissions as broker.users has them now, and close
    those whose user is gone. Returns how many connections were closed."""
    users = broker.users
    closed = 0
    nothing = None  # (made once, for every connection left without permissions)
    for conn in list(broker.connections):
        login = conn.client
        if login is None or conn.closed:  # (not logged in yet: its login reads broker.users)
            continue
        name = text(login.user)
        if name not in users.hashes:
            conn.close("user '%s' is deleted" % name)
            closed += 1
            continue
        allowed, granted = users.access(name)
        if not allowed and nothing is None:
            from ..core.access import Permissions

            nothing = Permissions("", "", "")  # allows no name: "" is RabbitMQ's "^$"
        login.permissions = granted if allowed else nothing
    return closed
