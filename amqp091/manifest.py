# What of hutch.amqp091 goes onto a board (MicroPython's manifest syntax; see core/manifest.py).
# Left out: batch.py and framing.py, the reader of the C frame scanner and its pure-Python
# reference (CPython only).
package(
    "hutch/amqp091",
    files=(
        "__init__.py",
        "basic.py",
        "channel.py",
        "confirms.py",
        "connection.py",
        "declare.py",
        "handshake.py",
        "output.py",
        "replies.py",
        "replyto.py",
        "secret.py",
        "tx.py",
    ),
)
