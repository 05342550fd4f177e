# What of hutch.amqp10 goes onto a board (MicroPython's manifest syntax; see core/manifest.py):
# the AMQP 1.0 client of a bridge to a 1.0 cloud (client.py, sas.py) and the codec it is made
# of. A board does not serve AMQP 1.0 (connection.py stays on the host), and imports none of
# this unless a [[bridge]] speaks 1.0.
package(
    "hutch/amqp10",
    files=(
        "__init__.py",
        "client.py",
        "frames.py",
        "message.py",
        "sas.py",
        "spec.py",
        "types.py",
    ),
)
