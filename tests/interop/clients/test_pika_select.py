"""pika's SelectConnection (callback style, pika's own ioloop) against the real `hutch serve`.

Covers: a full asynchronous round trip of 1,000 messages (declare exchange and
queue, bind, confirm.select, publish, broker acks counted through `multiple`,
consume with prefetch, ack, cancel, clean close with 200); mandatory returns
and broker nacks delivered to callbacks; a channel error (404) reported
through the channel's close callback while the connection stays usable.

Every ioloop runs under a watchdog timer (`call_later`) that stops it, so a
hung broker fails the test instead of hanging it.
"""

import socket

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByClient

# The watchdogs below stop each ioloop; this is the backstop if one of them does not.
pytestmark = pytest.mark.timeout(60)


def parameters(broker):
    return pika.ConnectionParameters(
        host=broker.host, port=broker.port, credentials=pika.PlainCredentials("guest", "guest")
    )


class Flow:
    """Runs one SelectConnection through a callback script; records what happened."""

    def __init__(self, broker, script, timeout=20):
        self.script = script
        self.timed_out = False
        self.error = None
        self.close_reason = None
        self.conn = pika.SelectConnection(
            parameters(broker),
            on_open_callback=self._opened,
            on_open_error_callback=self._failed,
            on_close_callback=self._closed,
        )
        self.conn.ioloop.call_later(timeout, self._watchdog)

    def run(self):
        self.conn.ioloop.start()
        assert not self.timed_out, "watchdog fired: the flow did not finish (%r)" % (self.error,)
        assert self.error is None, self.error
        return self

    def _opened(self, conn):
        try:
            self.script(self, conn)
        except Exception as e:  # surface it after the loop stops
            self.fail(e)

    def fail(self, error):
        if self.error is None:
            self.error = error
        if self.conn.is_open:
            self.conn.close()
        else:
            self.conn.ioloop.stop()

    def step(self, fn):
        """Wrap a callback so an assertion inside it ends the flow with that error."""

        def wrapped(*args):
            try:
                fn(*args)
            except Exception as e:
                self.fail(e)

        return wrapped

    def _failed(self, conn, error):
        self.fail(error)

    def _closed(self, conn, reason):
        self.close_reason = reason
        conn.ioloop.stop()

    def _watchdog(self):
        self.timed_out = True
        if self.conn.is_open:
            self.conn.close()
        self.conn.ioloop.call_later(2, self.conn.ioloop.stop)


def test_round_trip_of_1000_messages_with_confirms(broker):
    total = 1000
    state = {
        "outstanding": set(range(1, total + 1)),
        "acked": set(),
        "nacked": set(),
        "confirm_frames": 0,
        "received": [],
        "redelivered": 0,
        "unacked": 0,
        "most_unacked": 0,
    }

    def script(flow, conn):
        conn.channel(on_open_callback=flow.step(lambda ch: declare(flow, ch)))

    def declare(flow, ch):
        ch.exchange_declare(
            "sel.ex",
            "direct",
            durable=True,
            callback=flow.step(lambda _: ch.queue_declare("sel.q", callback=flow.step(lambda ok: bind(flow, ch, ok)))),
        )

    def bind(flow, ch, declare_ok):
        assert declare_ok.method.queue == "sel.q" and declare_ok.method.message_count == 0
        ch.queue_bind(
            "sel.q",
            "sel.ex",
            "k",
            callback=flow.step(
                lambda _: ch.confirm_delivery(
                    ack_nack_callback=flow.step(lambda frame: on_confirm(flow, ch, frame)),
                    callback=flow.step(lambda _: publish(flow, ch)),
                )
            ),
        )

    def publish(flow, ch):
        # pika sends each frame with its own send(): on a loaded machine the broker may wake
        # between any two of them, and how many confirms it sends would then measure the
        # scheduler. The socket is corked (TCP_CORK) for the burst, so it reaches the broker
        # in full segments, as from a client that writes faster than the broker reads.
        transport = flow.conn._transport
        sock = transport._sock
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
        for i in range(total):
            ch.basic_publish("sel.ex", "k", b"msg-%04d" % i, pika.BasicProperties(message_id=str(i), delivery_mode=2))

        def uncork():
            if transport.get_write_buffer_size():  # pika has not handed all of it to the socket yet
                flow.conn.ioloop.call_later(0.005, flow.step(uncork))
            else:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)

        flow.conn.ioloop.add_callback_threadsafe(flow.step(uncork))

    def on_confirm(flow, ch, frame):
        method = frame.method
        # with multiple=True one confirm covers every outstanding tag up to delivery_tag
        covered = (
            {t for t in state["outstanding"] if t <= method.delivery_tag} if method.multiple else {method.delivery_tag}
        )
        assert covered and covered <= state["outstanding"], "confirm for tags never published or confirmed twice"
        state["outstanding"] -= covered
        state["nacked" if isinstance(method, pika.spec.Basic.Nack) else "acked"].update(covered)
        state["confirm_frames"] += 1
        if not state["outstanding"]:
            ch.basic_qos(
                prefetch_count=50,
                callback=flow.step(
                    lambda _: ch.basic_consume("sel.q", flow.step(lambda c, m, p, b: on_message(flow, c, m, p, b)))
                ),
            )

    def on_message(flow, ch, method, props, body):
        state["unacked"] += 1
        state["most_unacked"] = max(state["most_unacked"], state["unacked"])
        state["received"].append((body, props.message_id))
        state["redelivered"] += method.redelivered
        state["last_tag"] = method.delivery_tag
        if state["unacked"] == 50 or len(state["received"]) == total:
            # ack the window a little later: a broker ignoring prefetch would go on delivering
            flow.conn.ioloop.call_later(0.02, flow.step(lambda: ack_window(flow, ch, method.consumer_tag)))

    def ack_window(flow, ch, consumer_tag):
        ch.basic_ack(state["last_tag"], multiple=True)
        state["unacked"] = 0
        if len(state["received"]) == total:
            ch.basic_cancel(consumer_tag, callback=flow.step(lambda _: check_empty(flow, ch)))

    def check_empty(flow, ch):
        def done(ok):
            state["left"] = ok.method.message_count
            flow.conn.close()

        ch.queue_declare("sel.q", passive=True, callback=flow.step(done))

    flow = Flow(broker, script).run()
    assert state["nacked"] == set()
    assert state["acked"] == set(range(1, total + 1))
    # the burst of publishes is confirmed with a few coalesced multiple=True acks, not 1,000
    assert state["confirm_frames"] < total // 10
    assert [r[0] for r in state["received"]] == [b"msg-%04d" % i for i in range(total)]
    assert [r[1] for r in state["received"]] == [str(i) for i in range(total)]
    assert state["redelivered"] == 0
    assert state["most_unacked"] == 50  # prefetch_count=50 filled, never exceeded
    assert state["left"] == 0
    # a clean close: the client's own 200, answered with close-ok
    assert isinstance(flow.close_reason, ConnectionClosedByClient)
    assert flow.close_reason.reply_code == 200


def test_returns_and_nacks_reach_callbacks(broker):
    state = {"returns": [], "confirms": []}

    def script(flow, conn):
        conn.channel(on_open_callback=flow.step(lambda ch: setup(flow, ch)))

    def setup(flow, ch):
        ch.add_on_return_callback(
            flow.step(lambda c, m, p, b: state["returns"].append((m.reply_code, m.routing_key, b)))
        )
        ch.queue_declare(
            "sel.full",
            arguments={"x-max-length": 1, "x-overflow": "reject-publish"},
            callback=flow.step(
                lambda _: ch.confirm_delivery(
                    ack_nack_callback=flow.step(lambda f: on_confirm(flow, f)),
                    callback=flow.step(lambda _: publish(ch)),
                )
            ),
        )

    def publish(ch):
        ch.basic_publish("", "sel.full", b"fits")  # 1: ack
        ch.basic_publish("", "sel.full", b"overflow")  # 2: nack (queue full)
        ch.basic_publish("", "no-such-queue", b"bounce", mandatory=True)  # 3: return, then ack
        ch.basic_publish("", "no-such-queue", b"dropped")  # 4: ack (dropped)

    def on_confirm(flow, frame):
        m = frame.method
        state["confirms"].append((m.NAME, m.delivery_tag, m.multiple))
        if m.delivery_tag == 4:
            flow.conn.close()

    Flow(broker, script, timeout=10).run()
    assert state["returns"] == [(312, "no-such-queue", b"bounce")]
    # expand multiple acks into the set of tags they cover
    outcome = {}
    for name, tag, multiple in state["confirms"]:
        for t in range(1, tag + 1) if multiple else (tag,):
            outcome.setdefault(t, name)
    assert outcome == {1: "Basic.Ack", 2: "Basic.Nack", 3: "Basic.Ack", 4: "Basic.Ack"}


def test_channel_error_reported_to_close_callback(broker):
    state = {}

    def script(flow, conn):
        conn.channel(on_open_callback=flow.step(lambda ch: doomed(flow, conn, ch)))

    def doomed(flow, conn, ch):
        ch.add_on_close_callback(flow.step(lambda c, reason: closed(flow, conn, reason)))
        ch.queue_declare(
            "sel.missing",
            passive=True,
            callback=flow.step(lambda _: flow.fail(AssertionError("passive declare of a missing queue succeeded"))),
        )

    def closed(flow, conn, reason):
        state["reason"] = reason
        # the connection survives a channel error: a new channel works
        conn.channel(
            on_open_callback=flow.step(
                lambda ch: ch.queue_declare("", exclusive=True, callback=flow.step(lambda ok: fresh(flow, ok)))
            )
        )

    def fresh(flow, ok):
        state["fresh"] = ok.method.queue
        flow.conn.close()

    Flow(broker, script, timeout=10).run()
    assert isinstance(state["reason"], ChannelClosedByBroker)
    assert state["reason"].reply_code == 404
    assert state["reason"].reply_text == "NOT_FOUND - no queue 'sel.missing' in vhost '/'"
    assert state["fresh"].startswith("amq.gen-")
