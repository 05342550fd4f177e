"""The [[device]] tables of the config file, checked: one dict per device, or ConfigError.

    [[device]]
    name = "probe-1"
    uri = "modbus+tcp://10.0.0.5:502"   # or "modbus+rtu:///dev/ttyUSB0?baudrate=9600&parity=E&stopbits=1"
    unit = 1                            # the Modbus unit (slave) id
    interval = 10.0                     # seconds between polls
    registers = [
      { name = "moisture", address = 0, kind = "holding", type = "uint16", scale = 0.1, unit = "%" },
      { name = "temp", address = 2, kind = "input", type = "float32" },
    ]

Devices whose URIs name one TCP address or one serial line share it (server/devices/polling.py: one
request at a time). Every mistake is one ConfigError naming the device and the key, so `hutch
serve` says it in one line and exits with 2 rather than polling a device that cannot answer.
"""

import sys

from ...devices.modbus.registers import width
from .. import schema
from ..config import ConfigError, did_you_mean

# One row per key, as server/schema.py's rows (section, key, kind, default, flag, help,
# description): "device" (a [[device]] table), "device.registers" (each of its registers),
# "device.uri" (a modbus+rtu:// URI's query options). Kinds: schema.table_setting's.
# docs/_ext/config_reference.py makes the reference's tables from the rows.
# fmt: off
ROWS = (
    ("device", "name", "text", None, None, None,
     "The device's name, unique in the file: its readings' sensor ids (`NAME.REGISTER`), its "
     "status topic (`status.NAME`), logs and `hutch ctl devices`. Required."),
    ("device", "uri", "text", None, None, None,
     "Where it answers: `modbus+tcp://host:502` (Modbus TCP), or `modbus+rtu:///dev/ttyUSB0` "
     "(Modbus RTU on a serial line, RS-485) with the line's settings as query options. Required."),
    ("device", "unit", "whole", 1, None, None,
     "Its Modbus unit id (the slave address on an RS-485 line; a TCP gateway's device behind it)."),
    ("device", "interval", "number", 10.0, None, None,
     "Seconds between polls (more than 0)."),
    ("device", "timeout", "number", 1.0, None, None,
     "Seconds to wait for an answer to one request (more than 0)."),
    ("device", "retries", "whole", 2, None, None,
     "Requests sent again after a timeout, before the poll counts as failed."),
    ("device", "exchange", "text", "amq.topic", None, None,
     "The exchange the readings and status messages are published to."),
    ("device", "routing_key", "text", "sensors.{device}", None, None,
     "The readings' routing key: `{device}` and `{register}` are filled in."),
    ("device", "registers", "tables", None, None, None,
     "What to read: a list of tables of the keys below, read in as few requests as their "
     "addresses allow. Required."),
    # a device's registers = [{...}]
    ("device.registers", "name", "text", None, None, None,
     "The register's name in the readings (required; unique in the device)."),
    ("device.registers", "address", "whole", None, None, None,
     "Its address, from 0 as the device's manual numbers them (required)."),
    ("device.registers", "kind", "text", "holding", None, None,
     "`holding` (function 3), `input` (4), `coil` (1) or `discrete` (2)."),
    ("device.registers", "type", "text", None, None, None,
     "`int16`, `uint16`, `int32`, `uint32`, `float32`, `float64` or `bool`. Default: `uint16` for "
     "registers, `bool` for coils and discrete inputs (the only type they take)."),
    ("device.registers", "word_order", "text", "big", None, None,
     "`big`: the first register holds the high word (Modbus's order); `little` for devices that "
     "put the low word first."),
    ("device.registers", "byte_order", "text", "big", None, None,
     "`big`: each register's high byte first (Modbus's order); `little` swaps them."),
    ("device.registers", "scale", "signed", 1.0, None, None,
     "The reading is the raw value times this, plus `offset`."),
    ("device.registers", "offset", "signed", 0.0, None, None,
     "Added to the scaled value."),
    ("device.registers", "unit", "text", None, None, None,
     "What the value is measured in, carried in each reading (`%`, `°C`, `kWh`)."),
    ("device.registers", "writable", "bool", False, None, None,
     "`true`: a command published to `cmd.DEVICE.REGISTER` sets it (holding registers and coils "
     "only); the publisher's permissions apply, and the answer goes to its `reply_to`."),
    # a modbus+rtu:// URI's query options
    ("device.uri", "baudrate", "whole", 9600, None, None,
     "The serial line's speed in bits per second."),
    ("device.uri", "parity", "text", "N", None, None,
     "`N` (none), `E` (even) or `O` (odd)."),
    ("device.uri", "stopbits", "whole", 1, None, None,
     "1 or 2."),
    ("device.uri", "bytesize", "whole", 8, None, None,
     "Data bits per character: 7 or 8."),
    ("device.uri", "tx", "whole", None, None, None,
     "A board's UART (`modbus+rtu://uart2`): the pin it sends on, if not the UART's own."),
    ("device.uri", "rx", "whole", None, None, None,
     "A board's UART: the pin it receives on, if not the UART's own."),
)
# fmt: on
KEYS = schema.keys_of("device", ROWS)
REGISTER_KEYS = schema.keys_of("device.registers", ROWS)
URI_OPTIONS = schema.keys_of("device.uri", ROWS)
RANGES = {
    "unit": (0, 247),  # 0 is broadcast over RTU; TCP gateways also use 255: not polled
    "retries": (0, 10),
    "address": (0, 65535),
    "baudrate": (300, 4000000),
    "stopbits": (1, 2),
    "bytesize": (7, 8),
    "tx": (0, 255),
    "rx": (0, 255),
}
KINDS = ("holding", "input", "coil", "discrete")
TYPES = ("int16", "uint16", "int32", "uint32", "float32", "float64", "bool")
ORDERS = ("big", "little")
PARITIES = ("N", "E", "O")


def devices_from(data, path="config"):
    """The checked devices of a config file's data (config.read): a list of dicts."""
    tables = data.get("device", [])
    if isinstance(tables, dict):  # JSON written as one object rather than a list of them
        tables = [tables]
    if not isinstance(tables, list):
        raise ConfigError("%s: [[device]] must be a list of tables" % path)
    devices = []
    names = set()
    serial_lines = {}  # a serial device -> the first [[device]] on it: one line has one set of settings
    for i, table in enumerate(tables):
        if not isinstance(table, dict):
            raise ConfigError("%s: [[device]] #%d must be a table" % (path, i + 1))
        device = _device(table, path, i + 1)
        if device["name"] in names:
            raise ConfigError("%s: a second device named '%s'" % (path, device["name"]))
        names.add(device["name"])
        line = device["line"]
        if line["transport"] == "rtu":
            first = serial_lines.setdefault(line["port"], device)
            differ = [key for key in sorted(line) if line[key] != first["line"][key]]
            if differ:
                raise ConfigError(
                    "%s: device '%s': its serial line %s is device '%s''s, with other settings (%s): "
                    "devices on one line share its settings"
                    % (path, device["name"], line["port"], first["name"],
                       ", ".join("%s %s, not %s" % (key, line[key], first["line"][key]) for key in differ))
                )  # fmt: skip
        devices.append(device)
    return devices


def _setting(table, key, where, section="device"):
    return schema.table_setting(ROWS, table, key, where, section, RANGES)


def _unknown(table, known, where, what):
    for key in table:
        if key not in known:
            raise ConfigError(
                "%s: unknown key '%s'%s%s (known: %s)" % (where, key, what, did_you_mean(key, known), ", ".join(known))
            )


def _device(table, path, number):
    where = "%s: [[device]] #%d" % (path, number)
    _unknown(table, KEYS, where, "")
    name = table.get("name")
    if not isinstance(name, str) or not name or "." in name or "/" in name:
        raise ConfigError('%s needs name = "..." (no "." or "/": it names topics and sensor ids)' % where)
    where = "%s: device '%s'" % (path, name)
    uri = table.get("uri")
    if not isinstance(uri, str) or not uri:
        raise ConfigError('%s needs uri = "modbus+tcp://host:502" or "modbus+rtu:///dev/ttyUSB0"' % where)
    device = {
        "name": name,
        "uri": uri,
        "line": parse_uri(uri, where),
        "unit": _setting(table, "unit", where),
        "interval": _setting(table, "interval", where),
        "timeout": _setting(table, "timeout", where),
        "retries": _setting(table, "retries", where),
        "exchange": _setting(table, "exchange", where),
        "routing_key": _setting(table, "routing_key", where),
        "registers": _registers(table, where),
    }
    for key in ("interval", "timeout"):
        if not device[key] > 0:
            raise ConfigError("%s: %s must be more than 0 seconds, not %r" % (where, key, table.get(key)))
    return device


def _registers(table, where):
    registers = table.get("registers")
    if not isinstance(registers, list) or not registers or not all(isinstance(one, dict) for one in registers):
        raise ConfigError(
            '%s needs registers = [{ name = "...", address = N, kind = "holding", type = "uint16" }, ...]' % where
        )
    out = []
    names = set()
    for one in registers:
        _unknown(one, REGISTER_KEYS, where, " in a register")
        name = one.get("name")
        if not isinstance(name, str) or not name or "." in name or "/" in name:
            raise ConfigError('%s: each register needs name = "..." (no "." or "/")' % where)
        if name in names:
            raise ConfigError("%s: a second register named '%s'" % (where, name))
        names.add(name)
        at = "%s: register '%s'" % (where, name)
        address = _setting(one, "address", at, "device.registers")
        if address is None:
            raise ConfigError("%s needs address = N (from 0)" % at)
        kind = _choice(one, "kind", KINDS, at)
        bits = kind in ("coil", "discrete")
        kind_type = one.get("type", "bool" if bits else "uint16")
        if kind_type not in TYPES:
            raise ConfigError("%s: type must be one of %s, not %r" % (at, ", ".join(TYPES), kind_type))
        if bits and kind_type != "bool":
            raise ConfigError('%s: a %s is one bit: its type is "bool", not %r' % (at, kind, kind_type))
        register = {
            "name": name,
            "address": address,
            "kind": kind,
            "type": kind_type,
            "word_order": _choice(one, "word_order", ORDERS, at),
            "byte_order": _choice(one, "byte_order", ORDERS, at),
            "scale": _setting(one, "scale", at, "device.registers"),
            "offset": _setting(one, "offset", at, "device.registers"),
            "unit": _setting(one, "unit", at, "device.registers"),
            "writable": _setting(one, "writable", at, "device.registers"),
        }
        if register["writable"] and kind not in ("holding", "coil"):
            raise ConfigError(
                "%s: writable: Modbus writes holding registers and coils, not %s"
                % (at, "input registers" if kind == "input" else "discrete inputs")
            )
        if register["scale"] == 1 and register["offset"] == 0:
            register["scale"], register["offset"] = 1, 0  # (whole raw values stay whole)
        if address + width(register) > 65536:
            raise ConfigError("%s: %s at %d runs past address 65535" % (at, kind_type, address))
        out.append(register)
    return out


def _choice(table, key, choices, where):
    value = _setting(table, key, where, "device.registers")
    if value not in choices:
        raise ConfigError("%s: %s must be one of %s, not %r" % (where, key, ", ".join(choices), value))
    return value


def parse_uri(uri, where):
    """{"transport": "tcp", "host", "port"} of a modbus+tcp:// URI, or {"transport": "rtu",
    "port" (the serial device), "baudrate", "parity", "stopbits", "bytesize"} of a
    modbus+rtu:// one; ConfigError naming what is wrong."""
    scheme, sep, rest = uri.partition("://")
    if not sep or scheme not in ("modbus+tcp", "modbus+rtu"):
        raise ConfigError(
            "%s: uri %r: the scheme must be modbus+tcp:// or modbus+rtu:// (%s)"
            % (where, uri, "modbus+tcp://host:502, modbus+rtu:///dev/ttyUSB0?baudrate=9600")
        )
    if scheme == "modbus+tcp" and sys.implementation.name == "micropython":
        raise ConfigError(
            "%s: uri %r: a board polls Modbus RTU devices on its serial lines (modbus+rtu://uart2), "
            "not Modbus TCP" % (where, uri)
        )
    if scheme == "modbus+tcp":
        hostport = rest.split("/", 1)[0]
        if hostport.startswith("["):  # an IPv6 address: [::1]:502
            host, _, after = hostport[1:].partition("]")
            port = after[1:] if after.startswith(":") else "502"
        else:
            host, colon, port = hostport.partition(":")
            port = port if colon else "502"
        if not host or not port.isdigit() or not 0 < int(port) < 65536 or "?" in rest:
            raise ConfigError("%s: uri %r: expected modbus+tcp://host:port (port 502 if left out)" % (where, uri))
        return {"transport": "tcp", "host": host, "port": int(port)}
    path, _, query = rest.partition("?")
    if not path.startswith("/") and not (path.startswith("uart") and path[4:].isdigit()):
        raise ConfigError(
            "%s: uri %r: expected modbus+rtu:///dev/ttyUSB0 (three slashes: the serial device's path), "
            "or a board's UART, modbus+rtu://uart2" % (where, uri)
        )
    if not path.startswith("/") and sys.implementation.name != "micropython":
        raise ConfigError("%s: uri %r: %s is a board's UART; here, name the serial device's path" % (where, uri, path))
    options = {}
    for pair in query.split("&") if query else ():
        key, eq, value = pair.partition("=")
        if key not in URI_OPTIONS:
            raise ConfigError(
                "%s: uri %r: unknown option '%s'%s (known: %s)"
                % (where, uri, key, did_you_mean(key, URI_OPTIONS), ", ".join(URI_OPTIONS))
            )
        if key != "parity":
            if not eq or not value.isdigit():
                raise ConfigError("%s: uri %r: %s must be a whole number, not %r" % (where, uri, key, value))
            value = int(value)
        options[key] = value
    line = {"transport": "rtu", "port": path}
    for key in URI_OPTIONS:
        line[key] = _setting(options, key, "%s: uri %r" % (where, uri), "device.uri")
    if path.startswith("/") and (line["tx"] is not None or line["rx"] is not None):
        raise ConfigError(
            "%s: uri %r: tx and rx are a board UART's pins (modbus+rtu://uart2?tx=17&rx=16)" % (where, uri)
        )
    if line["parity"] not in PARITIES:
        raise ConfigError("%s: uri %r: parity must be N, E or O, not %r" % (where, uri, line["parity"]))
    return line
