"""Field devices polled into the broker: the south side of a gateway.

A `[[device]]` of the config (server/devices/config.py) is a Modbus device, over TCP or on an
RS-485 line, polled every `interval` seconds; each poll's values are published into the broker
as readings, numbered so that the sensor dedup, the bridge and `hutch pipeline` take each once.

- registers.py: which reads fetch a device's registers, and what their words say (sans-IO).
- device.py: one device's state, numbering and readings: what a poll publishes, when the
  device is up or down, what is counted (sans-IO).
- rtu.py: Modbus RTU frames, a request's octets and what an answer's say (sans-IO).

server/devices/polling.py drives them: on CPython through pymodbus (the modbus extra), on a board
through its own RTU master (server/devices/rtu_master.py, with rtu.py's frames).
"""
