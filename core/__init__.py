"""hutch's broker model, protocol-neutral and sans-IO (no sockets, no clock): the broker,
exchanges, queues, messages, topology, budgets; its durability (store/), stream queues
(streams/) and the local side of bridges (bridge/).

Runs unchanged on CPython and MicroPython. Start at broker.Broker; the front ends (hutch.amqp091
for AMQP 0-9-1, hutch.amqp10 for AMQP 1.0) speak a protocol on top of it, and the ports in
hutch.ports move the bytes. What the broker asks of a front end is written in session.py; what a
port asks of a front end's connection, in connections.py (PortConnection: the port contract).
"""
