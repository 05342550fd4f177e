"""The bridges' wing of the broker program: a [[bridge]] table checked (config.py, with the
protocols a bridge speaks upstream: upstreams.py), made into running bridges (setup.py), and
each run by its asyncio driver (driver.py: sockets, TLS, sleeps; its decisions are
core/bridge/'s), which speaks upstream through its protocol's module (amqp091.py, amqp10.py,
mqtt.py: the client of that protocol, its events in the bridge's words), probes earlier URIs
with prefer_first (probe.py) and keeps a stream source's offset (offsets.py).
"""
