# What of hutch.amqp10 goes onto a board (MicroPython's manifest syntax; see core/manifest.py):
# the front end that serves AMQP 1.0 clients (connection.py, session.py, links.py,
# addresses.py, performatives.py: imported only when the config says [server] amqp10 = true),
# the AMQP 1.0 client of a bridge to a 1.0 cloud (client.py, sas.py: imported only by a
# [[bridge]] that speaks 1.0), and the codec both are made of. A board that does neither
# imports none of it.
package(
    "hutch/amqp10",
    files=(
        "__init__.py",
        "addresses.py",
        "client.py",
        "connection.py",
        "delivery.py",
        "frames.py",
        "links.py",
        "message.py",
        "performatives.py",
        "sas.py",
        "sections.py",
        "session.py",
        "spec.py",
        "types.py",
    ),
)
