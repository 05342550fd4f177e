"""Errors the broker reports in protocol terms.

AMQP has two levels of exception (requirements.md §2.8): a channel exception
closes one channel (channel.close with a "soft" reply code), a connection
exception closes the whole connection (connection.close with a "hard" code).
Handlers raise one of these; the connection turns it into the close method.
"""


class AMQPError(Exception):
    def __init__(self, code, text, method_id=0):
        super().__init__(text)
        self.code = code
        self.text = text
        self.method_id = method_id

    def __str__(self):
        return "%d %s" % (self.code, self.text)


class ChannelException(AMQPError):
    """Closes the channel it happened on (404, 403, 405, 406...)."""


class ConnectionException(AMQPError):
    """Closes the whole connection (501, 503, 504, 505, 530, 540...)."""


class DecodeError(Exception):
    """Bytes that do not parse; the connection reports it as 501 or 502."""

    def __init__(self, text, code=501):
        super().__init__(text)
        self.code = code
