"""Field devices polled into the broker: the south side of a gateway.

A `[[device]]` of the config (server/devices/config.py) is a Modbus device, over TCP or on an
RS-485 line, polled every `interval` seconds; each poll's values are published into the broker
as readings, numbered so that the sensor dedup, the bridge and `hutch pipeline` take each once.

- device.py: one device's state, numbering and readings: what a poll publishes, when the
  device is up or down, what is counted (sans-IO, whatever its protocol).
- line.py: the contract of a line devices are polled on (poll, write, close; one request at a
  time), the base of each protocol's, and how a poll or a write fails (Failed: timeout,
  exception, error, gone).
- modbus/: the field protocol, sans-IO: registers planned into reads and decoded
  (registers.py), the PDUs of a read or a write (pdu.py), RTU's framing (rtu.py).

server/devices/polling.py drives them: on CPython through pymodbus (the modbus extra), on a board
through its own RTU master (server/devices/rtu_master.py, with modbus/rtu.py's frames). A second
field protocol is a folder beside modbus/ and a line of its own.
"""
