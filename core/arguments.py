"""Queue and exchange arguments ("x-message-ttl", "alternate-exchange", ...), in one table.

Each argument hutch knows has one row: what its value must be, whether RabbitMQ
compares it when the queue or exchange is declared again (a redeclare that differs is
refused with 406), and whether a stream takes it (core/streams/streamrules.py checks a stream's
arguments, with RabbitMQ's words). Arguments that RabbitMQ gives a meaning hutch does not
implement are refused at declare: better than silently ignoring a promise the client
thinks it was given. Any other argument is kept but means nothing, as in RabbitMQ.

To support a new queue argument: add (or change) its row here, then act on it where the
queue reads its arguments (Queue.__init__ in core/queue.py).
"""

from ..codec.errors import PRECONDITION_FAILED, Refused
from ..codec.wire import text
from .exchange import freeze

# What a value must be (the row's low bits) ...
NON_NEGATIVE = 1
POSITIVE = 2
NAME = 3  # a string (bytes or str)
OVERFLOW_MODE = 4
CLASSIC = 5
QUEUE_MODE = 6
UNSUPPORTED = 7  # RabbitMQ's, not implemented by hutch: refused
# (more kinds: bit 5 with the low bits, past COMPARED and STREAM)
BOOLEAN = 32  # (core/refusals.py words the refusals of these two)
MAX_PRIORITY = 33  # an integer 0..255 (0: no priorities)
KIND = 39  # (7 | 32) a row's bits that say what its value must be
# ... whether a redeclare must repeat it (RabbitMQ's equivalence check) ...
COMPARED = 8
# ... and whether a stream (x-queue-type = stream) takes it; the two that only a stream
# takes are UNSUPPORTED on a classic queue.
STREAM = 16

QUEUE_ARGUMENTS = {
    "x-expires": POSITIVE | COMPARED,
    "x-message-ttl": NON_NEGATIVE | COMPARED,
    "x-max-length": NON_NEGATIVE | COMPARED,
    "x-max-length-bytes": NON_NEGATIVE | COMPARED | STREAM,
    "x-overflow": OVERFLOW_MODE | COMPARED,
    "x-dead-letter-exchange": NAME | COMPARED,
    "x-dead-letter-routing-key": NAME | COMPARED,
    "x-queue-type": CLASSIC | COMPARED | STREAM,
    "x-queue-mode": QUEUE_MODE | COMPARED,
    "x-max-priority": MAX_PRIORITY | COMPARED,
    "x-single-active-consumer": BOOLEAN | COMPARED,
    "x-queue-master-locator": UNSUPPORTED,
    "x-queue-leader-locator": UNSUPPORTED,
    "x-quorum-initial-group-size": UNSUPPORTED,
    "x-delivery-limit": UNSUPPORTED,
    "x-max-age": UNSUPPORTED | COMPARED | STREAM,
    "x-stream-max-segment-size-bytes": UNSUPPORTED | COMPARED | STREAM,
}
EXCHANGE_ARGUMENTS = {
    "alternate-exchange": NAME | COMPARED,
}

OVERFLOW_MODES = (b"drop-head", b"reject-publish", b"reject-publish-dlx")


def as_bytes(value):
    return value.encode() if isinstance(value, str) else value


def valid(kind, value):
    """Whether value is what an argument of this kind (a row's low bits) must be."""
    if kind == NAME:
        return isinstance(value, (bytes, str))
    if kind == OVERFLOW_MODE:
        return isinstance(value, (bytes, str)) and as_bytes(value) in OVERFLOW_MODES
    if kind == CLASSIC:
        return isinstance(value, (bytes, str)) and as_bytes(value) == b"classic"
    if kind == QUEUE_MODE:
        return isinstance(value, (bytes, str)) and as_bytes(value) in (b"default", b"lazy")
    if kind == BOOLEAN:
        return isinstance(value, bool)
    number = isinstance(value, int) and not isinstance(value, bool)
    if kind == MAX_PRIORITY:
        return number and 0 <= value <= 255
    if kind == POSITIVE:
        return number and value > 0
    return number and value >= 0  # NON_NEGATIVE


def check_queue_arguments(name, arguments):
    """Refuse (406) an argument hutch does not implement, or a known one with a bad value."""
    for key in arguments:
        row = QUEUE_ARGUMENTS.get(key)
        if row is None:
            continue
        kind = row & KIND
        if kind == UNSUPPORTED:
            raise Refused(
                PRECONDITION_FAILED,
                "queue argument '%s' is not supported by hutch (queue '%s')" % (key, text(name)),
            )
        if not valid(kind, arguments[key]):
            from .refusals import invalid_arg, why_invalid  # RabbitMQ's words: loaded with the first

            raise invalid_arg(key, name, why_invalid(kind, arguments[key]))


def check_equivalent(what, received, current, table, method):
    """A redeclare must repeat the arguments RabbitMQ compares (table: QUEUE_ARGUMENTS or
    EXCHANGE_ARGUMENTS); `what` names the queue or exchange in the 406's text."""
    for key in table:
        if table[key] & COMPARED and freeze(received.get(key)) != freeze(current.get(key)):
            from .refusals import shown  # RabbitMQ's words: loaded with the first refusal

            new, old = received.get(key), current.get(key)
            typed = new is None or old is None  # (RabbitMQ names the type only beside "none")
            raise Refused(
                PRECONDITION_FAILED,
                "inequivalent arg '%s' for %s in vhost '/': received %s but current is %s"
                % (key, what, shown(new, typed), shown(old, typed)),
                method,
            )
