"""What an upstream answers a bridge, as the bridge's client of each protocol reads it: the
0-9-1 client (server/bridges/amqp091.py's BridgeProtocol on client/protocol.py), AMQP 1.0's
(amqp10/client.py) and MQTT's (mqtt/client.py, 3.1.1 and 5).

clients: the first octet picks the client (0: 0-9-1, 1: 1.0, 2: MQTT 3.1.1, 3: MQTT 5), the
rest is what the upstream sent, fed in pieces after the client's connect; every event taken.
The bridge's driver (server/bridges/driver.py) ends a link on an ENDED event and on nothing
else: any exception from reading is a finding (it would be logged as a bug, with its
traceback, each time the link is made again).
"""

from hutch.codec.upstream import ENDED


def _client(choice):
    if choice == 0:
        from hutch.server.bridges.amqp091 import BridgeProtocol

        protocol = BridgeProtocol(frame_max=131072)
        protocol.connect(0, "guest", "guest", "/", 30, "fuzz")
    elif choice == 1:
        from hutch.amqp10.client import Protocol

        protocol = Protocol(max_frame=65536)
        protocol.connect(0, "guest", "guest", "localhost", "/queues/up")
    else:
        from hutch.mqtt.client import Protocol

        protocol = Protocol(65536, 4 if choice == 2 else 5)
        protocol.connect(0, "fuzz", "guest", "guest", 30, 0, "up/{routing_key}", None, "amq.topic")
    return protocol


def clients(data):
    if not data:
        return
    protocol = _client(data[0] % 4)
    stream = data[1:]
    for at in range(0, len(stream), 97):
        piece = stream[at : at + 97]
        while piece:
            n = protocol.receive_data(piece)
            piece = piece[n:]
            while True:
                event = protocol.next_event()
                if event is None or event[0] == ENDED:
                    break
            if event is not None:
                return  # (the link ends there)
