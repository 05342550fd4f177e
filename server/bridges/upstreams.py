"""The protocols a bridge speaks upstream: the one place that tells them apart, a column each
(typed by column, as a board's type check reads them), keyed by the protocol's name, and each
protocol's own config checks below them.

    SCHEMES     its URI schemes, plain and over TLS
    PORTS       the default ports, plain and over TLS
    SPOKEN      how a config error names it
    SETTING     what `protocol = "..."` may name: amqp:// and amqps:// URIs speak the first,
                or the one it names (AMQP 1.0 answers on RabbitMQ's AMQP port)
    KEYS        the [[bridge]] keys that only its links take (another protocol's bridge that
                sets one is refused, naming the protocol it is for)
    DOWN        the protocols a down bridge may speak
    SUBSCRIBES  those whose down bridge subscribes to topic filters (topic = "..."), not a queue
    PROBED      those whose earlier URIs prefer_first can probe (server/bridges/probe.py)
    CREDIT      those whose links forward no more than the client's room(): AMQP 1.0's link
                credit, MQTT's window of unacknowledged publishes (0-9-1's is the machine's
                prefetch)
    SET_UP      those whose links take the machine's set-up steps (codec/upstream.py:
                declares, prefetch, consume, confirm); the others' clients attach or
                subscribe by themselves once connected
    DRIVERS     the module of server/bridges/ that connects a link of it and probes an earlier
                URI (prefer_first): connect(bridge, uri, frame_max, now), probing(bridge, uri)
    FIRMWARE    the firmware feature whose bundles hold its client (firmware/build.py
                FEATURES: `hutch flash` picks it for a board's config that bridges over it);
                the others' are in every broker bundle
    CHECKS      its config checks (below): check(table, uris, direction, where, setting), the
                settings its driver reads, or ConfigError

server/bridges/config.py checks every bridge with these, copies credit and set_up into each
bridge's settings and the driver's module into each of its URIs', so the machine and the driver
read a flag or a name rather than compare a protocol's (server/bridges/driver.py
protocol_driver, probe.py). Adding a protocol is a row here (and its checks), its driver and
its client's folder. Loaded only to check a config: a board forgets it with the config's checks
(server/serve.py), where a module kept for the run would hold the table and its texts in its
heap.
"""

from ..schema import ConfigError

SCHEMES = {"0-9-1": ("amqp", "amqps"), "1.0": ("amqp10", "amqps10"), "mqtt": ("mqtt", "mqtts")}
PORTS = {"0-9-1": (5672, 5671), "1.0": (5672, 5671), "mqtt": (1883, 8883)}
SPOKEN = {
    "0-9-1": "AMQP 0-9-1 (amqp:// or amqps://)",
    "1.0": 'AMQP 1.0 (amqp10:// or amqps10://, or protocol = "1.0")',
    "mqtt": "MQTT (mqtt:// or mqtts://)",
}
SETTING = ("0-9-1", "1.0")
KEYS = {
    "0-9-1": ("declare",),
    "1.0": ("address", "device_id", "sas_key", "token_lifetime", "cbs"),
    "mqtt": ("topic", "client_id", "mqtt_version", "session_expiry"),
}
DOWN = ("0-9-1", "mqtt")
SUBSCRIBES = ("mqtt",)
PROBED = ("0-9-1", "mqtt")
CREDIT = ("1.0", "mqtt")
SET_UP = ("0-9-1",)
DRIVERS = {"0-9-1": "amqp091", "1.0": "amqp10", "mqtt": "mqtt"}
FIRMWARE = {"mqtt": "mqtt"}


def scheme(name):
    """(the protocol of a URI scheme, or None where protocol = "..." decides: amqp://, amqps://;
    whether it is over TLS), or None for a scheme no protocol has."""
    for protocol, schemes in SCHEMES.items():
        if name in schemes:
            return (None if protocol == SETTING[0] else protocol), name == schemes[1]
    return None


def amqp091(table, uris, direction, where, setting):
    """AMQP 0-9-1: its URIs log in with a user (RabbitMQ's PLAIN or EXTERNAL); what it declares
    upstream is server/bridges/config.py's (declare, a table of its own)."""
    for uri in uris:
        if uri["auth_mechanism"] == "ANONYMOUS":
            raise ConfigError("%s: auth_mechanism=anonymous in '%s' is AMQP 1.0's only" % (where, uri["uri"]))
    return {}


IOT_HUB_TARGET = "/devices/%s/messages/events"


def amqp10(table, uris, direction, where, setting):
    """AMQP 1.0 (up only): the target `address`; for Azure IoT Hub, the device, its key and the
    lifetime of the SAS tokens made from it, and whether they go on $cbs."""
    for uri in uris:
        if uri["vhost"] != "/":
            raise ConfigError(
                "%s: '%s' names a vhost: an AMQP 1.0 link has none (its host is the open's hostname)"
                % (where, uri["uri"])
            )
    address = setting("address")
    if address is not None and (table.get("exchange") is not None or table.get("routing_key") is not None):
        raise ConfigError("%s: address or exchange/routing_key, not both (address is the whole target)" % where)
    if address == "":
        raise ConfigError('%s: address must name a target ("/queues/NAME", "/exchange/X/KEY", ...)' % where)
    device = setting("device_id")
    key = setting("sas_key")
    if (device is None) != (key is None) or device == "":
        raise ConfigError("%s: device_id and sas_key go together (an IoT Hub device and its key)" % where)
    if key is not None:
        import binascii  # (a bridge with a sas_key)

        try:
            if not binascii.a2b_base64(key):
                raise ValueError
        except ValueError:
            raise ConfigError("%s: sas_key must be the device's key in base64, as Azure shows it" % where)
        for uri in uris:
            if not uri["tls"]:
                raise ConfigError("%s: '%s': a SAS token goes over TLS only (amqps10://)" % (where, uri["uri"]))
            if uri["login"]:
                raise ConfigError(
                    "%s: '%s' names a user: with device_id and sas_key the bridge makes its own" % (where, uri["uri"])
                )
        if address is None:
            address = IOT_HUB_TARGET % device
    for name in ("token_lifetime", "cbs"):
        if name in table and key is None:
            raise ConfigError("%s: %s needs sas_key (the key its tokens are made from)" % (where, name))
    return {
        "address": address,
        "device_id": device,
        "sas_key": key,
        "token_lifetime": setting("token_lifetime"),
        "cbs": setting("cbs"),
    }


MQTT_VERSIONS = {"3.1.1": "3.1.1", "5": "5", "5.0": "5"}


def mqtt(table, uris, direction, where, setting):
    """MQTT: up, the `topic` template each message goes to ("{routing_key}", the message's routing
    key with `.` as `/`; "{exchange}", "{client_id}"); down, the topic filter (or filters) it
    subscribes to; the client id (default: the node's name and the bridge's), the protocol
    version and a version 5 session's expiry (seconds)."""
    for uri in uris:
        if uri["vhost"] != "/" or uri["auth_mechanism"] != "PLAIN" or uri["frame_max"]:
            raise ConfigError(
                "%s: '%s': an MQTT URI names no vhost, auth_mechanism or frame_max (the options are heartbeat, "
                "its keep-alive in seconds, and connection_timeout)" % (where, uri["uri"])
            )
    topic, filters = table.get("topic"), None
    if direction == "down":
        filters = [topic] if isinstance(topic, str) else topic
        if not isinstance(filters, list) or not filters or not all(isinstance(f, str) and f for f in filters):
            raise ConfigError('%s: a down bridge from MQTT needs topic = "..." (the filter it subscribes to)' % where)
        topic = None
    else:
        if topic is not None and (not isinstance(topic, str) or not topic):
            raise ConfigError('%s: topic must be a template such as "dt/gateway-7/{routing_key}"' % where)
        if topic is not None and ("+" in topic or "#" in topic):
            raise ConfigError("%s: topic '%s' holds a wildcard: a message goes to one topic" % (where, topic))
        topic = topic or "{routing_key}"
    version = table["mqtt_version"] if "mqtt_version" in table else setting("mqtt_version")
    if version not in MQTT_VERSIONS:
        raise ConfigError('%s: mqtt_version must be "3.1.1" or "5", not %r' % (where, version))
    if "session_expiry" in table and MQTT_VERSIONS[version] != "5":
        raise ConfigError(
            '%s: session_expiry is MQTT 5\'s (mqtt_version = "5"): 3.1.1 keeps a session until it is cleaned' % where
        )
    return {
        "topic": topic,
        "filters": filters,
        "client_id": setting("client_id"),
        "mqtt_version": MQTT_VERSIONS[version],
        "session_expiry": setting("session_expiry"),
    }


CHECKS = {"0-9-1": amqp091, "1.0": amqp10, "mqtt": mqtt}
