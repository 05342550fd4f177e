"""What a bridge over AMQP 0-9-1 adds to its driver (server/bridges/driver.py), loaded only by a
bridge whose URIs speak 0-9-1:

    connect(bridge, uri, frame_max, now) -> (protocol, None)

the sensor client's protocol (client/protocol.py) connecting, as BridgeProtocol: the same
client, whose events come out in the bridge's words and which takes its set-up steps in them
(codec/upstream.py). This module is the one place that knows 0-9-1's names for them:
basic.ack and basic.nack are accepted and rejected, a basic.deliver delivered, basic.return
returned, queue.declare-ok's count the backlog, channel.flow and connection.blocked upstream's
flow control, a close the link's end; a step is the synchronous method that does it.

(The sensor client is not on codec/upstream.py's Upstream base, as the 1.0 and MQTT clients
are: it is a sensor node's first, which runs without the bridge's modules, with a send buffer
of its own that a board's node sizes once; the bridge speaks to it through this subclass.)
"""

import struct

from ...client.protocol import AMQPError, ChannelClosed, Message, Protocol
from ...codec import spec
from ...codec.errors import DecodeError
from ...codec.upstream import (
    ACCEPTED,
    BACKLOG,
    BLOCKED,
    DELIVERED,
    ENDED,
    FLOW,
    REJECTED,
    RETURNED,
    UNBLOCKED,
)


def connect(bridge, uri, frame_max, now):
    """(the 0-9-1 client protocol, connecting; no login to renew)."""
    protocol = BridgeProtocol(frame_max=frame_max)
    protocol.connect(
        now,
        uri["user"],
        uri["password"],
        uri["vhost"],
        uri["heartbeat"],
        "hutch bridge %s/%s" % (bridge.broker.name, bridge.machine.name),
        mechanism=uri["auth_mechanism"],
    )
    return protocol, None


def probing(bridge, uri, frame_max, now):
    """prefer_first's probe of uri (server/bridges/probe.py): (the protocol connecting, its
    set-up steps: confirm, and a passive declare of what the bridge sends to, its exchange or
    the queue the default exchange routes its routing key to; the goodbye)."""
    protocol = connect(bridge, uri, frame_max, now)[0]
    settings = bridge.machine.settings
    steps = [("confirm",)]  # type: list[tuple]
    if settings["exchange"]:
        steps.append(("has-exchange", settings["exchange"]))
    elif settings["exchange"] == "" and settings["routing_key"]:
        steps.append(("has-queue", settings["routing_key"]))
    return protocol, steps, lambda: protocol.send(spec.CONNECTION_CLOSE, (200, "hutch bridge probe done", 0, 0))


class BridgeProtocol(Protocol):
    """The 0-9-1 client, its events and set-up steps in the bridge's words. (Two methods, the
    words inline: each function is an object in a board's heap.)"""

    def set_up(self, step):
        """A set-up step (codec/upstream.py) sent as the method that does it; its reply is
        awaited (self.awaiting) before the next."""
        word = step[0]
        if word == "exchange":
            self.call(spec.EXCHANGE_DECLARE, (0, step[1], step[2], False, True, False, False, False, None))
        elif word == "queue":
            self.call(spec.QUEUE_DECLARE, (0, step[1], False, True, False, False, False, step[2]))
        elif word == "bind":
            self.call(spec.QUEUE_BIND, (0, step[1], step[2], step[3], False, None))
        elif word == "confirm":
            self.call(spec.CONFIRM_SELECT, (False,))
        elif word == "has-exchange":  # (passive: its type is not checked)
            self.call(spec.EXCHANGE_DECLARE, (0, step[1], "topic", True, False, False, False, False, None))
        elif word == "has-queue":
            self.call(spec.QUEUE_DECLARE, (0, step[1], True, False, False, False, False, None))
        elif word == "prefetch":
            self.call(spec.BASIC_QOS, (0, step[1], False))
        elif word == "consume":
            self.call(spec.BASIC_CONSUME, (0, step[1], step[2], False, False, False, False, None))
        else:
            raise ValueError("no set-up step %r over AMQP 0-9-1" % (word,))

    def next_event(self):
        while True:
            try:
                event = Protocol.next_event(self)
            except DecodeError as e:  # (the upstream's bytes are not AMQP 0-9-1: the link ends, said in a line)
                return (ENDED, "upstream sent what is not AMQP 0-9-1: %s" % e)
            if event is None:
                return None
            if isinstance(event, Message):
                if event.kind == spec.BASIC_RETURN:  # (up, mandatory: its confirm follows)
                    return (RETURNED, event.properties.get("headers") or {}, event.reply_code, event.reply_text)
                if event.kind != spec.BASIC_DELIVER:
                    continue  # (a basic.get-ok: the bridge never asks for one)
                # down: a delivery, as the broker keeps one (content header and body as frame tails)
                raw = event._raw
                body = event.body
                if isinstance(raw, dict) or raw is None:  # no properties (or decoded): a bare header
                    raw = struct.pack(">HHQH", 60, 0, len(body), 0)
                exchange, key = event.exchange, event.routing_key
                return (
                    DELIVERED,
                    event.delivery_tag,
                    exchange.encode() if isinstance(exchange, str) else exchange,
                    key.encode() if isinstance(key, str) else key,
                    struct.pack(">I", len(raw)) + raw + b"\xce",
                    struct.pack(">I", len(body)) + bytes(body) + b"\xce" if body else None,
                    len(body),
                )
            if isinstance(event, AMQPError):
                if isinstance(event, ChannelClosed):
                    why = "upstream closed the channel"
                elif event.code == spec.ACCESS_REFUSED or (self.state != "open" and event.code == 530):
                    why = "login refused"
                else:
                    why = "upstream closed the connection"
                return (ENDED, "%s: %d %s" % (why, event.code, event.text), None)
            method, args = event
            if method == spec.BASIC_ACK:
                return (ACCEPTED, args[0], args[1])
            if method == spec.BASIC_NACK:
                return (REJECTED, args[0], args[1], "basic.nack")
            if method == spec.QUEUE_DECLARE_OK:
                return (BACKLOG, args[1])
            if method == spec.CHANNEL_FLOW:  # (flow-ok already answered by the protocol)
                return (FLOW, args[0])
            if method == spec.CONNECTION_BLOCKED:
                return (BLOCKED, args[0] if args else "")
            if method == spec.CONNECTION_UNBLOCKED:
                return (UNBLOCKED,)
            # (the other replies, to the handshake and the set-up, say nothing the bridge keeps)
