"""What the differential tests of the run paths (tests/accel/test_accel_runs.py,
tests/mqtt/test_mqtt_runs.py, tests/accel/test_accel_appends.py) compare of two brokers once
the same bytes were fed to both: their state in memory, and the files they wrote."""

import os

from hutch.core.session import MESSAGE, REDELIVERED


def written_files(folder, wanted):
    """{path under folder: content} of the files under folder whose names wanted(name) takes."""
    files = {}
    for parent, _, names in os.walk(folder):
        for name in names:
            if wanted(name):
                path = os.path.join(parent, name)
                with open(path, "rb") as f:
                    files[os.path.relpath(path, folder)] = f.read()
    return files


def broker_state(broker):
    """(counters, messages published, the budget held, {queue: (published, delivered, ready
    bytes, [its messages: header, body, redelivered, order])})."""
    queues = {}
    for name, queue in broker.queues.items():
        queues[name] = (
            queue.published,
            queue.delivered,
            queue.ready_bytes,
            [
                (entry[MESSAGE].header_tail, entry[MESSAGE].body_tail, entry[REDELIVERED], entry[MESSAGE].order)
                for entry in queue.messages
            ],
        )
    return list(broker.stats), broker.published, (broker.flow.held_messages, broker.flow.held_bytes), queues
