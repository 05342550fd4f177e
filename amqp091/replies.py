"""How 0-9-1 words what the broker refuses (core/session.py Refused): each condition's reply
code (the spec's table, by the names rabbit_framing_amqp_0_9_1 gives them), RabbitMQ's text
("NOT_FOUND - no queue 'q' in vhost '/'"), and whether it closes the connection (a hard
error: connection.close) or only its channel (channel.close).

Loaded with the first refusal: a board whose clients are never refused holds none of it.
"""

# Each condition (codec/errors.py, its number the index): its reply code and name.
REPLIES = (
    None,
    (311, "CONTENT_TOO_LARGE"),
    (312, "NO_ROUTE"),
    (313, "NO_CONSUMERS"),
    (320, "CONNECTION_FORCED"),
    (402, "INVALID_PATH"),
    (403, "ACCESS_REFUSED"),
    (404, "NOT_FOUND"),
    (405, "RESOURCE_LOCKED"),
    (406, "PRECONDITION_FAILED"),
    (501, "FRAME_ERROR"),
    (502, "SYNTAX_ERROR"),
    (503, "COMMAND_INVALID"),
    (504, "CHANNEL_ERROR"),
    (505, "UNEXPECTED_FRAME"),
    (506, "RESOURCE_ERROR"),
    (530, "NOT_ALLOWED"),
    (540, "NOT_IMPLEMENTED"),
    (541, "INTERNAL_ERROR"),
)

# The soft errors: the spec's "channel" exceptions; every other code closes the connection.
CHANNEL_ONLY = (311, 312, 313, 403, 404, 405, 406)


def closing_arguments(e):
    """channel.close's or connection.close's arguments for a refusal: reply code, reply text
    (RabbitMQ's: the condition's name, " - ", the text), class id, method id."""
    code, name = REPLIES[e.condition]
    return code, "%s - %s" % (name, e.text), e.method_id >> 16, e.method_id & 0xFFFF


def closes_connection(e):
    return REPLIES[e.condition][0] not in CHANNEL_ONLY
