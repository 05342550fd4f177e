"""What a bridge over AMQP 0-9-1 adds to its driver (server/bridges/driver.py), loaded only by a bridge
whose URIs speak 0-9-1:

    connect(bridge, uri, frame_max, now) -> (protocol, None)

the sensor client's protocol (client/protocol.py) connecting, as BridgeProtocol: the same
client, whose events come out in the bridge's words (codec/upstream.py). This module is the one
place that knows 0-9-1's names for them: basic.ack and basic.nack are a confirm, a
basic.deliver a delivery, basic.return a returned message, channel.flow and
connection.blocked upstream's flow control, a close the link's end.
"""

import struct

from ...client.protocol import AMQPError, ChannelClosed, Message, Protocol
from ...codec import spec


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


class BridgeProtocol(Protocol):
    """The 0-9-1 client, its events in the bridge's words. (One method, the words inline: each
    function is an object in a board's heap.)"""

    def next_event(self):
        while True:
            event = Protocol.next_event(self)
            if event is None:
                return None
            if isinstance(event, Message):
                if event.kind == spec.BASIC_RETURN:  # (up, mandatory: its confirm follows)
                    return ("returned", event.properties.get("headers") or {}, event.reply_code, event.reply_text)
                if event.kind != spec.BASIC_DELIVER:
                    continue  # (a basic.get-ok: the bridge never asks for one)
                # down: a delivery, as the broker keeps one (content header and body as frame tails)
                raw = event._raw
                body = event.body
                if isinstance(raw, dict) or raw is None:  # no properties (or decoded): a bare header
                    raw = struct.pack(">HHQH", 60, 0, len(body), 0)
                exchange, key = event.exchange, event.routing_key
                return (
                    "delivery",
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
                return ("ended", "%s: %d %s" % (why, event.code, event.text), None)
            method, args = event
            if method == spec.BASIC_ACK:
                return ("accepted", args[0], args[1])
            if method == spec.BASIC_NACK:
                return ("rejected", args[0], args[1], "basic.nack")
            if method == spec.CHANNEL_FLOW:  # (flow-ok already answered by the protocol)
                return ("flow", args[0])
            if method == spec.CONNECTION_BLOCKED:
                return ("blocked", args[0] if args else "")
            if method == spec.CONNECTION_UNBLOCKED:
                return ("unblocked",)
            return ("reply", method, args)
