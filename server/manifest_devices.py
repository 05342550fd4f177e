# The [[device]]s of a board that polls Modbus devices: added to the bundle's server
# (manifest.py) with devices/manifest.py. rtu_master.py is the board's Modbus RTU master (a
# board has no pymodbus). Imported only when the config has a [[device]].
package("hutch/server", files=("device_commands.py", "device_config.py", "devices.py", "rtu_master.py"))
