"""The `hutch ctl` commands that ask the running broker, over its control socket in the data
folder (ports/control_request.py, answered by server/control.py):

    hutch ctl list KIND [COLUMN ...] [--json]   queues, exchanges, bindings, connections,
                                                channels, consumers, streams, bridges, users,
                                                permissions, user_permissions USER,
                                                topic_permissions
    hutch ctl purge QUEUE | delete queue|exchange NAME | close-connection NAME REASON
    hutch ctl add-user NAME PASSWORD [--tags T,...] | set-permissions NAME CONF WRITE READ
    hutch ctl clear-permissions NAME | change-password NAME PASSWORD | delete-user NAME
    hutch ctl reload                            the config file read again (as SIGHUP)
    hutch ctl ping | check-running | check-port-connectivity   (rabbitmq-diagnostics' checks)
    hutch ctl export [FILE] [--data DIR]   the broker's definitions, RabbitMQ's JSON
    hutch ctl import FILE [--data DIR]     load definitions (RabbitMQ's JSON) into it

Each takes --data DIR (default ./hutch-data). Column names are rabbitmqctl's. A command that
cannot be done says why in one line and exits 1; a health check exits 0 when healthy.

`export` writes what `rabbitmqctl import_definitions` loads; `import` takes what `rabbitmqctl
export_definitions` writes. What hutch has no counterpart for (other virtual hosts, policies,
quorum queues, ...) and users the config file defines are named, one line each, and the exit
status is 3: the import was partial. No broker running on the folder: one line, exit 1.
"""

import json
import os
import sys

from ..ports.control_request import request

PARTIAL = 3  # the exit status of an import that left something out


def add_options(commands, data_option):
    listed = commands.add_parser(
        "list", help="queues, exchanges, bindings, ... of the running broker (rabbitmqctl's columns)"
    )
    listed.add_argument(
        "kind",
        help="queues, exchanges, bindings, connections, channels, consumers, streams, bridges, users, "
        "permissions, user_permissions USER, topic_permissions",
    )
    listed.add_argument("columns", nargs="*", help="the columns to show (default: rabbitmqctl's)")
    listed.add_argument("--json", action="store_true", help="print one JSON object per row, in a list")
    data_option(listed)
    listed.set_defaults(run=list_command)
    for name, help_text, arguments, make in (
        ("purge", "drop the ready messages of a queue", ("queue",), lambda a: {"name": a.queue}),
        ("delete", "delete a queue or an exchange", ("kind", "name"), lambda a: {"kind": a.kind, "name": a.name}),
        (
            "close-connection",
            "close a client's connection (320 CONNECTION_FORCED with the reason)",
            ("connection", "reason"),
            lambda a: {"name": a.connection, "reason": a.reason},
        ),
        ("add-user", "add a user (kept in DATA/users.json)", ("user", "password"), None),
        (
            "set-permissions",
            "set a user's configure, write and read patterns on /",
            ("user", "configure", "write", "read"),
            lambda a: {"name": a.user, "configure": a.configure, "write": a.write, "read": a.read},
        ),
        (
            "clear-permissions",
            "take a user's permissions on / away (its connections are refused every operation)",
            ("user",),
            lambda a: {"name": a.user},
        ),
        (
            "change-password",
            "change a user's password (its connections stay open)",
            ("user", "password"),
            lambda a: {"name": a.user, "password": a.password},
        ),
        (
            "delete-user",
            "delete a user added with hutch ctl (its connections are closed)",
            ("user",),
            lambda a: {"name": a.user},
        ),
    ):
        command = commands.add_parser(name, help=help_text)
        for argument in arguments:
            command.add_argument(argument)
        if name == "add-user":
            command.add_argument("--tags", default="", help="comma-separated tags (monitoring, administrator, ...)")
            make = lambda a: {"name": a.user, "password": a.password, "tags": [t for t in a.tags.split(",") if t]}  # noqa: E731
        data_option(command)
        command.set_defaults(run=change_command, control=name, make=make)
    for name, help_text in (
        ("ping", "whether the broker answers (exit 0) or not"),
        ("check-running", "whether the broker runs and serves (exit 0) or not"),
        ("check-port-connectivity", "whether every listener accepts a TCP connection (exit 0) or not"),
    ):
        command = commands.add_parser(name, help=help_text)
        data_option(command)
        command.set_defaults(run=check_command, check=name)
    export = commands.add_parser(
        "export", help="the running broker's users, permissions, exchanges, queues and bindings (RabbitMQ's JSON)"
    )
    export.add_argument("file", nargs="?", help="write them to FILE (default: standard output)")
    data_option(export)
    export.set_defaults(run=export_command)
    reload = commands.add_parser(
        "reload", help="read the config file again: bridges, users and permissions, TLS files (as SIGHUP does)"
    )
    data_option(reload)
    reload.set_defaults(run=reload_command)
    load = commands.add_parser("import", help="load a definitions file (RabbitMQ's JSON) into the running broker")
    load.add_argument("file", help="the definitions file, as rabbitmqctl export_definitions writes it ('-': stdin)")
    data_option(load)
    load.set_defaults(run=import_command)


def ask(data, command, **arguments):
    """The running broker's answer, or None after one line on stderr (no broker answers)."""
    try:
        answer = request(data, command, **arguments)
    except OSError as e:
        why = "no broker runs there" if isinstance(e, (FileNotFoundError, ConnectionRefusedError)) else e
        if isinstance(e, PermissionError):
            why = "its control socket %s" % not_yours(data)
        print("hutch ctl %s: no answer from a broker on data folder %s (%s)" % (command, data, why), file=sys.stderr)
        return None
    if "error" in answer:
        print("hutch ctl %s: %s" % (command, answer["error"]), file=sys.stderr)
        return None
    return answer


def not_yours(data):
    """Why a data folder cannot be read: whose it is, and how to read it (the service's folder
    is its user's alone, as /var/lib/rabbitmq is rabbitmq's)."""
    try:
        import pwd

        owner = pwd.getpwuid(os.stat(data).st_uid).pw_name
    except (ImportError, KeyError, OSError):
        owner = "another user"
    return "it is %s's: run hutch ctl as that user, or with sudo" % owner


def export_command(args):
    answer = ask(args.data, "export")
    if answer is None:
        return 1
    text = json.dumps(answer["definitions"], indent=2) + "\n"
    if args.file is None:
        sys.stdout.write(text)
        return 0
    try:
        with open(args.file, "w") as f:
            f.write(text)
    except OSError as e:
        print("hutch ctl export: cannot write %s: %s" % (args.file, e.strerror or e), file=sys.stderr)
        return 1
    return 0


def import_command(args):
    try:
        if args.file == "-":
            definitions = json.load(sys.stdin)
        else:
            with open(args.file) as f:
                definitions = json.load(f)
    except OSError as e:
        print("hutch ctl import: cannot read %s: %s" % (args.file, e.strerror or e), file=sys.stderr)
        return 2
    except (ValueError, RecursionError) as e:  # (RecursionError: nested past the recursion limit)
        print("hutch ctl import: %s is not JSON: %s" % (args.file, e), file=sys.stderr)
        return 2
    answer = ask(args.data, "import", definitions=definitions)
    if answer is None:
        return 1
    counts = answer["imported"]
    print(
        "imported %d users, %d exchanges, %d queues, %d bindings"
        % (counts["users"], counts["exchanges"], counts["queues"], counts["bindings"])
    )
    for line in answer["left_out"]:
        print("left out: %s" % line)
    for line in answer["errors"]:
        print("not done: %s" % line)
    return PARTIAL if answer["left_out"] or answer["errors"] else 0


def list_command(args):
    columns, user = list(args.columns), None
    if args.kind == "user_permissions":  # rabbitmqctl list_user_permissions USER
        if not columns:
            print(
                "hutch ctl list: user_permissions needs the user: hutch ctl list user_permissions USER", file=sys.stderr
            )
            return 1
        user = columns.pop(0)
    answer = ask(args.data, "list", kind=args.kind, columns=columns, user=user)
    if answer is None:
        return 1
    columns, rows = answer["columns"], answer["rows"]
    if args.json:
        print(json.dumps([dict(zip(columns, row)) for row in rows], indent=1))
        return 0
    cells = [columns] + [[_cell(value) for value in row] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    for line in cells:
        print("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)).rstrip())
    return 0


def _cell(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return "" if value is None else str(value)


def change_command(args):
    answer = ask(args.data, args.control, **args.make(args))
    if answer is None:
        return 1
    done = {
        "purge": lambda: "purged %d messages from queue '%s'" % (answer["purged"], args.queue),
        "delete": lambda: "deleted %s '%s'" % (args.kind, args.name),
        "close-connection": lambda: "closed connection %s" % args.connection,
        "add-user": lambda: "added user '%s'" % args.user,
        "set-permissions": lambda: "set permissions of user '%s'" % args.user,
        "clear-permissions": lambda: "cleared permissions of user '%s'" % args.user,
        "change-password": lambda: "changed the password of user '%s'" % args.user,
        "delete-user": lambda: "deleted user '%s'%s" % (args.user, _connections_closed(answer.get("closed", 0))),
    }
    print(done[args.control]())
    return 0


def _connections_closed(count):
    return "; closed its %d connection%s" % (count, "s" * (count != 1)) if count else ""


def reload_command(args):
    """`hutch ctl reload`: what changed, one line each; a config that does not load: one line
    saying why (the running one is kept), exit 1."""
    answer = ask(args.data, "reload")
    if answer is None:
        return 1
    for line in answer["reloaded"]:
        print(line)
    return 0


def check_command(args):
    """rabbitmq-diagnostics' checks: one line, exit 0 when healthy, 1 when not."""
    answer = ask(args.data, "ping")
    if answer is None:
        return 1
    if args.check == "ping":
        print("ping succeeded: pid %d" % answer["pid"])
        return 0
    if args.check == "check-running":
        print("the broker runs (pid %d) with %d listeners" % (answer["pid"], len(answer["listeners"])))
        return 0 if answer["listeners"] else 1
    import socket

    failed = []
    for host, port in answer["listeners"]:
        address = "127.0.0.1" if host in ("0.0.0.0", "") else ("::1" if host == "::" else host)
        try:
            socket.create_connection((address, port), timeout=5).close()
        except OSError as e:
            failed.append("%s:%d (%s)" % (host, port, e.strerror or e))
    if failed:
        print("hutch ctl check-port-connectivity: no connection to %s" % ", ".join(failed), file=sys.stderr)
        return 1
    print("every listener accepts connections: %s" % ", ".join("%s:%d" % (h, p) for h, p in answer["listeners"]))
    return 0
