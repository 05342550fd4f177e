"""What goes wrong, in no protocol's words: bytes that do not parse (DecodeError), and what the
broker refuses a client (Refused; core/session.py says how each front end words it).

(Refused is here, at the bottom of the layers, because every layer raises or words it and a
board loads this module anyway: a module of its own costs a board's heap ~0.5 KiB.)"""

# What the broker refuses with (Refused.condition), by RabbitMQ's names for them (rabbit_framing's
# amqp_exception atoms). Numbers, not strings: a board's build folds these into its bytecode,
# where each string would cost its heap a qstr. amqp091/replies.py and amqp10/links.py word them.
CONTENT_TOO_LARGE = 1
NO_ROUTE = 2
NO_CONSUMERS = 3
CONNECTION_FORCED = 4
INVALID_PATH = 5
ACCESS_REFUSED = 6
NOT_FOUND = 7
RESOURCE_LOCKED = 8
PRECONDITION_FAILED = 9
FRAME_ERROR = 10
SYNTAX_ERROR = 11
COMMAND_INVALID = 12
CHANNEL_ERROR = 13
UNEXPECTED_FRAME = 14
RESOURCE_ERROR = 15
NOT_ALLOWED = 16
NOT_IMPLEMENTED = 17
INTERNAL_ERROR = 18


class DecodeError(Exception):
    """Bytes that do not parse; the connection reports it as 501 or 502."""

    def __init__(self, text, code=501):
        super().__init__(text)
        self.code = code


class Refused(Exception):
    """The broker refuses what a client asked: `condition` says why (one of the names above),
    `text` says it for a person ("no queue 'q' in vhost '/'"), and `method_id` is the request
    refused, as the front end named it to the broker (the 0-9-1 method id; 0: none)."""

    def __init__(self, condition, text, method_id=0):
        super().__init__(text)
        self.condition = condition
        self.text = text
        self.method_id = method_id
