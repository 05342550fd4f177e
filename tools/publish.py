"""`hutch publish`: one message to the broker, for a quick test (as `mosquitto_pub` and
`rabbitmqadmin publish`).

    hutch publish --routing-key readings '{"t": 21.5}'
    hutch publish --exchange amq.topic --routing-key site.7.temperature --persistent 21.5
    echo 21.5 | hutch publish --routing-key readings -

The message is published in confirm mode and mandatory: the command ends once the broker
confirmed it (exit 0), and a message that no queue takes, or that the broker refuses, is an
error naming why (exit 1), never a silent loss. The connection options are tools/
connection_options.py's (--host, --port, --user, --password, --tls ...).
"""

import sys

from . import connection_options


def add_options(parser):
    parser.add_argument("body", help="the message's body ('-': standard input)")
    parser.add_argument("--routing-key", required=True, metavar="KEY", help='the routing key (for "": the queue)')
    parser.add_argument("--exchange", default="", help='the exchange (default "", which routes to the queue KEY)')
    parser.add_argument("--persistent", action="store_true", help="delivery_mode 2: kept on disk by a durable queue")
    parser.add_argument("--content-type", default=None, help="the content_type property")
    parser.add_argument(
        "--header", action="append", default=[], metavar="NAME=VALUE", help="a header (repeat for more)"
    )
    connection_options.add_options(parser)


def run(args):
    from ..client import Returned

    properties = {}
    for header in args.header:
        name, equals, value = header.partition("=")
        if not equals or not name:
            print("hutch publish: --header %r is not NAME=VALUE" % header, file=sys.stderr)
            return 2
        properties.setdefault("headers", {})[name] = value
    if args.persistent:
        properties["delivery_mode"] = 2
    if args.content_type:
        properties["content_type"] = args.content_type
    body = sys.stdin.buffer.read() if args.body == "-" else args.body.encode()
    where = "exchange '%s' with routing key '%s'" % (args.exchange, args.routing_key)

    def publish(client):
        client.confirm()
        client.publish(args.exchange, args.routing_key, body, properties or None)
        try:
            confirmed = client.wait_confirms(10000)
        except Returned as e:
            print("hutch publish: no queue took the message to %s: %d %s" % (where, e.code, e.text), file=sys.stderr)
            return 1
        if not confirmed:
            print("hutch publish: the broker did not confirm the message to %s (nack, or no answer)" % where,
                  file=sys.stderr)  # fmt: skip
            return 1
        print("published %d bytes to %s: confirmed" % (len(body), where))
        return 0

    return connection_options.with_client(args, "hutch publish", publish)
