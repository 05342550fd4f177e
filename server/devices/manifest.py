# The [[device]]s of a board that polls Modbus devices (MicroPython's manifest syntax; see
# core/manifest.py): in the bundle with devices/manifest.py. rtu_master.py is the board's Modbus
# RTU master (a board has no pymodbus). Imported only when the config has a [[device]].
package("hutch/server/devices", files=("__init__.py", "commands.py", "config.py", "polling.py", "rtu_master.py"))
