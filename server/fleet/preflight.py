"""A document's upstreams tried before it is applied (Greengrass's pre-flight): each bridge it
adds or changes, on each of its URIs, with a second connection that goes as far as the link's
set-up would, then closes. Over AMQP 0-9-1: the handshake and login, channel.open,
confirm.select, and a passive declare of what an up bridge sends to (its exchange, or the
queue its routing key names) or of the queue a down bridge takes from. Over AMQP 1.0 and MQTT:
the TCP connection (and TLS handshake). A URI that fails refuses the document: PreflightError,
naming the bridge, the URI and why.
"""

import asyncio
import socket

from ...client.protocol import AMQPError
from .upstream import connect


class PreflightError(Exception):
    pass


async def preflight(runtime, opts):
    running = {bridge.machine.name: bridge.machine.settings for bridge in runtime.bridges}
    changed = [settings for settings in opts["bridges"] if running.get(settings["name"]) != settings]
    for settings in changed:
        for uri in settings["uris"]:
            await asyncio.to_thread(_try, settings, uri)


def _try(settings, uri):
    where = "bridge %s: %s" % (settings["name"], uri["uri"])
    timeout = (uri["connection_timeout"] or 10000) / 1000
    try:
        if not settings["set_up"]:  # (a link that takes no set-up steps: AMQP 1.0's, MQTT's)
            _reach(settings, uri, timeout)
            return
        client = connect(uri, "hutch fleet preflight", settings["tls"], int(timeout * 1000))
        try:
            client.confirm()
            exchange, key = settings["exchange"], settings["routing_key"]
            if settings["direction"] == "down" and settings["queue"]:
                client.declare_queue(settings["queue"], passive=True)
            elif exchange:
                client.declare_exchange(exchange, "topic", passive=True)
            elif exchange == "" and key:
                client.declare_queue(key, passive=True)
        finally:
            client.close()
    except AMQPError as e:
        raise PreflightError("%s: %s %s" % (where, e.code, e.text))
    except (OSError, ValueError) as e:
        raise PreflightError("%s: %s" % (where, getattr(e, "strerror", None) or e or e.__class__.__name__))


def _reach(settings, uri, timeout):
    """The TCP connection (and TLS handshake) of a link over 1.0 or MQTT."""
    sock = socket.create_connection((uri["host"], uri["port"]), timeout)
    try:
        if uri["tls"]:
            from ...ports.tls import client_context

            tls = settings["tls"]
            context = client_context(tls["ca_file"], tls["cert_file"], tls["key_file"], tls["verify"])
            sock = context.wrap_socket(sock, server_hostname=uri["host"])
    finally:
        sock.close()
