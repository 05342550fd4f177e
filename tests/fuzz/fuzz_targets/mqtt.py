"""MQTT 3.1, 3.1.1 and 5 as a client's bytes reach the broker.

packets: each packet a client's bytes split into (mqtt/packets.py split) read by the reader of
its kind, at each protocol level: a value, or Malformed (the connection's end, with its
reason code); never another exception.

session: a served MQTT connection fed the bytes in pieces, on two brokers at once: one taking
runs of alike PUBLISHes together (mqtt/runs.py, what CPython serves with) and one taking each
alone (what a board does), a subscriber to every topic on each. After each piece both say the
same to the client and to the subscriber, and log the same; no internal error is logged; a
good client is served after the session ends.
"""

from hutch.mqtt import packets

from .served import PEER, Logged, ended, pieces

READERS = (
    lambda first, body, level: packets.Connect(body, 0, len(body)),
    lambda first, body, level: packets.read_publish(first, body, 0, len(body), level),
    lambda first, body, level: packets.read_subscribe(body, 0, len(body), level),
    lambda first, body, level: packets.read_unsubscribe(body, 0, len(body), level),
    lambda first, body, level: packets.read_ack(body, 0, len(body), level),
    lambda first, body, level: packets.read_disconnect(body, 0, len(body), level),
    lambda first, body, level: packets.read_properties(body, 0, len(body)),
)


def packet_readers(data):
    """The outcome: each reader's, at each level, of each packet: + (read) or its reason code."""
    said = []
    at = 0
    while at < len(data):
        try:
            found = packets.split(data, at, 1 << 20)
        except packets.Malformed as e:
            said.append("split:%d" % e.args[0])
            break
        if found is None:
            break
        first, start, end = found
        body = data[start:end]
        for level in (packets.V31, packets.V311, packets.V5):
            for read in READERS:
                try:
                    read(first, body, level)
                    said.append("+")
                except packets.Malformed as e:
                    said.append(str(e.args[0]))
        at = end
    return " ".join(said)


def _side(runs):
    from hutch.mqtt.connection import Connection, serving_of

    logged = Logged()
    if runs:
        from hutch.mqtt.runs import parse

        serving_of(logged.broker).parse = parse
    watcher = Connection(logged.broker, dict(PEER, port=40002))
    watcher.feed(packets.connect(b"fuzz-watcher", user=b"guest", password=b"guest", level=packets.V5))
    watcher.feed(packets.subscribe(1, [(b"#", 1), (b"$share/g/#", 0)], packets.V5))
    watcher.take_output()
    return logged, Connection(logged.broker, PEER), watcher


def session(data):
    if not data:
        return
    parts, _stream = pieces(data)
    sides = [_side(runs) for runs in (False, True)]
    for part in parts:
        results = []
        for logged, conn, watcher in sides:
            conn.feed(part)
            out = conn.take_output()
            seen = watcher.take_output()
            watcher.feed(b"")  # (nothing: the watcher acknowledges nothing, its window fills as a slow reader's)
            results.append((out, seen, conn.closed, logged.said[:]))
        assert results[1] == results[0], "the runs' path answers differently from the one by one path"
    for logged, conn, _watcher in sides:
        ended(logged, conn)
