# What of hutch.mqtt goes onto a board (MicroPython's manifest syntax; see core/manifest.py): the
# MQTT front end, for a board that serves MQTT sensors ([server] mqtt = true, or a [[listener]]
# with protocol = "mqtt"), and its client side (client.py), for a bridge to an MQTT broker. In a
# bundle only when asked (python -m hutch.firmware.build --mqtt; hutch flash with a config that
# serves MQTT or bridges to it), and imported only when the config says so.
package(
    "hutch/mqtt",
    files=(
        "__init__.py",
        "client.py",
        "connection.py",
        "held.py",
        "identity.py",
        "own_queues.py",
        "options.py",
        "packets.py",
        "publishing.py",
        "qos2.py",
        "qos2_out.py",
        "retained.py",
        "serving.py",
        "session.py",
        "shared.py",
        "topics.py",
    ),
)
