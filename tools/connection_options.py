"""The options `hutch publish` and `hutch get` connect with, as rabbitmqadmin and mosquitto_pub
take them (TLS with `hutch serve`'s file options), and the sensor client (hutch.client) they
make of them.

    add_options(parser)
    return with_client(args, "hutch publish", work)   # work(client) -> exit code, or 1 for a
                                                      # failed connection or a broker's refusal
"""

import sys


def add_options(parser):
    parser.add_argument("--host", default="127.0.0.1", help="the broker's address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None, help="its port (default 5672; 5671 with --tls)")
    parser.add_argument("--user", default="guest", help="the user to log in as (default guest)")
    parser.add_argument("--password", default="guest", help="its password (default guest)")
    parser.add_argument("--vhost", default="/", help="the virtual host (default /)")
    parser.add_argument("--tls", action="store_true", help="AMQP over TLS (amqps), the broker's certificate checked")
    parser.add_argument("--cacertfile", metavar="FILE", help="with --tls: the CA of the broker's certificate")
    parser.add_argument("--certfile", metavar="FILE", help="with --tls: this client's certificate (PEM)")
    parser.add_argument("--keyfile", metavar="FILE", help="with --tls: its private key (PEM)")
    parser.add_argument(
        "--external", action="store_true", help="with --tls and --certfile: log in as the user the certificate names"
    )


def connect(args, command):
    """A connected hutch.client Client, or None after one line on stderr naming what failed."""
    from ..client import AMQPError, Client

    if (args.certfile or args.cacertfile or args.external) and not args.tls:
        print("%s: --cacertfile, --certfile and --external are options of --tls" % command, file=sys.stderr)
        return None
    if args.external and not args.certfile:
        print("%s: --external logs in by a certificate: give --certfile and --keyfile" % command, file=sys.stderr)
        return None
    tls = None
    if args.tls:
        from ..client.tls import context

        try:
            tls = context(args.cacertfile, args.certfile, args.keyfile)
        except (OSError, ValueError) as e:
            print("%s: cannot load the TLS files: %s" % (command, e), file=sys.stderr)
            return None
    port = args.port if args.port is not None else (5671 if args.tls else 5672)
    client = Client(
        args.host,
        port,
        user=args.user,
        password=args.password,
        vhost=args.vhost,
        heartbeat=0,
        name=command,
        ssl=tls,
        mechanism="EXTERNAL" if args.external else "PLAIN",
    )
    try:
        client.connect()
    except AMQPError as e:
        print("%s: %s" % (command, e.text), file=sys.stderr)
        return None
    except OSError as e:
        why = getattr(e, "strerror", None) or e
        print("%s: cannot connect to %s:%d: %s" % (command, args.host, port, why), file=sys.stderr)
        return None
    return client


def with_client(args, command, work):
    """work(client) on a connected client, closed after: its exit code, or 1 after one line on
    stderr if the connection fails or the broker refuses something (its reply, as it words it)."""
    from ..client import AMQPError

    client = connect(args, command)
    if client is None:
        return 1
    try:
        return work(client)
    except AMQPError as e:
        print("%s: %s" % (command, e.text), file=sys.stderr)
        return 1
    except OSError as e:
        print("%s: the connection failed: %s" % (command, getattr(e, "strerror", None) or e), file=sys.stderr)
        return 1
    finally:
        client.close()
