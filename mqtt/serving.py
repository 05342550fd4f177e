"""The MQTT front end set up from its [mqtt] settings (server/listeners.py LISTENERS: its
SECTION), before any client comes: loaded by the start only (a board forgets it then).
"""

import sys

from .connection import Serving


def serve(broker, mqtt):
    """broker.front_ends["mqtt"]: the Serving of these [mqtt] settings (mqtt/connection.py)."""
    serving = broker.front_ends["mqtt"] = Serving(
        mqtt["exchange"].encode(),
        mqtt["prefetch"],
        mqtt["max_session_expiry"],
        mqtt["max_keep_alive"],
        (mqtt["sensor_id_field"], mqtt["sensor_seq_field"]),
    )
    if sys.implementation.name != "micropython":  # (host only: a board loads neither)
        from .runs import parse  # pyright: ignore[reportMissingImports]

        # (Connection.parse reads with it: runs of QoS 0 PUBLISHes; a board's Serving has no such attribute)
        serving.parse = parse  # pyright: ignore[reportAttributeAccessIssue]
        if mqtt["sys_interval"]:
            from .sys_topics import SysTopics  # pyright: ignore[reportMissingImports]

            broker.tickers = tuple(broker.tickers) + (SysTopics(broker, serving, mqtt["sys_interval"]),)
