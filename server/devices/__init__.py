"""The devices' wing of the broker program: the [[device]] tables checked (config.py), the
devices polled into the broker (polling.py) over their lines (modbus_lines.py: pymodbus on
CPython; rtu_master.py: a board's own Modbus RTU master), and the commands to their writable
registers (commands.py). What a device is and what its reads become is devices/'s, sans-IO.
"""
