# What a sensor node runs: hutch.client and the parts of hutch.core it speaks through
# (MicroPython's manifest syntax; see core/manifest.py). `python -m hutch.firmware.build --node`
# stages exactly these files.
package("hutch/client", files=("__init__.py", "transport.py"))
# the serial link layer, for a node on a UART (client/transport.py's Serial)
package("hutch/core", files=("__init__.py", "link.py"))
