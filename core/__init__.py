"""hutch's broker core: AMQP 0-9-1 as a sans-IO state machine (no sockets, no clock).

Runs unchanged on CPython and MicroPython. Start at broker.Broker and
connection.Connection; the ports in hutch.ports drive it.
"""
