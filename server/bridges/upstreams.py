"""The protocols a bridge speaks upstream: the one place that tells them apart, a column each
(typed by column, as a board's type check reads them), keyed by the protocol's name.

    SCHEMES  its URI schemes, plain and over TLS (amqp:// and amqps:// speak AMQP 1.0 too, with
             protocol = "1.0": server/bridges/config.py)
    PORTS    the default ports, plain and over TLS
    SPOKEN   how a config error names it
    CREDIT   the protocols whose links forward no more than the client's room(): AMQP 1.0's
             link credit, MQTT's window of unacknowledged publishes (0-9-1's is the machine's
             prefetch)
    SET_UP   the protocols whose links take the machine's set-up steps (codec/upstream.py:
             declares, prefetch, consume, confirm); the others' clients attach or subscribe by
             themselves once connected
    DRIVERS  the module of server/bridges/ that connects a link of it and probes an earlier
             URI (prefer_first): connect(bridge, uri, frame_max, now) and probing(bridge, uri)

server/bridges/config.py checks URIs with these and copies credit and set_up into each bridge's
settings and the driver's module into each of its URIs', so the machine and the driver read a flag or a name
rather than compare a protocol's (server/bridges/driver.py start_protocol, probe.py). Loaded only to check a config: a board forgets
it with the config's checks (server/serve.py), where a module kept for the run would hold the
table and its texts in its heap.
"""

SCHEMES = {"0-9-1": ("amqp", "amqps"), "1.0": ("amqp10", "amqps10"), "mqtt": ("mqtt", "mqtts")}
PORTS = {"0-9-1": (5672, 5671), "1.0": (5672, 5671), "mqtt": (1883, 8883)}
SPOKEN = {
    "0-9-1": "AMQP 0-9-1 (amqp:// or amqps://)",
    "1.0": "AMQP 1.0 (amqp10:// or amqps10://)",
    "mqtt": "MQTT (mqtt:// or mqtts://)",
}
CREDIT = ("1.0", "mqtt")
SET_UP = ("0-9-1",)
DRIVERS = {"0-9-1": "amqp091", "1.0": "amqp10", "mqtt": "mqtt"}


def scheme(name):
    """(the protocol of a URI scheme, or None where protocol = "..." decides: amqp://, amqps://;
    whether it is over TLS), or None for a scheme no protocol has."""
    for protocol, schemes in SCHEMES.items():
        if name in schemes:
            return (None if protocol == "0-9-1" else protocol), name == schemes[1]
    return None
