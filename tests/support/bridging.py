"""What the bridge tests share: an edge broker with one [[bridge]] table, confirmed publishes
into it, what arrives upstream consumed, an upstream queue made ready.
"""

import os

import pika
from brokers import BIN, RunningBroker
from windowed import publish_windowed


def edge_with_bridge(tmp_path, bridge, name="edge", metrics_port=None):
    """hutch serve with one [[bridge]] table (a dict), started (with a metrics port, if given)."""
    folder = tmp_path / name
    folder.mkdir()
    config = folder / "hutch.toml"
    metrics = "[metrics]\nport = %d\n" % metrics_port if metrics_port else ""
    config.write_text(metrics + "[[bridge]]\n" + "".join("%s = %s\n" % (k, toml(v)) for k, v in bridge.items()))
    return RunningBroker([os.path.join(BIN, "hutch"), "serve", "--config", str(config)], folder).start()


def toml(value):
    if isinstance(value, dict):
        return "{ %s }" % ", ".join("%s = %s" % (k, toml(v)) for k, v in value.items())
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"%s"' % value
    if isinstance(value, list):
        return "[%s]" % ", ".join(toml(v) for v in value)
    return repr(value)


def publish_confirmed(broker, queue, bodies, rate=None, window=200):
    """bodies, persistent, each with its length in a header, all confirmed (windowed.py: at
    most `window` of them unconfirmed; rate: at most that many a second)."""
    messages = [(queue, body, pika.BasicProperties(delivery_mode=2, headers={"n": len(body)})) for body in bodies]
    publish_windowed(broker.url, messages, window=window, rate=rate)


def consume_all(url, queue, count, timeout=30):
    """The bodies of count messages from queue (acked), in the order they came."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=500)
    got = []
    for method, properties, body in channel.consume(queue, inactivity_timeout=timeout):
        if method is None:
            break
        got.append((body, properties.headers, properties.delivery_mode))
        channel.basic_ack(method.delivery_tag)
        if len(got) == count:
            break
    channel.cancel()
    connection.close()
    return got


def consume_every(url, queue, bodies, timeout=90):
    """What queue holds, consumed (and acked) until every one of bodies has come and a second
    passes with nothing more (the copies a fault makes the bridge send again come before the
    first copies that follow them), or until timeout seconds: a quiet spell alone is no end,
    since a loaded machine's bridge may take many seconds to come back after a fault."""
    import time

    wanted = set(bodies)
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=500)
    got = []
    deadline = time.monotonic() + timeout
    for method, properties, body in channel.consume(queue, inactivity_timeout=1):
        if method is None:
            if not wanted or time.monotonic() > deadline:
                break
            continue
        got.append((body, properties.headers, properties.delivery_mode))
        wanted.discard(body)
        channel.basic_ack(method.delivery_tag)
    channel.cancel()
    connection.close()
    return got


def publish_during(edge, queue, thread, body, rate, at_least=0, most=100000, batch=500, after=None):
    """Confirmed publishes to queue at the edge (publish_confirmed), rate a second in batches of
    `batch`: at_least of them, and on for as long as thread (the fault injector) runs, up to
    most, so that the faults fall on a busy bridge however long they take. body(i): the i-th
    one's body; after(n): called after the n-th batch. The bodies published, in order."""
    bodies = []
    while len(bodies) < at_least or (thread.is_alive() and len(bodies) < most):
        more = [body(i) for i in range(len(bodies), len(bodies) + batch)]
        publish_confirmed(edge, queue, more, rate=rate)
        if after is not None:
            after(len(bodies) // batch)
        bodies += more
    return bodies


def upstream_count(url, name):
    """How many messages queue `name` holds (a passive declare)."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        return connection.channel().queue_declare(name, passive=True).method.message_count
    finally:
        connection.close()


def upstream_queue(url, name, purge=True):
    """The durable queue name upstream; purged of an earlier test's messages unless purge is
    false (an upstream that a running bridge already forwards to: the purge would take some)."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.queue_declare(name, durable=True)
    if purge:
        channel.queue_purge(name)
    connection.close()


def rabbitmq_url(rabbitmq):
    return "amqp://guest:guest@127.0.0.1:%d/" % rabbitmq.port


def first_copies(received):
    """received without its repeats (what a fault had a bridge send again), in order; and how
    many repeats there were."""
    seen, first = set(), []
    for body in received:
        if body not in seen:
            seen.add(body)
            first.append(body)
    return first, len(received) - len(first)
