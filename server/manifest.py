# What of hutch.server goes onto a board (MicroPython's manifest syntax; see core/manifest.py):
# the broker's entry point that firmware/main.py starts; all but control.py, host.py, listing.py
# and reload.py, what serves `hutch ctl` and SIGHUP (CPython: a board has neither). monitoring.py:
# the metrics port, loaded only when the config has one; bridge091.py, bridge10.py and
# bridgemqtt.py, each only by a bridge over its protocol; bridge_offsets.py, only by a stream
# source; upstreams.py, to check a config with bridges. The [[device]]s' modules are in
# manifest_devices.py, in the bundle of a board that polls Modbus devices.
package(
    "hutch/server",
    files=(
        "__init__.py",
        "bridge.py",
        "bridge091.py",
        "bridge_probe.py",
        "bridge10.py",
        "bridgemqtt.py",
        "bridge_config.py",
        "bridge_offsets.py",
        "bridge_setup.py",
        "upstreams.py",
        "config.py",
        "definitions.py",
        "frontends.py",
        "monitoring.py",
        "options.py",
        "readable.py",
        "runtime.py",
        "schema.py",
        "serve.py",
        "startup.py",
    ),
)
# a bridge's upstream side is the sensor client's protocol (imported only with a [[bridge]])
package("hutch/client", files=("__init__.py", "clock.py", "protocol.py"))
