"""codec/spec.py is generated from tools/spec/amqp-rabbitmq-0.9.1.json; it must not drift."""

from hutch.codec import spec
from hutch.codec.wire import method_name, signature
from hutch.tools import gen_spec


def test_generated_table_is_current():
    assert gen_spec.main(["--check"]) == 0


def test_table_has_every_0_9_1_method():
    names = {method_name(int(line[:8], 16)) for line in spec.METHODS.splitlines()}
    for name in (
        "connection.start-ok",
        "channel.flow",
        "exchange.bind",
        "queue.unbind-ok",
        "basic.nack",
        "basic.recover-async",
        "confirm.select",
        "tx.rollback-ok",
        "connection.blocked",
    ):
        assert name in names
    assert signature(spec.BASIC_PUBLISH) == "hssbb" and spec.BASIC_PUBLISH in spec.CONTENT
    assert method_name(spec.BASIC_PUBLISH) == "basic.publish"
    assert method_name(0x00FF0001) == "unknown method 255.1" and signature(0x00FF0001) is None
    assert signature(spec.CHANNEL_CLOSE_OK) == "" and method_name(spec.CHANNEL_CLOSE_OK) == "channel.close-ok"
    assert spec.FRAME_HEARTBEAT == 8 and spec.FRAME_MIN_SIZE == 4096 and spec.FRAME_END == 0xCE
