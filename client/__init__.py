"""hutch.client: a tiny blocking AMQP 0-9-1 client for sensor nodes.

Runs on MicroPython (ESP32, RP2040, the unix port) and CPython, in the spirit of
micropython-lib's umqtt: one channel, no threads, no asyncio, nothing from hutch's broker.
Three layers, each on the one below:

- client/protocol.py: the client side of AMQP 0-9-1, sans-IO (bytes in, events and bytes
  out), built on codec/wire.py; an asyncio bridge can drive it as well;
- client/simple.py (hutch.client.simple.Client): the blocking client over a transport,
  as umqtt.simple;
- client/robust.py (hutch.client.Client): the simple client plus what recovery needs,
  as umqtt.robust: it records its declarations and keeps unconfirmed messages for
  reconnect() and republish().

    from hutch.client import Client
    c = Client("192.168.1.10", user="sensor", password="...", heartbeat=30)
    c.connect()
    c.declare_queue("readings", durable=True)
    c.confirm()                                   # publisher confirms
    c.publish("", "readings", b"21.5", {"delivery_mode": 2})
    c.wait_confirms(5000)                         # True: every publish so far was acked

    def command(m):                               # m.body .routing_key .delivery_tag
        print(m.body, m.properties)               # .redelivered .exchange .properties
        c.ack(m.delivery_tag)
    c.consume("sensor-7.cmd", command, prefetch=1)
    while True:
        c.wait_msg(1000)      # or check_msg() in a loop; both keep heartbeats going

The calls are described in client/simple.py and client/robust.py; a node's files in
client/manifest.py (`python -m hutch.firmware.build --node` builds them).
"""

# Each name is imported when it is first asked for (PEP 562, as MicroPython has it too), so a
# node that imports only hutch.client.simple does not load the robust layer.
_WHERE = {
    "Client": "robust",
    "AMQPError": "protocol",
    "ChannelClosed": "protocol",
    "ConnectionClosed": "protocol",
    "Message": "protocol",
    "Blocked": "simple",
    "Returned": "simple",
}


def __getattr__(name):
    if name not in _WHERE:
        raise AttributeError(name)
    module = __import__(__name__ + "." + _WHERE[name], None, None, (name,))
    value = getattr(module, name)
    globals()[name] = value
    return value
