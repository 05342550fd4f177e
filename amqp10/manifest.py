# What of hutch.amqp10 goes onto a board (MicroPython's manifest syntax; see core/manifest.py):
# the AMQP 1.0 client of a bridge to a 1.0 cloud (client.py, sas.py: imported only by a
# [[bridge]] that speaks 1.0) and the codec it is made of. The front end that serves 1.0
# clients is manifest_serving.py's, in a bundle only when asked (python -m
# hutch.firmware.build --amqp10; hutch flash with a config that says [server] amqp10 = true).
package(
    "hutch/amqp10",
    files=(
        "__init__.py",
        "client.py",
        "delivery.py",
        "frames.py",
        "sas.py",
        "sections.py",
        "spec.py",
        "types.py",
    ),
)
