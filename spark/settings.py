"""`hutch pipeline`'s settings, checked before anything slow starts: the durations, the trigger
and the readings' schema. Plain Python (no pyspark): a mistake here is one line and exit 2
in a fraction of a second, not after Spark's 10 s start.

A mistake is a SettingError whose message names the option and says what is wrong.
"""

import re

DEFAULT_SCHEMA = "sensor STRING, ts TIMESTAMP, value DOUBLE"

# What the aggregation needs of each reading, and the types the schema may give them. `ts` is
# read as the JSON's text whatever its declared type (readings.py: ISO-8601 or epoch seconds).
REQUIRED = {
    "sensor": ("STRING", "VARCHAR", "CHAR", "INT", "INTEGER", "BIGINT", "LONG", "SMALLINT", "TINYINT"),
    "ts": ("TIMESTAMP", "STRING", "DOUBLE", "FLOAT", "BIGINT", "LONG", "INT", "INTEGER", "DECIMAL"),
    "value": ("DOUBLE", "FLOAT", "REAL", "DECIMAL", "INT", "INTEGER", "BIGINT", "LONG", "SMALLINT", "TINYINT"),
}

# Spark's interval units (what F.window and withWatermark take: "1 minute", "90 seconds").
_UNITS = ("millisecond", "second", "minute", "hour", "day", "week")
_DURATION = re.compile(r"^(\s*\d+\s*(%s)s?\s*)+$" % "|".join(_UNITS), re.IGNORECASE)
# --trigger processing=10s: short units too, as an operator types them
_SHORT = {"ms": "milliseconds", "s": "seconds", "m": "minutes", "h": "hours"}
_PROCESSING = re.compile(r"^processing=(\d+)\s*(ms|s|m|h|%s)s?$" % "|".join(_UNITS), re.IGNORECASE)


class SettingError(ValueError):
    """A bad option: exit 2."""


def duration(option, text):
    """A Spark interval such as "1 minute" or "1 hour 30 minutes", checked."""
    if not _DURATION.match(text or "") or not re.search(r"[1-9]", text):
        raise SettingError(
            '%s must be a duration such as "1 minute", "30 seconds" or "1 hour", not %r (units: %s)'
            % (option, text, ", ".join(_UNITS))
        )
    return " ".join(text.split())


_SECONDS = {"millisecond": 0.001, "second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800}


def seconds(text):
    """A checked duration (duration()) in seconds: "1 hour 30 minutes" is 5400."""
    total = 0.0
    for count, unit in re.findall(r"(\d+)\s*([a-z]+?)s?\b", text.lower()):
        total += int(count) * _SECONDS[unit]
    return total


def trigger(text):
    """--trigger: ("available-now", None) or ("processing", "10 seconds"). `once` is
    available-now: Spark 4 deprecates Trigger.Once, and available-now does the same (everything
    there is, then stop) in batches of --max-offsets-per-trigger."""
    text = (text or "").strip().lower()
    if text in ("once", "available-now", "availablenow"):
        return ("available-now", None)
    found = _PROCESSING.match(text)
    if found and int(found.group(1)) > 0:
        unit = found.group(2).lower()
        return ("processing", "%s %s" % (found.group(1), _SHORT.get(unit, unit + "s")))
    raise SettingError(
        "--trigger must be once, available-now or processing=DURATION (such as processing=10s), not %r" % text
    )


def schema_fields(ddl):
    """[(name, TYPE)] of a Spark DDL schema's top-level fields, as far as they can be told
    without Spark: fields split at the commas outside <...> and (...), a field's name is its
    first word (backquotes allowed), its type the next (upper case, without (p, s) or <...>).
    Spark parses the whole string again when the job starts, and says what it cannot parse."""
    fields = []
    for part in _top_level(ddl):
        part = part.strip()
        found = re.match(r"^(`[^`]+`|[A-Za-z_][A-Za-z0-9_]*)\s*:?\s*([A-Za-z_]+)", part)
        if not found:
            raise SettingError('--schema: %r is not a field such as "value DOUBLE" (in %r)' % (part, ddl))
        fields.append((found.group(1).strip("`"), found.group(2).upper()))
    return fields


def check_schema(ddl):
    """The schema DDL, checked for the fields the aggregation needs (sensor, ts, value) and
    their types."""
    if not (ddl or "").strip():
        raise SettingError("--schema is empty: give fields such as %r" % DEFAULT_SCHEMA)
    fields = dict((name, type_) for name, type_ in schema_fields(ddl))
    for name, allowed in REQUIRED.items():
        if name not in fields:
            raise SettingError("--schema has no field %r: the pipeline needs sensor, ts and value (%r)" % (name, ddl))
        if fields[name] not in allowed:
            raise SettingError(
                "--schema: %s is %s, which the pipeline cannot use (one of: %s)"
                % (name, fields[name], ", ".join(allowed))
            )
    return ddl.strip()


FIELDS = ("sensor", "ts", "value")
_JSON_PATH = re.compile(r"^[A-Za-z_$@][\w$@-]*(\[\d+\])*(\.[A-Za-z_$@][\w$@-]*(\[\d+\])*)*$")
_ROUTING_WORD = re.compile(r"^routing_key\[(\d+)\]$")


def fields(text):
    """--fields "sensor=WHERE,ts=WHERE,value=WHERE": where each field of a reading is, for a body
    whose JSON is not flat (Tasmota's {"Time": ..., "SHT3X": {"Temperature": ...}}) or that does
    not name its sensor. WHERE is a path into the JSON body (levels joined by dots, [N] for an
    array's item: SHT3X.Temperature), routing_key[N] (the Nth word of the routing key, from 0:
    tele.greenhouse-1.SENSOR's 1 is greenhouse-1) or header:NAME (a header's value). The
    three, as {name: (kind, where)}: kind "json" (a JSON path, $.SHT3X.Temperature),
    "routing_key" (N) or "header" (NAME)."""
    found = {}
    for part in (text or "").split(","):
        name, sep, where = (piece.strip() for piece in part.partition("="))
        if not sep or not where:
            raise SettingError('--fields takes NAME=WHERE pairs such as "sensor=routing_key[1],ts=Time", not %r' % part)
        if name not in FIELDS:
            raise SettingError("--fields names %r: the fields are %s" % (name, ", ".join(FIELDS)))
        if name in found:
            raise SettingError("--fields names %s twice" % name)
        word = _ROUTING_WORD.match(where)
        if word:
            found[name] = ("routing_key", int(word.group(1)))
        elif where.startswith("header:") and len(where) > 7:
            found[name] = ("header", where[7:])
        elif _JSON_PATH.match(where):
            found[name] = ("json", "$." + where)
        else:
            raise SettingError(
                "--fields: %s=%s is not a JSON path (such as SHT3X.Temperature), routing_key[N] or header:NAME"
                % (name, where)
            )
    missing = [name for name in FIELDS if name not in found]
    if missing:
        raise SettingError("--fields says nothing of %s: the pipeline needs sensor, ts and value" % ", ".join(missing))
    return found


def _top_level(text):
    """text split at the commas that are not inside <...> or (...)."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char in "<(":
            depth += 1
        elif char in ">)":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    if any(not part.strip() for part in parts):
        raise SettingError("--schema %r has an empty field (a comma too many?)" % text)
    return parts
