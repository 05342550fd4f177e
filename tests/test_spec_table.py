"""core/spec.py is generated from tools/spec/amqp-rabbitmq-0.9.1.json; it must not drift."""
from hutch.core import spec
from hutch.tools import gen_spec


def test_generated_table_is_current():
    assert gen_spec.main(["--check"]) == 0


def test_table_has_every_0_9_1_method():
    names = {info[0] for info in spec.METHODS.values()}
    for name in ("connection.start-ok", "channel.flow", "exchange.bind", "queue.unbind-ok", "basic.nack",
                 "basic.recover-async", "confirm.select", "tx.rollback-ok", "connection.blocked"):
        assert name in names
    assert spec.METHODS[spec.BASIC_PUBLISH] == ("basic.publish", "hssbb", True)
    assert spec.FRAME_HEARTBEAT == 8 and spec.FRAME_MIN_SIZE == 4096 and spec.FRAME_END == 0xCE
