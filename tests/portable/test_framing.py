"""Frames, content assembly and the connection-level errors they cause.

Each error path checks the reply code and which side closes: a connection
exception is connection.close on channel 0, a channel exception channel.close.
"""

import struct

from harness import Client, closed_with, content, frame, method, names, opened

from hutch.codec import spec
from hutch.codec.wire import encode_properties, method_payload
from hutch.core.limits import Limits


def test_frames_split_at_every_byte():
    client = opened()
    data = (
        method(1, spec.QUEUE_DECLARE, (0, b"q", False, False, False, False, False, {}))
        + method(1, spec.BASIC_PUBLISH, (0, b"", b"q", False, False))
        + content(1, b"hello")
    )
    for i in range(len(data)):
        client.send(data[i : i + 1])
    events = client.read()
    assert names(events) == ["queue.declare-ok"]
    assert client.get(1, b"q", no_ack=True)[0].body == b"hello"


def test_many_frames_in_one_read():
    client = opened()
    client.queue(1, b"q")
    data = b"".join(
        method(1, spec.BASIC_PUBLISH, (0, b"", b"q", False, False)) + content(1, b"m%d" % i) for i in range(50)
    )
    client.send(data)
    assert client.read() == []
    bodies = [client.get(1, b"q", no_ack=True)[0].body for _ in range(50)]
    assert bodies == [b"m%d" % i for i in range(50)]


def test_bad_frame_end():
    client = opened()
    bad = method(1, spec.BASIC_QOS, (0, 10, False))[:-1] + b"\x00"
    client.send(bad)
    closed_with(client.read(), spec.FRAME_ERROR, "connection.close")
    assert client.conn.closed  # a broken stream cannot be read further: closed at once


def test_frame_larger_than_frame_max():
    client = opened(frame_max=4096)
    client.send(struct.pack(">BHI", 3, 1, 5000))
    text = closed_with(client.read(), spec.FRAME_ERROR, "connection.close")
    assert b"frame_max" in text


def test_a_frame_may_be_8_octets_over_frame_max_as_rabbitmq_allows():
    """AMQPStorm and rabbitpy fill a body frame's payload to frame_max, so the frame is 8 octets
    over: RabbitMQ takes up to that (its FRAME_SIZE_FUDGE) and no more, and so does hutch."""
    client = opened(frame_max=4096)
    client.queue(1, b"q")
    body = bytes(range(256)) * 16  # 4,096 octets in one body frame: 4,104 in all
    client.send(method(1, spec.BASIC_PUBLISH, (0, b"", b"q", False, False)) + content(1, body, None, 4096 + 8))
    assert client.read() == []
    assert client.get(1, b"q", no_ack=True)[0].body == body
    client.send(struct.pack(">BHI", 3, 1, 4097))
    text = closed_with(client.read(), spec.FRAME_ERROR, "connection.close")
    assert b"frame size 4105 exceeds frame_max 4096" in text


def test_unknown_frame_type():
    client = opened()
    client.send(frame(4, 0, b""))  # the 0-9-1 PDF's heartbeat number is not a frame type
    closed_with(client.read(), spec.FRAME_ERROR, "connection.close")


def test_heartbeat_on_a_channel():
    client = opened()
    client.send(frame(8, 1, b""))
    closed_with(client.read(), spec.UNEXPECTED_FRAME, "connection.close")


def test_content_on_channel_0():
    client = opened()
    client.send(frame(2, 0, struct.pack(">HHQH", 60, 0, 0, 0)))
    closed_with(client.read(), spec.CHANNEL_ERROR, "connection.close")


def test_content_header_without_publish():
    client = opened()
    client.send(frame(2, 1, struct.pack(">HHQH", 60, 0, 0, 0)))
    closed_with(client.read(), spec.UNEXPECTED_FRAME, "connection.close")


def test_body_without_header():
    client = opened()
    client.send(method(1, spec.BASIC_PUBLISH, (0, b"", b"q", False, False)) + frame(3, 1, b"x"))
    closed_with(client.read(), spec.UNEXPECTED_FRAME, "connection.close")


def test_method_in_the_middle_of_content():
    client = opened()
    client.send(
        method(1, spec.BASIC_PUBLISH, (0, b"", b"q", False, False))
        + frame(2, 1, struct.pack(">HHQH", 60, 0, 10, 0))
        + frame(3, 1, b"12345")
        + method(1, spec.BASIC_QOS, (0, 1, False))
    )
    closed_with(client.read(), spec.UNEXPECTED_FRAME, "connection.close")


def test_interleaved_publishes_on_one_channel():
    client = opened()
    publish = method(1, spec.BASIC_PUBLISH, (0, b"", b"q", False, False))
    client.send(publish + publish)
    closed_with(client.read(), spec.UNEXPECTED_FRAME, "connection.close")


def test_content_interleaved_across_channels_is_fine():
    client = opened()
    client.channel(2)
    client.queue(1, b"q")
    client.send(
        method(1, spec.BASIC_PUBLISH, (0, b"", b"q", False, False))
        + method(2, spec.BASIC_PUBLISH, (0, b"", b"q", False, False))
        + frame(2, 2, struct.pack(">HHQ", 60, 0, 3) + encode_properties({}))
        + frame(2, 1, struct.pack(">HHQ", 60, 0, 3) + encode_properties({}))
        + frame(3, 1, b"one")
        + frame(3, 2, b"two")
    )
    assert client.read() == []
    bodies = sorted(client.get(1, b"q", no_ack=True)[0].body for _ in range(2))
    assert bodies == [b"one", b"two"]


def test_body_larger_than_announced():
    client = opened()
    client.send(
        method(1, spec.BASIC_PUBLISH, (0, b"", b"q", False, False))
        + frame(2, 1, struct.pack(">HHQH", 60, 0, 3, 0))
        + frame(3, 1, b"four")
    )
    closed_with(client.read(), spec.FRAME_ERROR, "connection.close")


def test_header_of_another_class():
    client = opened()
    client.send(
        method(1, spec.BASIC_PUBLISH, (0, b"", b"q", False, False)) + frame(2, 1, struct.pack(">HHQH", 50, 0, 0, 0))
    )
    closed_with(client.read(), spec.UNEXPECTED_FRAME, "connection.close")


def test_header_with_weight():
    client = opened()
    client.send(
        method(1, spec.BASIC_PUBLISH, (0, b"", b"q", False, False)) + frame(2, 1, struct.pack(">HHQH", 60, 1, 0, 0))
    )
    closed_with(client.read(), spec.UNEXPECTED_FRAME, "connection.close")


def test_short_header():
    client = opened()
    client.send(method(1, spec.BASIC_PUBLISH, (0, b"", b"q", False, False)) + frame(2, 1, b"\x00\x3c"))
    closed_with(client.read(), spec.FRAME_ERROR, "connection.close")


def test_empty_body_frames_are_ignored():
    client = opened()
    client.queue(1, b"q")
    client.send(
        method(1, spec.BASIC_PUBLISH, (0, b"", b"q", False, False))
        + frame(2, 1, struct.pack(">HHQH", 60, 0, 2, 0))
        + frame(3, 1, b"")
        + frame(3, 1, b"ab")
    )
    assert client.get(1, b"q", no_ack=True)[0].body == b"ab"


def test_zero_length_body():
    client = opened()
    client.queue(1, b"q")
    client.publish(1, b"", b"q", b"", {"content-type": b"text/plain"})
    event = client.get(1, b"q", no_ack=True)[0]
    assert event.body == b"" and event.properties == {"content-type": b"text/plain"}


def test_message_split_over_frames_arrives_whole():
    client = opened(frame_max=4096)
    client.queue(1, b"q")
    body = bytes(range(256)) * 100  # 25,600 bytes: seven body frames of at most 4,088
    client.publish(1, b"", b"q", body)
    event = client.get(1, b"q", no_ack=True)[0]
    assert event.body == body


def test_message_too_large_closes_channel():
    client = opened(limits=Limits(max_message_bytes=1000))
    client.queue(1, b"q")
    text = closed_with(client.publish(1, b"", b"q", b"x" * 1001), spec.PRECONDITION_FAILED)
    assert b"1001" in text
    # the rest of that content is discarded with the channel; the connection lives on
    client.channel(2)
    assert client.get(2, b"q")[0].name == "basic.get-empty"


def test_frames_on_unopened_channel():
    client = opened()
    closed_with(client.call(5, spec.BASIC_QOS, (0, 1, False)), spec.CHANNEL_ERROR, "connection.close")


def test_second_channel_open():
    client = opened()
    closed_with(client.call(1, spec.CHANNEL_OPEN, (b"",)), spec.CHANNEL_ERROR, "connection.close")


def test_any_channel_number_the_wire_carries():
    """channel_max caps how many channels are open, not their numbers (RabbitMQ opens 65535
    after negotiating 2047)."""
    client = Client()
    client.open(channel_max=3)
    for number in (65535, 1, 2048):
        client.channel(number)
    assert names(client.declare_queue(65535)) == ["queue.declare-ok"]


def test_channel_count_above_channel_max():
    client = Client()
    client.open(channel_max=2)
    client.channel(7)
    client.channel(9000)
    events = client.call(3, spec.CHANNEL_OPEN, (b"",))
    text = closed_with(events, spec.NOT_ALLOWED, "connection.close")
    assert text == b"NOT_ALLOWED - number of channels opened (2) has reached the negotiated channel_max (2)"
    assert events[-1].args[2:] == [0, 0]  # RabbitMQ names no method


def test_closed_channel_frees_its_place():
    client = Client()
    client.open(channel_max=2)
    client.channel(1)
    client.channel(2)
    assert names(client.call(1, spec.CHANNEL_CLOSE, (200, b"", 0, 0))) == ["channel.close-ok"]
    client.channel(40000)


def test_channel_number_reused_after_close():
    client = opened()
    assert names(client.call(1, spec.CHANNEL_CLOSE, (200, b"", 0, 0))) == ["channel.close-ok"]
    client.channel(1)


def test_unknown_method():
    client = opened()
    client.send(frame(1, 1, struct.pack(">HH", 60, 999)))
    closed_with(client.read(), spec.NOT_IMPLEMENTED, "connection.close")


def test_server_only_method_from_client():
    client = opened()
    closed_with(
        client.call(1, spec.BASIC_DELIVER, (b"t", 1, False, b"", b"q")), spec.COMMAND_INVALID, "connection.close"
    )


def test_connection_method_on_a_channel():
    client = opened()
    closed_with(client.call(1, spec.CONNECTION_TUNE_OK, (1, 4096, 0)), spec.COMMAND_INVALID, "connection.close")


def test_channel_method_on_channel_0():
    client = opened()
    closed_with(client.call(0, spec.BASIC_QOS, (0, 1, False)), spec.CHANNEL_ERROR, "connection.close")


def test_truncated_method_arguments():
    client = opened()
    payload = method_payload(spec.QUEUE_DECLARE, (0, b"queue", False, False, False, False, False, {}))
    client.send(frame(1, 1, payload[:-3]))
    closed_with(client.read(), spec.FRAME_ERROR, "connection.close")


def test_trailing_bytes_after_arguments():
    client = opened()
    client.send(frame(1, 1, method_payload(spec.BASIC_QOS, (0, 1, False)) + b"\x00"))
    closed_with(client.read(), spec.FRAME_ERROR, "connection.close")


def test_bad_field_table_type():
    client = opened()
    table = b"\x00\x00\x00\x04\x01kZ\x00"  # one entry with the unknown type tag 'Z'
    payload = method_payload(spec.QUEUE_DECLARE, (0, b"q", False, False, False, False, False, {}))[:-4] + table
    client.send(frame(1, 1, payload))
    closed_with(client.read(), spec.SYNTAX_ERROR, "connection.close")


def test_lying_table_length():
    client = opened()
    payload = method_payload(spec.QUEUE_DECLARE, (0, b"q", False, False, False, False, False, {}))[:-4]
    client.send(frame(1, 1, payload + b"\x7f\xff\xff\xff"))
    closed_with(client.read(), spec.FRAME_ERROR, "connection.close")


def test_malformed_publish():
    client = opened()
    client.send(frame(1, 1, struct.pack(">IH", spec.BASIC_PUBLISH, 0) + b"\x09ex"))
    closed_with(client.read(), spec.FRAME_ERROR, "connection.close")


def test_immediate_is_not_implemented():
    client = opened()
    client.queue(1, b"q")
    events = client.publish(1, b"", b"q", b"x", immediate=True)
    closed_with(events, spec.NOT_IMPLEMENTED, "connection.close")


def test_input_after_connection_error_is_discarded():
    client = opened()
    client.send(frame(1, 1, struct.pack(">HH", 60, 999)) + method(1, spec.BASIC_QOS, (0, 1, False)))
    events = client.read()
    assert names(events) == ["connection.close"]
    client.send(method(0, spec.CONNECTION_CLOSE_OK))
    assert client.conn.closed
