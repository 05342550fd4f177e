# What a sensor node runs: hutch.client and hutch.codec, which it speaks through
# (MicroPython's manifest syntax; see core/manifest.py). `python -m hutch.firmware.build --node`
# stages exactly these files.
package(
    "hutch/client",
    files=("__init__.py", "clock.py", "protocol.py", "robust.py", "sensor.py", "simple.py", "tls.py", "transport.py"),
)
# the AMQP 0-9-1 wire module the client speaks through (with the spec table and DecodeError,
# and the read buffer it assembles frames in),
# and the serial link layer, for a node on a UART (client/transport.py's Serial)
# and the PEM reader of client/tls.py (MicroPython's TLS takes DER), and the words for a
# message property of the wrong kind (loaded only then)
package(
    "hutch/codec",
    files=("__init__.py", "errors.py", "link.py", "pem.py", "property_types.py", "readbuffer.py", "spec.py", "wire.py"),
)
