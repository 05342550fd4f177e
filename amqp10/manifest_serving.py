# The AMQP 1.0 front end, for a board that serves 1.0 clients ([server] amqp10 = true): added
# to the bundle's amqp10 (manifest.py) by python -m hutch.firmware.build --amqp10, and by
# hutch flash when the config it installs says so. Imported only when the config says so.
package(
    "hutch/amqp10",
    files=(
        "addresses.py",
        "connection.py",
        "links.py",
        "message.py",
        "performatives.py",
        "session.py",
    ),
)
