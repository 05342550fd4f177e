"""RabbitMQ's words for an argument value it refuses (its Erlang terms, after the colon of a
406's text): a field-table type's name, an integer that is not one, a value shown beside
another in an equivalence refusal.

Loaded with the first such refusal (core/arguments.py, core/broker.py, core/streams/streamrules.py):
a board whose clients declare and consume with valid arguments does not hold it.
"""

from ..codec.errors import PRECONDITION_FAILED, Refused
from ..codec.wire import text

# (core/arguments.py's kinds of value, as its rows have them)
BOOLEAN = 32
MAX_PRIORITY = 33


def invalid_arg(key, queue_name, why, method=0):
    return Refused(
        PRECONDITION_FAILED,
        "invalid arg '%s' for queue '%s' in vhost '/': %s" % (key, text(queue_name), why),
        method,
    )


def why_invalid(kind, value):
    """What RabbitMQ's refusal of an invalid value says after the colon (its Erlang term)."""
    if kind == BOOLEAN:
        return "{unacceptable_type,%s}" % type_name(value)
    if kind == MAX_PRIORITY:
        if not isinstance(value, int) or isinstance(value, bool):
            return not_an_integer(value)
        return "{%s,%d}" % ("value_negative" if value < 0 else "max_value_exceeded", value)
    return repr(value)


def not_an_integer(value):
    return '"expected integer, got %s"' % type_name(value)


def type_name(value):
    """The field-table type of a decoded value, as RabbitMQ names it (clients send strings as
    longstr)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "signedint" if -0x80000000 <= value <= 0x7FFFFFFF else "long"
    if isinstance(value, (bytes, str)):
        return "longstr"
    if isinstance(value, bytearray):
        return "binary"
    if isinstance(value, float):
        return "double"
    if isinstance(value, dict):
        return "table"
    if isinstance(value, list):
        return "array"
    if value is None:
        return "void"
    return "timestamp"


def shown(value, typed):
    """An argument's value as RabbitMQ's equivalence refusal shows it: 'value', or with its
    type when the other one is missing ("none")."""
    if value is None:
        return "none"
    kind = type_name(value)
    if isinstance(value, bool):
        value = "true" if value else "false"
    elif isinstance(value, str):
        value = text(value.encode())
    elif isinstance(value, bytes):
        value = text(value)
    if typed:
        return "the value '%s' of type '%s'" % (value, kind)
    return "'%s'" % value
