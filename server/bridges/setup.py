"""The config's [[bridge]]s made into running bridges (server/bridges/driver.py), and its [uplink] (their
shared budget and windows) set on the broker: at start (server/startup.py) and at a reload
(server/reload.py). Their certificate files are checked first: a link that could never connect
is said in one line, not retried forever."""

from ..readable import check_readable
from ..runtime import StartError


def bridge_tls_files(bridge):
    """StartError (exit 2) in one line if an amqps:// bridge's ca_file, cert_file or key_file
    cannot be read: a link that could never connect is said at start, not retried forever."""
    check_readable("bridge '%s'" % bridge["name"], bridge["tls"], ("ca_file", "cert_file", "key_file"))


def make_bridges(settings, runtime, data_folder):
    """The config's [[bridge]]s, their queues set up (server/bridges/driver.py; not imported without one);
    StartError (exit 2) if one does not fit what the broker holds (its source exchange missing)."""
    if not settings:
        return []
    from .driver import Bridge, BridgeError, node_id

    node = node_id(data_folder)
    try:
        return [
            Bridge(runtime.broker, one, runtime.log, runtime.clock, node, runtime.interrupt, data_folder)
            for one in settings
        ]
    except BridgeError as e:
        raise StartError(str(e), 2)


def take_in_left_behind(runtime, bridges):
    """The queues bridges left behind (core/bridge/leftovers.py, loaded only when there is one):
    their messages to the bridge that inherits them, the rest unbound. What was done, one line
    each, also logged."""
    broker = runtime.broker
    from ...core.bridge.classes import classes_of

    owned = {one["queue"] for settings in bridges if settings["direction"] == "up" for one in classes_of(settings)}
    if not any(name.startswith(b"hutch.bridge.") and name.decode() not in owned for name in broker.queues):
        return []
    from ...core.bridge.leftovers import take_in

    said = take_in(broker, bridges)
    for line in said:
        runtime.log("warning" if "left" in line else "info", "bridges: " + line)
    return said


def set_uplink(runtime, settings):
    """The config's [uplink] (server/options.py's checked table, or None) on the broker, where each
    bridge reads it (core/bridge/uplink.py: loaded only with one)."""
    if settings is None:
        runtime.broker.uplink = None
        return
    from ...core.bridge.uplink import Uplink

    runtime.broker.uplink = Uplink(settings, runtime.clock.now_ms())
