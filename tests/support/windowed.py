"""Publishing many messages with confirms as a fast publisher does: pika's SelectConnection in
confirm mode, with up to `window` publishes unconfirmed, until the last confirm.

pika's BlockingConnection waits for each publish's confirm before the next: one message per
round trip, and one pass of the broker's loop (read, journal, confirm) per message. The fault
tests publish thousands of messages between their faults; one at a time, that was most of
their CPU (theirs and the broker's), and the faults they exist for were the same either way.
"""

import time

import pika

PACE = 0.05  # seconds between a rate-limited publisher's sends

PERSISTENT = pika.BasicProperties(delivery_mode=2)


class NotConfirmed(AssertionError):
    pass


def publish_windowed(url, messages, exchange="", window=200, rate=None, timeout=120):
    """Publish messages, [(routing key, body, pika.BasicProperties)], to exchange with confirms,
    at most window unconfirmed, and return once every one is confirmed. rate: at most that
    many a second (sent every PACE seconds), for a test whose faults must meet messages in
    flight for as long as they last. NotConfirmed if the broker nacks one, closes the
    connection, or the last confirm has not come within timeout seconds."""
    messages = list(messages)
    state = dict(sent=0, confirmed=0, nacked=0, done=not messages, started=None, paced=False)
    channel = []

    def publish():
        end = len(messages)
        if rate is not None:
            if state["started"] is None:
                state["started"] = time.monotonic()
            end = min(end, int((time.monotonic() - state["started"]) * rate) + 1)
        while state["sent"] < end and state["sent"] - state["confirmed"] < window:
            key, body, properties = messages[state["sent"]]
            channel[0].basic_publish(exchange, key, body, properties)
            state["sent"] += 1
        if state["sent"] == end < len(messages) and not state["paced"]:
            state["paced"] = True  # one call pending at a time
            connection.ioloop.call_later(PACE, paced)

    def paced():
        state["paced"] = False
        publish()

    def on_confirm(frame):
        method = frame.method
        settled = method.delivery_tag - state["confirmed"] if method.multiple else 1
        if isinstance(method, pika.spec.Basic.Nack):
            state["nacked"] += settled
        state["confirmed"] = max(state["confirmed"], method.delivery_tag)
        if state["confirmed"] >= len(messages):
            state["done"] = True
            connection.close()
        else:
            publish()

    def on_ready(opened):
        channel.append(opened)
        if messages:
            publish()
        else:
            connection.close()

    connection, ended = confirming_connection(pika.URLParameters(url), on_confirm, on_ready)
    connection.ioloop.call_later(timeout, connection.close)
    connection.ioloop.start()
    if not state["done"] or state["nacked"]:
        raise NotConfirmed(
            "%d of %d publishes to %r confirmed, %d nacked (%s)"
            % (state["confirmed"], len(messages), exchange, state["nacked"], ended[0] if ended else None)
        )


def confirming_connection(parameters, on_confirm, on_ready):
    """(connection, ended): a pika SelectConnection whose one channel is put in confirm mode,
    on_confirm(frame) called for each confirm and on_ready(channel) once confirms are on. Its
    ioloop (not yet started) stops when the connection closes or cannot open; ended then holds
    the reason."""
    ended = []

    def on_channel(channel):
        channel.confirm_delivery(on_confirm, callback=lambda _frame: on_ready(channel))

    def on_closed(_connection, reason):
        ended.append(reason)
        connection.ioloop.stop()

    connection = pika.SelectConnection(parameters, on_open_callback=lambda c: c.channel(on_open_callback=on_channel))
    connection.add_on_open_error_callback(on_closed)
    connection.add_on_close_callback(on_closed)
    return connection, ended
