# What of hutch.devices goes onto a board (MicroPython's manifest syntax; see core/manifest.py):
# all of it, in the bundle of a board that polls Modbus devices (python -m hutch.firmware.build
# --modbus, or hutch flash with a config that has a [[device]]). Loaded only by a [[device]]:
# the device model and its line's contract here, its field protocol in its folder (modbus/).
package("hutch/devices", files=("__init__.py", "device.py", "line.py"))
package("hutch/devices/modbus", files=("__init__.py", "pdu.py", "registers.py", "rtu.py"))
