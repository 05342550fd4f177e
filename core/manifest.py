# What of hutch.core goes onto a board, in MicroPython's manifest syntax (as micropython-lib keeps
# one manifest per package). firmware/build.py stages exactly the files listed: a module that is
# not listed stays on the host. Left out here: batch.py and framing.py, the reader of the C frame
# scanner and its pure-Python reference (CPython only).
package(
    "hutch/core",
    files=(
        "__init__.py",
        "arguments.py",
        "auth.py",
        "basic.py",
        "broker.py",
        "channel.py",
        "confirms.py",
        "connection.py",
        "deadletter.py",
        "declare.py",
        "errors.py",
        "exchange.py",
        "fifo.py",
        "flow.py",
        "handshake.py",
        "journal.py",
        "limits.py",
        "link.py",
        "message.py",
        "queue.py",
        "records.py",
        "replay.py",
        "spec.py",
        "stream.py",
        "streamlog.py",
        "streamrules.py",
        "topology.py",
        "tx.py",
        "wire.py",
    ),
)
