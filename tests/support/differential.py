"""The RabbitMQ differential suite's shared rule (the tests/interop/compat/test_compat_*.py files).

A scenario is a function of one broker: hutch's `broker` fixture or the run's `rabbitmq`
(conftest.py). It drives real clients (pika, aio-pika, py-amqp, or the raw client of
bench/loadgen.py) and returns what they observed, as plain data: deliveries in the order they
came, their headers, reply codes and texts, which side closed. `same_on_both` runs it against
both brokers in the same test and asserts the two observations are equal; RabbitMQ is the oracle.

Where hutch differs on purpose, the test passes `expected_difference`, a function that turns
RabbitMQ's observation into hutch's, and says why in its docstring; the rest must still match.
"""

import uuid

import pika
import pytest
from brokers import pika_connection
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker

# Every differential test talks to its worker's RabbitMQ (tests/interop/conftest.py rabbitmq).
MARKS = [pytest.mark.timeout(120)]


def fresh(prefix="compat"):
    """A name no other test (nor an earlier run against the same RabbitMQ) has used."""
    return "%s-%s" % (prefix, uuid.uuid4().hex[:10])


def same_on_both(scenario, hutch, rabbitmq, expected_difference=None):
    """Run scenario(target) on RabbitMQ, then on hutch; assert both observed the same and
    return it (hutch's observation)."""
    theirs = scenario(rabbitmq)
    ours = scenario(hutch)
    if expected_difference is not None:
        theirs = expected_difference(theirs)
    assert ours == theirs, "hutch observed:\n  %r\nRabbitMQ observed:\n  %r" % (ours, theirs)
    return ours


def closed_by(error):
    """(reply code, reply text) of a pika ChannelClosedByBroker or ConnectionClosedByBroker, or
    of a py-amqp / aio-pika error carrying them."""
    code = getattr(error, "reply_code", None)
    if code is None:
        code = getattr(error, "code", None)
    reply_text = getattr(error, "reply_text", None)
    if reply_text is None:
        reply_text = getattr(error, "message", None)
    if code is None and error.args:
        code = error.args[0]
        reply_text = error.args[1] if len(error.args) > 1 else reply_text
    return (code, reply_text)


def url(target):
    """The AMQP URL of either broker (the run's RabbitMQ object has no .url)."""
    return "amqp://guest:guest@%s:%d/" % (target.host, target.port)


def attempt(target, action, **connection_options):
    """Run action(connection, channel) on a fresh pika connection: ("ok", what it returned), or
    who closed what with which reply code and text."""
    if connection_options:
        params = pika.ConnectionParameters(
            target.host, target.port, credentials=pika.PlainCredentials("guest", "guest"), **connection_options
        )
        connection = pika.BlockingConnection(params)
    else:
        connection = pika_connection(target)
    try:
        return ("ok", action(connection, connection.channel()))
    except ChannelClosedByBroker as e:
        return ("channel closed",) + closed_by(e)
    except ConnectionClosedByBroker as e:
        return ("connection closed",) + closed_by(e)
    finally:
        if connection.is_open:
            connection.close()
