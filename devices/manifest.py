# What of hutch.devices goes onto a board (MicroPython's manifest syntax; see core/manifest.py):
# all of it, in the bundle of a board that polls Modbus devices (python -m hutch.firmware.build
# --modbus, or hutch flash with a config that has a [[device]]). Loaded only by a [[device]].
package("hutch/devices", files=("__init__.py", "device.py", "registers.py", "rtu.py"))
