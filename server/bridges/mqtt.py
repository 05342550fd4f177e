"""What a bridge over MQTT adds to its driver (server/bridges/driver.py), loaded only by a bridge whose
URIs speak MQTT:

    connect(bridge, uri, frame_max, now) -> (protocol, None)

the MQTT client (mqtt/client.py) connecting with the bridge's client id (`client_id`, else
NODE-NAME: one per broker and bridge, so that two gateways' bridges to one cloud never take
each other's session), its session expiry, and what it publishes to (`topic`, up) or
subscribes to (`filters`, down, delivered to `exchange`).
"""

from ...codec.wire import text
from ...mqtt.client import Protocol


def connect(bridge, uri, frame_max, now, probe=False):
    """(the MQTT client protocol, connecting; no login to renew). probe: prefer_first's
    (server/bridges/probe.py): a clean session, its client id the link's with "-probe" after it
    (a cluster that knew the link's id would end the link's session to give it to the probe)."""
    settings = bridge.machine.settings
    protocol = Protocol(frame_max, 5 if settings["mqtt_version"] == "5" else 4)  # (CONNECT's level)
    client_id = settings["client_id"] or "%s-%s" % (text(bridge.node), bridge.machine.name)
    protocol.connect(
        now,
        client_id + "-probe" if probe else client_id,
        uri["user"] if uri["login"] else None,
        uri["password"],
        uri["heartbeat"],
        settings["session_expiry"],
        settings["topic"],
        None if probe else settings["filters"],
        settings["exchange"],
        clean=probe,
    )
    return protocol, None


def probing(bridge, uri, frame_max, now):
    """prefer_first's probe of uri (server/bridges/probe.py): (the protocol connecting, no set-up
    steps: the CONNACK is the answer; the goodbye, a DISCONNECT: the broker drops the clean
    session)."""
    protocol = connect(bridge, uri, frame_max, now, probe=True)[0]
    return protocol, [], protocol.close
