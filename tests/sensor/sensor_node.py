"""A sensor node's side of tests/interop/clients/test_sensor_client.py, run under `micropython`
(MICROPYPATH holding the node bundle's sources) and under CPython: `sensor_node.py SCENARIO PORT [ARGS]`.

Each scenario prints result lines that the test checks; anything unexpected raises, so
the process exits non-zero with a traceback.
"""

import sys
import time

from hutch.client import Blocked, ChannelClosed, Client, ConnectionClosed, Returned

HOST = "127.0.0.1"


def body(i, size=None):
    """Distinct, checkable bodies; every byte value appears."""
    n = (i * 37) % 600 if size is None else size
    b = bytearray(6 + n)  # built in place: a small heap has no room for a list of n ints
    b[0:6] = ("%05d:" % i).encode()
    for k in range(n):
        b[6 + k] = (i * 7 + k) & 0xFF
    return bytes(b)


def say(*words):
    sys.stdout.write(" ".join([str(w) for w in words]) + "\n")
    try:
        sys.stdout.flush()
    except AttributeError:
        pass


def client(port, **kw):
    c = Client(HOST, port, name="sensor-test", **kw)
    c.connect()
    return c


def publish(port, queue, count):
    count = int(count)
    c = client(port)
    c.declare_queue(queue)
    c.confirm()
    for i in range(count):
        props = {
            "message_id": str(i),
            "content_type": "application/octet-stream",
            "delivery_mode": 2,
            "headers": {"i": i, "node": "s1", "ok": True, "big": 1 << 40, "raw": b"\x00\xff", "list": [1, "a"]},
        }
        seq = c.publish("", queue, body(i), props)
        assert seq == i + 1, seq
        if seq % 50 == 0:
            assert c.wait_confirms(5000), "not all confirmed by %d" % seq
    assert c.wait_confirms(5000)
    say("confirmed", count)
    c.close()


def consume(port, queue, count):
    count = int(count)
    c = client(port)
    seen = {}
    redelivered = []

    def on_command(m):
        i = int(m.properties["message_id"])
        assert m.body == body(i), "command %d arrived changed" % i
        assert m.routing_key == queue and m.exchange == ""
        assert m.properties["headers"]["n"] == i
        if i == 3 and not m.redelivered:
            c.nack(m.delivery_tag, requeue=True)  # comes back with redelivered set
            return
        if m.redelivered:
            redelivered.append(i)
        seen[i] = seen.get(i, 0) + 1
        c.ack(m.delivery_tag)

    c.consume(queue, on_command, prefetch=10)
    say("consuming")
    start = time.time()
    while len(seen) < count:
        assert time.time() - start < 30, "only %d of %d commands" % (len(seen), count)
        c.wait_msg(1000)
    assert sorted(seen) == list(range(count)) and max(seen.values()) == 1, seen
    say("acked", len(seen), "redelivered", redelivered)
    c.close()


def errors(port, queue):
    c = client(port)
    c.declare_queue(queue)
    c.confirm()
    c.publish("no-such-exchange", "x", b"lost")
    try:
        c.wait_confirms(5000)
        raise AssertionError("no channel error")
    except ChannelClosed as e:
        say("channel-closed", e.code, e.method[0], e.method[1], e.text)
    assert len(c.unconfirmed) == 1 and c.unconfirmed[0][0] == "no-such-exchange"
    c.unconfirmed.clear()
    c.reconnect()  # the connection is fine: only the channel is opened again (with confirms)
    c.publish("", queue, b"after the error")
    assert c.wait_confirms(5000)
    say("recovered")
    try:
        c.declare_queue("no-such-queue", passive=True)
        raise AssertionError("no 404")
    except ChannelClosed as e:
        say("passive", e.code)
    c.close()
    try:
        client(port, password="wrong")
        raise AssertionError("logged in with a wrong password")
    except ConnectionClosed as e:
        say("login", e.code)


def heartbeat(port, queue):
    c = client(port, heartbeat=1)
    c.declare_queue(queue)
    c.confirm()
    start = time.time()
    assert not c.wait_msg(4000)  # idle for 4 heartbeat periods: kept alive by heartbeats both ways
    assert time.time() - start >= 3.9
    c.publish("", queue, b"still here")
    assert c.wait_confirms(5000)
    say("alive")
    time.sleep(3.5)  # not calling the client: it sends no heartbeats, the broker gives up on it
    try:
        for _i in range(100):  # what the broker sent before it gave up is handled first
            c.check_msg()
            time.sleep(0.05)
        raise AssertionError("silence went unnoticed")
    except (OSError, ConnectionClosed) as e:
        say("dropped", type(e).__name__, e)
    c.reconnect()
    c.publish("", queue, b"back")
    assert c.wait_confirms(5000)
    say("reconnected")
    c.close()


def silent_broker(port):
    """The test freezes the broker (SIGSTOP): the client notices within two heartbeats."""
    c = client(port, heartbeat=1)
    say("ready")
    start = time.time()
    try:
        while time.time() - start < 30:
            c.wait_msg(500)
        raise AssertionError("a silent broker went unnoticed")
    except OSError as e:
        say("gave-up", e)


def mandatory(port, queue):
    c = client(port)
    c.declare_queue(queue)
    c.confirm()
    returned = []
    c.on_return = returned.append
    c.publish("", "nowhere", b"unroutable", {"message_id": "r1"})  # mandatory by default
    c.publish("", queue, b"routable", mandatory=True)
    # a returned message is confirmed too (as by RabbitMQ), but it waits in unconfirmed
    assert not c.wait_confirms(5000)
    assert c.unconfirmed == [("", "nowhere", b"unroutable", {"message_id": "r1"}, True)], c.unconfirmed
    c.unconfirmed = []
    m = returned[0]
    say(
        "returned",
        len(returned),
        m.reply_code,
        m.reply_text,
        m.routing_key,
        m.body.decode(),
        m.properties["message_id"],
    )
    c.on_return = None
    c.publish("", "nowhere", b"again", mandatory=True)
    try:
        c.wait_confirms(5000)
        raise AssertionError("no Returned")
    except Returned as e:
        say("raised", e.code, e.message.body.decode())
    c.reconnect(republish=True)  # nothing to reopen after a Returned: it is published again
    try:
        c.wait_confirms(5000)
        raise AssertionError("no Returned")
    except Returned as e:
        say("raised", e.code, e.message.body.decode())
    c.unconfirmed = []
    c.declare_queue("nowhere")
    c.publish("", "nowhere", b"routed now", mandatory=False)
    assert c.wait_confirms(5000)
    c.close()


def big(port, out_queue, in_queue, size):
    size = int(size)
    c = client(port, frame_max=4096)
    assert len(c._rx) == 4096  # the whole read buffer
    c.declare_queue(out_queue)
    c.confirm()
    c.publish("", out_queue, body(7, size), {"message_id": "big"})
    assert c.wait_confirms(5000)
    say("published", size + 6)
    got = []
    c.consume(in_queue, lambda m: (got.append(m), c.ack(m.delivery_tag)))
    assert c.wait_msg(10000)
    assert got[0].body == body(8, size), "the big delivery arrived changed"
    say("received", len(got[0].body))
    c.close()


def nacks(port, queue):
    c = client(port)
    c.declare_queue(queue, arguments={"x-max-length": 3, "x-overflow": "reject-publish"})
    c.confirm()
    headers = {"t": 21.5, "n": -5, "l": [1, "a", None, False], "d": {"x": b"\x01"}}
    for i in range(5):
        c.publish("", queue, body(i), {"headers": headers, "timestamp": 1700000000, "priority": 1})
    assert not c.wait_confirms(5000)
    say("unconfirmed", len(c.unconfirmed), " ".join([m[2][:5].decode() for m in c.unconfirmed]))
    for i in range(3):
        m = c.get(queue)
        assert m.body == body(i) and m.message_count == 2 - i, (m.body[:8], m.message_count)
        assert m.properties == {"headers": headers, "timestamp": 1700000000, "priority": 1}, m.properties
        c.ack(m.delivery_tag)
    assert c.get(queue) is None
    c.republish()
    assert c.wait_confirms(5000) and not c.unconfirmed
    bodies = [c.get(queue, no_ack=True).body for i in range(2)]
    assert bodies == [body(3), body(4)], bodies
    say("republished", len(bodies))
    c.close()


def reconnect(port, queue):
    """Consume commands; when the broker goes away, reconnect and go on. Test drives the broker."""
    c = client(port, heartbeat=2)
    c.declare_exchange("sensors", "direct")
    c.declare_queue(queue)
    c.bind(queue, "sensors", "cmd")
    got = []

    def on_command(m):
        got.append(m.body.decode())
        say("cmd", got[-1])

    c.consume(queue, on_command, no_ack=True)
    say("ready")
    start = time.time()
    while len(got) < 2:
        assert time.time() - start < 60, "gave up: %s" % got
        try:
            c.wait_msg(500)
        except (OSError, ChannelClosed, ConnectionClosed) as e:
            say("lost", getattr(e, "code", "oserror"))
            for attempt in range(100):  # noqa: B007 (read after the loop)
                time.sleep(0.2)
                try:
                    c.reconnect()
                    break
                except OSError:
                    pass
            say("back", attempt > 0)
    say("got", " ".join(got))
    c.close()


def simple(port, queue, count):
    """The simple client alone (hutch.client.simple: no recording, no reconnect)."""
    from hutch.client import simple

    count = int(count)
    c = simple.Client(HOST, port, name="sensor-simple")
    c.connect()
    c.declare_queue(queue)
    c.confirm()
    for i in range(count):
        assert c.publish("", queue, body(i), {"message_id": str(i)}) == i + 1
    assert c.wait_confirms(5000) and not c.protocol.unconfirmed
    for i in range(count):
        m = c.get(queue)
        assert m.body == body(i) and m.properties["message_id"] == str(i), i
        c.ack(m.delivery_tag)
    assert c.get(queue) is None
    say("simple", count, not hasattr(c, "reconnect"))
    c.close()


def numbered(port, queue, count, boot_file):
    """A sensor's readings numbered (client/sensor.py): published, the link dropped before the
    confirms could come, sent again after reconnecting: the broker took each once. Run twice
    with one boot file, as a board booting twice."""
    from hutch.client.sensor import Sequence

    count = int(count)
    c = client(port, sensor_id="node-7", sequence=Sequence(boot_file))
    c.declare_queue(queue, durable=True)
    c.confirm()
    for i in range(count):
        c.publish("", queue, body(i, 8), {"delivery_mode": 2})
    c._drop()  # the link is gone before any confirm was read: all of them are unconfirmed
    c.reconnect(republish=True)
    assert c.wait_confirms(5000) and not c.unconfirmed
    say("boot", c.sequence.boot, "sent twice", count)
    c.close()


def blocked(port, queue):
    """Publish until the broker blocks the connection; then wait for it to be unblocked."""
    c = client(port)
    c.declare_queue(queue)
    sent = 0
    start = time.time()
    while True:
        assert time.time() - start < 30, "never blocked after %d" % sent
        try:
            c.publish("", queue, body(sent, 1000))
            sent += 1
        except Blocked as e:
            say("blocked", sent, e.args[0])
            break
        c.check_msg()
    while c.blocked is not None:
        assert time.time() - start < 60, "never unblocked"
        c.wait_msg(200)
    c.publish("", queue, b"after")
    say("unblocked")
    c.close()


def tls(port, ca, cert, key, stranger_ca, queue):
    """Over the TLS listener (client/tls.py): the broker verified against ca, the node logged
    in by its certificate (EXTERNAL), a message there and back; then a context whose CA did not
    sign the broker's certificate, and a name that is not the certificate's, are refused."""
    from hutch.client.tls import Tls, context

    c = Client(HOST, port, ssl=context(ca, cert, key), mechanism="EXTERNAL", name="sensor-tls")
    c.connect()
    c.declare_queue(queue)
    c.confirm()
    c.publish("", queue, b"over tls", {"delivery_mode": 2})
    assert c.wait_confirms(5000)
    m = c.get(queue, no_ack=True)
    say("external", m.body.decode(), type(c.transport).__name__)
    c.close()
    for transport in (
        Tls(HOST, port, context(stranger_ca, cert, key)),  # not the broker's CA
        Tls(HOST, port, context(ca, cert, key), server_hostname="gateway.example"),  # not its name
    ):
        c = Client(transport=transport, mechanism="EXTERNAL")
        try:
            c.connect()
            raise AssertionError("a broker the node cannot verify was let in")
        except OSError as e:  # ssl.SSLError on CPython, OSError(-9984...) from Mbed TLS
            say("refused", type(e).__name__)


if __name__ == "__main__":
    globals()[sys.argv[1]](int(sys.argv[2]), *sys.argv[3:])
