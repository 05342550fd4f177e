"""The listener protocols: the one table of them, a row each, which option checking
(server/options.py), start-up (server/startup.py), the connection factory of each listener
(server/frontends.py FrontEnds) and `hutch flash` (the features a board's bundle needs) read.
A new listener protocol is a folder (its front end: new_connection(broker, peer), and
serving.py's serve(broker, settings) if it has settings of its own) and a row here. Needed only
to start: a board forgets it then (server/serve.py).
"""

# The listener protocols, keyed by what a [[listener]]'s `protocol` says (as RabbitMQ names its
# listeners: "amqp" is AMQP on TCP); each row:
#   TITLE      what its listener says it serves
#   PORTS      its default ports, plain and over TLS (RabbitMQ's)
#   WEBSOCKET  its default ports over WebSocket, plain and over TLS; None: not served so
#   PACKAGE    the package of its front end, whose new_connection(broker, peer) makes its
#              clients' connections (imported when a listener serves it); None: 0-9-1's, which
#              takes every header its claimers do not: its handshake answers a header it does
#              not speak with its own and hangs up, as RabbitMQ does (amqp091/handshake.py)
#   CLAIMS     the package of a front end that claims its HEADERS on this listener where the
#              runtime serves it (AMQP 1.0: runtime.amqp10, from the settings; a board that
#              does not keeps nothing of it in its heap); None: none
#   SECTION    the config section of its settings (server/schema.py's rows), checked where a
#              listener serves it and handed to PACKAGE's serving.serve(broker, settings)
#              before any client comes; None: it has none
#   FEATURE    the firmware feature whose bundles hold its front end (firmware/build.py
#              FEATURES; `hutch flash` picks it for a config that serves it); None: all do
# (An MQTT listener's clients are MQTT's, whose CONNECT comes without a header to sniff.)
LISTENERS = {
    "amqp": ("AMQP 0-9-1", (5672, 5671), None, None, "amqp10", None, None),
    "mqtt": ("MQTT", (1883, 8883), (8083, 8084), "mqtt", None, "mqtt", "mqtt"),
}
TITLE, PORTS, WEBSOCKET, PACKAGE, CLAIMS, SECTION, FEATURE = range(7)
ROOT = __name__[: -len("server.listeners")]  # ("hutch.": the front ends' packages are its)


def front_end(package, name):
    """What a front end's package (a row's PACKAGE, CLAIMS: "mqtt"; or a module of it,
    "mqtt.serving") names `name`, the package imported now."""
    return getattr(__import__(ROOT + package, None, None, (name,)), name)
