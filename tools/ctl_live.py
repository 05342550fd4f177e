"""The `hutch ctl` commands that ask the running broker, over its control socket in the data
folder (ports/control_socket.py, answered by server/control.py):

    hutch ctl export [FILE] [--data DIR]   the broker's definitions, RabbitMQ's JSON
    hutch ctl import FILE [--data DIR]     load definitions (RabbitMQ's JSON) into it

`export` writes what `rabbitmqctl import_definitions` loads; `import` takes what `rabbitmqctl
export_definitions` writes. What hutch has no counterpart for (other virtual hosts, policies,
quorum queues, ...) and users the config file defines are named, one line each, and the exit
status is 3: the import was partial. No broker running on the folder: one line, exit 1.
"""

import json
import sys

from ..ports.control_socket import request

PARTIAL = 3  # the exit status of an import that left something out


def add_options(commands, data_option):
    export = commands.add_parser(
        "export", help="the running broker's users, permissions, exchanges, queues and bindings (RabbitMQ's JSON)"
    )
    export.add_argument("file", nargs="?", help="write them to FILE (default: standard output)")
    data_option(export)
    export.set_defaults(run=export_command)
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
        print("hutch ctl %s: no answer from a broker on data folder %s (%s)" % (command, data, why), file=sys.stderr)
        return None
    if "error" in answer:
        print("hutch ctl %s: %s" % (command, answer["error"]), file=sys.stderr)
        return None
    return answer


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
    except ValueError as e:
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
