"""What RabbitMQ allows of a stream over AMQP 0-9-1, and how it words a refusal: the
declare (properties, argument values, the duration grammar of x-max-age), a consumer's
arguments (x-stream-offset's forms), and the operations a stream does not have.

The texts are those RabbitMQ 3.10 gives (checked against Debian's 3.10.8); where 3.10
crashes instead (a bad x-max-age or x-stream-offset string: 541), the 406 later releases
give. Loaded with core/streams/stream.py, when a broker first has a stream.
"""

from ...codec.errors import NOT_IMPLEMENTED, PRECONDITION_FAILED, Refused
from ...codec.wire import Timestamp, method_name, text
from ..arguments import QUEUE_ARGUMENTS, STREAM, as_bytes
from ..refusals import not_an_integer, type_name

MAX_SEGMENT_SIZE = 3000000000  # RabbitMQ's ?MAX_STREAM_MAX_SEGMENT_SIZE

# RabbitMQ's duration units (x-max-age, x-stream-offset intervals) in seconds; case matters:
# M is a month (30 days), m a minute.
DURATION_UNITS = {"Y": 365 * 86400, "M": 30 * 86400, "D": 86400, "h": 3600, "m": 60, "s": 1}

# Where a consumer starts (start_of), besides an offset of its own.
FIRST = 0
LAST = 1
NEXT = 2
OFFSET = 3
TIME = 4  # a moment, in ms on the broker's wall clock


def duration_ms(value):
    """A RabbitMQ duration ("7D", "1h", "30s": digits, then one of Y M D h m s) in ms; None if
    value is not one (also for zero, which RabbitMQ refuses)."""
    if not isinstance(value, (bytes, str)):
        return None
    value = text(value)  # (octets that are no UTF-8 come back as their repr: no duration)
    digits = value[:-1]
    unit = DURATION_UNITS.get(value[-1:])
    if unit is None or not digits or not digits.isdigit():  # isdigit: no sign, no space, no dot
        return None
    amount = int(digits)
    return amount * unit * 1000 if amount else None


def check_declare(name, durable, exclusive, auto_delete, arguments, method):
    """A new stream is named by its client, durable, not exclusive, not auto-delete, and its
    arguments are those a stream takes, with values RabbitMQ accepts."""
    if not name:
        raise Refused(
            PRECONDITION_FAILED,
            "Cannot declare a server-named queue for type rabbit_stream_queue",
            method,
        )
    for refused, what in ((not durable, "non-durable"), (exclusive, "exclusive-owner"), (auto_delete, "auto-delete")):
        if refused:
            raise Refused(
                PRECONDITION_FAILED,
                "invalid property '%s' for queue '%s' in vhost '/'" % (what, text(name)),
                method,
            )
    for key in arguments:
        row = QUEUE_ARGUMENTS.get(key)
        if row is not None and not row & STREAM:  # RabbitMQ's, for another queue type
            raise Refused(
                PRECONDITION_FAILED,
                "invalid arg '%s' for queue '%s' in vhost '/' of queue type rabbit_stream_queue" % (key, text(name)),
                method,
            )
    for key in ("x-max-length-bytes", "x-max-age", "x-stream-max-segment-size-bytes"):
        value = arguments.get(key)
        if value is None:
            continue
        if key == "x-max-age":
            why = None if duration_ms(value) is not None else _why_age(value)
        elif not isinstance(value, int) or isinstance(value, bool):
            why = not_an_integer(value)
        else:
            why = "{value_negative,%d}" % value if value < 0 else None
        if why is not None:
            raise Refused(
                PRECONDITION_FAILED,
                "invalid arg '%s' for queue '%s' in vhost '/': %s" % (key, text(name), why),
                method,
            )
        if key == "x-stream-max-segment-size-bytes" and value > MAX_SEGMENT_SIZE:
            raise Refused(PRECONDITION_FAILED, "Exceeded max value for %s" % key, method)


def _why_age(value):
    return "invalid_max_age" if isinstance(value, (bytes, str)) else "{unacceptable_type,%s}" % type_name(value)


def start_of(arguments, name, method):
    """Where a consumer with these arguments starts: (FIRST | LAST | NEXT, 0), (OFFSET, n) or
    (TIME, ms); RabbitMQ's 406 for x-priority and for an x-stream-offset it does not take."""
    if "x-priority" in arguments:
        raise Refused(
            PRECONDITION_FAILED,
            "invalid arg 'x-priority' for queue '%s' in vhost '/' of queue type rabbit_stream_queue" % text(name),
            method,
        )
    value = arguments.get("x-stream-offset")
    if value is None:
        return NEXT, 0
    if isinstance(value, (bytes, str)):
        word = as_bytes(value)
        if word == b"next":
            return NEXT, 0
        if word == b"first":
            return FIRST, 0
        if word == b"last":
            return LAST, 0
        interval = duration_ms(value)
        if interval is not None:
            return TIME, -interval  # before now: the caller adds the broker's wall clock
    elif isinstance(value, Timestamp):
        return TIME, value.seconds * 1000
    elif isinstance(value, int) and not isinstance(value, bool):
        return OFFSET, value
    raise Refused(
        PRECONDITION_FAILED,
        "invalid arg 'x-stream-offset' for queue '%s' in vhost '/': "
        "{invalid_stream_offset_arg,%s}" % (text(name), _erlang(value)),
        method,
    )


def _erlang(value):
    """A refused x-stream-offset as RabbitMQ prints it: {longstr,<<"5">>}, {bool,true}..."""
    if isinstance(value, (bytes, str)):
        octets = as_bytes(value)
        try:
            return '{longstr,<<"%s">>}' % octets.decode()
        except UnicodeError:  # not UTF-8: as Erlang prints a binary that is no text
            return "{longstr,<<%s>>}" % ",".join(str(octet) for octet in octets)
    if isinstance(value, bool):
        return "{bool,%s}" % ("true" if value else "false")
    return "{%s,...}" % type_name(value)


def check_consumer(consumer, name, method):
    """A stream consumer must have a prefetch (406), must ack (540), and its channel must not
    have a global prefetch (540): RabbitMQ's checks, in its order."""
    what = "queue '%s' in vhost '/'" % text(name)
    if not consumer.prefetch:
        raise Refused(PRECONDITION_FAILED, "consumer prefetch count is not set for '%s'" % what, method)
    if consumer.no_ack:
        raise Refused(
            NOT_IMPLEMENTED,
            "automatic acknowledgement not supported by stream queues " + what,
            method,
        )
    if consumer.session.prefetch_global:
        raise Refused(NOT_IMPLEMENTED, "%s does not support global qos" % what, method)


def refused(queue, method):
    """540 for what a stream does not do (basic.get, queue.purge, basic.recover)."""
    return Refused(
        NOT_IMPLEMENTED,
        "%s not supported by stream queues queue '%s' in vhost '/'" % (method_name(method), text(queue.name)),
        method,
    )
