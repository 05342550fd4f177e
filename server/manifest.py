# What of hutch.server goes onto a board (MicroPython's manifest syntax; see core/manifest.py):
# the broker's entry point that firmware/main.py starts; all but control.py, host.py, listing.py
# and reload.py, what serves `hutch ctl` and SIGHUP (CPython: a board has neither). monitoring.py:
# the metrics port, loaded only when the config has one. The bridges' wing (bridges/): amqp091.py,
# amqp10.py and mqtt.py, each loaded only by a bridge over its protocol; offsets.py, only by a
# stream source; upstreams.py and config.py, to check a config with bridges. The [[device]]s'
# wing is devices/manifest.py's, in the bundle of a board that polls Modbus devices.
package(
    "hutch/server",
    files=(
        "__init__.py",
        "config.py",
        "definitions.py",
        "frontends.py",
        "listeners.py",
        "monitoring.py",
        "options.py",
        "readable.py",
        "runtime.py",
        "schema.py",
        "serve.py",
        "startup.py",
    ),
)
package(
    "hutch/server/bridges",
    files=(
        "__init__.py",
        "amqp091.py",
        "amqp10.py",
        "config.py",
        "driver.py",
        "mqtt.py",
        "offsets.py",
        "probe.py",
        "setup.py",
        "upstreams.py",
    ),
)
# a bridge's upstream side is the sensor client's protocol (imported only with a [[bridge]])
package("hutch/client", files=("__init__.py", "clock.py", "protocol.py"))
