"""Transports and platform glue that drive the sans-IO core: TCP and TLS on asyncio (tcp.py; on
CPython tcp_cpython.py, its sockets on Linux epoll_sockets.py, and tls_cpython.py, and websocket.py, MQTT's WebSocket framing), serial
links (serial.py), the journal's and the
streams' files (storage.py, streams.py), the metrics and status page, the clock, logging.

A port moves bytes between a transport and a connection of whatever front end the listener's
server/frontends.py FrontEnds chose, through the port contract of core/connections.py; it
imports no front end."""
