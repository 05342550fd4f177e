"""`hutch get`: messages from a queue, for a quick test (as `rabbitmqadmin get`).

    hutch get readings                 the first message, left in the queue
    hutch get readings --count 10 --ack    up to ten, taken off it
    hutch get readings --json          with their routing key, exchange and properties

As rabbitmqadmin's default, the messages are put back (requeued, marked redelivered) unless
--ack takes them. Each body is printed on a line (as text when it is UTF-8, else as Python's
bytes literal); an empty queue says so (exit 0); a queue that does not exist is an error
(exit 1). The connection options are tools/connection_options.py's.
"""

import json
import sys

from . import connection_options


def add_options(parser):
    parser.add_argument("queue", help="the queue to read")
    parser.add_argument("--count", type=int, default=1, help="at most this many messages (default 1)")
    parser.add_argument("--ack", action="store_true", help="take them off the queue (default: put them back)")
    parser.add_argument("--json", action="store_true", help="one JSON object per message, in a list")
    connection_options.add_options(parser)


def run(args):
    if args.count < 1:
        print("hutch get: --count must be at least 1, not %d" % args.count, file=sys.stderr)
        return 2
    return connection_options.with_client(args, "hutch get", lambda client: _get(client, args))


def _get(client, args):
    got = []
    while len(got) < args.count:
        message = client.get(args.queue)
        if message is None:
            break
        got.append(message)
    if got and args.ack:
        client.ack(got[-1].delivery_tag, multiple=True)
    elif got:
        client.nack(got[-1].delivery_tag, requeue=True, multiple=True)
    if args.json:
        print(json.dumps([_as_json(m) for m in got], indent=1))
    elif not got:
        print("(queue '%s' is empty)" % args.queue)
    for m in got if not args.json else ():
        print(_text(m.body))
    return 0


def _text(body):
    try:
        return bytes(body).decode()
    except UnicodeError:
        return repr(bytes(body))


def _as_json(m):
    properties = {k: v for k, v in m.properties.items() if isinstance(v, (str, int, float, bool, dict, list))}
    return {
        "body": _text(m.body),
        "exchange": m.exchange,
        "routing_key": m.routing_key,
        "redelivered": m.redelivered,
        "properties": json.loads(json.dumps(properties, default=str)),
    }
