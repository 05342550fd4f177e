"""The check of each key of a config table that repeats ([[bridge]] and its classes,
[[device]] and its registers), by its row in server/schema.py's format. A module of its own:
loaded only by a config with bridges or devices (server/bridge_config.py,
server/device_config.py), so a board that has neither keeps none of its names in its heap."""

from .schema import DEFAULT, KIND, ConfigError, check, row_of


def setting(rows, table, key, where, section, ranges=None, units=None, default=None):
    """A key of a config table that repeats ([[bridge]], [[device]] and their inner tables),
    checked by its row of rows (section, key): its KINDS kind, or "number" (at least 0, a
    fraction allowed, in its unit: units, else seconds), "signed" (any number) and "whole"
    (within its bounds: ranges, else a count from 0 to 2 ** 50). Absent: the row's default (or
    default, when the row's is None)."""
    row = row_of(section, key, rows)
    kind = row[KIND]
    value = table.get(key)
    if value is None:
        value = row[DEFAULT]
        if value is None:
            return default
    elif kind == "whole":
        low, high = (ranges or {}).get(key, (0, 1 << 50))
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise ConfigError("%s: %s must be a whole number from %d to %d, not %r" % (where, key, low, high, value))
    elif kind in ("number", "signed"):
        if not isinstance(value, (int, float)) or isinstance(value, bool) or (kind == "number" and value < 0):
            wording = (units or {}).get(key, "a number of seconds") if kind == "number" else "a number"
            raise ConfigError("%s: %s must be %s, not %r" % (where, key, wording, value))
    else:
        check(kind, value, lambda: "%s: %s" % (where, key))
    return float(value) if kind in ("number", "signed") else value
