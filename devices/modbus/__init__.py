"""Modbus, the field protocol of a [[device]]: a device's registers planned into reads and their
words decoded (registers.py), the protocol data units of a read or a write and what an answer's
say (pdu.py), and RTU's framing of them on a serial line, a unit id before and a CRC after
(rtu.py). Sans-IO: a line (devices/line.py) sends and reads the octets.
"""
